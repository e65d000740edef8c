//! An MCP server's tool as a tool of the loop, and how a `tools/call` result becomes the tool's result.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;
use tower_chat::ToolSpec;
use tower_chat_function_invocation::{Tool, ToolContext, ToolError, ToolHints};

use crate::hub::StopOnDrop;
use crate::server::Server;

/// One tool of one server, under the name the model sees.
pub(crate) struct McpTool {
    pub(crate) server: Arc<Server>,
    pub(crate) remote_name: String,
    pub(crate) spec: ToolSpec,
    pub(crate) hints: ToolHints,
    pub(crate) requires_approval: bool,
    pub(crate) timeout: Option<Duration>,
    /// Keeps the servers up while a request holds this tool, after the hub may be gone; tells a call after
    /// [`McpTools::shutdown`](crate::McpTools::shutdown) not to start.
    running: Arc<StopOnDrop>,
}

impl McpTool {
    pub(crate) fn new(
        server: Arc<Server>,
        running: Arc<StopOnDrop>,
        tool: &rmcp::model::Tool,
        exposed: String,
    ) -> Self {
        let remote_name = tool.name.to_string();
        let annotations = tool.annotations.as_ref();
        let hints = ToolHints {
            read_only: annotations.and_then(|a| a.read_only_hint),
            destructive: annotations.and_then(|a| a.destructive_hint),
            idempotent: annotations.and_then(|a| a.idempotent_hint),
            open_world: annotations.and_then(|a| a.open_world_hint),
            source: Some(server.name().to_owned()),
            source_name: Some(remote_name.clone()),
        };
        let requires_approval = server.config.policy.requires_approval(&remote_name, &hints);
        let spec = ToolSpec::new(
            exposed,
            tool.description.as_deref().unwrap_or_default(),
            Value::Object((*tool.input_schema).clone()),
        );
        McpTool {
            timeout: server.config.timeout,
            server,
            remote_name,
            spec,
            hints,
            requires_approval,
            running,
        }
    }
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn hints(&self) -> ToolHints {
        self.hints.clone()
    }

    fn call(
        &self,
        arguments: Value,
        _context: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>> {
        let server = self.server.clone();
        let remote = self.remote_name.clone();
        // The connections close a moment after a shutdown (their tasks see it asynchronously): a call in that
        // window must not reach the server.
        let shut_down = self.running.is_stopped();
        Box::pin(async move {
            if shut_down {
                return Err(ToolError::new(format!(
                    "MCP server `{}` was shut down",
                    server.name()
                )));
            }
            let arguments = match arguments {
                Value::Object(map) => map,
                Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::invalid_arguments(format!(
                        "MCP tools take a JSON object, got {other}"
                    )))
                }
            };
            let peer = server.peer().map_err(ToolError::new)?;
            // Dropping this future (timeout, dropped stream, cancelled request) makes rmcp send
            // `notifications/cancelled` for the request and stop waiting.
            let result = peer
                .call_tool(CallToolRequestParams::new(remote).with_arguments(arguments))
                .await
                .map_err(|e| {
                    ToolError::new(format!(
                        "MCP server `{}` failed the call: {e}",
                        server.name()
                    ))
                    .with_source(e)
                })?;
            tool_result(result)
        })
    }
}

/// Map a `tools/call` result to the loop's result text.
///
/// - Text blocks are joined with newlines.
/// - `structuredContent` is appended as compact JSON, unless a text block already holds the same JSON value (the
///   spec asks servers to mirror it in a text block for older clients); alone, it is the whole result.
/// - Other blocks are described in one line each (`[image: image/png, 1234 bytes base64]`, an embedded text
///   resource's text, `[resource: uri]`).
/// - `isError: true` makes it an error result with that text.
pub(crate) fn tool_result(result: CallToolResult) -> Result<String, ToolError> {
    let mut parts: Vec<String> = Vec::with_capacity(result.content.len() + 1);
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!(
                "[image: {}, {} bytes base64]",
                image.mime_type,
                image.data.len()
            ),
            ContentBlock::Audio(audio) => format!(
                "[audio: {}, {} bytes base64]",
                audio.mime_type,
                audio.data.len()
            ),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, .. } => format!("[resource: {uri}]"),
                _ => "[resource]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
            _ => "[unsupported content]".to_owned(),
        });
    }
    if let Some(structured) = &result.structured_content {
        let mirrored = result.content.iter().any(|block| {
            block
                .as_text()
                .and_then(|t| serde_json::from_str::<Value>(&t.text).ok())
                .is_some_and(|v| &v == structured)
        });
        if !mirrored {
            parts.push(structured.to_string());
        }
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        Err(ToolError::new(if text.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            text
        }))
    } else {
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_structured_and_error_results() {
        let text = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(tool_result(text).unwrap(), "a\nb");

        let structured = CallToolResult::structured(json!({"sum": 3}));
        assert_eq!(tool_result(structured).unwrap(), r#"{"sum":3}"#);

        let mut both = CallToolResult::success(vec![ContentBlock::text("the sum is 3")]);
        both.structured_content = Some(json!({"sum": 3}));
        assert_eq!(tool_result(both).unwrap(), "the sum is 3\n{\"sum\":3}");

        let error = CallToolResult::error(vec![ContentBlock::text("no such file")]);
        let error = tool_result(error).unwrap_err();
        assert_eq!(error.message(), "no such file");
        assert!(!error.is_invalid_arguments());

        let image = CallToolResult::success(vec![ContentBlock::image("aGVsbG8=", "image/png")]);
        assert_eq!(
            tool_result(image).unwrap(),
            "[image: image/png, 8 bytes base64]"
        );
    }
}
