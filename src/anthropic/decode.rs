//! Messages API responses — the streamed event sequence and whole messages — mapped to chat events.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ChatError, ErrorKind};
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::forced_answer::ForcedAnswerEvents;
use crate::message::ToolCall;
use crate::provider_extra::ProviderExtra;
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
        /// Read by [`read_block`], so a block of a type no layer models is kept as it came.
        content_block: Value,
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

/// The message of `message_start`, and a whole (non-streamed) message: a stream's start usually has no content
/// and no `stop_reason` yet, but one may carry the complete message and go straight on to `message_stop`.
#[derive(Deserialize)]
struct MessageInfo {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock {
    Text {
        #[serde(default)]
        text: String,
        /// Sources of the text (documents, search results), each as sent.
        #[serde(default)]
        citations: Option<Vec<Value>>,
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
    /// A block of another type, as sent.
    #[serde(skip)]
    Other(Value),
}

/// A content block by its `type`: one of [`ContentBlock`]'s, or any other kept whole.
fn read_block(block: Value) -> Result<ContentBlock, ChatError> {
    let known = matches!(
        block.get("type").and_then(Value::as_str),
        Some("text" | "thinking" | "redacted_thinking" | "tool_use")
    );
    if !known {
        return Ok(ContentBlock::Other(block));
    }
    serde_json::from_value(block).map_err(|e| {
        ChatError::new(
            ErrorKind::Protocol,
            format!("malformed content block ({e})"),
        )
    })
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
    CitationsDelta { citation: Value },
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
    #[serde(default)]
    citation: Option<Value>,
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
            "citations_delta" => BlockDelta::CitationsDelta {
                citation: wire.citation.ok_or_else(|| missing("citation"))?,
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
    /// A text block and its citations so far (in its start block, or one per `citations_delta`).
    Text {
        citations: Vec<Value>,
    },
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
    /// A block of a type no layer models, and the `input_json_delta`s of its input so far (a server tool's
    /// call streams its input as a tool call's does).
    Carried {
        block: Value,
        json: String,
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
    /// The last block to stop was a text block that said nothing of its end: a text block after it ends it
    /// first, so the two stay apart for a client of the format.
    after_text: bool,
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
                for (index, block) in message.content.into_iter().enumerate() {
                    self.on_stream_event(
                        StreamEvent::ContentBlockStart {
                            index,
                            content_block: block,
                        },
                        out,
                    )?;
                    self.on_stream_event(StreamEvent::ContentBlockStop { index }, out)?;
                }
                if let Some(reason) = message.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(sequence) = message.stop_sequence {
                    self.stop_sequence = Some(sequence);
                }
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = read_block(content_block)?;
                if std::mem::take(&mut self.after_text)
                    && matches!(block, ContentBlock::Text { .. })
                {
                    out.push_back(text_block_end(Vec::new()));
                }
                let state = match block {
                    ContentBlock::Text { text, citations } => {
                        if !text.is_empty() {
                            out.push_back(ChatEvent::TextDelta { text });
                        }
                        BlockState::Text {
                            citations: citations.unwrap_or_default(),
                        }
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
                        // A call made by the provider's code execution (programmatic tool calling) comes whole in
                        // its start block, with no `input_json_delta` after it: a streaming client reads the
                        // arguments only from deltas, so the whole input is the call's one delta.
                        let mut json = String::new();
                        if input.as_object().is_some_and(|fields| !fields.is_empty()) {
                            json = input.to_string();
                            out.push_back(ChatEvent::ToolCallDelta {
                                index: call_index,
                                arguments: json.clone(),
                            });
                        }
                        BlockState::Tool {
                            call_index,
                            id,
                            name,
                            json,
                            start_input: input,
                        }
                    }
                    ContentBlock::Other(block) => BlockState::Carried {
                        block,
                        json: String::new(),
                    },
                };
                self.blocks.insert(index, state);
            }
            StreamEvent::ContentBlockDelta { index, delta } => match (self.block(index)?, delta) {
                (BlockState::Text { .. }, BlockDelta::TextDelta { text }) => {
                    out.push_back(ChatEvent::TextDelta { text })
                }
                (BlockState::Text { citations }, BlockDelta::CitationsDelta { citation }) => {
                    citations.push(citation)
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
                (BlockState::Carried { json, .. }, BlockDelta::InputJsonDelta { partial_json }) => {
                    json.push_str(&partial_json)
                }
                // Deltas of block kinds we do not map.
                _ => {}
            },
            StreamEvent::ContentBlockStop { index } => {
                let stopped = self.blocks.remove(&index);
                self.after_text = matches!(&stopped, Some(BlockState::Text { citations }) if citations.is_empty());
                match stopped {
                    // A cited block ends with its citations; a client of the format gets them on the block.
                    Some(BlockState::Text { citations }) if !citations.is_empty() => {
                        out.push_back(text_block_end(citations))
                    }
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
                    Some(BlockState::Carried { mut block, json }) => {
                        // The streamed input replaces the start block's (empty) one, as the whole message has it.
                        if let (Ok(input), Some(fields)) =
                            (serde_json::from_str::<Value>(&json), block.as_object_mut())
                        {
                            fields.insert("input".to_owned(), input);
                        }
                        out.push_back(ChatEvent::ProviderBlock {
                            format: crate::ApiFormat::Messages,
                            block,
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
        self.after_text = false;
        out.push_back(ChatEvent::Usage { usage: self.usage });
        let reason = stop_reason(
            self.stop_reason.as_deref().unwrap_or("end_turn"),
            self.stop_sequence.take(),
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
        if let StreamEvent::Unknown = parsed {
            // A kind of event this decoder does not know: a Messages client still gets it, as it came.
            if let Ok(event) = serde_json::from_str::<Value>(&event.data) {
                out.push_back(ChatEvent::ProviderExtra {
                    format: crate::ApiFormat::Messages,
                    extra: ProviderExtra::Event { event },
                });
            }
            return Ok(());
        }
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

/// The end of a text block of the provider's, with its citations.
fn text_block_end(citations: Vec<Value>) -> ChatEvent {
    ChatEvent::ProviderExtra {
        format: crate::ApiFormat::Messages,
        extra: ProviderExtra::TextBlockEnd { citations },
    }
}

/// The provider's own reason, whatever calls the message holds: a turn that ended (`end_turn`) with `tool_use`
/// blocks holds calls the provider's code execution already made, which the client must not run again.
fn stop_reason(reason: &str, sequence: Option<String>) -> FinishReason {
    match reason {
        "tool_use" => FinishReason::ToolCalls,
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

/// Map a whole message body to the same events its stream would give.
pub(crate) fn decode_message(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ChatError::protocol(format_args!("malformed message ({e})"), body))?;
    if value.get("type").and_then(Value::as_str) == Some("error") {
        return Err(error_from(value.get("error").unwrap_or(&Value::Null)));
    }
    let message: MessageInfo = serde_json::from_value(value)
        .map_err(|e| ChatError::protocol(format_args!("malformed message ({e})"), body))?;
    let mut decoder = MessageDecoder::default();
    let mut out = VecDeque::new();
    decoder.on_stream_event(StreamEvent::MessageStart { message }, &mut out)?;
    decoder.finish(&mut out);
    decoder.answers_as_text(&mut out, 0);
    Ok(out.into())
}
