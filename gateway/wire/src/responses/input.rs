//! Responses `input` items into messages: `message` items (content as a string or parts), `function_call`
//! and `custom_tool_call`, `function_call_output` and `custom_tool_call_output` (output as a string or parts)
//! and `reasoning` items; an item of any other type is kept whole for a Responses upstream.

use serde_json::Value;
use tower_chat::{AssistantMessage, Content, Message, Part, ProviderPart, ToolCall, ToolMessage};

use super::reasoning::input_reasoning;
use crate::error::ApiError;
use crate::format::schema;
use crate::parts::responses_content;

/// The provider of a whole input item kept as it came; the core's Responses leaf sends it back as an item.
pub(crate) const ITEM_PROVIDER: &str = "openai-responses-item";

pub(super) fn str_field<'a>(item: &'a Value, field: &str, at: &str) -> Result<&'a str, ApiError> {
    item.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| schema(format!("{at}: `{field}` must be a string")))
}

/// A call item's tool name in the request's terms: a namespace's tool (the item's `namespace`) under its joined
/// name, as every upstream is offered it.
fn call_name(item: &Value, at: &str) -> Result<String, ApiError> {
    let name = str_field(item, "name", at)?;
    Ok(match item.get("namespace").and_then(Value::as_str) {
        Some(namespace) => tower_chat::namespaced_tool_name(namespace, name),
        None => name.to_owned(),
    })
}

/// At least how many messages and tool calls `items` become: each `function_call_output` and each message not
/// from the assistant is a message, each item of a type kept whole too, each `function_call` a call (assistant
/// items merge, so they are not counted).
pub(super) fn raw_counts(items: &[Value]) -> (usize, usize) {
    let (mut messages, mut calls) = (0, 0);
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call" | "custom_tool_call") => calls += 1,
            Some("function_call_output" | "custom_tool_call_output") => messages += 1,
            Some("message") | None
                if item.get("role").and_then(Value::as_str) != Some("assistant") =>
            {
                messages += 1
            }
            Some("message" | "reasoning") | None => {}
            // Kept whole, each as a message of its own.
            Some(_) => messages += 1,
        }
    }
    (messages, calls)
}

/// The assistant turn being read: consecutive reasoning, assistant message and function call items form one
/// assistant message, whatever their order (reasoning comes first in the message, as every upstream wants it).
#[derive(Default)]
struct Turn {
    message: Option<AssistantMessage>,
    /// A message or function call item was read: the turn has something besides reasoning.
    answered: bool,
}

impl Turn {
    fn reasoning(&mut self) -> &mut AssistantMessage {
        self.message.get_or_insert_with(AssistantMessage::default)
    }

    fn answer(&mut self) -> &mut AssistantMessage {
        self.answered = true;
        self.reasoning()
    }

    /// End the turn. Reasoning that no answer or call followed has nothing to continue: it is left out, so an
    /// upstream is not sent an assistant message without content.
    fn flush(&mut self, out: &mut Vec<Message>) {
        if let Some(message) = self.message.take() {
            if std::mem::take(&mut self.answered) {
                out.push(Message::Assistant(message));
            }
        }
    }
}

/// Input items to messages, appended to `out`.
pub(super) fn input_messages(items: Vec<Value>, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let mut turn = Turn::default();
    for (i, mut item) in items.into_iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = match item.get("type").and_then(Value::as_str) {
            Some(kind) => kind.to_owned(),
            None if item.get("role").is_some() => "message".to_owned(),
            None => return Err(schema(format!("{at}: `type` is required"))),
        };
        match kind.as_str() {
            "message" => {
                // Taken, not cloned: the parts may hold megabytes of base64.
                let content = item.get_mut("content").map(Value::take).unwrap_or_default();
                let content = responses_content(content, &format!("{at}.content"))?;
                match str_field(&item, "role", &at)? {
                    "assistant" => {
                        let text = assistant_text(content.into_parts(), &at)?;
                        turn.answer().content.push_str(&text);
                    }
                    role => {
                        turn.flush(out);
                        out.push(match role {
                            "user" => Message::user(content),
                            "system" | "developer" => Message::system(content),
                            other => return Err(schema(format!("{at}: unknown role `{other}`"))),
                        });
                    }
                }
            }
            "function_call" => {
                let call = ToolCall::from_raw_arguments(
                    str_field(&item, "call_id", &at)?.to_owned(),
                    call_name(&item, &at)?,
                    str_field(&item, "arguments", &at)?.to_owned(),
                );
                turn.answer().tool_calls.push(call);
            }
            // A freeform tool's call: its input is one string, whatever upstream answers next.
            "custom_tool_call" => {
                let call = ToolCall::custom(
                    str_field(&item, "call_id", &at)?,
                    call_name(&item, &at)?,
                    str_field(&item, "input", &at)?,
                );
                turn.answer().tool_calls.push(call);
            }
            "function_call_output" | "custom_tool_call_output" => {
                turn.flush(out);
                let output = match item.get_mut("output").map(Value::take) {
                    Some(output @ (Value::String(_) | Value::Array(_))) => output,
                    _ => {
                        return Err(schema(format!(
                            "{at}: `output` must be a string or a list of content parts"
                        )))
                    }
                };
                let content = responses_content(output, &format!("{at}.output"))?;
                out.push(Message::Tool(ToolMessage::success(
                    str_field(&item, "call_id", &at)?,
                    "",
                    content,
                )));
            }
            "reasoning" => {
                let part = input_reasoning(item, &at)?;
                turn.reasoning().reasoning.push(part);
            }
            // An item of a type no layer models (a tool namespace's item, a hosted tool's call): kept whole, in
            // its place, for a Responses upstream.
            _ => {
                turn.flush(out);
                out.push(Message::user(Content::from_parts(vec![Part::from(
                    ProviderPart {
                        provider: ITEM_PROVIDER.into(),
                        value: item,
                    },
                )])));
            }
        }
    }
    turn.flush(out);
    Ok(())
}

