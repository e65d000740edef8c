//! The reference a tower-chat stack is measured against: what a careful hand-written client over hyper does with
//! the OpenAI Chat Completions wire format, keeping the same information the leaf keeps (ids, text, reasoning,
//! tool calls by index with their arguments joined and parsed once, finish reason, usage).
//!
//! Shared by the core's `leaf` bench and the stack's `stack` bench (`#[path]` include), so both compare against
//! one client.

#![allow(dead_code)] // each bench uses part of it

use std::hint::black_box;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use serde::Deserialize;
use serde_json::Value;
use tower_chat::sse::SseDecoder;

/// A plain HTTP/1.1 hyper client, as a hand-written integration would build it.
pub type RawClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// The minimum a typed hand-written client deserializes per chunk.
#[derive(Deserialize)]
pub struct MinimalChunk {
    #[serde(default)]
    pub choices: Vec<MinimalChoice>,
}

/// One choice of a [`MinimalChunk`].
#[derive(Deserialize)]
pub struct MinimalChoice {
    #[serde(default)]
    pub delta: Option<MinimalDelta>,
}

/// The delta of a [`MinimalChoice`].
#[derive(Deserialize)]
pub struct MinimalDelta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
}

/// What a typed hand-written client that keeps the same information as the leaf deserializes per chunk.
#[derive(Deserialize)]
pub struct FullChunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<FullChoice>,
    #[serde(default)]
    usage: Option<FullUsage>,
}

#[derive(Deserialize)]
struct FullChoice {
    #[serde(default)]
    delta: Option<FullDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct FullDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<FullToolCall>>,
}

#[derive(Deserialize)]
struct FullToolCall {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FullFunction>,
}

#[derive(Deserialize)]
struct FullFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct FullUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// A non-streamed completion, the same fields.
#[derive(Deserialize)]
struct FullCompletion {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<FullCompletionChoice>,
    #[serde(default)]
    usage: Option<FullUsage>,
}

#[derive(Deserialize)]
struct FullCompletionChoice {
    message: FullCompletionMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct FullCompletionMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<FullToolCall>,
}

/// One tool call of a [`RawAnswer`]: id, name, arguments text.
pub type RawToolCall = (String, String, String);

/// What a raw client keeps of one answer.
#[derive(Default)]
pub struct RawAnswer {
    pub id: Option<String>,
    pub model: Option<String>,
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<RawToolCall>,
    pub finish: Option<String>,
    pub usage: Option<(u64, u64)>,
}

impl RawAnswer {
    /// Fold one streamed chunk in.
    pub fn absorb(&mut self, chunk: FullChunk) {
        if self.id.is_none() {
            self.id = chunk.id;
            self.model = chunk.model;
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                self.text.push_str(delta.content.as_deref().unwrap_or(""));
                self.reasoning
                    .push_str(delta.reasoning_content.as_deref().unwrap_or(""));
                for call in delta.tool_calls.into_iter().flatten() {
                    self.absorb_call(call);
                }
            }
            if choice.finish_reason.is_some() {
                self.finish = choice.finish_reason;
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some((usage.prompt_tokens, usage.completion_tokens));
        }
    }

    fn absorb_call(&mut self, call: FullToolCall) {
        if call.index >= self.calls.len() {
            self.calls.resize_with(call.index + 1, Default::default);
        }
        let slot = &mut self.calls[call.index];
        if let Some(id) = call.id {
            slot.0 = id;
        }
        if let Some(function) = call.function {
            if let Some(name) = function.name {
                slot.1 = name;
            }
            slot.2.push_str(function.arguments.as_deref().unwrap_or(""));
        }
    }

    /// Parse a whole non-streamed completion body.
    pub fn from_completion(body: &[u8]) -> RawAnswer {
        let completion: FullCompletion = serde_json::from_slice(body).unwrap();
        let mut answer = RawAnswer {
            id: completion.id,
            model: completion.model,
            usage: completion
                .usage
                .map(|u| (u.prompt_tokens, u.completion_tokens)),
            ..RawAnswer::default()
        };
        for choice in completion.choices {
            answer
                .text
                .push_str(choice.message.content.as_deref().unwrap_or(""));
            answer
                .reasoning
                .push_str(choice.message.reasoning_content.as_deref().unwrap_or(""));
            for (index, mut call) in choice.message.tool_calls.into_iter().enumerate() {
                call.index = index;
                answer.absorb_call(call);
            }
            answer.finish = choice.finish_reason;
        }
        answer
    }
}

/// How the raw client parses each streamed event.
#[derive(Clone, Copy)]
pub enum RawParse {
    /// `serde_json::Value`.
    Value,
    /// Only `content` (and tool calls as `Value`).
    Minimal,
    /// Typed structs keeping what the leaf keeps: [`FullChunk`] folded into a [`RawAnswer`].
    SameFields,
}

/// The data of one event: text from the [`SseDecoder`], bytes from [`MemchrSse`] (parsed as they are, the way
/// a client splitting bytes by hand would).
#[derive(Clone, Copy)]
enum EventData<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
}

