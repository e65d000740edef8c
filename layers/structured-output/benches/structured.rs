//! What structured output costs: rewriting a schema for a provider, validating an answer, and reading a
//! streamed answer as it grows — incrementally ([`PartialJson`], kept across chunks) against the peer, reading
//! the whole prefix again after every chunk (what a partial-JSON parser without state does).
//!
//! ```sh
//! cargo bench -p tower-chat-structured-output --bench structured            # criterion, wall clock
//! cargo bench -p tower-chat-structured-output --bench structured --no-run   # prints the binary's path
//! STRUCTURED_COST=normalise|normalise_cached|validate|partial|cloned|reparse|events|helper|plain SIZE=1k|100k|1m N=<count> \
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null <binary>
//! ```
//!
//! The schema is `schemars`' for `Place` below (optional fields, an enum, a nested struct, a recursive list
//! through `$defs`); the answer to validate is one `Place` with two parts (~300 bytes). The streamed answers are
//! `Place`s with ever more parts, serialised to about `SIZE` bytes, cut into 32-byte chunks (the order of a
//! model's text deltas). The same answers also stream through a `StructuredOutputLayer` over an in-process
//! service: `plain` without partial answers (text deltas, one check at the end), `events` with
//! `ChatEvent::PartialAnswer` events (the per-chunk cost of sending the answer so far), `helper` read by
//! `structured_stream` into typed `Partial`s. With `STRUCTURED_COST` set the binary does the work `N` times and exits, for
//! instruction counts (subtract the `N = 0` run for start-up).

use std::hint::black_box;

use criterion::{criterion_group, BenchmarkId, Criterion};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt};
use tower_chat::output_schema::{normalise, rewrite, SchemaDialect};
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, Message};
use tower_chat_structured_output::{
    AnswerSchema, Partial, PartialJson, StructuredExt, StructuredOutputLayer,
};

#[derive(Serialize, Deserialize, JsonSchema)]
struct Place {
    name: String,
    kind: Kind,
    location: Location,
    population: Option<u64>,
    tags: Vec<String>,
    parts: Vec<Place>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
enum Kind {
    City,
    District,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Location {
    lat: f64,
    lon: f64,
}

const CHUNK: usize = 32;

fn place(parts: usize) -> Place {
    Place {
        name: "Oslo".into(),
        kind: Kind::City,
        location: Location {
            lat: 59.9139,
            lon: 10.7522,
        },
        population: Some(709_037),
        tags: vec!["capital".into(), "fjord \"city\"".into()],
        parts: (0..parts)
            .map(|i| Place {
                name: format!("District number {i}, with a longer name \u{e6}\u{f8}\u{e5}"),
                kind: Kind::District,
                location: Location {
                    lat: 59.9 + i as f64 / 1e4,
                    lon: 10.7,
                },
                population: (i % 3 != 0).then_some(i as u64 * 17),
                tags: vec!["part".into()],
                parts: Vec::new(),
            })
            .collect(),
    }
}

/// A serialised answer of about `bytes` bytes.
fn answer(bytes: usize) -> String {
    let per_part = serde_json::to_string(&place(1)).unwrap().len()
        - serde_json::to_string(&place(0)).unwrap().len();
    serde_json::to_string(&place(bytes / per_part)).unwrap()
}

fn chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + CHUNK).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

/// Reads the stream keeping the parser: the value after every chunk, by reference.
fn incremental(chunks: &[&str]) -> usize {
    let mut parser = PartialJson::new();
    let mut seen = 0;
    for chunk in chunks {
        parser.push(chunk).unwrap();
        seen += parser
            .value()
            .map_or(0, |v| v.as_object().map_or(0, |o| o.len()));
    }
    seen
}

/// A value sent after every chunk: the parser kept, the value copied each time (the quadratic cost the layer's
/// spacing of `PartialAnswer` events avoids).
fn cloned_every_chunk(chunks: &[&str]) -> usize {
    let mut parser = PartialJson::new();
    let mut seen = 0;
    for chunk in chunks {
        parser.push(chunk).unwrap();
        seen += parser
            .value()
            .cloned()
            .map_or(0, |v| v.as_object().map_or(0, |o| o.len()));
    }
    seen
}

/// The peer: after every chunk, the whole prefix read again from the start.
fn reparse(text: &str, chunks: &[&str]) -> usize {
    let mut end = 0;
    let mut seen = 0;
    for chunk in chunks {
        end += chunk.len();
        let mut parser = PartialJson::new();
        parser.push(&text[..end]).unwrap();
        seen += parser
            .value()
            .map_or(0, |v| v.as_object().map_or(0, |o| o.len()));
    }
    seen
}

/// A service that streams `chunks` as text deltas, all ready at once (no I/O in the figures).
fn leaf(
    chunks: Vec<String>,
) -> impl tower::Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send>
       + Clone
       + Send
       + Sync
       + 'static {
    tower::service_fn(move |_request: ChatRequest| {
        let mut events: Vec<Result<ChatEvent, ChatError>> = chunks
            .iter()
            .map(|c| Ok(ChatEvent::text(c.as_str())))
            .collect();
        events.push(Ok(ChatEvent::finish(FinishReason::Stop)));
        async move { Ok::<ChatStream, ChatError>(Box::pin(futures_util::stream::iter(events))) }
    })
}