/// An assistant message item's text: `output_text` and `refusal` parts (the model's own words) only.
fn assistant_text(parts: Vec<Part>, at: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (k, part) in parts.into_iter().enumerate() {
        match part {
            Part::Text(part) => text.push_str(&part.text),
            other => {
                return Err(schema(format!(
                    "{at}.content[{k}]: an assistant message carries text only, not a {} part",
                    other.kind()
                )))
            }
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tower_chat::{Continuation, ImageDetail, MediaSource};

    use super::*;
    use crate::format::UpstreamFormat;
    use crate::format::{Inbound, ParseContext, WireFormat};
    use crate::limits::RequestLimits;
    use crate::responses::Responses;

    const PNG: &str = "iVBORw0KGgo=";
    const PDF: &str = "JVBERi0xLjQK";

    fn parse(input: Value) -> Result<Inbound, ApiError> {
        let context = ParseContext {
            upstream: UpstreamFormat::Anthropic,
            limits: RequestLimits::DEFAULT,
            stores_responses: true,
        };
        let body = json!({"model": "m", "input": input}).to_string();
        Responses::parse(body.as_bytes(), &context).map(|(inbound, _)| inbound)
    }

    fn user_parts(input: Value) -> Vec<Part> {
        let request = parse(input).unwrap().request;
        let Some(Message::User { content }) = request.messages.last() else {
            panic!("{:?}", request.messages);
        };
        content.parts().to_vec()
    }

    #[test]
    fn message_parts_become_content_parts() {
        let parts = user_parts(json!([{"role": "user", "content": [
            {"type": "input_text", "text": "What are these?"},
            {"type": "input_image", "detail": "low", "image_url": format!("data:image/png;base64,{PNG}")},
            {"type": "input_image", "detail": "original", "image_url": "https://example.com/cat.jpg"},
            {"type": "input_image", "detail": "auto", "file_id": "file-img", "image_url": null},
            {"type": "input_file", "filename": "a.pdf", "file_data": format!("data:application/pdf;base64,{PDF}")},
            {"type": "input_file", "filename": "b.pdf", "file_data": PDF},
            {"type": "input_file", "file_url": "https://example.com/c.pdf"},
            {"type": "input_file", "file_id": "file-doc"},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        ]}]));
        assert_eq!(parts.len(), 9);
        assert!(matches!(&parts[0], Part::Text(text) if text.text == "What are these?"));
        let Part::Image(image) = &parts[1] else {
            panic!("{:?}", parts[1]);
        };
        assert_eq!(image.detail, Some(ImageDetail::Low));
        assert_eq!(
            (parts[1].media_type(), parts[1].media_bytes()),
            (Some("image/png"), 8)
        );
        let Part::Image(image) = &parts[2] else {
            panic!("{:?}", parts[2]);
        };
        assert_eq!(image.detail, Some(ImageDetail::Original));
        assert!(
            matches!(&image.source, MediaSource::Url { url } if url == "https://example.com/cat.jpg")
        );
        let Part::Image(image) = &parts[3] else {
            panic!("{:?}", parts[3]);
        };
        assert!(matches!(&image.source, MediaSource::FileId { id } if id == "file-img"));
        // A data URL and plain base64 named by its file both decode to the same bytes.
        for part in &parts[4..6] {
            assert_eq!(
                (part.media_type(), part.media_bytes()),
                (Some("application/pdf"), 9)
            );
        }
        let Part::File(file) = &parts[5] else {
            panic!("{:?}", parts[5]);
        };
        assert_eq!(file.name.as_deref(), Some("b.pdf"));
        let Part::File(file) = &parts[6] else {
            panic!("{:?}", parts[6]);
        };
        assert!(matches!(&file.source, MediaSource::Url { url } if url.ends_with("c.pdf")));
        assert_eq!(file.media_type(), Some("application/pdf"));
        let Part::File(file) = &parts[7] else {
            panic!("{:?}", parts[7]);
        };
        assert!(matches!(&file.source, MediaSource::FileId { id } if id == "file-doc"));
        assert_eq!(parts[8].media_type(), Some("audio/wav"));
    }

    #[test]
    fn a_cache_breakpoint_marks_its_part() {
        let parts = user_parts(json!([{"role": "user", "content": [
            {"type": "input_text", "text": "long prefix", "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"}},
            {"type": "input_text", "text": "question"},
        ]}]));
        assert!(parts[0].cache().is_some());
        assert!(parts[1].cache().is_none());
    }

    #[test]
    fn text_parts_stay_one_text() {
        let request = parse(json!([{"role": "user", "content": [
            {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]))
        .unwrap()
        .request;
        assert_eq!(request.messages[0], Message::user("ab"));
    }

    #[test]
    fn a_function_call_output_may_carry_parts() {
        let request = parse(json!([
            {"role": "user", "content": "chart?"},
            {"type": "function_call", "call_id": "c1", "name": "render", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_text", "text": "rendered"},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")},
                {"type": "input_file", "filename": "r.pdf", "file_data": PDF}]},
            {"type": "function_call", "call_id": "c2", "name": "render", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "plain"},
        ]))
        .unwrap()
        .request;
        let Message::Tool(tool) = &request.messages[2] else {
            panic!("{:?}", request.messages);
        };
        assert_eq!(
            (tool.call_id.as_str(), tool.name.as_str()),
            ("c1", "render")
        );
        let kinds: Vec<&str> = tool.content.parts().iter().map(Part::kind).collect();
        assert_eq!(kinds, ["text", "image", "file"]);
        assert_eq!(
            request.messages[4],
            Message::Tool(ToolMessage::success("c2", "render", "plain"))
        );
    }

    #[test]
    fn reasoning_joins_the_assistant_turn_that_follows_it() {
        let request = parse(json!([
            {"role": "user", "content": "weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}],
             "encrypted_content": "gAAAAB-first"},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "12C"},
            {"type": "reasoning", "id": "rs_2", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "12C."}]},
            {"role": "user", "content": "thanks"},
            // Reasoning that no answer followed: no assistant message of its own.
            {"type": "reasoning", "id": "rs_3", "summary": []},
        ]))
        .unwrap()
        .request;
        assert_eq!(request.messages.len(), 5, "{:?}", request.messages);
        let Message::Assistant(first) = &request.messages[1] else {
            panic!("{:?}", request.messages[1]);
        };
        assert_eq!(first.tool_calls[0].id, "c1");
        assert_eq!(first.reasoning[0].text, "Look it up.");
        assert_eq!(
            first.reasoning[0].continuation,
            Some(Continuation::OpenAiReasoning {
                id: "rs_1".into(),
                encrypted_content: Some("gAAAAB-first".into()),
                summary: vec!["Look it up.".into()],
            })
        );
        let Message::Assistant(second) = &request.messages[3] else {
            panic!("{:?}", request.messages[3]);
        };
        assert_eq!(second.content, "12C.");
        assert_eq!(second.reasoning.len(), 1);
        assert_eq!(request.messages[4], Message::user("thanks"));
    }

    #[test]
    fn bad_parts_are_refused_with_their_place() {
        let refused = |input: Value, says: &str| {
            let error = parse(input).unwrap_err();
            assert_eq!(error.status.as_u16(), 400);
            assert!(error.message.contains(says), "{says}: {}", error.message);
        };
        let user = |part: Value| json!([{"role": "user", "content": "hi"}, {"role": "user", "content": [part]}]);
        refused(
            user(json!({"type": "input_image", "image_url": "ftp://x/y.png"})),
            "input[1].content[0]",
        );
        refused(
            user(json!({"type": "input_image", "image_url": "file:///etc/passwd"})),
            "http(s)",
        );
        refused(
            user(json!({"type": "input_image", "detail": "auto"})),
            "exactly one of `image_url`",
        );
        refused(
            user(json!({"type": "input_image", "image_url": "data:image/png;base64,@@"})),
            "base64",
        );
        refused(
            user(json!({"type": "input_file", "file_data": PDF})),
            "filename",
        );
        refused(
            user(json!({"type": "input_file", "file_url": "data:application/pdf;base64,JVBE"})),
            "file_url",
        );
        refused(
            user(
                json!({"type": "input_file", "file_id": "f", "file_data": PDF, "filename": "a.pdf"}),
            ),
            "exactly one of `file_data`",
        );
        refused(
            user(
                json!({"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "auto"}}),
            ),
            "explicit",
        );
        refused(
            json!([{"type": "message", "role": "assistant", "content": [
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")}]}]),
            "assistant message carries text only",
        );
        refused(
            json!([{"type": "function_call_output", "call_id": "c", "output": {"text": "x"}}]),
            "input[0]: `output`",
        );
        refused(
            json!([{"type": "function_call_output", "call_id": "c", "output": [{"type": "output_audio"}]}]),
            "input[0].output[0]",
        );
        refused(json!([{"type": "reasoning", "summary": []}]), "input[0]");
    }
}
