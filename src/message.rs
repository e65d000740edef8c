//! The provider-neutral conversation: system, user, assistant and tool messages.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::{Content, ProviderPart};
use crate::reasoning::{deserialize_reasoning, ReasoningPart};

/// One message of a conversation.
///
/// Serialized with a `role` tag (`{"role":"user","content":"hi"}`; content with parts other than one plain text
/// is an array of parts); serde round-trips every variant losslessly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions: text parts (a part may carry a cache hint).
        content: Content,
    },
    /// What the user said.
    User {
        /// The user's text, images, audio and files.
        content: Content,
    },
    /// What the model answered: text, reasoning and tool calls.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    Tool(ToolMessage),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<Content>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message: text (`Message::user("hi")`) or parts (`Message::user(vec![Part::text(..), Part::image(..)])`).
    pub fn user(content: impl Into<Content>) -> Self {
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
        content: impl Into<Content>,
    ) -> Self {
        Message::Tool(ToolMessage::success(call_id, name, content))
    }

    /// Bytes of binary data the message's parts hold (images, audio, files; an assistant message holds none).
    pub fn media_bytes(&self) -> usize {
        match self {
            Message::System { content } | Message::User { content } => content.media_bytes(),
            Message::Tool(tool) => tool.content.media_bytes(),
            Message::Assistant(_) => 0,
        }
    }
}

/// What the model answered in one round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The answer text (empty when the model only called tools).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content: String,
    /// Reasoning, in the model's order, with what its provider needs to continue from it (Anthropic's thinking
    /// signatures, OpenAI's reasoning items); text only for providers that just stream it (DeepSeek's
    /// `reasoning_content`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "deserialize_reasoning"
    )]
    pub reasoning: Vec<ReasoningPart>,
    /// The tools the model asked to call, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Blocks of a provider's own format the core does not model (Anthropic's `server_tool_use` and its
    /// results), each with its place among the modelled content. Only a leaf speaking that provider's format
    /// sends them; the others leave them out and name them in [`DroppedFields`](crate::DroppedFields).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_parts: Vec<PlacedPart>,
}

/// A provider part of an assistant message and its place: the reasoning parts and tool calls before it, and
/// the byte offset into the answer text where it sits (text blocks around it are joined in
/// [`AssistantMessage::content`], so the offset is what splits them again).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacedPart {
    /// Reasoning parts before the part.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub after_reasoning: usize,
    /// Byte offset into [`AssistantMessage::content`] (a char boundary) where the part sits.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub text_offset: usize,
    /// Tool calls before the part.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub after_calls: usize,
    /// The block as the provider's format writes it.
    pub part: ProviderPart,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl PlacedPart {
    /// `part` placed after everything `message` holds so far (what a parser reading blocks in order wants).
    pub fn at_end_of(message: &AssistantMessage, part: ProviderPart) -> Self {
        PlacedPart {
            after_reasoning: message.reasoning.len(),
            text_offset: message.content.len(),
            after_calls: message.tool_calls.len(),
            part,
        }
    }
}

impl AssistantMessage {
    /// Whether the message carries nothing at all.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
            && self.reasoning.is_empty()
            && self.tool_calls.is_empty()
            && self.provider_parts.is_empty()
    }

    /// The reasoning texts joined (borrowed when there is one part), `None` without reasoning text.
    pub fn reasoning_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        let mut texts = self.reasoning.iter().filter(|part| !part.text.is_empty());
        let first = texts.next()?;
        match texts.next() {
            None => Some(std::borrow::Cow::Borrowed(&first.text)),
            Some(second) => {
                let mut joined = format!("{}\n\n{}", first.text, second.text);
                for part in texts {
                    joined.push_str("\n\n");
                    joined.push_str(&part.text);
                }
                Some(std::borrow::Cow::Owned(joined))
            }
        }
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call; tool results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed once when the call was complete. A [`CallKind::Custom`] call's are
    /// `{"input": "<the model's text>"}`, so every layer reads them as JSON like any other call's.
    pub arguments: ToolArguments,
    /// A call of a function tool, or of a freeform tool whose input is one string.
    #[serde(default, skip_serializing_if = "CallKind::is_function")]
    pub kind: CallKind,
}

/// What kind of tool a call is for: the kind of the [`ToolSpec`](crate::ToolSpec) it names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// A function tool: the arguments are a JSON object for its schema.
    #[default]
    Function,
    /// A freeform tool ([`ToolKind::Custom`](crate::ToolKind::Custom)): the model wrote one string, kept as the
    /// `input` argument. A Responses client sees it as a `custom_tool_call` item.
    Custom,
}

