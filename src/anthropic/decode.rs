//! Messages API responses — the streamed event sequence and whole messages — mapped to chat events.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ChatError, ErrorKind};
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::forced_answer::ForcedAnswerEvents;
use crate::message::ToolCall;
use crate::reasoning::Continuation;
use crate::sse::SseEvent;
use crate::transport::WireDecoder;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: MessageInfo,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageInfo {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

/// `content_block_delta`, the bulk of a stream, read without the `type`-tagged [`StreamEvent`] enum when the SSE
/// event name already says what it is: serde buffers the whole object of an internally tagged enum before it can
/// pick the variant.
#[derive(Deserialize)]
struct ContentBlockDeltaEvent {
    index: usize,
    delta: BlockDelta,
}

enum BlockDelta {
    TextDelta { text: String },
    InputJsonDelta { partial_json: String },
    ThinkingDelta { thinking: String },
    SignatureDelta { signature: String },
    Other,
}

/// A delta read as a plain object (no buffering, unlike a `type`-tagged enum), then sorted by its `type`.
#[derive(Deserialize)]
struct WireBlockDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    partial_json: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
}

impl<'de> Deserialize<'de> for BlockDelta {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireBlockDelta::deserialize(deserializer)?;
        let missing = |field| serde::de::Error::missing_field(field);
        Ok(match &*wire.kind {
            "text_delta" => BlockDelta::TextDelta {
                text: wire.text.ok_or_else(|| missing("text"))?,
            },
            "input_json_delta" => BlockDelta::InputJsonDelta {
                partial_json: wire.partial_json.ok_or_else(|| missing("partial_json"))?,
            },
            "thinking_delta" => BlockDelta::ThinkingDelta {
                thinking: wire.thinking.ok_or_else(|| missing("thinking"))?,
            },
            "signature_delta" => BlockDelta::SignatureDelta {
                signature: wire.signature.ok_or_else(|| missing("signature"))?,
            },
            _ => BlockDelta::Other,
        })
    }
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

/// What one content block (by the provider's index) is.
enum BlockState {
    Text,
    /// A thinking block and its signature so far (sent whole in one `signature_delta`, or in the start block).
    Thinking {
        signature: String,
    },
    Tool {
        call_index: usize,
        id: String,
        name: String,
        json: String,
        start_input: Value,
    },
    Other,
}

/// Maps a Messages API SSE stream to chat events.
#[derive(Default)]
pub struct MessageDecoder {
    /// The open content blocks by their wire index (a stopped block is removed). A map, not a `Vec` indexed by
    /// it: the index comes from the upstream, and sizing a `Vec` by it let one `"index": 3666666666666666666` abort the process
    /// (capacity overflow; a smaller huge index allocated gigabytes) — found by `fuzz/anthropic_stream`.
    blocks: BTreeMap<usize, BlockState>,
    calls: usize,
    usage: Usage,
    stop_reason: Option<String>,
    /// Which stop sequence ended the message, when `stop_reason` is `stop_sequence`.
    stop_sequence: Option<String>,
    done: bool,
    /// Calls of the forced answer tool (a JSON answer on models before structured outputs) become text.
    answers: ForcedAnswerEvents,
}

impl MessageDecoder {
    /// Runs the events from `start` on through the forced-answer mapping, in place.
    fn answers_as_text(&mut self, out: &mut VecDeque<ChatEvent>, start: usize) {
        let mut i = start;
        while i < out.len() {
            let event = std::mem::replace(&mut out[i], ChatEvent::finish(FinishReason::Stop));
            match self.answers.map(event) {
                Some(mapped) => {
                    out[i] = mapped;
                    i += 1;
                }
                None => {
                    out.remove(i);
                }
            }
        }
    }

    fn block(&mut self, index: usize) -> Result<&mut BlockState, ChatError> {
        self.blocks.get_mut(&index).ok_or_else(|| {
            ChatError::new(
                ErrorKind::Protocol,
                format!("content block {index} was never started"),
            )
        })
    }

    fn apply_usage(&mut self, wire: WireUsage) {
        // Anthropic's input_tokens exclude cache reads and writes; tower-chat counts every prompt token as input.
        if wire.input_tokens.is_some() || wire.cache_read_input_tokens.is_some() {
            self.usage.input_tokens = wire.input_tokens.unwrap_or(0)
                + wire.cache_read_input_tokens.unwrap_or(0)
                + wire.cache_creation_input_tokens.unwrap_or(0);
            self.usage.cached_input_tokens = wire.cache_read_input_tokens;
            self.usage.cache_write_input_tokens = wire.cache_creation_input_tokens;
        }
        // Both message_start and message_delta report output tokens cumulatively.
        if let Some(output) = wire.output_tokens {
            self.usage.output_tokens = output;
        }
    }

