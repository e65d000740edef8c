//! Message contents in the OpenTelemetry GenAI JSON shape (`gen_ai.input.messages`, `gen_ai.output.messages`).
//!
//! Only built when content recording is enabled and the span is enabled: conversations are large and sensitive.

use serde_json::{json, Map, Value};
use tower_chat::{FinishReason, Message, ToolArguments, ToolCall};

/// `gen_ai.input.messages`: every message of the request, in order.
pub(crate) fn input_messages(messages: &[Message]) -> String {
    Value::Array(messages.iter().map(|m| message(m, None)).collect()).to_string()
}

/// `gen_ai.output.messages`: what the call produced. The last message carries the call's finish reason; earlier
/// assistant messages of a tool loop ended in tool calls.
pub(crate) fn output_messages(messages: &[Message], finish: Option<&FinishReason>) -> String {
    let last = messages.len().saturating_sub(1);
    let out = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let reason = match m {
                Message::Assistant(_) if i == last => finish.map(FinishReason::as_str),
                Message::Assistant(a) if !a.tool_calls.is_empty() => Some("tool_calls"),
                _ => None,
            };
            message(m, reason)
        })
        .collect();
    Value::Array(out).to_string()
}

fn message(message: &Message, finish_reason: Option<&str>) -> Value {
    let (role, parts) = match message {
        Message::System { content } => ("system", vec![text(content)]),
        Message::User { content } => ("user", vec![text(content)]),
        Message::Assistant(a) => {
            let mut parts = Vec::new();
            if let Some(reasoning) = &a.reasoning {
                parts.push(json!({"type": "reasoning", "content": reasoning}));
            }
            if !a.content.is_empty() {
                parts.push(text(&a.content));
            }
            parts.extend(a.tool_calls.iter().map(tool_call));
            ("assistant", parts)
        }
        Message::Tool(t) => (
            "tool",
            vec![json!({"type": "tool_call_response", "id": t.call_id, "response": t.content})],
        ),
    };
    let mut object = Map::new();
    object.insert("role".into(), role.into());
    object.insert("parts".into(), parts.into());
    if let Some(reason) = finish_reason {
        object.insert("finish_reason".into(), reason.into());
    }
    Value::Object(object)
}

fn text(content: &str) -> Value {
    json!({"type": "text", "content": content})
}

fn tool_call(call: &ToolCall) -> Value {
    let arguments = match &call.arguments {
        ToolArguments::Json(value) => value.clone(),
        ToolArguments::Invalid { raw, .. } => Value::String(raw.clone()),
    };
    json!({"type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments})
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::{AssistantMessage, ToolMessage};

    #[test]
    fn messages_take_the_semconv_parts_shape() {
        let messages = vec![
            Message::system("be brief"),
            Message::user("weather in Oslo?"),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: Some("look it up".into()),
                tool_calls: vec![
                    ToolCall::new("c1", "weather", json!({"city": "Oslo"})),
                    ToolCall::from_raw_arguments("c2".into(), "weather".into(), "{oops".into()),
                ],
            }),
            Message::Tool(ToolMessage::success("c1", "weather", "12C")),
        ];
        let value: Value = serde_json::from_str(&input_messages(&messages)).unwrap();
        assert_eq!(
            value,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                {"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]},
                {"role": "assistant", "parts": [
                    {"type": "reasoning", "content": "look it up"},
                    {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Oslo"}},
                    {"type": "tool_call", "id": "c2", "name": "weather", "arguments": "{oops"},
                ]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "12C"}]},
            ])
        );
    }

    #[test]
    fn the_last_output_message_carries_the_finish_reason() {
        let messages = vec![
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::new("c1", "weather", json!({}))],
                ..AssistantMessage::default()
            }),
            Message::tool_result("c1", "weather", "12C"),
            Message::assistant("It is 12C."),
        ];
        let value: Value =
            serde_json::from_str(&output_messages(&messages, Some(&FinishReason::Stop))).unwrap();
        assert_eq!(value[0]["finish_reason"], "tool_calls");
        assert!(value[1].get("finish_reason").is_none());
        assert_eq!(value[2]["finish_reason"], "stop");
        assert_eq!(value[2]["parts"][0]["content"], "It is 12C.");
    }
}
