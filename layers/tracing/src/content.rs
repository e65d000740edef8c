//! Message contents in the OpenTelemetry GenAI JSON shape (`gen_ai.input.messages`, `gen_ai.output.messages`).
//!
//! Only built when content recording is enabled and the span is enabled: conversations are large and sensitive.
//! Images, audio and files are described by their media type and size (and a URL when they are one), never by
//! their bytes.

use serde_json::{json, Map, Value};
use tower_chat::{
    Content, DataUrl, FinishReason, MediaSource, Message, Part, ToolArguments, ToolCall,
};

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
        Message::System { content } => ("system", parts(content)),
        Message::User { content } => ("user", parts(content)),
        Message::Assistant(a) => {
            let mut parts = Vec::new();
            if let Some(reasoning) = a.reasoning_text() {
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
            vec![
                json!({"type": "tool_call_response", "id": t.call_id, "response": t.content.joined_text()}),
            ],
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

fn parts(content: &Content) -> Vec<Value> {
    content.parts().iter().map(part).collect()
}

/// A part in the GenAI shape: text as it is; media as a `uri` part (an `https:` URL) or a `blob` part whose
/// `content` is left out and replaced by its size.
fn part(part: &Part) -> Value {
    let modality = match part {
        Part::Text(text) => return self::text(&text.text),
        Part::Image(_) => "image",
        Part::Audio(_) => "audio",
        _ => "file",
    };
    let url = match part {
        Part::Image(image) => match &image.source {
            MediaSource::Url { url } if DataUrl::parse(url).is_err() => Some(url.as_str()),
            _ => None,
        },
        Part::File(file) => match &file.source {
            MediaSource::Url { url } if DataUrl::parse(url).is_err() => Some(url.as_str()),
            _ => None,
        },
        _ => None,
    };
    let mut object = Map::new();
    match url {
        Some(url) => {
            object.insert("type".into(), "uri".into());
            object.insert("uri".into(), url.into());
        }
        None => {
            object.insert("type".into(), "blob".into());
            object.insert("size".into(), part_size(part).into());
        }
    }
    object.insert("modality".into(), modality.into());
    if let Some(media_type) = part.media_type() {
        object.insert("mime_type".into(), media_type.into());
    }
    Value::Object(object)
}

fn part_size(part: &Part) -> usize {
    match part {
        Part::Image(image) => match &image.source {
            MediaSource::Url { url } => {
                DataUrl::parse(url).map_or(0, |data| data.base64.len() / 4 * 3)
            }
            _ => part.media_bytes(),
        },
        _ => part.media_bytes(),
    }
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
                reasoning: vec![tower_chat::ReasoningPart::text("look it up")],
                tool_calls: vec![
                    ToolCall::new("c1", "weather", json!({"city": "Oslo"})),
                    ToolCall::from_raw_arguments("c2".into(), "weather".into(), "{oops".into()),
                ],
                provider_parts: Vec::new(),
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
    fn media_parts_are_described_by_type_and_size_never_by_their_bytes() {
        let secret_pixels = vec![0x42u8; 3000];
        let messages = vec![Message::user(vec![
            Part::text("what is this?"),
            Part::image(secret_pixels, "image/png"),
            Part::image_url("https://example.com/cat.jpg"),
            Part::image_url("data:image/jpeg;base64,QkJCQkJC"),
        ])];
        let text = input_messages(&messages);
        assert!(!text.contains("QkJC"), "{text}");
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value[0]["parts"],
            json!([
                {"type": "text", "content": "what is this?"},
                {"type": "blob", "size": 3000, "modality": "image", "mime_type": "image/png"},
                {"type": "uri", "uri": "https://example.com/cat.jpg", "modality": "image"},
                {"type": "blob", "size": 6, "modality": "image", "mime_type": "image/jpeg"},
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
