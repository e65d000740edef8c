//! The stream decoders + event mappings (Chat Completions, Responses, Messages, Gemini, Bedrock's event-stream
//! frames), and one leaf round trip over loopback against a raw hyper client doing the same request and parse.
//!
//! `cargo bench --bench leaf`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, Criterion, Throughput};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::openai::{OpenAiChat, StreamDecoder};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{ChatRequest, ChatStreamExt, Message};

/// A realistic streamed answer: `words` text chunks, one tool call in 20 fragments, usage, `[DONE]`.
fn openai_body(words: usize) -> (Vec<u8>, usize) {
    let mut events = vec![
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
    ];
    for i in 0..words {
        events.push(json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": null}]}));
    }
    events.push(json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
        "type": "function", "function": {"name": "lookup", "arguments": ""}}]}}]}));
    for i in 0..20 {
        events.push(json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": if i == 0 { "{\"q\":\"".to_owned() } else if i == 19 { "\"}".to_owned() } else { format!("part{i}") }}}]}}]}));
    }
    events.push(json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
    events.push(json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}));
    let mut body = String::new();
    for event in &events {
        body.push_str(&format!("data: {event}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    (body.into_bytes(), events.len() + 1)
}

/// The same answer in the Messages API's stream: `words` text deltas, one tool call in 20 `input_json_delta`
/// fragments, usage, `message_stop`.
fn anthropic_body(words: usize) -> (Vec<u8>, usize) {
    let mut events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for i in 0..words {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": format!("word{i} ")}}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "content_block_start",
        json!({"type": "content_block_start", "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}}),
    ));
    for i in 0..20 {
        let part = if i == 0 {
            "{\"q\":\"".to_owned()
        } else if i == 19 {
            "\"}".to_owned()
        } else {
            format!("part{i}")
        };
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": part}}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 1}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
        "usage": {"output_tokens": 50}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let mut body = String::new();
    for (name, data) in &events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    (body.into_bytes(), events.len())
}

/// The same answer in Gemini's stream (`streamGenerateContent?alt=sse`): `words` text chunks, then the tool call
/// (Gemini sends a call whole, in one chunk) with its thought signature, the finish and usage.
fn gemini_body(words: usize) -> (Vec<u8>, usize) {
    let chunk = |parts: Value| {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 1, "totalTokenCount": 101},
            "modelVersion": "gemini-2.5-flash", "responseId": "bench-response-1"})
    };
    let mut events = Vec::with_capacity(words + 1);
    for i in 0..words {
        events.push(chunk(json!([{"text": format!("word{i} ")}])));
    }
    let mut last = chunk(
        json!([{"functionCall": {"name": "lookup", "args": {"q": "part1part2part3"}},
        "thoughtSignature": "CiQB0e2Kb7kGq0bWc7Z7i4GQ1SM2xmqVQ0d8uYlJ2wqM6lGdZQo="}]),
    );
    last["candidates"][0]["finishReason"] = json!("STOP");
    last["usageMetadata"] =
        json!({"promptTokenCount": 100, "candidatesTokenCount": 50, "totalTokenCount": 150});
    events.push(last);
    let mut body = String::new();
    for event in &events {
        body.push_str(&format!("data: {event}\r\n\r\n"));
    }
    (body.into_bytes(), events.len())
}

/// The same answer in Bedrock's ConverseStream (AWS event-stream frames): `words` text deltas, one `toolUse` in
/// 20 input fragments, `messageStop`, then `metadata` with usage. Each payload carries the `p` padding field
/// ConverseStream adds to its events.
fn bedrock_body(words: usize) -> (Vec<u8>, usize) {
    const PADDING: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ";
    let mut events = vec![("messageStart", json!({"role": "assistant", "p": PADDING}))];
    for i in 0..words {
        events.push((
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": format!("word{i} ")}, "p": PADDING}),
        ));
    }
    events.push((
        "contentBlockStop",
        json!({"contentBlockIndex": 0, "p": PADDING}),
    ));
    events.push((
        "contentBlockStart",
        json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
            "name": "lookup"}}, "p": PADDING}),
    ));
    for i in 0..20 {
        let fragment = if i == 0 {
            "{\"q\":\"".to_owned()
        } else if i == 19 {
            "\"}".to_owned()
        } else {
            format!("part{i}")
        };
        events.push((
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": fragment}}, "p": PADDING}),
        ));
    }
    events.push((
        "contentBlockStop",
        json!({"contentBlockIndex": 1, "p": PADDING}),
    ));
    events.push((
        "messageStop",
        json!({"stopReason": "tool_use", "p": PADDING}),
    ));
    events.push((
        "metadata",
        json!({"usage": {"inputTokens": 100, "outputTokens": 50, "totalTokens": 150},
            "metrics": {"latencyMs": 1066}, "p": PADDING}),
    ));
    let mut body = Vec::new();
    for (event_type, payload) in &events {
        body.extend(tower_chat::test_server::bedrock_event(
            event_type,
            &payload.to_string(),
        ));
    }
    (body, events.len())
}

