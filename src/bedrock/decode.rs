//! ConverseStream events — one per event-stream frame — and whole Converse responses, mapped to chat events.
//!
//! Text and reasoning stream as deltas; a `toolUse` block starts with its id and name and streams its `input` as
//! JSON fragments, joined and parsed once at its `contentBlockStop`; a reasoning block's `signature` or
//! `redactedContent` ends it as a [`Continuation::Other`] of provider `bedrock`, which the request encoder sends
//! back. `messageStop` carries the stop reason and `metadata` the usage, usually after it: the usage and the finish
//! are sent at whichever of the two comes last, or at the body's end when `metadata` never came. Exception frames are typed errors
//! ([`exception`]).

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::error::BedrockError;
use super::eventstream::{EventStreamFraming, Frame, MessageKind};
use super::wire::BEDROCK;
use crate::error::{ChatError, ErrorKind, TimeoutPhase};
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::forced_answer::ForcedAnswerEvents;
use crate::message::ToolCall;
use crate::reasoning::Continuation;
use crate::transport::WireDecoder;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    #[serde(default)]
    content_block_index: usize,
    #[serde(default, borrow)]
    start: Option<StartKind<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartKind<'a> {
    #[serde(default, borrow)]
    tool_use: Option<ToolUseStart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart<'a> {
    #[serde(borrow)]
    tool_use_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta {
    #[serde(default)]
    content_block_index: usize,
    delta: Delta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_use: Option<ToolUseDelta>,
    #[serde(default)]
    reasoning_content: Option<ReasoningDelta>,
}

#[derive(Deserialize)]
struct ToolUseDelta {
    #[serde(default)]
    input: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    #[serde(default)]
    content_block_index: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop<'a> {
    stop_reason: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    additional_model_response_fields: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    metrics: Option<Metrics>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metrics {
    #[serde(default)]
    latency_ms: Option<u64>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        Usage {
            // Bedrock's inputTokens exclude cache reads and writes; tower-chat counts every prompt token as input.
            input_tokens: wire.input_tokens
                + wire.cache_read_input_tokens.unwrap_or(0)
                + wire.cache_write_input_tokens.unwrap_or(0),
            output_tokens: wire.output_tokens,
            cached_input_tokens: wire.cache_read_input_tokens,
            cache_write_input_tokens: wire.cache_write_input_tokens,
            reasoning_tokens: None,
            from_response_cache: false,
        }
    }
}

