//! The answer in the Responses format: a `response` object, or its SSE events, from the stack's events.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use tower_chat::{CallKind, Continuation, FinishReason, ToolCall, Usage};

use crate::error::ApiError;

use super::reasoning;
use crate::format::{
    arguments_text, begin_sse_event, end_sse, sse_event, write_json, Encoder, Ending, Folded,
    Piece, Visible,
};
/// The Responses usage object.
fn usage(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens.unwrap_or(0)},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens.unwrap_or(0)},
        "total_tokens": usage.total_tokens(),
    })
}

/// `status` and `incomplete_details` for a finish reason.
fn status(reason: &FinishReason) -> (&'static str, Value) {
    match reason {
        FinishReason::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
        // A recitation stop cut the answer by the provider's policy: Responses' own word for that.
        FinishReason::ContentFilter | FinishReason::Recitation => {
            ("incomplete", json!({"reason": "content_filter"}))
        }
        _ => ("completed", Value::Null),
    }
}

/// The finish reason as the `tower_chat` field compares it: the reasons a Responses client can tell from
/// `status` and the output items need no field.
fn said(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::AwaitingApproval
        | FinishReason::MaxRounds
        | FinishReason::MalformedFunctionCall
        | FinishReason::Other(_) => "completed",
        FinishReason::Recitation => "content_filter",
        other => other.as_str(),
    }
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": text, "annotations": []}])
    } else {
        json!([])
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

/// A freeform tool's call: its input is one string (OpenAI's item has no `status`).
fn custom_call_item(id: &str, call_id: &str, name: &str, input: &str) -> Value {
    json!({"type": "custom_tool_call", "id": id, "call_id": call_id, "name": name, "input": input})
}

/// `{"type": kind, "response": response}`, the response moved in (not copied, as `json!` would).
fn response_event(kind: &str, response: Value) -> Value {
    let mut event = Map::new();
    event.insert("type".into(), kind.into());
    event.insert("response".into(), response);
    Value::Object(event)
}

/// What a `*.delta` event adds to: a message's text part, or a function call's arguments.
#[derive(Clone, Copy)]
enum DeltaOf {
    Text,
    Arguments,
}

impl DeltaOf {
    fn kind(self) -> &'static str {
        match self {
            DeltaOf::Text => "response.output_text.delta",
            DeltaOf::Arguments => "response.function_call_arguments.delta",
        }
    }
}

/// The part of every `*.delta` event of one output item that does not change, escaped once per item:
/// `event: …\ndata: {"type":…,"item_id":…,"output_index":…[,"content_index":0],"delta":`. Serialising those
/// keys and values for each event cost more than the rest of it.
struct DeltaHead {
    of: DeltaOf,
    bytes: Vec<u8>,
}

impl DeltaHead {
    fn new(of: DeltaOf, item_id: &str, output_index: usize) -> Self {
        let kind = of.kind();
        let mut bytes = Vec::with_capacity(160);
        begin_sse_event(kind, &mut bytes);
        bytes.extend_from_slice(b"{\"type\":");
        write_json(kind, &mut bytes);
        bytes.extend_from_slice(b",\"item_id\":");
        write_json(item_id, &mut bytes);
        bytes.extend_from_slice(b",\"output_index\":");
        write_json(&output_index, &mut bytes);
        if let DeltaOf::Text = of {
            bytes.extend_from_slice(b",\"content_index\":0");
        }
        bytes.extend_from_slice(b",\"delta\":");
        DeltaHead { of, bytes }
    }

    /// A `*.delta` event (one per token of a streamed answer): the head, then the event's own fields.
    /// `sequence` is the encoder's event counter. The bytes are exactly those of serialising the test-only
    /// `DeltaEvent` struct.
    fn emit(&self, sequence: &mut u64, delta: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes);
        write_json(delta, out);
        // Only a text delta names its content part and carries (empty) log probabilities.
        if let DeltaOf::Text = self.of {
            out.extend_from_slice(b",\"logprobs\":[]");
        }
        out.extend_from_slice(b",\"sequence_number\":");
        write_json(sequence, out);
        out.push(b'}');
        end_sse(out);
        *sequence += 1;
    }
}

/// `response.output_text.delta` / `response.function_call_arguments.delta`: what [`DeltaHead::emit`] writes,
/// field by field (the test compares them).
#[cfg(test)]
#[derive(serde::Serialize)]
struct DeltaEvent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    item_id: &'a str,
    output_index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_index: Option<u32>,
    delta: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<[(); 0]>,
    sequence_number: u64,
}

