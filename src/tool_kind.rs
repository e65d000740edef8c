//! What kind of tool a [`ToolSpec`](crate::ToolSpec) offers, and what each upstream format makes of it.
//!
//! - A **function** tool: a name, a description and a JSON Schema of its arguments; every provider takes it.
//! - A **freeform** tool ([`ToolKind::Custom`], OpenAI Responses' `custom` tools, Codex's `apply_patch`): the
//!   model writes one string, optionally in a grammar the client gives. A Responses upstream takes it as it
//!   came; every other provider gets a function tool with one string parameter, `input`, and the grammar in
//!   the tool's description, so the model knows the syntax. The call comes back as a [`CallKind::Custom`](crate::CallKind::Custom)
//!   call whatever the upstream, with the string as its `input` argument.
//! - A **hosted** tool ([`ToolKind::Hosted`]: `web_search`, `tool_search`, `code_interpreter`, Anthropic's
//!   `web_search_20250305`, …): the provider runs it. It reaches an upstream of the format it was written in
//!   exactly as sent; any other upstream cannot run it, and [`HostedTool::elsewhere`] says whether the call
//!   goes on without it or is refused.
//!
//! ```
//! use serde_json::json;
//! use tower_chat::{ApiFormat, HostedTool, ToolKind, ToolSpec, Unhosted};
//!
//! let patch = ToolSpec::custom("apply_patch", "Edit files.", Some(json!({"type": "text"})));
//! assert_eq!(patch.parameters["required"], json!(["input"]));
//! let search = HostedTool::new(ApiFormat::Responses, json!({"type": "web_search"}));
//! assert_eq!(search.elsewhere(), Unhosted::Dropped);
//! let code = HostedTool::new(ApiFormat::Responses, json!({"type": "code_interpreter"}));
//! assert_eq!(code.elsewhere(), Unhosted::Refused);
//! assert!(matches!(ToolSpec::hosted(search).kind, ToolKind::Hosted(_)));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::carried::ApiFormat;

/// The kind of a tool offered to the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolKind {
    /// A function tool: JSON arguments for its `parameters` schema.
    #[default]
    Function,
    /// A freeform tool: the model writes one string (its `parameters` are the one-string schema
    /// [`ToolSpec::custom`](crate::ToolSpec::custom) gives every provider that has no such tools).
    Custom {
        /// The client's description of the string's syntax, as sent (Responses' `format`: `{"type": "text"}`,
        /// or `{"type": "grammar", "syntax": "lark" | "regex", "definition": …}`); `None` for free text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<Value>,
    },
    /// A tool the provider runs itself.
    Hosted(HostedTool),
}

impl ToolKind {
    /// Whether this is a function tool (the default, left out when serialised).
    pub fn is_function(&self) -> bool {
        matches!(self, ToolKind::Function)
    }
}

/// A tool a provider runs itself, as the client wrote it for that provider's format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostedTool {
    /// The format the definition is written in: only an upstream speaking it can run the tool.
    pub format: ApiFormat,
    /// The tool's definition, as sent (`{"type": "web_search", …}`).
    pub definition: Value,
}

/// What an upstream of another format does with a hosted tool it cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unhosted {
    /// The call goes on without the tool: it only widens what the model may look up (a web search, a search
    /// over deferred tools), clients send it unasked, and the answer is still an answer without it. The drop is
    /// logged at `debug` and named (`tool:<type>`) in the request's [`DroppedFields`](crate::DroppedFields).
    Dropped,
    /// The call is refused before sending ([`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)), naming
    /// the tool and the upstream kinds that host it: the client asked for what the tool produces (code run,
    /// files searched, images made, a client-side action), and an answer without it would be a wrong one.
    Refused,
}

impl HostedTool {
    /// A hosted tool written in `format`.
    pub fn new(format: ApiFormat, definition: Value) -> Self {
        HostedTool { format, definition }
    }

