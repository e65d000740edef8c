//! A whole `chat.completion` (non-streaming): mapped through the stream decoder's own steps, so both give the
//! same events.

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::Value;

use super::chunk::{ChunkDecoder, Delta, DeltaFunction, DeltaToolCall, RareDelta};
use super::extras::CompletionExtras;
use super::fields::{finish_reason, stream_error, WireUsage};
use super::parts::Content;
use super::text::Text;
use crate::error::ChatError;
use crate::event::{ChatEvent, Usage};

#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    #[serde(borrow)]
    choices: Vec<CompletionChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct CompletionChoice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow)]
    message: CompletionMessage<'a>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct CompletionMessage<'a> {
    /// A string, or a list of parts (Mistral's reasoning models).
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CompletionToolCall>>,
}

#[derive(Deserialize)]
struct CompletionToolCall {
    id: String,
    function: CompletionFunction,
}

#[derive(Deserialize)]
struct CompletionFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// Map a whole `chat.completion` body to the same events a stream of it would give.
pub(crate) fn decode_completion(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let completion: Completion = serde_json::from_slice(body)
        .map_err(|e| ChatError::protocol(format_args!("malformed completion ({e})"), body))?;
    if let Some(error) = completion.error {
        return Err(stream_error(&error));
    }
    let choice = completion
        .choices
        .into_iter()
        .find(|c| c.index == 0)
        .ok_or_else(|| ChatError::protocol("completion without choices", body))?;
    let mut out = VecDeque::new();
    if completion.id.is_some() || completion.model.is_some() {
        out.push_back(ChatEvent::ResponseMetadata {
            id: completion.id,
            model: completion.model,
        });
    }
    // Fields no layer models, for a Chat Completions client: read in a pass of their own.
    let (message_extra, choice_extra) = serde_json::from_slice::<CompletionExtras>(body)
        .map(CompletionExtras::of_first)
        .unwrap_or((None, None));
    let message = choice.message;
    let (content, content_parts) = match message.content {
        Some(Content::Text(text)) => (Some(text), None),
        Some(Content::Parts(parts)) => (None, Some(parts)),
        None => (None, None),
    };
    let mut decoder = ChunkDecoder {
        metadata_sent: true,
        ..ChunkDecoder::default()
    };
    decoder.on_delta(
        Delta {
            content,
            tool_calls: None,
            rare: Some(Box::new(RareDelta {
                reasoning_content: message.reasoning_content.map(Text::from),
                reasoning: message.reasoning.map(Text::from),
                refusal: message.refusal.map(Text::from),
                content_parts,
                extra: message_extra,
            })),
        },
        choice_extra,
        &mut out,
    );
    for (i, call) in message.tool_calls.into_iter().flatten().enumerate() {
        // Arguments are a JSON string by the spec; a few servers send the object itself.
        let arguments = match call.function.arguments {
            Value::String(text) => text,
            Value::Null => String::new(),
            other => other.to_string(),
        };
        decoder.on_tool_fragment(
            DeltaToolCall {
                index: Some(i as u32),
                id: Some(call.id.into()),
                function: Some(DeltaFunction {
                    name: Some(call.function.name.into()),
                    arguments: Some(arguments.into()),
                }),
            },
            &mut out,
        );
    }
    decoder.finish = choice
        .finish_reason
        .map(|r| finish_reason(&r, !decoder.calls.is_empty()));
    decoder.usage = completion.usage.map(Usage::from);
    decoder.finish(&mut out);
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::FinishReason;
    use crate::message::ToolCall;
    use serde_json::json;

    #[test]
    fn a_whole_refusal_ends_as_content_filter() {
        let body = json!({"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,
            "refusal":"I can't help with that."},"finish_reason":"stop"}]});
        let events = decode_completion(body.to_string().as_bytes()).unwrap();
        assert!(events.contains(&ChatEvent::text("I can't help with that.")));
        assert_eq!(
            events.last(),
            Some(&ChatEvent::finish(FinishReason::ContentFilter))
        );
    }

    #[test]
    fn a_whole_completion_gives_the_same_events_as_its_stream() {
        let body = json!({"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"add","arguments":"{\"a\":1}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,
            "prompt_tokens_details":{"cached_tokens":1}}});
        let events = decode_completion(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            events,
            vec![
                ChatEvent::ResponseMetadata {
                    id: Some("x".into()),
                    model: Some("m".into())
                },
                ChatEvent::ToolCallStart {
                    index: 0,
                    id: "c1".into(),
                    name: "add".into()
                },
                ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{\"a\":1}".into()
                },
                ChatEvent::ToolCallEnd {
                    index: 0,
                    call: ToolCall::new("c1", "add", json!({"a": 1}))
                },
                ChatEvent::Usage {
                    usage: Usage {
                        from_response_cache: false,
                        input_tokens: 3,
                        output_tokens: 2,
                        cached_input_tokens: Some(1),
                        reasoning_tokens: None,
                        cache_write_input_tokens: None,
                    }
                },
                ChatEvent::finish(FinishReason::ToolCalls),
            ]
        );
    }
}
