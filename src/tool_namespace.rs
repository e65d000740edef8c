//! Responses tool namespaces (`{"type": "namespace", "name": …, "tools": [...]}`, how Codex offers an MCP
//! server's tools) toward providers that have no such groups: each tool of the group becomes a tool of its own
//! named `<namespace>__<name>`, and its calls come back under that name, which the client's format turns into
//! the namespaced call again (`namespace` + `name`).
//!
//! The name must fit every provider's limit for tool names (64 characters of `[A-Za-z0-9_-]` for OpenAI, Bedrock
//! and Gemini): a joined name that is longer, or that holds any other character, is cut to 55 characters of
//! the allowed ones and ends in `_` and eight hex digits of a hash of the whole, so it stays the same from one
//! request to the next and tells the tools apart. Calls are mapped back by looking the name up in the request's
//! own namespaces, never by splitting it.
//!
//! ```
//! use tower_chat::namespaced_tool_name;
//!
//! assert_eq!(namespaced_tool_name("mcp__docs", "search"), "mcp__docs__search");
//! let long = namespaced_tool_name("mcp__a_server_with_a_rather_long_name", "and_a_tool_with_a_long_name_too");
//! assert_eq!(long.len(), 64);
//! ```

use serde_json::Value;

use crate::carried::ApiFormat;
use crate::request::ToolSpec;
use crate::tool_kind::{HostedTool, ToolKind};

/// The longest tool name every provider takes.
const MAX_NAME: usize = 64;

/// The name a namespace's tool goes by at a provider without namespaces.
pub fn namespaced_tool_name(namespace: &str, name: &str) -> String {
    let joined = format!("{namespace}__{name}");
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if joined.len() <= MAX_NAME && joined.chars().all(allowed) {
        return joined;
    }
    // FNV-1a: stable across processes and releases, unlike the standard hasher.
    let hash = joined.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    let head: String = joined
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .take(MAX_NAME - 9)
        .collect();
    format!("{head}_{hash:08x}")
}

/// Whether `hosted` is a Responses tool namespace.
fn is_namespace(hosted: &HostedTool) -> bool {
    hosted.format == ApiFormat::Responses && hosted.tool_type() == "namespace"
}

/// The function tools of a namespace as tools of their own, each under its [`namespaced_tool_name`], with
/// their schema. `None` when `hosted` is no namespace.
pub(crate) fn flatten(hosted: &HostedTool) -> Option<Vec<ToolSpec>> {
    if !is_namespace(hosted) {
        return None;
    }
    let namespace = hosted.definition.get("name").and_then(Value::as_str)?;
    let tools = hosted.definition.get("tools").and_then(Value::as_array)?;
    let text = |tool: &Value, key: &str| {
        tool.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(
        tools
            .iter()
            .filter_map(|tool| {
                let name = namespaced_tool_name(namespace, tool.get("name")?.as_str()?);
                let description = text(tool, "description");
                match tool.get("type").and_then(Value::as_str) {
                    Some("function") | None => Some(ToolSpec::new(
                        name,
                        description,
                        tool.get("parameters")
                            .filter(|p| p.is_object())
                            .cloned()
                            .unwrap_or_else(
                                || serde_json::json!({"type": "object", "properties": {}}),
                            ),
                    )),
                    // A freeform or hosted tool inside a group: its call could not come back as the client's
                    // namespaced call of that kind, so it is not offered.
                    Some(_) => None,
                }
            })
            .collect(),
    )
}

/// The namespaced tools among `tools`, as `(name at a provider without namespaces, namespace, name in it)`.
pub fn namespaced_tools(tools: &[ToolSpec]) -> Vec<(String, String, String)> {
    let mut table = Vec::new();
    for tool in tools {
        let ToolKind::Hosted(hosted) = &tool.kind else {
            continue;
        };
        if !is_namespace(hosted) {
            continue;
        }
        let Some(namespace) = hosted.definition.get("name").and_then(Value::as_str) else {
            continue;
        };
        for inner in hosted
            .definition
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = inner.get("name").and_then(Value::as_str) {
                table.push((
                    namespaced_tool_name(namespace, name),
                    namespace.to_owned(),
                    name.to_owned(),
                ));
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_fit_every_provider_and_stay_apart() {
        let a = namespaced_tool_name(&"n".repeat(40), &"a".repeat(40));
        let b = namespaced_tool_name(&"n".repeat(40), &format!("{}b", "a".repeat(39)));
        assert_eq!(a.len(), MAX_NAME);
        assert_ne!(a, b);
        assert_eq!(a, namespaced_tool_name(&"n".repeat(40), &"a".repeat(40)));
        let dotted = namespaced_tool_name("mcp.docs", "search");
        assert!(dotted.starts_with("mcp_docs__search_"), "{dotted}");
        assert!(dotted
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn a_namespace_flattens_into_its_tools_and_maps_back() {
        let hosted = HostedTool::new(
            ApiFormat::Responses,
            json!({"type": "namespace", "name": "mcp__docs", "description": "Docs.", "tools": [
                {"type": "function", "name": "search", "description": "Search.",
                 "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
                {"type": "custom", "name": "edit", "description": "Edit."}]}),
        );
        let flat = flatten(&hosted).unwrap();
        assert_eq!(flat[0].name, "mcp__docs__search");
        assert_eq!(flat[0].parameters["properties"]["q"]["type"], "string");
        assert_eq!(
            flat.len(),
            1,
            "the freeform tool of the group is not offered"
        );
        assert_eq!(
            namespaced_tools(&[ToolSpec::hosted(hosted)])[0],
            (
                "mcp__docs__search".to_owned(),
                "mcp__docs".to_owned(),
                "search".to_owned()
            )
        );
        let search = HostedTool::new(ApiFormat::Responses, json!({"type": "web_search"}));
        assert!(flatten(&search).is_none());
    }
}