/// The same answer in the Responses API's stream, as OpenAI sends it (`sequence_number`, item ids, `logprobs`
/// and `obfuscation` on every delta): `words` text deltas, one function call in 20 argument deltas, the
/// items' `done` events, usage in `response.completed`.
fn responses_body(words: usize) -> (Vec<u8>, usize) {
    let msg = "msg_68af4c1d2d8c8190a8b2c5e0d1f3a4b50c1d2e3f4a5b6c7d";
    let fc = "fc_68af4c1e7f008190b1c2d3e4f5a6b7c80c1d2e3f4a5b6c7d";
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_68af4c1c9e0c8190", "object": "response", "created_at": 1756318748, "status": status,
            "model": "gpt-5-mini-2025-08-07", "output": output, "usage": usage})
    };
    let mut events = vec![
        json!({"type": "response.created", "response": response("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.in_progress", "response": response("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": msg, "type": "message",
            "status": "in_progress", "content": [], "role": "assistant"}}),
        json!({"type": "response.content_part.added", "item_id": msg, "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}),
    ];
    let mut text = String::new();
    for i in 0..words {
        let word = format!("word{i} ");
        text.push_str(&word);
        events.push(
            json!({"type": "response.output_text.delta", "item_id": msg, "output_index": 0,
            "content_index": 0, "delta": word, "logprobs": [], "obfuscation": "sZ3kQ"}),
        );
    }
    let message = json!({"id": msg, "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]});
    events.push(
        json!({"type": "response.output_text.done", "item_id": msg, "output_index": 0,
        "content_index": 0, "text": text, "logprobs": []}),
    );
    events.push(
        json!({"type": "response.content_part.done", "item_id": msg, "output_index": 0,
        "content_index": 0, "part": message["content"][0]}),
    );
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": message}));
    events.push(json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": fc,
        "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "call_1", "name": "lookup"}}));
    let mut arguments = String::new();
    for i in 0..20 {
        let part = if i == 0 {
            "{\"q\":\"".to_owned()
        } else if i == 19 {
            "\"}".to_owned()
        } else {
            format!("part{i}")
        };
        arguments.push_str(&part);
        events.push(json!({"type": "response.function_call_arguments.delta", "item_id": fc, "output_index": 1,
            "delta": part, "obfuscation": "Kq8"}));
    }
    events.push(
        json!({"type": "response.function_call_arguments.done", "item_id": fc, "output_index": 1,
        "arguments": arguments}),
    );
    let call = json!({"id": fc, "type": "function_call", "status": "completed", "arguments": arguments,
        "call_id": "call_1", "name": "lookup"});
    events.push(json!({"type": "response.output_item.done", "output_index": 1, "item": call}));
    events.push(json!({"type": "response.completed", "response": response("completed", json!([message, call]),
        json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 50,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 150}))}));
    let mut body = String::new();
    for (n, event) in events.iter_mut().enumerate() {
        event["sequence_number"] = n.into();
        body.push_str(&format!(
            "event: {}\ndata: {event}\n\n",
            event["type"].as_str().unwrap()
        ));
    }
    (body.into_bytes(), events.len())
}

fn decode(c: &mut Criterion) {
    for (provider, (body, sse_events)) in [
        ("openai", openai_body(500)),
        ("responses", responses_body(500)),
        ("anthropic", anthropic_body(500)),
        ("gemini", gemini_body(500)),
        ("bedrock", bedrock_body(500)),
    ] {
        let mut group = c.benchmark_group(format!("{provider}_sse_decode"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("bytes", |b| b.iter(|| decode_body(provider, &body)));
        group.throughput(Throughput::Elements(sse_events as u64));
        group.bench_function("sse_events", |b| b.iter(|| decode_body(provider, &body)));
        group.finish();
    }
}

/// Decode a whole body with one provider's public decoder, fed in 1 KiB pieces, every event drained.
fn decode_body(provider: &str, body: &[u8]) {
    match provider {
        "openai" => drain_decoder(
            body,
            StreamDecoder::new(),
            |d| d.next_event(),
            |d, c| d.feed(c),
        ),
        "responses" => drain_decoder(
            body,
            tower_chat::responses::StreamDecoder::new(),
            |d| d.next_event(),
            |d, c| d.feed(c),
        ),
        "anthropic" => drain_decoder(
            body,
            tower_chat::anthropic::StreamDecoder::new(),
            |d| d.next_event(),
            |d, c| d.feed(c),
        ),
        "gemini" => drain_decoder(
            body,
            tower_chat::gemini::StreamDecoder::new(),
            |d| d.next_event(),
            |d, c| d.feed(c),
        ),
        "bedrock" => drain_decoder(
            body,
            tower_chat::bedrock::StreamDecoder::new(),
            |d| d.next_event(),
            |d, c| d.feed(c),
        ),
        other => panic!("unknown decoder {other}"),
    }
}

#[path = "support/raw_openai.rs"]
mod raw_openai;
use raw_openai::{raw_round_trip, RawClient, RawParse};

/// What a hand-written client does: POST, read frames, split SSE, parse each event's JSON, then the tool calls'
/// arguments once.
async fn raw_call(client: &RawClient, url: &str, body: &Bytes, parse: RawParse) -> usize {
    let (answer, parsed) = raw_round_trip(client, url, body.clone(), true, parse).await;
    for (_, _, arguments) in &answer.calls {
        black_box(serde_json::from_str::<Value>(arguments).ok());
    }
    black_box(answer);
    parsed
}

/// The round-trip variants, in the order tables print them; the leaf last.
const VARIANTS: [&str; 4] = [
    "raw_hyper_value",
    "raw_hyper_typed",
    "raw_hyper_same_fields",
    "openai_leaf",
];

/// A scripted provider streaming the 100-word answer, and every client that calls it.
struct RoundTrip {
    provider: ScriptedProvider,
    leaf: OpenAiChat,
    request: ChatRequest,
    raw_client: RawClient,
    url: String,
    raw_body: Bytes,
}

impl RoundTrip {
    async fn start() -> Self {
        let body = Bytes::from(openai_body(100).0);
        let provider = ScriptedProvider::start(move |_, _| Reply::sse_chunks([body.clone()])).await;
        let leaf = OpenAiChat::builder()
            .base_url(provider.base_url())
            .api_key("sk-bench")
            .model("gpt-4o-mini")
            .build()
            .unwrap();
        let request = ChatRequest::new(vec![
            Message::system("You are a bench."),
            Message::user("Stream me 100 words."),
        ]);
        let url = format!("{}/chat/completions", provider.base_url());
        let raw_body = Bytes::from(
            json!({"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are a bench."},
                {"role": "user", "content": "Stream me 100 words."}], "stream": true, "stream_options": {"include_usage": true}})
            .to_string(),
        );
        RoundTrip {
            provider,
            leaf,
            request,
            raw_client: Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>(),
            url,
            raw_body,
        }
    }

    /// One call by one of [`VARIANTS`].
    async fn call(&self, variant: &str) {
        let parse = match variant {
            "openai_leaf" => {
                let stream = self
                    .leaf
                    .clone()
                    .oneshot(self.request.clone())
                    .await
                    .unwrap();
                black_box(stream.collect_response().await.unwrap());
                return;
            }
            "raw_hyper_value" => RawParse::Value,
            "raw_hyper_typed" => RawParse::Minimal,
            "raw_hyper_same_fields" => RawParse::SameFields,
            other => panic!("unknown variant {other}"),
        };
        black_box(raw_call(&self.raw_client, &self.url, &self.raw_body, parse).await);
    }
}

fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn round_trip(c: &mut Criterion) {
    let rt = multi_thread_runtime();
    let fixture = rt.block_on(RoundTrip::start());
    let mut group = c.benchmark_group("round_trip_100_chunks");
    for variant in VARIANTS {
        group.bench_function(variant, |b| b.iter(|| rt.block_on(fixture.call(variant))));
    }
    group.finish();
}

criterion_group!(benches, decode, round_trip);

/// Feed `body` in 1 KiB pieces, draining every event.
fn drain_decoder<D>(
    body: &[u8],
    mut decoder: D,
    mut next: impl FnMut(&mut D) -> Option<Result<tower_chat::ChatEvent, tower_chat::ChatError>>,
    mut feed: impl FnMut(&mut D, &[u8]),
) {
    for chunk in body.chunks(1024) {
        feed(&mut decoder, chunk);
        while let Some(event) = next(&mut decoder) {
            black_box(event.unwrap());
        }
    }
}

/// `LEAF_COUNT_VARIANT=raw_hyper_value|raw_hyper_typed|raw_hyper_same_fields|openai_leaf LEAF_COUNT_CALLS=N` runs
/// N round trips of one variant and exits (`openai_decode|responses_decode|anthropic_decode|gemini_decode|bedrock_decode`: N decodes of the
/// 500-word body, no HTTP), for instruction counting under `valgrind --tool=callgrind` (repeatable where wall
/// time on a shared machine is not).
fn count_variant(variant: &str) {
    let calls: usize = std::env::var("LEAF_COUNT_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    if let Some(provider) = variant.strip_suffix("_decode") {
        // Decoding alone: the 500-word body of the decode group, N times.
        let (body, events) = match provider {
            "openai" => openai_body(500),
            "responses" => responses_body(500),
            "gemini" => gemini_body(500),
            "bedrock" => bedrock_body(500),
            _ => anthropic_body(500),
        };
        for _ in 0..calls {
            decode_body(provider, &body);
        }
        eprintln!("{variant}: {calls} bodies of {events} SSE events");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let fixture = RoundTrip::start().await;
        for _ in 0..calls {
            fixture.call(variant).await;
        }
        eprintln!(
            "{variant}: {calls} calls over {} connection(s)",
            fixture.provider.connections()
        );
    });
}

/// `LEAF_INTERLEAVE_ROUNDS=R` times the four round-trip variants in interleaved rounds (each round runs every
/// variant for 20 calls, in a rotating order) and prints, per variant, the median per-call time and the median of
/// the per-round ratios to `openai_leaf`. On a shared machine whose speed drifts over minutes, a ratio taken within
/// a round is far steadier than one between criterion groups measured one after another.
fn interleave(rounds: usize) {
    const CALLS: usize = 20;
    let rt = multi_thread_runtime();
    let fixture = rt.block_on(RoundTrip::start());
    // One `block_on` per call, as in the criterion group.
    let run = |variant: &str| {
        let start = std::time::Instant::now();
        for _ in 0..CALLS {
            rt.block_on(fixture.call(variant));
        }
        start.elapsed().as_secs_f64() * 1e6 / CALLS as f64
    };
    // Warm-up: connections, allocator, caches.
    for variant in VARIANTS {
        run(variant);
    }
    let mut times = vec![Vec::with_capacity(rounds); VARIANTS.len()];
    for round in 0..rounds {
        for k in 0..VARIANTS.len() {
            let v = (round + k) % VARIANTS.len();
            times[v].push(run(VARIANTS[v]));
        }
    }
    let median = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let leaf_times = times[3].clone();
    println!("{rounds} interleaved rounds of {CALLS} calls per variant");
    println!(
        "{:<24} {:>16} {:>26}",
        "variant", "median µs/call", "median of openai_leaf/this"
    );
    for (v, variant) in VARIANTS.iter().enumerate() {
        let ratios = leaf_times
            .iter()
            .zip(&times[v])
            .map(|(l, t)| l / t)
            .collect();
        println!(
            "{variant:<24} {:>16.1} {:>26.3}",
            median(times[v].clone()),
            median(ratios)
        );
    }
}

fn main() {
    if let Ok(variant) = std::env::var("LEAF_COUNT_VARIANT") {
        count_variant(&variant);
        return;
    }
    if let Some(rounds) = std::env::var("LEAF_INTERLEAVE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        interleave(rounds);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
