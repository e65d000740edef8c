//! CPU per byte of the request bodies an attacker would send to make parsing expensive: N tool calls and N tool
//! results that answer none of them (every result is looked up among every call), in each inbound format, at
//! 0.4 MB and 3.2 MB. Each is sent over loopback to a gateway in this process:
//!
//! - `counted`: the command line's default limits. The parser counts the calls and results on the raw body and
//!   refuses it (`limit_exceeded`) before converting a single item.
//! - `converted`: `--max-messages` raised past N, `--max-id-bytes` at 4, so the whole body is converted (every
//!   result named after its call) and only then refused for its ids. Nothing reaches the upstream either way.
//!
//! Guard: for every shape the large body's CPU per byte is at most 3× the small body's (linear parsing); a
//! quadratic step makes it about 8× (the size ratio). The run exits non-zero when the guard fails.
//!
//! Then client JSON Schemas, with `[structured]` on (the answer is validated against the schema as sent):
//!
//! - `accepted`: an answer schema of N properties, each a `$ref` to one shared definition, at two sizes 8×
//!   apart, the larger near the largest the default schema limits accept; the upstream answers with a value
//!   for every property, which is validated. Guard as above: CPU per byte of the large one at most 3× the small.
//! - `refused`: the bombs (a chain of 1,500 `$ref`s, `allOf` levels of two `$ref`s 27 deep, `anyOf` 22 deep,
//!   four `$ref`s per level 10 and 14 deep), each a 400 `limit_exceeded`. Guard: CPU per byte at most 3× the
//!   small accepted schema's, so no refusal does the work the bomb asks for.
//!
//! ```text
//! cargo bench -p tower-chat-gateway --bench adversarial
//! ```

use std::time::Duration;

use bytes::Bytes;
use cpu_time::ProcessTime;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_gateway::request_limits::RequestLimits;
use tower_chat_gateway::{Config, Gateway};
use tower_chat_testkit::{ref_chain, ref_dag, ref_laughs};

/// Requests per measured case (after one warm-up request); the least CPU of them is reported.
const REPEATS: u32 = 5;
/// The most the large body's CPU per byte may be over the small body's.
const LINEAR_GUARD: f64 = 3.0;

/// A body of `n` calls and `n` results answering other ids, in `format`. The ids share a long prefix and have
/// one length, so telling two apart reads them whole (the costliest comparison for a quadratic lookup).
fn body(format: &str, n: usize) -> Value {
    const PREFIX: &str = "toolu_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ";
    let call_id = |i: usize| format!("{PREFIX}c{i:08}");
    let other_id = |i: usize| format!("{PREFIX}r{i:08}");
    match format {
        "/v1/chat/completions" => {
            let calls: Vec<Value> = (0..n)
                .map(|i| {
                    json!({"id": call_id(i), "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"}})
                })
                .collect();
            let mut messages = vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
            ];
            messages.extend(
                (0..n).map(|i| json!({"role": "tool", "tool_call_id": other_id(i), "content": ""})),
            );
            json!({"model": "m", "messages": messages})
        }
        "/v1/messages" => {
            let uses: Vec<Value> = (0..n)
                .map(|i| json!({"type": "tool_use", "id": call_id(i), "name": "read_file", "input": {}}))
                .collect();
            let results: Vec<Value> = (0..n)
                .map(|i| json!({"type": "tool_result", "tool_use_id": other_id(i)}))
                .collect();
            json!({"model": "m", "max_tokens": 16, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": uses},
                {"role": "user", "content": results},
            ]})
        }
        _ => {
            let mut items = vec![json!({"role": "user", "content": "hi"})];
            items.extend((0..n).map(|i| {
                json!({"type": "function_call", "call_id": call_id(i), "name": "read_file", "arguments": "{}"})
            }));
            items.extend((0..n).map(
                |i| json!({"type": "function_call_output", "call_id": other_id(i), "output": ""}),
            ));
            json!({"model": "m", "input": items})
        }
    }
}