    fn on_stream_event(
        &mut self,
        event: StreamEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        match event {
            StreamEvent::MessageStart { message } => {
                out.push_back(ChatEvent::ResponseMetadata {
                    id: message.id,
                    model: message.model,
                });
                if let Some(usage) = message.usage {
                    self.apply_usage(usage);
                }
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let state = match content_block {
                    ContentBlock::Text { text } => {
                        if !text.is_empty() {
                            out.push_back(ChatEvent::TextDelta { text });
                        }
                        BlockState::Text
                    }
                    ContentBlock::Thinking {
                        thinking,
                        signature,
                    } => {
                        if !thinking.is_empty() {
                            out.push_back(ChatEvent::ReasoningDelta { text: thinking });
                        }
                        BlockState::Thinking { signature }
                    }
                    ContentBlock::RedactedThinking { data } => {
                        out.push_back(ChatEvent::ReasoningEnd {
                            continuation: Continuation::AnthropicRedacted { data },
                        });
                        BlockState::Other
                    }
                    ContentBlock::ToolUse { id, name, input } => {
                        let call_index = self.calls;
                        self.calls += 1;
                        out.push_back(ChatEvent::ToolCallStart {
                            index: call_index,
                            id: id.clone(),
                            name: name.clone(),
                        });
                        BlockState::Tool {
                            call_index,
                            id,
                            name,
                            json: String::new(),
                            start_input: input,
                        }
                    }
                    ContentBlock::Other => BlockState::Other,
                };
                self.blocks.insert(index, state);
            }
            StreamEvent::ContentBlockDelta { index, delta } => match (self.block(index)?, delta) {
                (BlockState::Text, BlockDelta::TextDelta { text }) => {
                    out.push_back(ChatEvent::TextDelta { text })
                }
                (BlockState::Thinking { .. }, BlockDelta::ThinkingDelta { thinking }) => {
                    out.push_back(ChatEvent::ReasoningDelta { text: thinking })
                }
                (
                    BlockState::Thinking { signature },
                    BlockDelta::SignatureDelta { signature: more },
                ) => signature.push_str(&more),
                (
                    BlockState::Tool {
                        call_index, json, ..
                    },
                    BlockDelta::InputJsonDelta { partial_json },
                ) if !partial_json.is_empty() => {
                    json.push_str(&partial_json);
                    out.push_back(ChatEvent::ToolCallDelta {
                        index: *call_index,
                        arguments: partial_json,
                    });
                }
                // Signatures, citations and deltas of block kinds we do not map.
                _ => {}
            },
            StreamEvent::ContentBlockStop { index } => {
                match self.blocks.remove(&index) {
                    Some(BlockState::Tool {
                        call_index,
                        id,
                        name,
                        json,
                        start_input,
                    }) => {
                        // With no input deltas (a tool without parameters) the start block's input is the input.
                        let raw = if json.is_empty() && !start_input.is_null() {
                            start_input.to_string()
                        } else {
                            json
                        };
                        out.push_back(ChatEvent::ToolCallEnd {
                            index: call_index,
                            call: ToolCall::from_raw_arguments(id, name, raw),
                        });
                    }
                    // Thinking without a signature cannot be sent back: it stays plain reasoning text.
                    Some(BlockState::Thinking { signature }) if !signature.is_empty() => out
                        .push_back(ChatEvent::ReasoningEnd {
                            continuation: Continuation::AnthropicThinking { signature },
                        }),
                    _ => {}
                }
            }
            StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(sequence) = delta.stop_sequence {
                    self.stop_sequence = Some(sequence);
                }
                if let Some(usage) = usage {
                    self.apply_usage(usage);
                }
            }
            StreamEvent::MessageStop => self.finish(out),
            StreamEvent::Ping | StreamEvent::Unknown => {}
            StreamEvent::Error { error } => return Err(error_from(&error)),
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut VecDeque<ChatEvent>) {
        out.push_back(ChatEvent::Usage { usage: self.usage });
        let reason = stop_reason(
            self.stop_reason.as_deref().unwrap_or("end_turn"),
            self.stop_sequence.take(),
            self.calls > 0,
        );
        out.push_back(ChatEvent::Finish { reason });
        self.done = true;
    }
}

impl std::fmt::Debug for MessageDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageDecoder").finish_non_exhaustive()
    }
}

impl WireDecoder for MessageDecoder {
    type Framing = crate::sse::SseDecoder;

    fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        let parsed = if event.event.as_deref() == Some("content_block_delta") {
            serde_json::from_str::<ContentBlockDeltaEvent>(&event.data).map(|e| {
                StreamEvent::ContentBlockDelta {
                    index: e.index,
                    delta: e.delta,
                }
            })
        } else {
            serde_json::from_str::<StreamEvent>(&event.data)
        };
        let parsed = parsed.map_err(|e| {
            ChatError::protocol(format_args!("malformed event ({e})"), event.data.as_bytes())
        })?;
        let start = out.len();
        self.on_stream_event(parsed, out)?;
        self.answers_as_text(out, start);
        Ok(())
    }

    fn on_end(&mut self, _out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        Err(ChatError::ended_before("message_stop"))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

fn stop_reason(reason: &str, sequence: Option<String>, had_calls: bool) -> FinishReason {
    match reason {
        "tool_use" => FinishReason::ToolCalls,
        "end_turn" | "stop_sequence" if had_calls => FinishReason::ToolCalls,
        "stop_sequence" => sequence.map_or(FinishReason::Stop, FinishReason::StopSequence),
        "end_turn" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

fn error_from(error: &Value) -> ChatError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    let kind = match error.get("type").and_then(Value::as_str) {
        Some("rate_limit_error") => ErrorKind::RateLimited { retry_after: None },
        Some("authentication_error") | Some("permission_error") => ErrorKind::Authentication,
        Some("invalid_request_error") | Some("not_found_error") | Some("request_too_large") => {
            ErrorKind::InvalidRequest
        }
        _ => ErrorKind::Upstream,
    };
    ChatError::new(kind, message)
}

/// The message in an error body: `{"type":"error","error":{"type":…,"message":…}}`.
pub(crate) fn provider_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| error.as_str().map(str::to_owned))
}