impl EventData<'_> {
    fn is_done(self) -> bool {
        match self {
            EventData::Text(text) => text == "[DONE]",
            EventData::Bytes(bytes) => bytes == b"[DONE]",
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(self) -> T {
        match self {
            EventData::Text(text) => serde_json::from_str(text).unwrap(),
            EventData::Bytes(bytes) => serde_json::from_slice(bytes).unwrap(),
        }
    }
}

/// How the raw client finds the events of a streamed answer.
#[derive(Clone, Copy, Debug)]
pub enum RawSplit {
    /// The core's [`SseDecoder`] (every SSE field, `\r`/`\n`/`\r\n` line ends).
    Decoder,
    /// A hand-written splitter for what OpenAI sends: `memchr` finds the blank line ending each event, and the
    /// `data:` lines of the event are handed on as bytes ([`MemchrSse`]).
    Memchr,
}

/// The splitter a hand-written client writes for OpenAI's SSE: events end at `\n\n`, only `data:` lines count.
/// A partial event waits in `pending` for the next frame; whole events are taken from the frame in place.
#[derive(Default)]
pub struct MemchrSse {
    pending: Vec<u8>,
    /// The lines of an event with more than one `data:` line, joined by `\n` as the SSE rules say.
    joined: Vec<u8>,
}

impl MemchrSse {
    /// Feed one body frame; `on_data` gets the data of each complete event.
    pub fn feed(&mut self, frame: &[u8], on_data: &mut impl FnMut(&[u8])) {
        if self.pending.is_empty() {
            let rest = self.split(frame, on_data);
            self.pending.extend_from_slice(&frame[rest..]);
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(frame);
            let rest = self.split(&pending, on_data);
            pending.drain(..rest);
            self.pending = pending;
        }
    }

    /// Hand on every complete event of `bytes`; returns where the incomplete rest starts.
    fn split(&mut self, bytes: &[u8], on_data: &mut impl FnMut(&[u8])) -> usize {
        let mut start = 0;
        // Matches do not overlap, so each starts at or after the end of the previous event.
        for end in memchr::memmem::find_iter(bytes, b"\n\n") {
            self.event(&bytes[start..end], on_data);
            start = end + 2;
        }
        start
    }

    fn event(&mut self, event: &[u8], on_data: &mut impl FnMut(&[u8])) {
        let mut data_lines = event.split(|b| *b == b'\n').filter_map(|line| {
            let data = line.strip_prefix(b"data:")?;
            Some(data.strip_prefix(b" ").unwrap_or(data))
        });
        let Some(first) = data_lines.next() else {
            return;
        };
        match data_lines.next() {
            None => on_data(first),
            Some(second) => {
                self.joined.clear();
                self.joined.extend_from_slice(first);
                for line in std::iter::once(second).chain(data_lines) {
                    self.joined.push(b'\n');
                    self.joined.extend_from_slice(line);
                }
                on_data(&self.joined);
            }
        }
    }
}

/// POST `body` to `url` and read the answer: SSE events parsed as `parse` says when `stream`, else one JSON
/// completion. Returns the answer (filled for [`RawParse::SameFields`] and non-streamed calls) and the number of
/// SSE events read.
pub async fn raw_round_trip(
    client: &RawClient,
    url: &str,
    body: Bytes,
    stream: bool,
    parse: RawParse,
) -> (RawAnswer, usize) {
    raw_round_trip_split(client, url, body, stream, parse, RawSplit::Decoder).await
}

/// [`raw_round_trip`] with the events of a streamed answer found as `split` says.
pub async fn raw_round_trip_split(
    client: &RawClient,
    url: &str,
    body: Bytes,
    stream: bool,
    parse: RawParse,
    split: RawSplit,
) -> (RawAnswer, usize) {
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench")
        .body(Full::new(body))
        .unwrap();
    let mut response = client.request(request).await.unwrap();
    assert!(response.status().is_success());
    if !stream {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        return (RawAnswer::from_completion(&body), 0);
    }
    let mut parsed = 0;
    // Like any client, keep the answer.
    let mut text = String::new();
    let mut answer = RawAnswer::default();
    let mut on_data = |data: EventData<'_>| {
        if !data.is_done() {
            match parse {
                RawParse::Minimal => {
                    let chunk: MinimalChunk = data.parse();
                    for delta in chunk.choices.into_iter().filter_map(|c| c.delta) {
                        text.push_str(delta.content.as_deref().unwrap_or(""));
                        black_box(delta.tool_calls);
                    }
                }
                RawParse::Value => {
                    black_box(data.parse::<Value>());
                }
                RawParse::SameFields => answer.absorb(data.parse()),
            }
        }
        parsed += 1;
    };
    let mut decoder = SseDecoder::new();
    let mut memchr_sse = MemchrSse::default();
    while let Some(frame) = response.body_mut().frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            match split {
                RawSplit::Decoder => {
                    decoder.feed(&data, &mut |event| on_data(EventData::Text(&event.data)));
                }
                RawSplit::Memchr => {
                    memchr_sse.feed(&data, &mut |data| on_data(EventData::Bytes(data)))
                }
            }
        }
    }
    black_box(text);
    (answer, parsed)
}