/// `n` such that the body is about `bytes` long.
fn calls_for(format: &str, bytes: usize) -> usize {
    let per_pair = body(format, 1000).to_string().len() / 1000;
    bytes / per_pair
}

struct Measured {
    bytes: usize,
    cpu: Duration,
    status: u16,
}

/// A gateway in this process within `limits`, with `file` as its configuration file, whose upstream answers
/// `answer`.
async fn start(
    limits: RequestLimits,
    file: Option<ConfigFile>,
    answer: String,
) -> (ScriptedProvider, String, tempfile::TempDir) {
    let provider = ScriptedProvider::start(move |_, _| Reply::openai_text(&answer)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(provider.base_url());
    config.no_upstream_key = true;
    config.db = dir.path().join("adversarial.db");
    config.limits = limits;
    if let Some(file) = file {
        config.file = file;
    }
    let gateway = Gateway::new(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gateway.serve(listener, std::future::pending()));
    (provider, format!("http://{addr}"), dir)
}

/// The least CPU of [`REPEATS`] requests of `body` to `path` (after a warm-up), and the status; `check` reads
/// each answer.
async fn least_cpu(
    base: &str,
    path: &str,
    body: &Bytes,
    check: impl Fn(u16, &str),
) -> (Duration, u16) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let send = || async {
        let request = http::Request::post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .unwrap();
        let response = client.request(request).await.unwrap();
        let status = response.status().as_u16();
        let answer = response.into_body().collect().await.unwrap().to_bytes();
        check(
            status,
            &String::from_utf8_lossy(&answer[..answer.len().min(300)]),
        );
        status
    };
    send().await;
    let mut status = 0;
    let mut least = Duration::MAX;
    for _ in 0..REPEATS {
        let start = ProcessTime::now();
        status = send().await;
        least = least.min(start.elapsed());
    }
    (least, status)
}

async fn measure(base: &str, path: &str, body: Bytes) -> Measured {
    let (cpu, status) = least_cpu(base, path, &body, |status, answer| {
        assert!(
            answer.contains("limit_exceeded"),
            "{path}: expected a limit_exceeded refusal, got {status} {answer}"
        );
    })
    .await;
    Measured {
        bytes: body.len(),
        cpu,
        status,
    }
}

/// An answer schema of `n` properties, each a `$ref` to one definition, and an answer matching it.
fn wide_schema(n: usize) -> (Value, String) {
    let properties: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/item"})))
        .collect();
    let schema = json!({"type": "object", "properties": properties,
        "$defs": {"item": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}});
    let answer: serde_json::Map<String, Value> =
        (0..n).map(|i| (format!("p{i}"), json!({"x": i}))).collect();
    (schema, Value::Object(answer).to_string())
}

/// The bombs, by name: each breaks a schema limit.
fn bombs() -> Vec<(&'static str, Value)> {
    let object = || json!({"type": "object"});
    vec![
        ("ref chain 1500", ref_chain(1500, object())),
        ("allOf x2 depth 27", ref_dag("allOf", 27, 2, object())),
        ("anyOf x2 depth 22", ref_dag("anyOf", 22, 2, object())),
        ("laughs x4 depth 10", ref_laughs(10, 4)),
        ("laughs x4 depth 14", ref_laughs(14, 4)),
    ]
}

/// A Chat Completions body asking for an answer matching `schema`.
fn answer_body(schema: &Value) -> Bytes {
    Bytes::from(
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": true}}})
        .to_string(),
    )
}

/// A gateway with `[structured]` on whose upstream answers `answer`.
async fn start_structured(answer: String) -> (ScriptedProvider, String, tempfile::TempDir) {
    let file = ConfigFile::parse("[structured]\n", "gateway.toml").unwrap();
    start(RequestLimits::default(), Some(file), answer).await
}