struct OpenMessage {
    id: String,
    output_index: usize,
    text: String,
    delta_head: DeltaHead,
}

/// A reasoning item being streamed: its summary text so far.
struct OpenReasoning {
    id: String,
    output_index: usize,
    text: String,
}

struct OpenCall {
    id: String,
    output_index: usize,
    call_id: String,
    name: String,
    arguments: String,
    delta_head: DeltaHead,
    /// A call of a freeform tool: a `custom_tool_call` item, whose input is written once the call is
    /// complete (the argument fragments are JSON around it, not the input itself).
    custom: bool,
}

/// Builds `response` objects and the Responses SSE events.
pub struct ResponseEncoder {
    id: String,
    created_at: u64,
    /// The request's settings, echoed in every `response` object.
    echo: Value,
    sequence: u64,
    /// Finished output items, in order.
    items: Vec<Value>,
    message: Option<OpenMessage>,
    reasoning: Option<OpenReasoning>,
    /// Client-visible call index → the open call item.
    calls: HashMap<usize, OpenCall>,
    /// The request asked for `encrypted_content` on reasoning items (`include`).
    include_encrypted: bool,
    /// The request's freeform tools: their calls are `custom_tool_call` items.
    custom_tools: Vec<String>,
    /// The request's namespaced tools (`(joined name, namespace, name)`): their calls go back namespaced.
    namespaced: Vec<(String, String, String)>,
}

