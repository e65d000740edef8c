//! Responses API answers — the streamed `response.*` events and whole `response` objects — mapped to chat events.
//!
//! A response is a list of output items: `message` (text), `function_call` (a tool call), `custom_tool_call` (a
//! freeform tool's call, whose one-string input becomes the `input` argument) and `reasoning` (a summary, and
//! the encrypted reasoning to continue from). The stream announces each item
//! (`response.output_item.added`), streams its deltas, and repeats it complete (`response.output_item.done`),
//! which is where a call's arguments and a reasoning item's `encrypted_content` are final. A whole response is
//! mapped through the same steps, item by item, so both give the same events.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;
use serde_json::Value;

use super::error::{error_from, failure, typed_error};
use crate::error::{ChatError, ErrorKind};
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::message::ToolCall;
use crate::reasoning::Continuation;
use crate::sse::SseEvent;
use crate::transport::WireDecoder;

#[derive(Deserialize)]
#[serde(tag = "type")]
enum StreamEvent {
    #[serde(rename = "response.created")]
    Created { response: ResponseInfo },
    /// The items are read by [`read_item`], so an item of a type no layer models is kept as it came.
    #[serde(rename = "response.output_item.added")]
    ItemAdded { output_index: usize, item: Value },
    #[serde(rename = "response.output_item.done")]
    ItemDone { output_index: usize, item: Value },
    #[serde(rename = "response.output_text.delta")]
    TextDelta { delta: String },
    #[serde(rename = "response.refusal.delta")]
    RefusalDelta { delta: String },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta { output_index: usize, delta: String },
    #[serde(rename = "response.custom_tool_call_input.delta")]
    CustomInputDelta { output_index: usize, delta: String },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    SummaryDelta {
        output_index: usize,
        #[serde(default)]
        summary_index: usize,
        delta: String,
    },
    /// Raw reasoning text, from servers that show it (open-weight models behind vLLM and others).
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta { output_index: usize, delta: String },
    #[serde(rename = "response.completed")]
    Completed { response: ResponseInfo },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: ResponseInfo },
    #[serde(rename = "response.failed")]
    Failed { response: ResponseInfo },
    #[serde(rename = "error")]
    Error {
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        message: Option<String>,
        /// Some servers nest the error object (`{"type":"error","error":{…}}`).
        #[serde(default)]
        error: Option<Value>,
    },
    /// `response.in_progress`, `*.done` of parts and texts, and events of built-in tools: nothing to map.
    #[serde(other)]
    Unknown,
}

/// The hot events, read without the `type`-tagged [`StreamEvent`] when the SSE event name says what they are:
/// serde buffers the whole object of an internally tagged enum before it can pick the variant, and a borrowed
/// delta is one allocation fewer.
#[derive(Deserialize)]
struct TextDeltaEvent<'a> {
    #[serde(borrow)]
    delta: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ArgumentsDeltaEvent<'a> {
    output_index: usize,
    #[serde(borrow)]
    delta: Cow<'a, str>,
}

