//! What structured output costs: rewriting a schema for a provider, validating an answer, and reading a
//! streamed answer as it grows — incrementally ([`PartialJson`], kept across chunks) against the peer, reading
//! the whole prefix again after every chunk (what a partial-JSON parser without state does).
//!
//! ```sh
//! cargo bench -p tower-chat-structured-output --bench structured            # criterion, wall clock
//! cargo bench -p tower-chat-structured-output --bench structured --no-run   # prints the binary's path
//! STRUCTURED_COST=normalise|normalise_cached|validate|partial|reparse SIZE=1k|100k|1m N=<count> \
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null <binary>
//! ```
//!
//! The schema is `schemars`' for `Place` below (optional fields, an enum, a nested struct, a recursive list
//! through `$defs`); the answer to validate is one `Place` with two parts (~300 bytes). The streamed answers are
//! `Place`s with ever more parts, serialised to about `SIZE` bytes, cut into 32-byte chunks (the order of a
//! model's text deltas). With `STRUCTURED_COST` set the binary does the work `N` times and exits, for
//! instruction counts (subtract the `N = 0` run for start-up).

use std::hint::black_box;

use criterion::{criterion_group, BenchmarkId, Criterion};
use schemars::JsonSchema;
use serde::Serialize;
use tower_chat::output_schema::{normalise, rewrite, SchemaDialect};
use tower_chat_structured_output::{AnswerSchema, PartialJson};

#[derive(Serialize, JsonSchema)]
struct Place {
    name: String,
    kind: Kind,
    location: Location,
    population: Option<u64>,
    tags: Vec<String>,
    parts: Vec<Place>,
}

#[derive(Serialize, JsonSchema)]
enum Kind {
    City,
    District,
}

#[derive(Serialize, JsonSchema)]
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
    let mut total = 0usize;
    for _ in 0..n {
        total += match mode {
            "normalise" => rewrite(black_box(&schema), SchemaDialect::OpenAiStrict)
                .moved
                .len(),
            "normalise_cached" => normalise(black_box(&schema), SchemaDialect::OpenAiStrict)
                .moved
                .len(),
            "validate" => checker
                .check(black_box(&small))
                .map_or(0, |v| v.as_object().unwrap().len()),
            "partial" => incremental(black_box(&pieces)),
            "reparse" => reparse(black_box(&text), black_box(&pieces)),
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
