//! Responses tool namespaces (`{"type": "namespace", "name": …, "tools": [...]}`, how Codex offers an MCP
//! server's tools) toward providers that have no such groups: each tool of the group becomes a tool of its own
//! named `<namespace>__<name>`, and its calls come back under that name, which the client's format turns into
//! the namespaced call again (`namespace` + `name`). A freeform (`custom`) tool of the group becomes a freeform
//! tool of that name (a provider without freeform tools gets its one-string function) whose calls come back as
//! the namespaced `custom_tool_call`; a hosted tool in the group goes by the rule for hosted tools
//! ([`HostedTool::elsewhere`]). A `tool_choice` naming a namespace's tool names it by the joined name too.
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

/// The tools of a namespace as tools of their own, each under its [`namespaced_tool_name`]: a function tool
/// with its schema, a freeform (`custom`) tool as a freeform tool (the leaf gives a provider without freeform
/// tools its one-string function), any other type as the hosted tool it is, which the leaf drops or refuses by
/// [`HostedTool::elsewhere`] as it would at the top level. `None` when `hosted` is no namespace.
pub(crate) fn flatten(hosted: &HostedTool) -> Option<Vec<ToolSpec>> {
    if !is_namespace(hosted) {
        return None;
    }
    let namespace = hosted.definition.get("name").and_then(Value::as_str)?;
    let tools = hosted.definition.get("tools").and_then(Value::as_array)?;
    Some(
        tools
            .iter()
            .filter_map(|tool| member(namespace, tool))
            .collect(),
    )
}

/// One tool of `namespace` as a tool of its own; `None` for a named kind without its name.
fn member(namespace: &str, tool: &Value) -> Option<ToolSpec> {
    let description = tool
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = || Some(namespaced_tool_name(namespace, tool.get("name")?.as_str()?));
    match tool.get("type").and_then(Value::as_str) {
        Some("function") | None => Some(ToolSpec::new(
            name()?,
            description,
            tool.get("parameters")
                .filter(|p| p.is_object())
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        )),
        Some("custom") => Some(ToolSpec::custom(
            name()?,
            description,
            tool.get("format").filter(|f| f.is_object()).cloned(),
        )),
        Some(_) => Some(ToolSpec::hosted(HostedTool::new(
            ApiFormat::Responses,
            tool.clone(),
        ))),
    }
}

/// Each namespace among `tools` with each of its tools' definitions.
fn members(tools: &[ToolSpec]) -> impl Iterator<Item = (&str, &Value)> {
    tools
        .iter()
        .filter_map(|tool| match &tool.kind {
            ToolKind::Hosted(hosted) if is_namespace(hosted) => {
                let namespace = hosted.definition.get("name").and_then(Value::as_str)?;
                let inner = hosted.definition.get("tools").and_then(Value::as_array)?;
                Some(inner.iter().map(move |tool| (namespace, tool)))
            }
            _ => None,
        })
        .flatten()
}

/// The namespaced tools among `tools`, as `(name at a provider without namespaces, namespace, name in it)`.
pub fn namespaced_tools(tools: &[ToolSpec]) -> Vec<(String, String, String)> {
    members(tools)
        .filter_map(|(namespace, inner)| {
            let name = inner.get("name").and_then(Value::as_str)?;
            Some((
                namespaced_tool_name(namespace, name),
                namespace.to_owned(),
                name.to_owned(),
            ))
        })
        .collect()
}

/// The joined names ([`namespaced_tool_name`]) of the freeform (`custom`) tools inside the namespaces among
/// `tools`: their calls are freeform calls, whatever form the upstream was offered them in.
pub fn namespaced_freeform_tools(tools: &[ToolSpec]) -> Vec<String> {
    members(tools)
        .filter(|(_, inner)| inner.get("type").and_then(Value::as_str) == Some("custom"))
        .filter_map(|(namespace, inner)| {
            Some(namespaced_tool_name(
                namespace,
                inner.get("name").and_then(Value::as_str)?,
            ))
        })
        .collect()
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
                {"type": "custom", "name": "edit", "description": "Edit.",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                {"type": "web_search"}]}),
        );
        let flat = flatten(&hosted).unwrap();
        assert_eq!(flat.len(), 3);
        assert_eq!(flat[0].name, "mcp__docs__search");
        assert_eq!(flat[0].parameters["properties"]["q"]["type"], "string");
        assert_eq!(flat[1].name, "mcp__docs__edit");
        assert_eq!(
            flat[1].kind,
            ToolKind::Custom {
                format: Some(
                    json!({"type": "grammar", "syntax": "lark", "definition": "start: /.+/"})
                )
            },
            "the freeform tool of the group stays freeform"
        );
        assert!(
            matches!(&flat[2].kind, ToolKind::Hosted(h) if h.tool_type() == "web_search"),
            "the hosted tool of the group is a hosted tool: {:?}",
            flat[2].kind
        );
        let tools = [ToolSpec::hosted(hosted)];
        assert_eq!(
            namespaced_tools(&tools),
            [
                ("mcp__docs__search", "mcp__docs", "search"),
                ("mcp__docs__edit", "mcp__docs", "edit")
            ]
            .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
        );
        assert_eq!(namespaced_freeform_tools(&tools), ["mcp__docs__edit"]);
        let search = HostedTool::new(ApiFormat::Responses, json!({"type": "web_search"}));
        assert!(flatten(&search).is_none());
    }
}