impl std::fmt::Debug for ResponseEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseEncoder")
            .field("id", &self.id)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl ResponseEncoder {
    pub(super) fn new(
        id: String,
        echo: Value,
        include_encrypted: bool,
        custom_tools: Vec<String>,
        namespaced: Vec<(String, String, String)>,
    ) -> Self {
        ResponseEncoder {
            id,
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            echo,
            sequence: 0,
            items: Vec::new(),
            message: None,
            reasoning: None,
            calls: HashMap::new(),
            include_encrypted,
            custom_tools,
            namespaced,
        }
    }

    /// A `function_call` or `custom_tool_call` item of a namespace's tool, named as the client offered it: its
    /// `namespace` and its name in it.
    fn namespaced(&self, mut item: Value) -> Value {
        let found = self
            .namespaced
            .iter()
            .find(|(joined, ..)| item["name"].as_str() == Some(joined.as_str()));
        if let Some((_, namespace, name)) = found {
            item["name"] = name.as_str().into();
            item["namespace"] = namespace.as_str().into();
        }
        item
    }

    fn emit(&mut self, mut event: Value, out: &mut Vec<u8>) {
        event["sequence_number"] = self.sequence.into();
        self.sequence += 1;
        let name = event["type"].as_str().unwrap_or("message").to_owned();
        sse_event(&name, &event, out);
    }

    /// The `response` object. Built field by field: `json!` would copy `output`, `usage` and every echoed
    /// field through serde's value serializer once more.
    fn response(&self, folded: &Folded, status: &str, output: Vec<Value>, usage: Value) -> Value {
        let mut response = Map::new();
        response.insert("id".into(), self.id.clone().into());
        response.insert("object".into(), "response".into());
        response.insert("created_at".into(), self.created_at.into());
        response.insert("status".into(), status.into());
        response.insert("error".into(), Value::Null);
        response.insert("incomplete_details".into(), Value::Null);
        response.insert("model".into(), folded.model.clone().into());
        response.insert("output".into(), Value::Array(output));
        response.insert("usage".into(), usage);
        if let Some(echo) = self.echo.as_object() {
            for (key, value) in echo {
                response.insert(key.clone(), value.clone());
            }
        }
        Value::Object(response)
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        if self.message.is_none() {
            self.close_reasoning(None, out);
            let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
            let output_index = self.items.len() + self.calls.len();
            let message = OpenMessage {
                delta_head: DeltaHead::new(DeltaOf::Text, &id, output_index),
                id,
                output_index,
                text: String::new(),
            };
            let (id, output_index) = (message.id.clone(), message.output_index);
            self.message = Some(message);
            self.emit(
                json!({"type": "response.output_item.added", "output_index": output_index,
                       "item": message_item(&id, "", "in_progress")}),
                out,
            );
            self.emit(
                json!({"type": "response.content_part.added", "item_id": id,
                       "output_index": output_index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
                out,
            );
        }
        let Some(message) = self.message.as_mut() else {
            return;
        };
        message.text.push_str(text);
        message.delta_head.emit(&mut self.sequence, text, out);
    }

    /// Open a reasoning item under `id` (closing the message before it: text after reasoning is a new item).
    fn open_reasoning(&mut self, id: String, out: &mut Vec<u8>) {
        self.close_message(out);
        let output_index = self.items.len() + self.calls.len();
        self.emit(
            json!({"type": "response.output_item.added", "output_index": output_index,
                   "item": reasoning::output_item(&id, "", None)}),
            out,
        );
        self.reasoning = Some(OpenReasoning {
            id,
            output_index,
            text: String::new(),
        });
    }

    fn reasoning_text(&mut self, text: &str, out: &mut Vec<u8>) {
        if self.reasoning.is_none() {
            let id = format!("rs_{}", uuid::Uuid::new_v4().simple());
            self.open_reasoning(id, out);
        }
        let Some(open) = self.reasoning.as_mut() else {
            return;
        };
        let first = open.text.is_empty();
        open.text.push_str(text);
        let (id, index) = (open.id.clone(), open.output_index);
        if first {
            self.emit(
                json!({"type": "response.reasoning_summary_part.added", "item_id": id,
                       "output_index": index, "summary_index": 0,
                       "part": {"type": "summary_text", "text": ""}}),
                out,
            );
        }
        self.emit(
            json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
                   "output_index": index, "summary_index": 0, "delta": text}),
            out,
        );
    }

    /// Close the open reasoning item, with what its provider needs to continue from it when the block ended
    /// (`None` for reasoning text that ended because something else began). A block that ends without any text
    /// (redacted thinking) is an item of its own.
    fn close_reasoning(&mut self, continuation: Option<Continuation>, out: &mut Vec<u8>) {
        if self.reasoning.is_none() {
            let Some(continuation) = continuation else {
                return;
            };
            // An OpenAI item that arrives whole opens under its own id.
            let id = match &continuation {
                Continuation::OpenAiReasoning { id, .. } => id.clone(),
                _ => format!("rs_{}", uuid::Uuid::new_v4().simple()),
            };
            self.open_reasoning(id, out);
            return self.close_reasoning(Some(continuation), out);
        }
        let Some(open) = self.reasoning.take() else {
            return;
        };
        let (index, text) = (open.output_index, open.text);
        if !text.is_empty() {
            self.emit(
                json!({"type": "response.reasoning_summary_text.done", "item_id": open.id,
                       "output_index": index, "summary_index": 0, "text": text}),
                out,
            );
            self.emit(
                json!({"type": "response.reasoning_summary_part.done", "item_id": open.id,
                       "output_index": index, "summary_index": 0,
                       "part": {"type": "summary_text", "text": text}}),
                out,
            );
        }
        let part = tower_chat::ReasoningPart { text, continuation };
        let (id, encrypted) = reasoning::shown(&part, Some(&open.id), self.include_encrypted);
        let item = reasoning::output_item(&id, &part.text, encrypted);
        self.emit(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            out,
        );
        self.items.push(item);
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        let Some(message) = self.message.take() else {
            return;
        };
        let (id, index, text) = (&message.id, message.output_index, &message.text);
        self.emit(
            json!({"type": "response.output_text.done", "item_id": id, "output_index": index,
                   "content_index": 0, "text": text, "logprobs": []}),
            out,
        );
        self.emit(
            json!({"type": "response.content_part.done", "item_id": id, "output_index": index,
                   "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}),
            out,
        );
        let item = message_item(id, text, "completed");
        self.emit(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            out,
        );
        self.items.push(item);
    }
}

impl Encoder for ResponseEncoder {
    fn open(&mut self, folded: &Folded, out: &mut Vec<u8>) {
        let response = self.response(folded, "in_progress", Vec::new(), Value::Null);
        self.emit(response_event("response.created", response.clone()), out);
        self.emit(response_event("response.in_progress", response), out);
    }

    fn visible(&mut self, _folded: &Folded, event: Visible, out: &mut Vec<u8>) {
        match event {
            Visible::Text(text) => self.text(&text, out),
            // A later round's text is a message item of its own.
            Visible::RoundBreak => self.close_message(out),
            Visible::Reasoning(text) => self.reasoning_text(&text, out),
            Visible::ReasoningEnd(continuation) => self.close_reasoning(Some(continuation), out),
            Visible::CallStart { index, id, name } => {
                self.close_message(out);
                self.close_reasoning(None, out);
                let custom = self.custom_tools.contains(&name);
                let prefix = if custom { "ctc" } else { "fc" };
                let item_id = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
                let output_index = self.items.len() + self.calls.len();
                let call = OpenCall {
                    delta_head: DeltaHead::new(DeltaOf::Arguments, &item_id, output_index),
                    id: item_id,
                    output_index,
                    call_id: id,
                    name,
                    arguments: String::new(),
                    custom,
                };
                let item = self.namespaced(if custom {
                    custom_call_item(&call.id, &call.call_id, &call.name, "")
                } else {
                    call_item(&call.id, &call.call_id, &call.name, "", "in_progress")
                });
                let output_index = call.output_index;
                self.calls.insert(index, call);
                self.emit(
                    json!({"type": "response.output_item.added", "output_index": output_index,
                           "item": item}),
                    out,
                );
            }
            Visible::CallArguments { index, delta } => {
                let Some(call) = self.calls.get_mut(&index) else {
                    return;
                };
                if delta.is_empty() || call.custom {
                    return;
                }
                call.arguments.push_str(&delta);
                call.delta_head.emit(&mut self.sequence, &delta, out);
            }
            // Written back whole, in its place: an item added and done at once.
            Visible::ProviderBlock {
                format: tower_chat::ApiFormat::Responses,
                block,
            } => {
                self.close_message(out);
                self.close_reasoning(None, out);
                let output_index = self.items.len() + self.calls.len();
                self.emit(
                    json!({"type": "response.output_item.added", "output_index": output_index,
                           "item": block}),
                    out,
                );
                self.emit(
                    json!({"type": "response.output_item.done", "output_index": output_index,
                           "item": block}),
                    out,
                );
                self.items.push(block);
            }
            Visible::ProviderBlock { format, .. } => {
                tracing::debug!(
                    from = format.as_str(),
                    "an answer block left out of a Responses answer"
                );
            }
            // A Responses upstream's own events and fields are not carried: the encoder writes every lifecycle
            // event itself, with its own item numbering.
            Visible::ProviderExtra { format, extra } => {
                tracing::debug!(
                    from = format.as_str(),
                    kind = extra.kind(),
                    "an answer part left out of a Responses answer"
                );
            }
            Visible::CallEnd { index, call } => {
                let Some(open) = self.calls.remove(&index) else {
                    return;
                };
                if open.custom {
                    return self.end_custom_call(open, &call, out);
                }
                // The joined arguments, as parsed once (the deltas may have been whitespace-padded).
                let arguments = arguments_text(&call);
                self.emit(
                    json!({"type": "response.function_call_arguments.done", "item_id": open.id,
                           "output_index": open.output_index, "name": open.name,
                           "arguments": arguments}),
                    out,
                );
                let item = self.namespaced(call_item(
                    &open.id,
                    &open.call_id,
                    &open.name,
                    &arguments,
                    "completed",
                ));
                self.emit(
                    json!({"type": "response.output_item.done", "output_index": open.output_index,
                           "item": item}),
                    out,
                );
                self.items.push(item);
            }
        }
    }

    fn close(&mut self, folded: &Folded, ending: &Ending, out: &mut Vec<u8>) {
        let notice = ending.notice_text();
        if !notice.is_empty() {
            let notice = if folded.content.is_empty() {
                notice.trim_start_matches('\n').to_owned()
            } else {
                notice
            };
            self.text(&notice, out);
        }
        self.close_reasoning(None, out);
        self.close_message(out);
        let (status, incomplete) = status(&ending.reason);
        let items = std::mem::take(&mut self.items);
        let mut response = self.response(folded, status, items, usage(&folded.usage));
        response["incomplete_details"] = incomplete;
        if let Some(field) = ending.tower_chat_field(said(&ending.reason)) {
            response["tower_chat"] = field;
        }
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(response_event(kind, response), out);
    }

    fn error(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.emit(
            json!({"type": "error", "code": error.code, "message": error.message, "param": null}),
            out,
        );
    }

    fn whole(&mut self, folded: Folded, ending: &Ending) -> Vec<u8> {
        serde_json::to_vec(&self.whole_value(folded, ending)).expect("a JSON value serialises")
    }
}

impl ResponseEncoder {
    /// Whether `call` is of a freeform tool: marked so by the upstream's leaf, or named as one by the request.
    fn is_custom(&self, call: &ToolCall) -> bool {
        call.kind == CallKind::Custom || self.custom_tools.contains(&call.name)
    }

    /// A freeform call is complete: its input as one delta, then `.done` and the item.
    fn end_custom_call(&mut self, open: OpenCall, call: &ToolCall, out: &mut Vec<u8>) {
        let input = call.custom_input();
        let (id, index) = (&open.id, open.output_index);
        if !input.is_empty() {
            self.emit(
                json!({"type": "response.custom_tool_call_input.delta", "item_id": id,
                       "output_index": index, "delta": input}),
                out,
            );
        }
        self.emit(
            json!({"type": "response.custom_tool_call_input.done", "item_id": id,
                   "output_index": index, "input": input}),
            out,
        );
        let item = self.namespaced(custom_call_item(id, &open.call_id, &open.name, &input));
        self.emit(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            out,
        );
        self.items.push(item);
    }

    pub(super) fn whole_value(&mut self, mut folded: Folded, ending: &Ending) -> Value {
        let mut output = Vec::new();
        for part in &folded.reasoning_parts {
            let (id, encrypted) = reasoning::shown(part, None, self.include_encrypted);
            output.push(reasoning::output_item(&id, &part.text, encrypted));
        }
        let unsigned = &folded.reasoning[folded.reasoning_covered..];
        if !unsigned.is_empty() {
            let id = format!("rs_{}", uuid::Uuid::new_v4().simple());
            output.push(reasoning::output_item(&id, unsigned, None));
        }
        let mut text = folded.content.clone();
        let notice = ending.notice_text();
        text.push_str(if text.is_empty() {
            notice.trim_start_matches('\n')
        } else {
            &notice
        });
        let blocks = std::mem::take(&mut folded.provider_blocks);
        let format = tower_chat::ApiFormat::Responses;
        for piece in Folded::pieces_with_blocks(&text, &folded.round_breaks, blocks, format) {
            match piece {
                Piece::Text(piece) => {
                    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
                    output.push(message_item(&id, piece, "completed"));
                }
                // An item no layer models, as the upstream sent it, in its place.
                Piece::Block(item) => output.push(item),
            }
        }
        for call in &folded.client_calls {
            if self.is_custom(call) {
                let id = format!("ctc_{}", uuid::Uuid::new_v4().simple());
                let input = call.custom_input();
                output.push(self.namespaced(custom_call_item(&id, &call.id, &call.name, &input)));
                continue;
            }
            let id = format!("fc_{}", uuid::Uuid::new_v4().simple());
            output.push(self.namespaced(call_item(
                &id,
                &call.id,
                &call.name,
                &arguments_text(call),
                "completed",
            )));
        }
        let (status, incomplete) = status(&ending.reason);
        let mut response = self.response(&folded, status, output, usage(&folded.usage));
        response["incomplete_details"] = incomplete;
        if let Some(field) = ending.tower_chat_field(said(&ending.reason)) {
            response["tower_chat"] = field;
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_event_is_written_as_its_struct_serialises() {
        let awkward = "a \"quoted\" line\nwith \\ and é and \u{1}";
        for of in [DeltaOf::Text, DeltaOf::Arguments] {
            for (item_id, output_index) in [("msg_1", 0), ("fc_\"x\"", 7)] {
                let head = DeltaHead::new(of, item_id, output_index);
                for (sequence, delta) in [(0, ""), (41, awkward)] {
                    let kind = of.kind();
                    let text = matches!(of, DeltaOf::Text);
                    let mut expected = Vec::new();
                    sse_event(
                        kind,
                        &DeltaEvent {
                            kind,
                            item_id,
                            output_index,
                            content_index: text.then_some(0),
                            delta,
                            logprobs: text.then_some([]),
                            sequence_number: sequence,
                        },
                        &mut expected,
                    );
                    let mut counter = sequence;
                    let mut written = b"before".to_vec();
                    head.emit(&mut counter, delta, &mut written);
                    assert_eq!(
                        String::from_utf8_lossy(&written[6..]),
                        String::from_utf8_lossy(&expected)
                    );
                    assert_eq!(&written[..6], b"before");
                    assert_eq!(counter, sequence + 1);
                }
            }
        }
    }
}