#[derive(Deserialize)]
struct WholeMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<ContentBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Map a whole message body to the same events its stream would give.
pub(crate) fn decode_message(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ChatError::protocol(format_args!("malformed message ({e})"), body))?;
    if value.get("type").and_then(Value::as_str) == Some("error") {
        return Err(error_from(value.get("error").unwrap_or(&Value::Null)));
    }
    let message: WholeMessage = serde_json::from_value(value)
        .map_err(|e| ChatError::protocol(format_args!("malformed message ({e})"), body))?;
    let mut decoder = MessageDecoder::default();
    let mut out = VecDeque::new();
    decoder.on_stream_event(
        StreamEvent::MessageStart {
            message: MessageInfo {
                id: message.id,
                model: message.model,
                usage: message.usage,
            },
        },
        &mut out,
    )?;
    for (index, block) in message.content.into_iter().enumerate() {
        decoder.on_stream_event(
            StreamEvent::ContentBlockStart {
                index,
                content_block: block,
            },
            &mut out,
        )?;
        decoder.on_stream_event(StreamEvent::ContentBlockStop { index }, &mut out)?;
    }
    decoder.stop_reason = message.stop_reason;
    decoder.stop_sequence = message.stop_sequence;
    decoder.finish(&mut out);
    decoder.answers_as_text(&mut out, 0);
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::EventDecoder;
    use serde_json::json;

    fn decode_stream(text: &str) -> Vec<Result<ChatEvent, String>> {
        let mut decoder = EventDecoder::new(MessageDecoder::default());
        decoder.feed(text.as_bytes());
        decoder.end(None);
        std::iter::from_fn(|| decoder.next_item())
            .map(|item| item.map_err(|e| e.to_string()))
            .collect()
    }

    fn event(name: &str, data: Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    /// Found by `fuzz/anthropic_stream`: the block index sized a `Vec` (capacity overflow, an abort).
    #[test]
    fn a_huge_block_index_is_just_a_key() {
        let text = [
            event("message_start", json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}})),
            event("content_block_start", json!({"type":"content_block_start","index":3_666_666_666_666_666_666_u64,"content_block":{"type":"text","text":""}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":3_666_666_666_666_666_666_u64,"delta":{"type":"text_delta","text":"hi"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":3_666_666_666_666_666_666_u64})),
            event("content_block_delta", json!({"type":"content_block_delta","index":3_666_666_666_666_666_666_u64,"delta":{"type":"text_delta","text":"late"}})),
        ]
        .concat();
        let items = decode_stream(&text);
        assert!(
            items
                .iter()
                .any(|i| matches!(i, Ok(ChatEvent::TextDelta { text }) if text == "hi")),
            "{items:?}"
        );
        assert!(
            items.iter().any(|i| matches!(i, Err(e) if e.contains("content block 3666666666666666666 was never started"))),
            "a delta after the stop: {items:?}"
        );
    }

    fn tool_stream() -> String {
        [
            event("message_start", json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1,"cache_read_input_tokens":5}}})),
            event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
            event("ping", json!({"type":"ping"})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":0})),
            event("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Os"}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"lo\"}"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":1})),
            event("content_block_start", json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":2})),
            event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40}})),
            event("message_stop", json!({"type":"message_stop"})),
        ]
        .concat()
    }

    #[test]
    fn event_names_are_only_a_shortcut_the_data_decides_without_them() {
        let named = decode_stream(&tool_stream());
        let unnamed: String = tool_stream()
            .lines()
            .filter(|line| !line.starts_with("event:"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(decode_stream(&unnamed), named);
        assert!(named.iter().all(Result::is_ok), "{named:?}");
    }

    #[test]
    fn a_text_delta_without_its_text_is_a_protocol_error() {
        let text = [
            event("message_start", json!({"type":"message_start","message":{"id":"m","model":"c"}})),
            event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}})),
        ]
        .concat();
        let events = decode_stream(&text);
        assert!(
            matches!(events.last(), Some(Err(m)) if m.starts_with("protocol: malformed event") && m.contains("text")),
            "{events:?}"
        );
    }

    proptest::proptest! {
        #[test]
        fn every_chunking_yields_the_same_events(cuts in proptest::collection::vec(0usize..3000, 0..16)) {
            let text = tool_stream().replace("Checking", "Chécking ✓");
            let bytes = text.as_bytes();
            let whole = decode_stream(&text);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut decoder = EventDecoder::new(MessageDecoder::default());
            let mut events = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                decoder.feed(&bytes[start..cut]);
                start = cut;
                events.extend(std::iter::from_fn(|| decoder.next_item()));
            }
            decoder.end(None);
            events.extend(std::iter::from_fn(|| decoder.next_item()));
            let events: Vec<_> = events.into_iter().map(|item| item.map_err(|e| e.to_string())).collect();
            proptest::prop_assert_eq!(events, whole);
        }
    }

    #[test]
    fn a_tool_use_stream_maps_to_events() {
        let events = decode_stream(&tool_stream());
        let events: Vec<ChatEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            events[0],
            ChatEvent::ResponseMetadata {
                id: Some("msg_1".into()),
                model: Some("claude-sonnet-4-5".into())
            }
        );
        assert_eq!(events[1], ChatEvent::text("Checking"));
        assert_eq!(
            events[2],
            ChatEvent::ToolCallStart {
                index: 0,
                id: "toolu_1".into(),
                name: "weather".into()
            }
        );
        assert!(events.contains(&ChatEvent::ToolCallEnd {
            index: 0,
            call: ToolCall::new("toolu_1", "weather", json!({"city": "Oslo"}))
        }));
        assert!(events.contains(&ChatEvent::ToolCallEnd {
            index: 1,
            call: ToolCall::new("toolu_2", "now", json!({}))
        }));
        let n = events.len();
        assert_eq!(
            events[n - 2],
            ChatEvent::Usage {
                usage: Usage {
                    from_response_cache: false,
                    input_tokens: 30,
                    output_tokens: 40,
                    cached_input_tokens: Some(5),
                    reasoning_tokens: None,
                    cache_write_input_tokens: None,
                }
            }
        );
        assert_eq!(events[n - 1], ChatEvent::finish(FinishReason::ToolCalls));
    }

    #[test]
    fn a_forced_answer_call_comes_back_as_text_streamed_and_whole() {
        let stream = [
            event("message_start", json!({"type":"message_start","message":{"id":"msg_1","model":"claude-3-opus","usage":{"input_tokens":5,"output_tokens":0}}})),
            event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"structured_answer","input":{}}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"name\":"}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":0})),
            event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}})),
            event("message_stop", json!({"type":"message_stop"})),
        ]
        .concat();
        let streamed: Vec<ChatEvent> = decode_stream(&stream)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let text: String = streamed
            .iter()
            .filter_map(|e| match e {
                ChatEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, r#"{"name":"Oslo"}"#);
        assert!(!streamed.iter().any(|e| e.kind().starts_with("tool_call")));
        assert_eq!(
            streamed.last(),
            Some(&ChatEvent::finish(FinishReason::Stop))
        );

        let whole = decode_message(
            json!({"id":"msg_1","model":"claude-3-opus","content":[{"type":"tool_use","id":"toolu_1",
                   "name":"structured_answer","input":{"name":"Oslo"}}],"stop_reason":"tool_use",
                   "usage":{"input_tokens":5,"output_tokens":9}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        assert!(whole.contains(&ChatEvent::text(r#"{"name":"Oslo"}"#)));
        assert_eq!(whole.last(), Some(&ChatEvent::finish(FinishReason::Stop)));
    }

    #[test]
    fn thinking_deltas_are_reasoning() {
        let text = [
            event("message_start", json!({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}})),
            event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"def"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":0})),
            event("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EnCrYpTeD"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":1})),
            event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":3}})),
            event("message_stop", json!({"type":"message_stop"})),
        ].concat();
        let events = decode_stream(&text);
        assert_eq!(
            events[1..4],
            [
                Ok(ChatEvent::ReasoningDelta { text: "hmm".into() }),
                Ok(ChatEvent::ReasoningEnd {
                    continuation: Continuation::AnthropicThinking {
                        signature: "abcdef".into()
                    }
                }),
                Ok(ChatEvent::ReasoningEnd {
                    continuation: Continuation::AnthropicRedacted {
                        data: "EnCrYpTeD".into()
                    }
                }),
            ]
        );
        assert_eq!(
            *events.last().unwrap(),
            Ok(ChatEvent::finish(FinishReason::Length))
        );
    }

    #[test]
    fn a_stop_sequence_is_named_streamed_and_whole() {
        let text = [
            event("message_start", json!({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}})),
            event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
            event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"one two"}})),
            event("content_block_stop", json!({"type":"content_block_stop","index":0})),
            event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"output_tokens":3}})),
            event("message_stop", json!({"type":"message_stop"})),
        ].concat();
        let stop = FinishReason::StopSequence("END".into());
        assert_eq!(
            *decode_stream(&text).last().unwrap(),
            Ok(ChatEvent::finish(stop.clone()))
        );
        let body = json!({"id":"m","type":"message","role":"assistant","model":"c",
            "content":[{"type":"text","text":"one two"}],
            "stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":1,"output_tokens":3}});
        let whole = decode_message(body.to_string().as_bytes()).unwrap();
        assert_eq!(*whole.last().unwrap(), ChatEvent::finish(stop));
        // A provider that says `stop_sequence` without naming it: a plain stop.
        let unnamed = text.replace(r#","stop_sequence":"END""#, "");
        assert_eq!(
            *decode_stream(&unnamed).last().unwrap(),
            Ok(ChatEvent::finish(FinishReason::Stop))
        );
    }

    #[test]
    fn an_error_event_mid_stream_is_typed() {
        let text = [
            event(
                "message_start",
                json!({"type":"message_start","message":{"id":"m","model":"c"}}),
            ),
            event(
                "error",
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ),
        ]
        .concat();
        let events = decode_stream(&text);
        assert_eq!(
            events.last().unwrap(),
            &Err("upstream: Overloaded".to_owned())
        );
    }

    #[test]
    fn a_stream_without_message_stop_is_a_connection_error() {
        let text = tool_stream();
        let cut = text.find("event: message_delta").unwrap();
        let events = decode_stream(&text[..cut]);
        assert!(matches!(events.last().unwrap(), Err(m) if m.starts_with("connection")));
    }

    #[test]
    fn a_delta_for_a_block_never_started_is_a_protocol_error() {
        let text = event(
            "content_block_delta",
            json!({"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"x"}}),
        );
        assert!(matches!(&decode_stream(&text)[0], Err(m) if m.starts_with("protocol")));
    }

    #[test]
    fn a_whole_message_gives_the_same_events_as_its_stream() {
        let body = json!({"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
            "content":[{"type":"text","text":"Checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Oslo"}},
                       {"type":"tool_use","id":"toolu_2","name":"now","input":{}}],
            "stop_reason":"tool_use","usage":{"input_tokens":25,"output_tokens":40,"cache_read_input_tokens":5}});
        let whole = decode_message(body.to_string().as_bytes()).unwrap();
        let streamed: Vec<ChatEvent> = decode_stream(&tool_stream())
            .into_iter()
            .map(Result::unwrap)
            .filter(|e| !matches!(e, ChatEvent::ToolCallDelta { .. }))
            .collect();
        let whole: Vec<ChatEvent> = whole
            .into_iter()
            .filter(|e| !matches!(e, ChatEvent::ToolCallDelta { .. }))
            .collect();
        assert_eq!(whole, streamed);
    }

    #[test]
    fn error_bodies_give_their_message() {
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#;
        assert_eq!(
            provider_message(body).as_deref(),
            Some("max_tokens: required")
        );
        assert_eq!(
            decode_message(body).unwrap_err().kind(),
            &ErrorKind::InvalidRequest
        );
    }
}