/// The `response` object (of the lifecycle events, or a whole non-streamed answer).
#[derive(Deserialize)]
struct ResponseInfo {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output: Vec<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputItem {
    Message {
        #[serde(default)]
        content: Vec<MessageContent>,
    },
    FunctionCall {
        call_id: String,
        name: String,
        /// The tool namespace of the called tool: the call is named as the namespace's tools are at providers
        /// without namespaces ([`namespaced_tool_name`](crate::namespaced_tool_name)).
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        arguments: String,
    },
    /// A call of a freeform tool: one string, not JSON.
    CustomToolCall {
        call_id: String,
        name: String,
        /// The tool namespace of the called freeform tool, as for a `function_call`.
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        input: String,
    },
    Reasoning {
        id: String,
        #[serde(default)]
        summary: Vec<TextPart>,
        /// The raw reasoning (`reasoning_text` parts), from servers that show it.
        #[serde(default)]
        content: Vec<TextPart>,
        #[serde(default)]
        encrypted_content: Option<String>,
    },
    /// An item of another type (a built-in tool's: web search, file search, …), as sent: a client speaking
    /// Responses gets it back.
    #[serde(skip)]
    Other(Value),
}

/// An output item by its `type`: one of [`OutputItem`]'s, or any other kept whole.
fn read_item(item: Value) -> Result<OutputItem, ChatError> {
    let known = matches!(
        item.get("type").and_then(Value::as_str),
        Some("message" | "function_call" | "custom_tool_call" | "reasoning")
    );
    if !known {
        return Ok(OutputItem::Other(item));
    }
    serde_json::from_value(item)
        .map_err(|e| ChatError::new(ErrorKind::Protocol, format!("malformed output item ({e})")))
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum MessageContent {
    OutputText {
        text: String,
    },
    Refusal {
        refusal: String,
    },
    #[serde(other)]
    Other,
}

/// A `summary_text` or `reasoning_text` part of a reasoning item.
#[derive(Deserialize)]
struct TextPart {
    #[serde(default)]
    text: String,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        let input = wire.input_tokens_details;
        Usage {
            from_response_cache: false,
            // Like Chat Completions, and unlike Anthropic, `input_tokens` already counts the cached ones.
            input_tokens: wire.input_tokens,
            output_tokens: wire.output_tokens,
            cached_input_tokens: input.as_ref().and_then(|d| d.cached_tokens),
            cache_write_input_tokens: input
                .and_then(|d| d.cache_write_tokens)
                .filter(|&tokens| tokens > 0),
            reasoning_tokens: wire.output_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}

/// What one output item (by its `output_index`) is, while it streams.
enum ItemState {
    /// A function call; its id and name come again, final, in `response.output_item.done`.
    Call {
        call_index: usize,
        arguments: String,
    },
    /// A freeform call: its input so far. Its deltas go out as fragments of `{"input": "…"}`, the
    /// arguments every layer reads a freeform call's input from.
    Custom {
        call_index: usize,
        input: String,
    },
    Reasoning {
        /// The summary part the last delta belonged to, if any reasoning delta came.
        summary_index: Option<usize>,
    },
    Other,
}

/// Maps a Responses SSE stream to chat events.
#[derive(Default)]
pub struct ResponseDecoder {
    /// The open items by their `output_index`; a map, not a `Vec` indexed by it, because the index comes from the
    /// upstream (a huge one must not size an allocation).
    items: BTreeMap<usize, ItemState>,
    calls: usize,
    done: bool,
    /// The model sent refusal text: a completed response ends as a refusal (`content_filter`), not an answer.
    refused: bool,
}

impl ResponseDecoder {
    fn on_stream_event(
        &mut self,
        event: StreamEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        match event {
            StreamEvent::Created { response } => out.push_back(ChatEvent::ResponseMetadata {
                id: response.id,
                model: response.model,
            }),
            StreamEvent::ItemAdded { output_index, item } => {
                self.on_item_added(output_index, read_item(item)?, out)
            }
            StreamEvent::ItemDone { output_index, item } => {
                self.on_item_done(output_index, read_item(item)?, out)
            }
            StreamEvent::TextDelta { delta } => push_text(delta, out),
            StreamEvent::RefusalDelta { delta } => {
                self.refused |= !delta.is_empty();
                push_text(delta, out)
            }
            StreamEvent::ArgumentsDelta {
                output_index,
                delta,
            } => self.on_arguments(output_index, delta, out)?,
            StreamEvent::CustomInputDelta {
                output_index,
                delta,
            } => match self.items.get_mut(&output_index) {
                Some(ItemState::Custom { call_index, input }) => {
                    push_input(*call_index, input, &delta, out);
                }
                _ => {
                    return Err(never_started(
                        "a custom tool call input delta",
                        output_index,
                    ))
                }
            },
            StreamEvent::SummaryDelta {
                output_index,
                summary_index,
                delta,
            } => match self.items.get_mut(&output_index) {
                Some(ItemState::Reasoning {
                    summary_index: last,
                }) => {
                    // Summary parts are paragraphs of one readable text.
                    if last.is_some_and(|last| last != summary_index) {
                        out.push_back(ChatEvent::ReasoningDelta {
                            text: "\n\n".to_owned(),
                        });
                    }
                    *last = Some(summary_index);
                    if !delta.is_empty() {
                        out.push_back(ChatEvent::ReasoningDelta { text: delta });
                    }
                }
                _ => return Err(never_started("a reasoning summary delta", output_index)),
            },
            StreamEvent::ReasoningTextDelta {
                output_index,
                delta,
            } => match self.items.get_mut(&output_index) {
                Some(ItemState::Reasoning { summary_index }) => {
                    // Streamed text stands for the item: its summary is not repeated at its end.
                    summary_index.get_or_insert(0);
                    if !delta.is_empty() {
                        out.push_back(ChatEvent::ReasoningDelta { text: delta });
                    }
                }
                _ => return Err(never_started("a reasoning text delta", output_index)),
            },
            StreamEvent::Completed { response } | StreamEvent::Incomplete { response } => {
                self.finish(response, out)?
            }
            StreamEvent::Failed { response } => return Err(failure(response.error)),
            StreamEvent::Error {
                code,
                message,
                error,
            } => {
                return Err(match error {
                    Some(error) => error_from(&error),
                    None => typed_error(
                        code.as_deref(),
                        None,
                        message.unwrap_or_else(|| "the provider reported an error".to_owned()),
                    ),
                })
            }
            StreamEvent::Unknown => {}
        }
        Ok(())
    }

    fn on_item_added(&mut self, index: usize, item: OutputItem, out: &mut VecDeque<ChatEvent>) {
        let state = match item {
            OutputItem::FunctionCall {
                call_id,
                name,
                namespace,
                arguments,
            } => {
                let name = joined(namespace.as_deref(), name);
                let call_index = self.start_call(&call_id, &name, out);
                if !arguments.is_empty() {
                    out.push_back(ChatEvent::ToolCallDelta {
                        index: call_index,
                        arguments: arguments.clone(),
                    });
                }
                ItemState::Call {
                    call_index,
                    arguments,
                }
            }
            OutputItem::CustomToolCall {
                call_id,
                name,
                namespace,
                input: first,
            } => {
                let name = joined(namespace.as_deref(), name);
                let call_index = self.start_call(&call_id, &name, out);
                let mut input = String::new();
                push_input(call_index, &mut input, &first, out);
                ItemState::Custom { call_index, input }
            }
            OutputItem::Reasoning { .. } => ItemState::Reasoning {
                summary_index: None,
            },
            OutputItem::Message { .. } | OutputItem::Other(_) => ItemState::Other,
        };
        self.items.insert(index, state);
    }

    fn start_call(&mut self, call_id: &str, name: &str, out: &mut VecDeque<ChatEvent>) -> usize {
        let index = self.calls;
        self.calls += 1;
        out.push_back(ChatEvent::ToolCallStart {
            index,
            id: call_id.to_owned(),
            name: name.to_owned(),
        });
        index
    }

    fn on_arguments(
        &mut self,
        index: usize,
        delta: String,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        match self.items.get_mut(&index) {
            Some(ItemState::Call {
                call_index,
                arguments,
            }) => {
                if !delta.is_empty() {
                    arguments.push_str(&delta);
                    out.push_back(ChatEvent::ToolCallDelta {
                        index: *call_index,
                        arguments: delta,
                    });
                }
                Ok(())
            }
            _ => Err(never_started("a function call arguments delta", index)),
        }
    }

    /// An item is complete. Its text was streamed already; a call ends with the arguments streamed (or, when none
    /// were, the item's own), reasoning with what the next request must send back.
    fn on_item_done(&mut self, index: usize, item: OutputItem, out: &mut VecDeque<ChatEvent>) {
        let state = self.items.remove(&index);
        match item {
            OutputItem::FunctionCall {
                call_id,
                name,
                namespace,
                arguments: final_arguments,
            } => {
                let name = joined(namespace.as_deref(), name);
                let (call_index, streamed) = match state {
                    Some(ItemState::Call {
                        call_index,
                        arguments,
                    }) => (call_index, arguments),
                    // Announced only complete (a whole response): started here.
                    _ => (self.start_call(&call_id, &name, out), String::new()),
                };
                let arguments = if streamed.is_empty() && !final_arguments.is_empty() {
                    out.push_back(ChatEvent::ToolCallDelta {
                        index: call_index,
                        arguments: final_arguments.clone(),
                    });
                    final_arguments
                } else {
                    streamed
                };
                out.push_back(ChatEvent::ToolCallEnd {
                    index: call_index,
                    call: ToolCall::from_raw_arguments(call_id, name, arguments),
                });
            }
            OutputItem::CustomToolCall {
                call_id,
                name,
                namespace,
                input: final_input,
            } => {
                let name = joined(namespace.as_deref(), name);
                let (call_index, mut streamed) = match state {
                    Some(ItemState::Custom { call_index, input }) => (call_index, input),
                    _ => (self.start_call(&call_id, &name, out), String::new()),
                };
                if streamed.is_empty() {
                    push_input(call_index, &mut streamed, &final_input, out);
                }
                // The fragments close the `{"input": "…"}` they opened (or are that object, for no input).
                let close = if streamed.is_empty() {
                    "{\"input\":\"\"}"
                } else {
                    "\"}"
                };
                out.push_back(ChatEvent::ToolCallDelta {
                    index: call_index,
                    arguments: close.to_owned(),
                });
                // The item's own input is final; the streamed one stands in when a server leaves it out.
                let input = if final_input.is_empty() {
                    streamed
                } else {
                    final_input
                };
                out.push_back(ChatEvent::ToolCallEnd {
                    index: call_index,
                    call: ToolCall::custom(call_id, name, input),
                });
            }
            OutputItem::Reasoning {
                id,
                summary,
                content,
                encrypted_content,
            } => {
                let streamed = matches!(
                    state,
                    Some(ItemState::Reasoning {
                        summary_index: Some(_)
                    })
                );
                let summary: Vec<String> = summary.into_iter().map(|part| part.text).collect();
                // The raw text stands for the item, as its streamed deltas do; the summary where there is none.
                let raw: String = content.into_iter().map(|part| part.text).collect();
                let text = if raw.is_empty() {
                    summary.join("\n\n")
                } else {
                    raw
                };
                if !streamed && !text.is_empty() {
                    out.push_back(ChatEvent::ReasoningDelta { text });
                }
                out.push_back(ChatEvent::ReasoningEnd {
                    continuation: Continuation::OpenAiReasoning {
                        id,
                        encrypted_content,
                        summary,
                    },
                });
            }
            OutputItem::Message { .. } => {}
            OutputItem::Other(item) => out.push_back(ChatEvent::ProviderBlock {
                format: crate::ApiFormat::Responses,
                block: item,
            }),
        }
    }

    /// `response.completed` or `response.incomplete`: usage, then why it ended.
    fn finish(
        &mut self,
        response: ResponseInfo,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        if response.status.as_deref() == Some("failed") {
            return Err(failure(response.error));
        }
        if let Some(usage) = response.usage {
            out.push_back(ChatEvent::Usage {
                usage: usage.into(),
            });
        }
        let reason = match response.status.as_deref() {
            Some("incomplete") => match response
                .incomplete_details
                .and_then(|details| details.reason)
                .as_deref()
            {
                Some("max_output_tokens") => FinishReason::Length,
                Some("content_filter") => FinishReason::ContentFilter,
                Some(other) => FinishReason::Other(other.to_owned()),
                None => FinishReason::Other("incomplete".to_owned()),
            },
            _ if self.calls > 0 => FinishReason::ToolCalls,
            Some("completed") | None if self.refused => FinishReason::ContentFilter,
            Some("completed") | None => FinishReason::Stop,
            // `in_progress`, `queued`, `cancelled`: a whole answer of a response that did not finish.
            Some(other) => FinishReason::Other(other.to_owned()),
        };
        out.push_back(ChatEvent::Finish { reason });
        self.done = true;
        Ok(())
    }
}

fn push_text(text: String, out: &mut VecDeque<ChatEvent>) {
    if !text.is_empty() {
        out.push_back(ChatEvent::TextDelta { text });
    }
}

/// A piece of a freeform call's input, as a fragment of the JSON text `{"input": "…"}` (the first piece opens it).
fn push_input(call_index: usize, input: &mut String, delta: &str, out: &mut VecDeque<ChatEvent>) {
    if delta.is_empty() {
        return;
    }
    let quoted = serde_json::Value::from(delta).to_string();
    let escaped = &quoted[1..quoted.len() - 1];
    let arguments = if input.is_empty() {
        format!("{{\"input\":\"{escaped}")
    } else {
        escaped.to_owned()
    };
    input.push_str(delta);
    out.push_back(ChatEvent::ToolCallDelta {
        index: call_index,
        arguments,
    });
}

fn never_started(what: &str, index: usize) -> ChatError {
    ChatError::new(
        ErrorKind::Protocol,
        format!("{what} for output item {index}, which was never started"),
    )
}

impl std::fmt::Debug for ResponseDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseDecoder").finish_non_exhaustive()
    }
}

impl WireDecoder for ResponseDecoder {
    type Framing = crate::sse::SseDecoder;

    fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        let malformed = |e: serde_json::Error| {
            ChatError::protocol(format_args!("malformed event ({e})"), event.data.as_bytes())
        };
        match event.event.as_deref() {
            Some("response.output_text.delta") => {
                let parsed: TextDeltaEvent<'_> =
                    serde_json::from_str(&event.data).map_err(malformed)?;
                push_text(parsed.delta.into_owned(), out);
                Ok(())
            }
            Some("response.function_call_arguments.delta") => {
                let parsed: ArgumentsDeltaEvent<'_> =
                    serde_json::from_str(&event.data).map_err(malformed)?;
                self.on_arguments(parsed.output_index, parsed.delta.into_owned(), out)
            }
            _ => {
                let parsed: StreamEvent = serde_json::from_str(&event.data).map_err(malformed)?;
                self.on_stream_event(parsed, out)
            }
        }
    }

    fn on_end(&mut self, _out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        Err(ChatError::ended_before("response.completed"))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// Map a whole `response` body to the same events a stream of it would give.
pub(crate) fn decode_response(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let response: ResponseInfo = serde_json::from_slice(body)
        .map_err(|e| ChatError::protocol(format_args!("malformed response ({e})"), body))?;
    if response.status.as_deref() == Some("failed") {
        return Err(failure(response.error));
    }
    if let Some(error) = response.error.as_ref().filter(|error| !error.is_null()) {
        return Err(error_from(error));
    }
    let mut out = VecDeque::new();
    if response.id.is_some() || response.model.is_some() {
        out.push_back(ChatEvent::ResponseMetadata {
            id: response.id.clone(),
            model: response.model.clone(),
        });
    }
    let mut decoder = ResponseDecoder::default();
    let mut response = response;
    for (index, item) in std::mem::take(&mut response.output).into_iter().enumerate() {
        match read_item(item)? {
            OutputItem::Message { content } => {
                for part in content {
                    match part {
                        MessageContent::OutputText { text } => push_text(text, &mut out),
                        MessageContent::Refusal { refusal } => {
                            decoder.refused |= !refusal.is_empty();
                            push_text(refusal, &mut out)
                        }
                        MessageContent::Other => {}
                    }
                }
            }
            other => decoder.on_item_done(index, other, &mut out),
        }
    }
    decoder.finish(response, &mut out)?;
    Ok(out.into())
}

/// A call's name in the request's terms: a namespaced call under its namespace's joined name.
fn joined(namespace: Option<&str>, name: String) -> String {
    match namespace {
        Some(namespace) => crate::namespaced_tool_name(namespace, &name),
        None => name,
    }
}