    /// The definition's `type` (`web_search`, `web_search_20250305`), empty when it has none.
    pub fn tool_type(&self) -> &str {
        self.definition
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// What an upstream of another format does with it (a Responses `namespace` group is not dropped but
    /// flattened into its tools by the leaf). Dropped: OpenAI's `web_search*` and `tool_search` and its
    /// `namespace` groups, Anthropic's `web_search_*`, `web_fetch_*`
    /// and `tool_search_tool_*`. Every other type is refused.
    pub fn elsewhere(&self) -> Unhosted {
        let kind = self.tool_type();
        let dropped = match self.format {
            ApiFormat::Responses => {
                kind.starts_with("web_search") || kind == "tool_search" || kind == "namespace"
            }
            ApiFormat::Messages => {
                kind.starts_with("web_search_")
                    || kind.starts_with("web_fetch_")
                    || kind.starts_with("tool_search_tool_")
            }
            ApiFormat::ChatCompletions => false,
        };
        if dropped {
            Unhosted::Dropped
        } else {
            Unhosted::Refused
        }
    }

    /// The upstream kinds (`[upstreams]` provider names) that run tools written in this format.
    pub fn hosted_by(&self) -> &'static str {
        match self.format {
            ApiFormat::Responses => "an `openai-responses` upstream",
            ApiFormat::Messages => "an `anthropic` upstream",
            ApiFormat::ChatCompletions => "an `openai` or `azure` upstream",
        }
    }
}

/// The description a provider without freeform tools gets for one: the client's, then what the `input`
/// string must look like, so the model writes it in the grammar the client would have enforced.
pub(crate) fn freeform_description(description: &str, format: Option<&Value>) -> String {
    let mut text = description.to_owned();
    let syntax = |format: &Value| {
        format
            .get("syntax")
            .and_then(Value::as_str)
            .unwrap_or("grammar")
            .to_owned()
    };
    let rule = match format {
        Some(format) if format.get("type").and_then(Value::as_str) == Some("grammar") => {
            let definition = format
                .get("definition")
                .and_then(Value::as_str)
                .unwrap_or_default();
            format!(
                "Put the whole input in the `input` string, exactly as this {} grammar defines it \
                 (raw text, not JSON inside the string):\n{definition}",
                syntax(format)
            )
        }
        _ => "Put the whole input, as plain text, in the `input` string.".to_owned(),
    };
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(&rule);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_drop_rule_goes_by_format_and_type() {
        let rule = |format, kind: &str| HostedTool::new(format, json!({"type": kind})).elsewhere();
        for kind in [
            "web_search",
            "web_search_preview",
            "web_search_preview_2025_03_11",
            "tool_search",
            "namespace",
        ] {
            assert_eq!(
                rule(ApiFormat::Responses, kind),
                Unhosted::Dropped,
                "{kind}"
            );
        }
        for kind in [
            "file_search",
            "code_interpreter",
            "image_generation",
            "local_shell",
            "mcp",
            "computer_use_preview",
        ] {
            assert_eq!(
                rule(ApiFormat::Responses, kind),
                Unhosted::Refused,
                "{kind}"
            );
        }
        for kind in [
            "web_search_20250305",
            "web_fetch_20250910",
            "tool_search_tool_regex_20251119",
        ] {
            assert_eq!(rule(ApiFormat::Messages, kind), Unhosted::Dropped, "{kind}");
        }
        for kind in ["code_execution_20250825", "bash_20250124", "web_search"] {
            assert_eq!(rule(ApiFormat::Messages, kind), Unhosted::Refused, "{kind}");
        }
    }

    #[test]
    fn a_freeform_description_carries_the_grammar() {
        let grammar = json!({"type": "grammar", "syntax": "lark", "definition": "start: \"x\""});
        let text = freeform_description("Edit files.", Some(&grammar));
        assert!(text.starts_with("Edit files.\n\n"), "{text}");
        assert!(
            text.contains("lark grammar") && text.ends_with("start: \"x\""),
            "{text}"
        );
        let plain = freeform_description("", Some(&json!({"type": "text"})));
        assert!(plain.starts_with("Put the whole input"), "{plain}");
    }
}