/// The answer through the layer, with or without partial answers: how many events it streamed.
async fn through_layer(chunks: &[String], partial_answers: bool) -> usize {
    let mut request = ChatRequest::new(vec![Message::user("Describe Oslo.")]);
    request.options.response_format = Some(AnswerSchema::of::<Place>().unwrap().response_format());
    StructuredOutputLayer::new()
        .partial_answers(partial_answers)
        .layer(leaf(chunks.to_vec()))
        .oneshot(request)
        .await
        .unwrap()
        .count()
        .await
}

/// The answer read by the helper: how many steps it gave.
async fn through_helper(chunks: &[String]) -> usize {
    leaf(chunks.to_vec())
        .structured_stream::<Place>(ChatRequest::new(vec![Message::user("Describe Oslo.")]))
        .map(|step| matches!(step, Ok(Partial::Growing { .. })) as usize)
        .fold(0, |n, growing| async move { n + growing })
        .await
}

fn size(name: &str) -> usize {
    match name {
        "1k" => 1 << 10,
        "100k" => 100 << 10,
        "1m" => 1 << 20,
        other => panic!("SIZE={other}: 1k, 100k or 1m"),
    }
}

fn count_mode(mode: &str) {
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let schema = schemars::schema_for!(Place).to_value();
    let text = answer(size(&std::env::var("SIZE").unwrap_or_else(|_| "1k".into())));
    let pieces = chunks(&text);
    let small = serde_json::to_string(&place(2)).unwrap();
    let checker = AnswerSchema::new("Place", schema.clone()).unwrap();
    let owned: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut total = 0usize;
    for _ in 0..n {
        total += match mode {
            "normalise" => rewrite(black_box(&schema), SchemaDialect::OpenAiStrict)
                .unwrap()
                .moved
                .len(),
            "normalise_cached" => normalise(black_box(&schema), SchemaDialect::OpenAiStrict)
                .unwrap()
                .moved
                .len(),
            "validate" => checker
                .check(black_box(&small))
                .map_or(0, |v| v.as_object().unwrap().len()),
            "partial" => incremental(black_box(&pieces)),
            "cloned" => cloned_every_chunk(black_box(&pieces)),
            "reparse" => reparse(black_box(&text), black_box(&pieces)),
            "plain" => runtime.block_on(through_layer(black_box(&owned), false)),
            "events" => runtime.block_on(through_layer(black_box(&owned), true)),
            "helper" => runtime.block_on(through_helper(black_box(&owned))),
            other => panic!("STRUCTURED_COST={other}"),
        };
    }
    println!("{mode} x{n}: {total}");
}

fn benches(c: &mut Criterion) {
    let schema = schemars::schema_for!(Place).to_value();
    c.bench_function("normalise/openai_strict", |b| {
        b.iter(|| rewrite(black_box(&schema), SchemaDialect::OpenAiStrict))
    });
    c.bench_function("normalise/cached", |b| {
        b.iter(|| normalise(black_box(&schema), SchemaDialect::OpenAiStrict))
    });
    let checker = AnswerSchema::new("Place", schema.clone()).unwrap();
    let small = serde_json::to_string(&place(2)).unwrap();
    c.bench_function("validate/place", |b| {
        b.iter(|| checker.check(black_box(&small)).unwrap())
    });

    let mut group = c.benchmark_group("partial");
    group.sample_size(10);
    for name in ["1k", "100k", "1m"] {
        let text = answer(size(name));
        let pieces = chunks(&text);
        group.throughput(criterion::Throughput::Bytes(text.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("incremental", name),
            &pieces,
            |b, pieces| b.iter(|| incremental(pieces)),
        );
        // Reading every prefix of a megabyte again is ~16 GB of parsing an iteration: measured up to 100 KB.
        if name != "1m" {
            group.bench_with_input(BenchmarkId::new("reparse", name), &pieces, |b, pieces| {
                b.iter(|| reparse(&text, pieces))
            });
        }
    }
    group.finish();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("answer_events");
    group.sample_size(10);
    for name in ["1k", "100k", "1m"] {
        let text = answer(size(name));
        let pieces: Vec<String> = chunks(&text).iter().map(|p| p.to_string()).collect();
        group.throughput(criterion::Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("plain", name), &pieces, |b, pieces| {
            b.iter(|| runtime.block_on(through_layer(pieces, false)))
        });
        group.bench_with_input(BenchmarkId::new("events", name), &pieces, |b, pieces| {
            b.iter(|| runtime.block_on(through_layer(pieces, true)))
        });
        group.bench_with_input(BenchmarkId::new("helper", name), &pieces, |b, pieces| {
            b.iter(|| runtime.block_on(through_helper(pieces)))
        });
    }
    group.finish();
}

criterion_group!(group, benches);

fn main() {
    if let Ok(mode) = std::env::var("STRUCTURED_COST") {
        count_mode(&mode);
        return;
    }
    group();
    Criterion::default().configure_from_args().final_summary();
}