impl CallKind {
    /// Whether this is a function call (the default, left out when serialised).
    pub fn is_function(&self) -> bool {
        matches!(self, CallKind::Function)
    }
}

impl ToolCall {
    /// A call with well-formed JSON arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: ToolArguments::Json(arguments),
            kind: CallKind::Function,
        }
    }

    /// A call of a freeform tool whose input is `input` (kept as the `input` argument).
    pub fn custom(
        id: impl Into<String>,
        name: impl Into<String>,
        input: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: ToolArguments::Json(serde_json::json!({ "input": input.into() })),
            kind: CallKind::Custom,
        }
    }

    /// The text a freeform call's input is: its `input` argument, or the whole argument text when the model
    /// wrote something else (an upstream that took the tool as a function may wrap it otherwise).
    pub fn custom_input(&self) -> String {
        match &self.arguments {
            ToolArguments::Json(Value::Object(fields)) if fields.len() == 1 => {
                match fields.get("input") {
                    Some(Value::String(input)) => input.clone(),
                    _ => self.arguments.to_wire_string(),
                }
            }
            ToolArguments::Json(Value::String(input)) => input.clone(),
            ToolArguments::Json(other) => other.to_string(),
            ToolArguments::Invalid { raw, .. } => raw.clone(),
        }
    }

    /// A call whose argument text is parsed here: an empty text means `{}` (some servers send nothing for a
    /// tool without parameters); text that is not JSON is kept raw as [`ToolArguments::Invalid`].
    pub fn from_raw_arguments(id: String, name: String, raw: String) -> Self {
        ToolCall {
            id,
            name,
            arguments: ToolArguments::parse(raw),
            kind: CallKind::Function,
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
    /// The result: text (JSON results are serialized to text), and images or files where the tool returned them.
    pub content: Content,
    /// Whether the result reports a failure (bad arguments, tool error, denied approval).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolMessage {
    /// A successful result.
    pub fn success(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<Content>,
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
        content: impl Into<Content>,
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
                reasoning: vec![ReasoningPart::text("the user wants weather")],
                tool_calls: vec![
                    ToolCall::new("c1", "weather", json!({"city": "Oslo"})),
                    ToolCall::from_raw_arguments(
                        "c2".into(),
                        "weather".into(),
                        "{\"city\":".into(),
                    ),
                    ToolCall::custom("c3", "apply_patch", "*** Begin Patch\n*** End Patch\n"),
                ],
                provider_parts: Vec::new(),
            }),
            Message::Tool(ToolMessage::success("c1", "weather", "12C")),
            Message::Tool(ToolMessage::error("c2", "weather", "invalid arguments")),
        ];
        let text = serde_json::to_string(&messages).unwrap();
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, messages);
        assert!(text.contains(r#""role":"user""#), "{text}");
        // A function call says nothing of its kind (records written before kinds existed read the same).
        assert_eq!(text.matches(r#""kind":"custom""#).count(), 1, "{text}");
    }

    #[test]
    fn carried_assistant_blocks_round_trip_and_older_records_read_the_same() {
        let mut assistant = AssistantMessage::default();
        assistant.content.push_str("Searching. ");
        let part = |value: Value| ProviderPart {
            provider: "anthropic".into(),
            value,
        };
        let call =
            json!({"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}});
        assistant
            .provider_parts
            .push(PlacedPart::at_end_of(&assistant, part(call)));
        assistant.content.push_str("Found it.");
        assistant
            .tool_calls
            .push(ToolCall::new("c1", "read", json!({})));
        let result = json!({"type": "web_search_tool_result", "tool_use_id": "s1", "content": []});
        assistant
            .provider_parts
            .push(PlacedPart::at_end_of(&assistant, part(result)));
        let message = Message::Assistant(assistant);
        let text = serde_json::to_string(&message).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), message);
        let Message::Assistant(back) = serde_json::from_str::<Message>(&text).unwrap() else {
            unreachable!()
        };
        assert_eq!(back.provider_parts[0].text_offset, "Searching. ".len());
        assert_eq!(back.provider_parts[1].after_calls, 1);
        // Zero places are left out, as is an empty list: a record without carried blocks is as it was.
        assert!(!text.contains("after_reasoning"), "{text}");
        let plain = serde_json::to_string(&Message::assistant("hi")).unwrap();
        assert_eq!(plain, r#"{"role":"assistant","content":"hi"}"#);
        let older: Message =
            serde_json::from_str(r#"{"role":"assistant","content":"hi"}"#).unwrap();
        assert_eq!(older, Message::assistant("hi"));
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