/// A `stopReason` as a finish: the guardrail and the content filter are content-filter finishes;
/// `stop_sequence` names the sequence when the model's extra fields say which (Anthropic models do).
pub(crate) fn finish_reason(reason: &str, extra: Option<&RawValue>) -> FinishReason {
    match reason {
        "end_turn" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "stop_sequence" => extra
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .and_then(|v| {
                v.get("stop_sequence")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .map_or(FinishReason::Stop, FinishReason::StopSequence),
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// An exception (a mid-stream frame, or an HTTP error's `x-amzn-errortype`) as a typed error: throttling is rate
/// limiting, the model's and the service's own failures are upstream failures (both retryable, as AWS documents
/// them), a validation failure is a bad request, access denied is an authentication failure.
pub(crate) fn exception(error_type: &str, message: &str) -> ChatError {
    let name = error_type.split(':').next().unwrap_or(error_type);
    let kind = match name.to_ascii_lowercase().as_str() {
        "throttlingexception" | "toomanyrequestsexception" | "servicequotaexceededexception" => {
            ErrorKind::RateLimited { retry_after: None }
        }
        "validationexception" | "resourcenotfoundexception" | "conflictexception" => {
            ErrorKind::InvalidRequest
        }
        "accessdeniedexception" | "unrecognizedclientexception" | "expiredtokenexception" => {
            ErrorKind::Authentication
        }
        "modeltimeoutexception" => ErrorKind::Timeout(TimeoutPhase::Idle),
        // modelStreamErrorException, internalServerException, serviceUnavailableException,
        // modelNotReadyException and anything new: the service failed, and a retry may succeed.
        _ => ErrorKind::Upstream,
    };
    let text = if message.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {message}")
    };
    ChatError::new(kind, text).with_source(BedrockError::new(name, message))
}

/// The `message` of an exception payload or error body (`message` or `Message`).
pub(crate) fn payload_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value
        .get("message")
        .or_else(|| value.get("Message"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What a content block is, while it streams.
enum Block {
    Text,
    Tool {
        index: usize,
        id: String,
        name: String,
        arguments: String,
    },
    Reasoning {
        signature: Option<String>,
        redacted: Option<String>,
    },
}

/// Maps a ConverseStream body to chat events.
#[derive(Default)]
pub struct BedrockDecoder {
    /// The open blocks by `contentBlockIndex` (a handful per response).
    blocks: Vec<(usize, Block)>,
    calls: usize,
    finish: Option<FinishReason>,
    /// The usage of a `metadata` event that came before `messageStop` (the service may send them in either
    /// order), itself optional: the answer ends at `messageStop`, with it.
    early_usage: Option<Option<WireUsage>>,
    done: bool,
    /// Calls of the forced answer tool (how a JSON answer is asked of Converse) become text.
    answers: ForcedAnswerEvents,
}

impl std::fmt::Debug for BedrockDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BedrockDecoder").finish_non_exhaustive()
    }
}

fn parse<'a, T: Deserialize<'a>>(payload: &'a [u8], event: &str) -> Result<T, ChatError> {
    serde_json::from_slice(payload)
        .map_err(|e| ChatError::protocol(format_args!("a malformed {event} event ({e})"), payload))
}

impl BedrockDecoder {
    /// Runs the events from `start` on through the forced-answer mapping, in place.
    fn answers_as_text(&mut self, out: &mut VecDeque<ChatEvent>, start: usize) {
        let mapped: Vec<ChatEvent> = out
            .drain(start..)
            .filter_map(|event| self.answers.map(event))
            .collect();
        out.extend(mapped);
    }

    fn block(&mut self, index: usize) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, block)| block)
    }

    fn on_start(&mut self, start: BlockStart<'_>, out: &mut VecDeque<ChatEvent>) {
        let Some(tool) = start.start.and_then(|s| s.tool_use) else {
            return;
        };
        let index = self.calls;
        self.calls += 1;
        let id = tool.tool_use_id.into_owned();
        let name = tool.name.into_owned();
        out.push_back(ChatEvent::ToolCallStart {
            index,
            id: id.clone(),
            name: name.clone(),
        });
        self.blocks.push((
            start.content_block_index,
            Block::Tool {
                index,
                id,
                name,
                arguments: String::new(),
            },
        ));
    }

    fn on_delta(
        &mut self,
        delta: BlockDelta,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        let at = delta.content_block_index;
        let delta = delta.delta;
        if let Some(text) = delta.text {
            if self.block(at).is_none() {
                self.blocks.push((at, Block::Text));
            }
            if !text.is_empty() {
                out.push_back(ChatEvent::TextDelta { text });
            }
        } else if let Some(tool) = delta.tool_use {
            let Some(Block::Tool {
                index, arguments, ..
            }) = self.block(at)
            else {
                return Err(ChatError::new(
                    ErrorKind::Protocol,
                    format!("toolUse input for content block {at}, which is not a tool call"),
                ));
            };
            arguments.push_str(&tool.input);
            let index = *index;
            out.push_back(ChatEvent::ToolCallDelta {
                index,
                arguments: tool.input,
            });
        } else if let Some(reasoning) = delta.reasoning_content {
            if self.block(at).is_none() {
                self.blocks.push((
                    at,
                    Block::Reasoning {
                        signature: None,
                        redacted: None,
                    },
                ));
            }
            let Some(Block::Reasoning {
                signature,
                redacted,
            }) = self.block(at)
            else {
                return Err(ChatError::new(
                    ErrorKind::Protocol,
                    format!("reasoning for content block {at}, which is not reasoning"),
                ));
            };
            if let Some(s) = reasoning.signature {
                signature.get_or_insert_with(String::new).push_str(&s);
            }
            if let Some(r) = reasoning.redacted_content {
                redacted.get_or_insert_with(String::new).push_str(&r);
            }
            if let Some(text) = reasoning.text.filter(|t| !t.is_empty()) {
                out.push_back(ChatEvent::ReasoningDelta { text });
            }
        }
        Ok(())
    }

    fn on_stop(&mut self, at: usize, out: &mut VecDeque<ChatEvent>) {
        let Some(position) = self.blocks.iter().position(|(i, _)| *i == at) else {
            return;
        };
        match self.blocks.swap_remove(position).1 {
            Block::Text => {}
            Block::Tool {
                index,
                id,
                name,
                arguments,
            } => {
                let arguments = if arguments.is_empty() {
                    "{}".to_owned()
                } else {
                    arguments
                };
                out.push_back(ChatEvent::ToolCallEnd {
                    index,
                    call: ToolCall::from_raw_arguments(id, name, arguments),
                });
            }
            Block::Reasoning {
                signature,
                redacted,
            } => {
                if let Some(continuation) = continuation(signature.as_deref(), redacted.as_deref())
                {
                    out.push_back(ChatEvent::ReasoningEnd { continuation });
                }
            }
        }
    }

    fn end(&mut self, usage: Option<WireUsage>, out: &mut VecDeque<ChatEvent>) {
        // Blocks the stream never closed: their calls are still owed.
        let open: Vec<usize> = self.blocks.iter().map(|(i, _)| *i).collect();
        for at in open {
            self.on_stop(at, out);
        }
        if let Some(usage) = usage {
            out.push_back(ChatEvent::Usage {
                usage: usage.into(),
            });
        }
        let reason = self.finish.take().unwrap_or(FinishReason::Stop);
        out.push_back(ChatEvent::Finish { reason });
        self.done = true;
    }

    fn on_converse_event(
        &mut self,
        event_type: &str,
        payload: &[u8],
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        match event_type {
            "messageStart" => {}
            "contentBlockStart" => self.on_start(parse(payload, event_type)?, out),
            "contentBlockDelta" => self.on_delta(parse(payload, event_type)?, out)?,
            "contentBlockStop" => {
                let stop: BlockStop = parse(payload, event_type)?;
                self.on_stop(stop.content_block_index, out);
            }
            "messageStop" => {
                let stop: MessageStop<'_> = parse(payload, event_type)?;
                self.finish = Some(finish_reason(
                    &stop.stop_reason,
                    stop.additional_model_response_fields,
                ));
                if let Some(usage) = self.early_usage.take() {
                    self.end(usage, out);
                }
            }
            "metadata" => {
                let metadata: Metadata = parse(payload, event_type)?;
                if let Some(latency) = metadata.metrics.and_then(|m| m.latency_ms) {
                    tracing::debug!(latency_ms = latency, "Bedrock reported the call's latency");
                }
                if self.finish.is_none() {
                    // Before `messageStop`: the answer is not over yet.
                    self.early_usage = Some(metadata.usage);
                    return Ok(());
                }
                self.end(metadata.usage, out);
            }
            // Events added to the API later are not part of the answer as this decoder knows it.
            other => tracing::debug!(event = other, "unknown ConverseStream event skipped"),
        }
        Ok(())
    }
}

