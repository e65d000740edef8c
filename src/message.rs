//! The provider-neutral conversation: system, user, assistant and tool messages.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation.
///
/// Serialized with a `role` tag (`{"role":"user","content":"hi"}`); serde round-trips every variant losslessly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instruction text.
        content: String,
    },
    /// What the user said.
    User {
        /// The user's text.
        content: String,
    },
    /// What the model answered: text, reasoning and tool calls.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    Tool(ToolMessage),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::Assistant(AssistantMessage {
            content: content.into(),
            ..AssistantMessage::default()
        })
    }

    /// A tool message carrying a successful result.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Message::Tool(ToolMessage::success(call_id, name, content))
    }
}

/// What the model answered in one round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The answer text (empty when the model only called tools).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content: String,
    /// Reasoning text, for providers that stream it (DeepSeek's `reasoning_content`, Anthropic's thinking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The tools the model asked to call, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl AssistantMessage {
    /// Whether the message carries nothing at all.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_none() && self.tool_calls.is_empty()
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call; tool results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed once when the call was complete.
    pub arguments: ToolArguments,
}

impl ToolCall {
    /// A call with well-formed JSON arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: ToolArguments::Json(arguments),
        }
    }

    /// A call whose argument text is parsed here: an empty text means `{}` (some servers send nothing for a
    /// tool without parameters); text that is not JSON is kept raw as [`ToolArguments::Invalid`].
    pub fn from_raw_arguments(id: String, name: String, raw: String) -> Self {
        ToolCall {
            id,
            name,
            arguments: ToolArguments::parse(raw),
        }
    }
}

/// A tool call's arguments: valid JSON, or the raw text the model produced when it was not JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolArguments {
    /// Well-formed JSON (not yet checked against the tool's schema).
    Json(Value),
    /// The model's text did not parse as JSON; it is kept as it came.
    Invalid {
        /// The argument text exactly as the model produced it.
        raw: String,
        /// Why it did not parse.
        error: String,
    },
}

impl ToolArguments {
    /// Parse argument text; see [`ToolCall::from_raw_arguments`].
    pub fn parse(raw: String) -> Self {
        if raw.trim().is_empty() {
            return ToolArguments::Json(Value::Object(Default::default()));
        }
        match serde_json::from_str(&raw) {
            Ok(value) => ToolArguments::Json(value),
            Err(error) => ToolArguments::Invalid {
                raw,
                error: error.to_string(),
            },
        }
    }

    /// The parsed JSON, if the arguments were valid.
    pub fn json(&self) -> Option<&Value> {
        match self {
            ToolArguments::Json(value) => Some(value),
            ToolArguments::Invalid { .. } => None,
        }
    }

    /// The arguments as JSON text, as OpenAI-style wire formats carry them (the raw text when invalid).
    pub fn to_wire_string(&self) -> String {
        match self {
            ToolArguments::Json(value) => value.to_string(),
            ToolArguments::Invalid { raw, .. } => raw.clone(),
        }
    }
}

/// The result of one tool call, as sent back to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolMessage {
    /// The id of the call this answers.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The result text (JSON results are serialized to text).
    pub content: String,
    /// Whether the result reports a failure (bad arguments, tool error, denied approval).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolMessage {
    /// A successful result.
    pub fn success(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        ToolMessage {
            call_id: call_id.into(),
            name: name.into(),
            content: content.into(),
            is_error: false,
        }
    }

    /// A failure reported to the model.
    pub fn error(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        ToolMessage {
            is_error: true,
            ..ToolMessage::success(call_id, name, content)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_message_kind_round_trips_through_serde() {
        let messages = vec![
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant(AssistantMessage {
                content: "let me look".into(),
                reasoning: Some("the user wants weather".into()),
                tool_calls: vec![
                    ToolCall::new("c1", "weather", json!({"city": "Oslo"})),
                    ToolCall::from_raw_arguments(
                        "c2".into(),
                        "weather".into(),
                        "{\"city\":".into(),
                    ),
                ],
            }),
            Message::Tool(ToolMessage::success("c1", "weather", "12C")),
            Message::Tool(ToolMessage::error("c2", "weather", "invalid arguments")),
        ];
        let text = serde_json::to_string(&messages).unwrap();
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, messages);
        assert!(text.contains(r#""role":"user""#), "{text}");
    }

    #[test]
    fn argument_parsing_keeps_invalid_text_and_treats_empty_as_object() {
        assert_eq!(ToolArguments::parse(String::new()).json(), Some(&json!({})));
        match ToolArguments::parse("{\"a\": 1,".into()) {
            ToolArguments::Invalid { raw, error } => {
                assert_eq!(raw, "{\"a\": 1,");
                assert!(!error.is_empty());
            }
            other => panic!("expected invalid, got {other:?}"),
        }
    }
}
