//! `GenerateContentResponse`s — one per SSE event of `streamGenerateContent?alt=sse`, or one whole body of
//! `generateContent` — mapped to chat events.
//!
//! Text and thought parts stream as deltas; a `functionCall` arrives whole, several per turn, and becomes a start,
//! one delta and an end (Gemini 3 may stream its arguments in `partialArgs` pieces: they are assembled, and the
//! call ends with them as its delta); a part's `thoughtSignature` becomes a reasoning continuation;
//! `usageMetadata` (cumulative on every chunk) is reported once, before the finish; `promptFeedback.blockReason`
//! is a typed error ([`PromptBlocked`]). Gemini's stream has no end marker: the body's end after a
//! `finishReason` ends the response.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::blocked::PromptBlocked;
use super::partial_args::{PartialArg, PartialCall};
use super::signature;
use crate::error::{ChatError, ErrorKind};
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::message::ToolCall;
use crate::sse::SseEvent;
use crate::transport::WireDecoder;

/// A JSON string borrowed from the input when it has no escapes (serde borrows a `Cow` only as a whole field).
#[derive(Deserialize)]
#[serde(transparent)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(default, borrow)]
    candidates: Vec<Candidate<'a>>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    prompt_feedback: Option<Box<Value>>,
    #[serde(default, borrow)]
    model_version: Option<Text<'a>>,
    #[serde(default, borrow)]
    response_id: Option<Text<'a>>,
    #[serde(default)]
    error: Option<Box<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default)]
    index: u32,
    #[serde(default, borrow)]
    content: Option<CandidateContent<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct CandidateContent<'a> {
    #[serde(default, borrow)]
    parts: Vec<WirePart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(default, borrow)]
    text: Option<Text<'a>>,
    #[serde(default)]
    thought: bool,
    #[serde(default, borrow)]
    thought_signature: Option<Text<'a>>,
    #[serde(default, borrow)]
    function_call: Option<FunctionCall<'a>>,
}

/// A call, whole; or, with its arguments streamed, one piece of it ([`partial_args`](super::partial_args)): the
/// first names it, the later ones carry `partialArgs` and no name.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCall<'a> {
    #[serde(default, borrow)]
    id: Option<Text<'a>>,
    #[serde(default, borrow)]
    name: Option<Text<'a>>,
    #[serde(default, borrow)]
    args: Option<&'a RawValue>,
    #[serde(default)]
    partial_args: Vec<PartialArg>,
    #[serde(default)]
    will_continue: bool,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
    #[serde(default)]
    tool_use_prompt_token_count: u64,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        Usage {
            from_response_cache: false,
            input_tokens: wire.prompt_token_count + wire.tool_use_prompt_token_count,
            // Gemini counts thoughts apart from the candidates; both are generated tokens.
            output_tokens: wire.candidates_token_count + wire.thoughts_token_count.unwrap_or(0),
            cached_input_tokens: wire.cached_content_token_count,
            cache_write_input_tokens: None,
            reasoning_tokens: wire.thoughts_token_count,
        }
    }
}

/// A `finishReason` as a finish: `STOP` after function calls is a tool-calls finish; the safety family a
/// content-filter finish; `RECITATION` and `MALFORMED_FUNCTION_CALL` their own finishes; the rest keep their
/// names, lower-cased.
pub(crate) fn finish_reason(reason: &str, had_calls: bool) -> FinishReason {
    match reason {
        "STOP" if had_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "PROHIBITED_CONTENT" | "BLOCKLIST" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        "RECITATION" => FinishReason::Recitation,
        "MALFORMED_FUNCTION_CALL" => FinishReason::MalformedFunctionCall,
        other => FinishReason::Other(other.to_ascii_lowercase()),
    }
}

/// An `error` object (in a stream, or an error body) as a typed error.
pub(crate) fn stream_error(error: &Value) -> ChatError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    let kind = match error.get("status").and_then(Value::as_str) {
        Some("RESOURCE_EXHAUSTED") => ErrorKind::RateLimited { retry_after: None },
        Some("INVALID_ARGUMENT") | Some("FAILED_PRECONDITION") => ErrorKind::InvalidRequest,
        Some("UNAUTHENTICATED") | Some("PERMISSION_DENIED") => ErrorKind::Authentication,
        _ => ErrorKind::Upstream,
    };
    ChatError::new(kind, message)
}