/// The least CPU of [`REPEATS`] answer requests, each answered with `expected`.
async fn measure_status(base: &str, body: Bytes, expected: u16) -> Duration {
    let path = "/v1/chat/completions";
    let check = |status, answer: &str| assert_eq!(status, expected, "{answer}");
    least_cpu(base, path, &body, check).await.0
}

/// The schema cases; `true` when a guard failed.
fn schemas(runtime: &tokio::runtime::Runtime) -> bool {
    let mut failed = false;
    println!(
        "\n{:<22} {:<10} {:>10} {:>7} {:>10} {:>9}",
        "schema", "", "bytes", "status", "CPU ms", "ns/byte"
    );
    let row = |name: &str, label: &str, bytes: usize, status: u16, cpu: Duration| {
        let per_byte = cpu.as_nanos() as f64 / bytes as f64;
        println!(
            "{name:<22} {label:<10} {bytes:>10} {status:>7} {:>10.2} {per_byte:>9.2}",
            cpu.as_secs_f64() * 1e3
        );
        per_byte
    };
    let mut accepted = Vec::new();
    for n in [1_000, 8_000] {
        let (schema, answer) = wide_schema(n);
        let (_provider, base, _dir) = runtime.block_on(start_structured(answer));
        let body = answer_body(&schema);
        let cpu = runtime.block_on(measure_status(&base, body.clone(), 200));
        accepted.push(row(
            &format!("{n} $ref properties"),
            "accepted",
            body.len(),
            200,
            cpu,
        ));
    }
    let ratio = accepted[1] / accepted[0];
    if ratio > LINEAR_GUARD {
        println!("  FAIL: CPU per byte grew {ratio:.2}x with the schema (limit {LINEAR_GUARD}x)");
        failed = true;
    }
    let (_provider, base, _dir) = runtime.block_on(start_structured("{}".into()));
    for (name, schema) in bombs() {
        let body = answer_body(&schema);
        let cpu = runtime.block_on(measure_status(&base, body.clone(), 400));
        let per_byte = row(name, "refused", body.len(), 400, cpu);
        if per_byte > LINEAR_GUARD * accepted[0] {
            println!(
                "  FAIL: the refusal costs {:.2}x the accepted schema's CPU per byte (limit {LINEAR_GUARD}x)",
                per_byte / accepted[0]
            );
            failed = true;
        }
    }
    failed
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let counted = RequestLimits::default();
    let converted = RequestLimits {
        max_messages: 1 << 20,
        max_id_bytes: 4,
        ..RequestLimits::default()
    };
    let mut failed = false;
    println!(
        "{:<22} {:<10} {:>10} {:>7} {:>10} {:>9}",
        "route", "limits", "bytes", "status", "CPU ms", "ns/byte"
    );
    for (label, limits) in [("counted", counted), ("converted", converted)] {
        let (_provider, base, _dir) = runtime.block_on(start(limits, None, "never asked".into()));
        for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
            let per_byte: Vec<f64> = [400_000, 3_200_000]
                .into_iter()
                .map(|size| {
                    let body = Bytes::from(body(path, calls_for(path, size)).to_string());
                    let m = runtime.block_on(measure(&base, path, body));
                    let per_byte = m.cpu.as_nanos() as f64 / m.bytes as f64;
                    println!(
                        "{path:<22} {label:<10} {:>10} {:>7} {:>10.2} {:>9.2}",
                        m.bytes,
                        m.status,
                        m.cpu.as_secs_f64() * 1e3,
                        per_byte
                    );
                    per_byte
                })
                .collect();
            let ratio = per_byte[1] / per_byte[0];
            if ratio > LINEAR_GUARD {
                println!(
                    "  FAIL: CPU per byte grew {ratio:.2}x with the body (limit {LINEAR_GUARD}x)"
                );
                failed = true;
            }
        }
    }
    failed |= schemas(&runtime);
    if failed {
        std::process::exit(1);
    }
}