/// The continuation of a reasoning block: its signature, or its redacted content.
fn continuation(signature: Option<&str>, redacted: Option<&str>) -> Option<Continuation> {
    let value = match (signature, redacted) {
        (_, Some(redacted)) => json!({ "redactedContent": redacted }),
        (Some(signature), None) => json!({ "signature": signature }),
        (None, None) => return None,
    };
    Some(Continuation::Other {
        provider: BEDROCK.to_owned(),
        value,
    })
}

impl WireDecoder for BedrockDecoder {
    type Framing = EventStreamFraming;

    fn on_event(&mut self, frame: Frame, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        let message = frame?;
        match &message.kind {
            MessageKind::Event(event_type) => {
                let start = out.len();
                self.on_converse_event(event_type, &message.payload, out)?;
                self.answers_as_text(out, start);
                Ok(())
            }
            MessageKind::Exception(error_type) => Err(exception(
                error_type,
                &payload_message(&message.payload).unwrap_or_default(),
            )),
            MessageKind::Error { code, message } => Err(ChatError::new(
                ErrorKind::Upstream,
                format!("{code}: {message}"),
            )
            .with_source(BedrockError::new(code, message))),
        }
    }

    fn on_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        if self.finish.is_some() {
            let start = out.len();
            let usage = self.early_usage.take().flatten();
            self.end(usage, out);
            self.answers_as_text(out, start);
            return Ok(());
        }
        Err(ChatError::ended_before("finishing the response"))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    output: Output,
    #[serde(borrow)]
    stop_reason: std::borrow::Cow<'a, str>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    additional_model_response_fields: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Output {
    message: OutputMessage,
}

#[derive(Deserialize)]
struct OutputMessage {
    #[serde(default)]
    content: Vec<Value>,
}

/// A whole Converse response as chat events.
pub(crate) fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let response: Response<'_> = serde_json::from_slice(body)
        .map_err(|e| ChatError::protocol(format_args!("malformed response ({e})"), body))?;
    let mut out = Vec::new();
    let mut calls = 0;
    for block in &response.output.message.content {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(ChatEvent::text(text));
            }
        } else if let Some(tool) = block.get("toolUse") {
            let id = tool
                .get("toolUseId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let arguments = tool
                .get("input")
                .map_or_else(|| "{}".to_owned(), Value::to_string);
            out.push(ChatEvent::ToolCallStart {
                index: calls,
                id: id.to_owned(),
                name: name.to_owned(),
            });
            out.push(ChatEvent::ToolCallDelta {
                index: calls,
                arguments: arguments.clone(),
            });
            out.push(ChatEvent::ToolCallEnd {
                index: calls,
                call: ToolCall::from_raw_arguments(id.to_owned(), name.to_owned(), arguments),
            });
            calls += 1;
        } else if let Some(reasoning) = block.get("reasoningContent") {
            let text = reasoning.get("reasoningText");
            if let Some(t) = text
                .and_then(|t| t.get("text"))
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push(ChatEvent::ReasoningDelta { text: t.to_owned() });
            }
            let signature = text
                .and_then(|t| t.get("signature"))
                .and_then(Value::as_str);
            let redacted = reasoning.get("redactedContent").and_then(Value::as_str);
            if let Some(continuation) = continuation(signature, redacted) {
                out.push(ChatEvent::ReasoningEnd { continuation });
            }
        }
    }
    if let Some(usage) = response.usage {
        out.push(ChatEvent::Usage {
            usage: usage.into(),
        });
    }
    out.push(ChatEvent::Finish {
        reason: finish_reason(
            &response.stop_reason,
            response.additional_model_response_fields,
        ),
    });
    let mut answers = ForcedAnswerEvents::default();
    Ok(out
        .into_iter()
        .filter_map(|event| answers.map(event))
        .collect())
}