/// The message of an error body: `{"error": {"message": …}}`, or Vertex's `[{"error": …}]`.
pub(crate) fn provider_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = match &value {
        Value::Array(items) => items.first()?.get("error")?,
        other => other.get("error")?,
    };
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The wait a 429 body asks for: the `retryDelay` of its `google.rpc.RetryInfo` detail (`"37s"`, `"1.5s"`), in
/// `{"error": {"details": [...]}}` or Vertex's `[{"error": ...}]`.
pub(crate) fn retry_delay(body: &[u8]) -> Option<std::time::Duration> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = match &value {
        Value::Array(items) => items.first()?.get("error")?,
        other => other.get("error")?,
    };
    let delay = error
        .get("details")?
        .as_array()?
        .iter()
        .find(|detail| {
            detail
                .get("@type")
                .and_then(Value::as_str)
                .is_some_and(|kind| kind.ends_with("RetryInfo"))
        })?
        .get("retryDelay")?
        .as_str()?;
    let seconds: f64 = delay.strip_suffix('s')?.parse().ok()?;
    // A protobuf Duration is at most about 10,000 years; anything past a day is no wait a client should keep.
    (seconds.is_finite() && (0.0..=86_400.0).contains(&seconds))
        .then(|| std::time::Duration::from_secs_f64(seconds))
}

/// Maps a Gemini SSE stream to chat events.
#[derive(Default)]
pub struct GeminiDecoder {
    metadata_sent: bool,
    response_id: Option<String>,
    calls: usize,
    /// A random stem for the ids of calls in an answer without a `responseId`, drawn at the first such call.
    fallback: Option<String>,
    /// A call whose arguments are still streaming in pieces.
    partial: Option<PartialCall>,
    finish: Option<FinishReason>,
    usage: Option<WireUsage>,
    done: bool,
}

/// The stem of an answer's call ids when Gemini gave it no `responseId`: random, drawn once per answer.
fn fallback_stem(stem: &mut Option<String>) -> &str {
    use std::hash::BuildHasher as _;
    // Each `RandomState` is keyed afresh (randomly seeded per thread, then stepped): no two draws repeat.
    stem.get_or_insert_with(|| {
        format!(
            "{:016x}",
            std::collections::hash_map::RandomState::new().hash_one(())
        )
    })
}

impl std::fmt::Debug for GeminiDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeminiDecoder").finish_non_exhaustive()
    }
}

