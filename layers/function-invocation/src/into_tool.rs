//! [`IntoTool`]: what the layer's `tool` / `tools` accept — a tool as written, or one already compiled.

use tower_chat::ChatError;

use crate::tool::{CompiledTool, Tool};

/// A tool the layer can offer: any [`Tool`] (a [`tool_fn`](crate::tool_fn) or [`tool_json`](crate::tool_json)
/// result, your own `impl Tool`), compiled when it is added, or a [`CompiledTool`], taken as it is (to share one
/// compilation between layers or registries).
pub trait IntoTool {
    /// Compile the tool's schema (a no-op for a [`CompiledTool`]); fails as [`CompiledTool::new`] does.
    fn into_tool(self) -> Result<CompiledTool, ChatError>;
}

impl<T: Tool> IntoTool for T {
    fn into_tool(self) -> Result<CompiledTool, ChatError> {
        CompiledTool::new(self)
    }
}

impl IntoTool for CompiledTool {
    fn into_tool(self) -> Result<CompiledTool, ChatError> {
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{tool_json, FunctionInvocationLayer};

    fn echo(name: &str, schema: serde_json::Value) -> crate::FnTool {
        tool_json(
            name,
            "echo",
            schema,
            |args: serde_json::Value, _ctx| async move { Ok::<_, String>(args.to_string()) },
        )
    }

    #[test]
    fn a_bad_schema_fails_when_the_tool_is_added_to_the_layer() {
        let error = FunctionInvocationLayer::new()
            .tool(echo(
                "bad",
                json!({"type": "object", "properties": {"x": {"type": 7}}}),
            ))
            .unwrap_err();
        assert_eq!(
            error.kind(),
            &tower_chat::ErrorKind::InvalidRequest,
            "{error}"
        );
        let error = FunctionInvocationLayer::new()
            .tools([
                echo("ok", json!({"type": "object"})),
                echo("bad name!", json!({"type": "object"})),
            ])
            .unwrap_err();
        assert!(error.to_string().contains("bad name!"), "{error}");
    }

    #[test]
    fn tools_are_taken_as_written_or_already_compiled() {
        let compiled = echo("shared", json!({"type": "object"}))
            .into_tool()
            .unwrap();
        let layer = FunctionInvocationLayer::new()
            .tool(echo("fresh", json!({"type": "object"})))
            .and_then(|layer| layer.tool(compiled))
            .unwrap();
        let debug = format!("{layer:?}");
        assert!(
            debug.contains("fresh") && debug.contains("shared"),
            "{debug}"
        );
    }

    #[test]
    fn registries_and_request_tools_take_tools_as_written_and_refuse_a_bad_schema() {
        let bad = || {
            echo(
                "bad",
                json!({"type": "object", "properties": {"x": {"type": 7}}}),
            )
        };
        let compiled = echo("shared", json!({"type": "object"}))
            .into_tool()
            .unwrap();
        let registry = crate::ToolSet::new()
            .with(echo("fresh", json!({"type": "object"})))
            .and_then(|set| set.with(compiled.clone()))
            .unwrap();
        assert_eq!(registry.len(), 2);
        assert!(crate::ToolSet::new().with(bad()).is_err());

        let request = crate::RequestTools::new()
            .tool(echo("fresh", json!({"type": "object"})))
            .and_then(|tools| tools.tool(compiled))
            .unwrap();
        assert_eq!(request.tools.len(), 2);
        let error = crate::RequestTools::new().tool(bad()).unwrap_err();
        assert_eq!(
            error.kind(),
            &tower_chat::ErrorKind::InvalidRequest,
            "{error}"
        );
    }
}
