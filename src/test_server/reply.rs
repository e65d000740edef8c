//! What the scripted provider records of a request and how a test scripts its answer: a status, headers and a
//! body of bytes, pauses, an abort or a hang.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::folded;

/// One request the provider received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// `POST`, …
    pub method: http::Method,
    /// The path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The query string without its `?`, e.g. `api-version=2024-10-21`, if the URL had one.
    pub query: Option<String>,
    /// The headers as received.
    pub headers: HeaderMap,
    /// The body parsed as JSON (`Null` if it was not JSON).
    pub body: Value,
    /// The body as received (a form, a signed payload: what is not JSON).
    pub raw_body: Bytes,
    /// The HTTP version the client spoke.
    pub version: http::Version,
}

/// One piece of a reply body.
#[derive(Clone, Debug)]
pub enum Part {
    /// Send these bytes as one chunk.
    Bytes(Bytes),
    /// Wait before the next part.
    Pause(Duration),
    /// Abort the connection here (the client sees the body end abnormally).
    Abort,
    /// Send nothing more and keep the connection open until the client goes away.
    Hang,
}

/// The answer to one request.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// Body parts, sent in order.
    pub parts: Vec<Part>,
    /// Wait this long before sending the status line.
    pub delay: Duration,
    /// The same answer as one JSON body (`200 application/json`), sent instead of `parts` when the request
    /// does not ask to stream (no `"stream": true`), as a real provider answers. Set by the streaming answer
    /// constructors ([`openai_stream`](Reply::openai_stream), [`responses_stream`](Reply::responses_stream),
    /// [`anthropic_stream`](Reply::anthropic_stream));
    /// [`then`](Reply::then) and [`rechunked`](Reply::rechunked) clear it: a body a test shapes byte by byte
    /// is sent as shaped, whatever the request asked.
    pub whole: Option<Value>,
}

impl Reply {
    /// A reply with this status and a JSON body.
    pub fn json(status: u16, body: Value) -> Self {
        Reply {
            status: StatusCode::from_u16(status).expect("valid status"),
            headers: vec![("content-type".into(), "application/json".into())],
            parts: vec![Part::Bytes(Bytes::from(body.to_string()))],
            delay: Duration::ZERO,
            whole: None,
        }
    }

    /// A `200 text/event-stream` reply whose body is sent in these chunks.
    pub fn sse_chunks<I, B>(chunks: I) -> Self
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        Reply {
            status: StatusCode::OK,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            parts: chunks.into_iter().map(|c| Part::Bytes(c.into())).collect(),
            delay: Duration::ZERO,
            whole: None,
        }
    }

    /// An OpenAI-style streaming reply: each JSON value becomes one `data:` event, then `data: [DONE]`; a
    /// request that does not ask to stream gets the same answer as one `chat.completion`.
    pub fn openai_stream(chunks: &[Value]) -> Self {
        let mut events: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        events.push("data: [DONE]\n\n".to_owned());
        Reply {
            whole: Some(folded::openai_completion(chunks)),
            ..Reply::sse_chunks(events)
        }
    }

    /// An Anthropic-style streaming reply: each JSON value becomes one event named by its `type`; a request
    /// that does not ask to stream gets the same answer as one `message`.
    pub fn anthropic_stream(events: &[Value]) -> Self {
        let sse: Vec<String> = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect();
        Reply {
            whole: Some(folded::anthropic_message(events)),
            ..Reply::sse_chunks(sse)
        }
    }

    /// An OpenAI-style streaming answer of plain text, a word per chunk, with usage.
    pub fn openai_text(text: &str) -> Self {
        let mut chunks = vec![
            json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
            "model": "scripted-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        ];
        for word in text.split_inclusive(' ') {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"content": word}}]}));
        }
        chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
        chunks.push(json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}));
        Reply::openai_stream(&chunks)
    }

    /// An OpenAI-style streaming answer that calls tools: `(call id, tool name, arguments JSON text)`.
    pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        let mut chunks = vec![json!({"id": "chatcmpl-scripted", "model": "scripted-model",
            "choices": [{"index": 0, "delta": {"role": "assistant"}}]})];
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            chunks.push(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "id": id,
                "type": "function", "function": {"name": name, "arguments": ""}}]}}]}),
            );
            // Split the arguments in two fragments, as real servers do.
            let mid = arguments
                .char_indices()
                .nth(arguments.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            for piece in [&arguments[..mid], &arguments[mid..]] {
                chunks.push(
                    json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index,
                    "function": {"arguments": piece}}]}}]}),
                );
            }
        }
        chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
        chunks.push(json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}}));
        Reply::openai_stream(&chunks)
    }

    /// The same body re-cut into `size`-byte chunks (pauses, aborts and hangs are dropped), so SSE lines, JSON
    /// and UTF-8 characters split anywhere.
    pub fn rechunked(mut self, size: usize) -> Self {
        self.whole = None;
        let body: Vec<u8> = self
            .parts
            .iter()
            .flat_map(|part| match part {
                Part::Bytes(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        self.parts = body
            .chunks(size.max(1))
            .map(|chunk| Part::Bytes(Bytes::copy_from_slice(chunk)))
            .collect();
        self
    }

    /// Add a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Append a body part.
    pub fn then(mut self, part: Part) -> Self {
        self.whole = None;
        self.parts.push(part);
        self
    }

    /// Wait before answering at all.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}