impl GeminiDecoder {
    fn on_chunk(
        &mut self,
        chunk: Chunk<'_>,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        if let Some(error) = chunk.error {
            return Err(stream_error(&error));
        }
        if let Some(blocked) = chunk
            .prompt_feedback
            .as_deref()
            .and_then(PromptBlocked::from_feedback)
        {
            return Err(blocked.into_error());
        }
        if !self.metadata_sent && (chunk.response_id.is_some() || chunk.model_version.is_some()) {
            self.metadata_sent = true;
            let id = chunk.response_id.map(|t| t.0.into_owned());
            self.response_id.clone_from(&id);
            out.push_back(ChatEvent::ResponseMetadata {
                id,
                model: chunk.model_version.map(|t| t.0.into_owned()),
            });
        }
        if let Some(usage) = chunk.usage_metadata {
            // Cumulative: the last one counts.
            self.usage = Some(usage);
        }
        let Some(candidate) = chunk.candidates.into_iter().find(|c| c.index == 0) else {
            return Ok(());
        };
        if let Some(content) = candidate.content {
            for part in content.parts {
                self.on_part(part, out)?;
            }
        }
        if let Some(reason) = candidate.finish_reason {
            self.finish = Some(finish_reason(&reason.0, self.calls > 0));
        }
        Ok(())
    }

    fn on_part(
        &mut self,
        part: WirePart<'_>,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        if let Some(call) = part.function_call {
            let Some(name) = call.name.filter(|name| !name.0.is_empty()) else {
                // A later piece of a call whose arguments stream.
                let Some(partial) = self.partial.as_mut() else {
                    return Err(ChatError::new(
                        ErrorKind::Protocol,
                        "a functionCall without a name, and no call streaming its arguments",
                    ));
                };
                partial.apply(call.partial_args)?;
                if !call.will_continue {
                    self.end_partial(out);
                }
                return Ok(());
            };
            // A new call ends one still streaming.
            self.end_partial(out);
            let index = self.calls;
            self.calls += 1;
            let id = match (call.id, &self.response_id) {
                (Some(id), _) if !id.0.is_empty() => id.0.into_owned(),
                (_, Some(response)) => format!("{response}-{index}"),
                // Without a response id, the index alone would repeat on the next turn: clients that keep a
                // conversation by call id (Codex) would pair a result with the wrong call.
                (_, None) => format!("call_{}_{index}", fallback_stem(&mut self.fallback)),
            };
            if let Some(signature) = part.thought_signature {
                out.push_back(ChatEvent::ReasoningEnd {
                    continuation: signature::on_call(&signature.0, &id),
                });
            }
            let name = name.0.into_owned();
            out.push_back(ChatEvent::ToolCallStart {
                index,
                id: id.clone(),
                name: name.clone(),
            });
            if call.will_continue || !call.partial_args.is_empty() {
                let args = match call.args {
                    Some(raw) => serde_json::from_str(raw.get()).unwrap_or_default(),
                    None => Value::Object(Default::default()),
                };
                let mut partial = PartialCall {
                    index,
                    id,
                    name,
                    args,
                };
                partial.apply(call.partial_args)?;
                self.partial = Some(partial);
                if !call.will_continue {
                    self.end_partial(out);
                }
                return Ok(());
            }
            let arguments = call
                .args
                .map_or_else(|| "{}".to_owned(), |raw| raw.get().to_owned());
            end_call(index, id, name, arguments, out);
            return Ok(());
        }
        if let Some(text) = part.text.filter(|t| !t.0.is_empty()) {
            let text = text.0.into_owned();
            out.push_back(if part.thought {
                ChatEvent::ReasoningDelta { text }
            } else {
                ChatEvent::TextDelta { text }
            });
        }
        if let Some(signature) = part.thought_signature {
            out.push_back(ChatEvent::ReasoningEnd {
                continuation: signature::on_text(&signature.0),
            });
        }
        Ok(())
    }

    /// The call streaming its arguments, if any, is complete: its assembled arguments are its one delta.
    fn end_partial(&mut self, out: &mut VecDeque<ChatEvent>) {
        let Some(PartialCall {
            index,
            id,
            name,
            args,
        }) = self.partial.take()
        else {
            return;
        };
        end_call(index, id, name, args.to_string(), out);
    }

    fn finish(&mut self, out: &mut VecDeque<ChatEvent>) {
        self.end_partial(out);
        if let Some(usage) = self.usage.take() {
            out.push_back(ChatEvent::Usage {
                usage: usage.into(),
            });
        }
        let reason = self
            .finish
            .take()
            .unwrap_or_else(|| finish_reason("STOP", self.calls > 0));
        out.push_back(ChatEvent::Finish { reason });
        self.done = true;
    }
}

/// A call's complete arguments as its one delta, then its end.
fn end_call(
    index: usize,
    id: String,
    name: String,
    arguments: String,
    out: &mut VecDeque<ChatEvent>,
) {
    out.push_back(ChatEvent::ToolCallDelta {
        index,
        arguments: arguments.clone(),
    });
    out.push_back(ChatEvent::ToolCallEnd {
        index,
        call: ToolCall::from_raw_arguments(id, name, arguments),
    });
}

impl WireDecoder for GeminiDecoder {
    type Framing = crate::sse::SseDecoder;

    fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        let data = event.data.as_str();
        if data.trim().is_empty() {
            return Ok(());
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| {
            ChatError::protocol(format_args!("malformed chunk ({e})"), data.as_bytes())
        })?;
        self.on_chunk(chunk, out)
    }

    fn on_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        if self.finish.is_some() {
            self.finish(out);
            return Ok(());
        }
        Err(ChatError::ended_before("finishing the response"))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// A whole `generateContent` response as chat events (through the stream decoder's steps).
pub(crate) fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ChatError::protocol("a response that is not UTF-8", body))?;
    let chunk: Chunk<'_> = serde_json::from_str(text)
        .map_err(|e| ChatError::protocol(format_args!("malformed response ({e})"), body))?;
    let mut decoder = GeminiDecoder::default();
    let mut out = VecDeque::new();
    decoder.on_chunk(chunk, &mut out)?;
    if decoder.finish.is_none() {
        return Err(ChatError::protocol(
            "a response without a finishReason",
            body,
        ));
    }
    decoder.finish(&mut out);
    Ok(out.into())
}
