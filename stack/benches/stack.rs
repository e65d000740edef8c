//! The whole stack against a raw hyper client, one tool conversation at a time or many at once.
//!
//! A conversation: a question after `STACK_HISTORY` earlier messages (default 10); the model calls
//! `STACK_PARALLEL` tools at once (default 1) in each of `STACK_ROUNDS - 1` rounds (default 2 rounds: one tool
//! round, then the answer), then answers in 30 words, streamed (`STACK_STREAM=1`, the default: 33 SSE events) or
//! as one JSON completion (`STACK_STREAM=0`). `STACK_CONCURRENT` conversations run at a time (default 1), all in
//! one task on one thread: the concurrent workload is `STACK_CONCURRENT=32 STACK_HISTORY=2`, whose `raw` peer
//! finds SSE events with `memchr` instead of the core's decoder (what a hand-written client tuned for many
//! streams would do). The scripted OpenAI-compatible server is this binary run again with
//! `STACK_SERVE=1` in a child process, so an instruction count under `valgrind --tool=callgrind` (which does not
//! follow children by default) is the client's work alone: HTTP, JSON both ways, the loop, the layers, the SQLite
//! write and its thread.
//!
//! The variants (`VARIANTS`):
//! - `raw`: a hyper client and a hand-written loop, typed structs keeping what the leaf keeps
//!   (`benches/support/raw_openai.rs`, shared with the core's `leaf` bench): the limit;
//! - `loop`: `FunctionInvocationLayer` over `OpenAiChat`;
//! - `loop_tracing` (`TracingLayer`, no subscriber), `loop_approval` (`ApprovalLayer`, in-memory, no tool
//!   gated), `loop_persistence` (`PersistenceLayer` inside the loop, SQLite file, defaults: fail-closed,
//!   one record per model call): the loop plus each layer alone;
//! - `full`: tracing with a subscriber at `INFO` writing to a discarding writer, approval, the loop and
//!   persistence.
//!
//! Every conversation checks the answer it got. The layered variants are boxed in a `BoxChatService` (one boxed
//! call per conversation, the same for each of them).
//!
//! Modes:
//! - `cargo bench -p tower-chat-stack --bench stack`: criterion, every variant, the configuration above (an
//!   iteration is one conversation, or `STACK_CONCURRENT` at once);
//! - `STACK_COUNT_VARIANT=<variant> STACK_COUNT_CONVERSATIONS=N`: N conversations of one variant after one
//!   warm-up conversation, then exit: run under callgrind twice (two values of N), the slope is the cost of one
//!   conversation (`stack/benches/count.sh` prints the whole table); `STACK_COUNT_INFO_SUBSCRIBER=1` installs the
//!   `full` variant's subscriber for any variant (what the subscriber costs over `loop_tracing`);
//!   `STACK_NO_TIMEOUTS=1` builds the leaf without its connect, first-byte and idle deadlines (what they cost: the
//!   raw client has none);
//! - `STACK_INTERLEAVE_ROUNDS=R`: wall clock, every variant in each of R rounds in a rotating order; prints the
//!   median time per conversation and the median of the per-round ratios to `raw` (a ratio taken within a round
//!   is steady on a shared machine where speed drifts over minutes).

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use criterion::Criterion;
use futures_util::StreamExt;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde_json::{json, Value};
use tower::{ServiceBuilder, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::transport::Timeouts;
use tower_chat::{BoxChatService, ChatRequest, ChatStreamExt, ConversationId, Message};
use tower_chat_stack::approval::ApprovalLayer;
use tower_chat_stack::persistence::{PersistenceLayer, SqliteStore};
use tower_chat_stack::tools::{tool_json, FunctionInvocationLayer};
use tower_chat_stack::tracing::TracingLayer;

#[path = "../../benches/support/raw_openai.rs"]
mod raw_openai;
use raw_openai::{raw_round_trip_split, RawClient, RawParse, RawSplit};

/// The variants, in the order tables print them; `raw` first (every ratio is to it).
const VARIANTS: [&str; 6] = [
    "raw",
    "loop",
    "loop_tracing",
    "loop_approval",
    "loop_persistence",
    "full",
];

const MODEL: &str = "scripted-model";

/// The model's final answer: 30 words, one streamed chunk each.
const ANSWER: &str = "It is four degrees in Oslo with light snow, and the sum you asked for is forty two; \
                      both values come from the lookup tool that ran during this conversation just now.";

/// The shape of one conversation, from the environment (the server child gets the same variables).
#[derive(Clone, Copy, Debug)]
struct Shape {
    rounds: usize,
    parallel: usize,
    history: usize,
    stream: bool,
    concurrent: usize,
}

impl Shape {
    fn from_env() -> Shape {
        let number = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
                .max(1)
        };
        Shape {
            rounds: number("STACK_ROUNDS", 2),
            parallel: number("STACK_PARALLEL", 1),
            history: std::env::var("STACK_HISTORY")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(10),
            stream: std::env::var("STACK_STREAM").map_or(true, |v| v != "0"),
            concurrent: number("STACK_CONCURRENT", 1),
        }
    }

    /// How `raw` finds SSE events: with `memchr` in the concurrent workload, with the core's decoder otherwise
    /// (the peer the one-at-a-time figures were taken against).
    fn raw_split(&self) -> RawSplit {
        if self.concurrent > 1 {
            RawSplit::Memchr
        } else {
            RawSplit::Decoder
        }
    }

    /// The earlier messages: a system prompt, then user and assistant turns.
    fn history(&self) -> Vec<(&'static str, String)> {
        let mut messages = vec![("system", "You are a helpful assistant.".to_owned())];
        for i in 1..self.history {
            let role = if i % 2 == 1 { "user" } else { "assistant" };
            messages.push((
                role,
                format!("Earlier message number {i} of this conversation."),
            ));
        }
        messages.truncate(self.history);
        messages.push(("user", "Weather in Oslo, and what is 21 + 21?".to_owned()));
        messages
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The scripted server (child process).

/// The leaf's deadlines: the defaults, or none with `STACK_NO_TIMEOUTS`.
fn leaf_timeouts() -> Timeouts {
    if std::env::var_os("STACK_NO_TIMEOUTS").is_some() {
        Timeouts {
            connect: None,
            first_byte: None,
            idle: None,
        }
    } else {
        Timeouts::default()
    }
}

/// `STACK_SERVE=1`: serve until stdin closes, after printing the base URL.
fn serve(shape: Shape) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let provider = ScriptedProvider::start(move |request, _| reply(shape, request)).await;
        println!("{}", provider.base_url());
        std::io::stdout().flush().unwrap();
        tokio::task::spawn_blocking(|| {
            let mut rest = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut rest);
        })
        .await
        .unwrap();
    });
}

/// Tool calls until `rounds - 1` rounds are answered, then the answer.
fn reply(shape: Shape, request: &RecordedRequest) -> Reply {
    let tool_results = request.body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let round = tool_results / shape.parallel;
    let stream = request.body["stream"].as_bool().unwrap_or(false);
    if round + 1 < shape.rounds {
        let calls: Vec<(String, String)> = (0..shape.parallel)
            .map(|i| {
                (
                    format!("call_{round}_{i}"),
                    format!(r#"{{"q":"key {round}.{i}"}}"#),
                )
            })
            .collect();
        if stream {
            let calls: Vec<(&str, &str, &str)> = calls
                .iter()
                .map(|(id, arguments)| (id.as_str(), "lookup", arguments.as_str()))
                .collect();
            Reply::openai_tool_calls(&calls)
        } else {
            let calls: Vec<Value> = calls
                .iter()
                .map(|(id, arguments)| {
                    json!({"id": id, "type": "function",
                    "function": {"name": "lookup", "arguments": arguments}})
                })
                .collect();
            completion(
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                "tool_calls",
            )
        }
    } else if stream {
        Reply::openai_text(ANSWER)
    } else {
        completion(json!({"role": "assistant", "content": ANSWER}), "stop")
    }
}

fn completion(message: Value, finish_reason: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}}),
    )
}

/// The server child; it exits when this is dropped (its stdin closes).
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    base_url: String,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("STACK_SERVE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("http://"), "server child said {line:?}");
        Server {
            stdin: child.stdin.take(),
            child,
            base_url: line.trim().to_owned(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The clients.

/// What the `lookup` tool answers, in every variant.
fn lookup(arguments: &Value) -> String {
    format!("value of {}", arguments["q"].as_str().unwrap_or("?"))
}

/// A raw request body, serialized straight from borrowed parts.
#[derive(Serialize)]
struct RawRequest<'a> {
    model: &'a str,
    messages: &'a [Value],
    tools: &'a Value,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

/// Everything the variants need, built once.
struct Fixture {
    shape: Shape,
    raw_client: RawClient,
    url: String,
    raw_history: Vec<Value>,
    raw_tools: Value,
    history: Vec<Message>,
    stacks: Vec<BoxChatService>,
    // Held for the stacks' lifetime.
    _server: Server,
    _store_dir: tempfile::TempDir,
}

impl Fixture {
    async fn start(shape: Shape) -> Fixture {
        let server = Server::start();
        let leaf = OpenAiChat::builder()
            .base_url(server.base_url.clone())
            .api_key("sk-bench")
            .model(MODEL)
            .timeouts(leaf_timeouts())
            .build()
            .unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(store_dir.path().join("chat.db"))
            .await
            .unwrap();
        let persistence = || PersistenceLayer::new(store.clone());
        let tool_loop = || {
            let lookup = tool_json(
                "lookup",
                "Look a key up",
                json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
                |arguments: Value, _ctx| async move { Ok::<_, String>(lookup(&arguments)) },
            );
            FunctionInvocationLayer::new()
                .tool(lookup)
                .unwrap()
                .max_rounds(64)
        };
        let stacks = vec![
            BoxChatService::new(
                ServiceBuilder::new()
                    .layer(tool_loop())
                    .service(leaf.clone()),
            ),
            BoxChatService::new(
                ServiceBuilder::new()
                    .layer(TracingLayer::new())
                    .layer(tool_loop())
                    .service(leaf.clone()),
            ),
            BoxChatService::new(
                ServiceBuilder::new()
                    .layer(ApprovalLayer::new())
                    .layer(tool_loop())
                    .service(leaf.clone()),
            ),
            BoxChatService::new(
                ServiceBuilder::new()
                    .layer(tool_loop())
                    .layer(persistence())
                    .service(leaf.clone()),
            ),
            BoxChatService::new(
                ServiceBuilder::new()
                    .layer(TracingLayer::new())
                    .layer(ApprovalLayer::new())
                    .layer(tool_loop())
                    .layer(persistence())
                    .service(leaf),
            ),
        ];
        let history = shape.history();
        Fixture {
            shape,
            raw_client: Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>(),
            url: format!("{}/chat/completions", server.base_url),
            raw_history: history
                .iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
            raw_tools: json!([{"type": "function", "function": {"name": "lookup",
                "description": "Look a key up",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]),
            history: history
                .into_iter()
                .map(|(role, content)| match role {
                    "system" => Message::system(content),
                    "assistant" => Message::assistant(content),
                    _ => Message::user(content),
                })
                .collect(),
            stacks,
            _server: server,
            _store_dir: store_dir,
        }
    }

    /// Conversations `first..first + count` by `variant`, `shape.concurrent` of them at a time.
    async fn conversations(&self, variant: usize, first: usize, count: usize) {
        if self.shape.concurrent == 1 {
            for n in first..first + count {
                self.conversation(variant, n).await;
            }
            return;
        }
        futures_util::stream::iter(first..first + count)
            .for_each_concurrent(self.shape.concurrent, |n| self.conversation(variant, n))
            .await;
    }

    /// One whole conversation by `variant`; `n` names it (its conversation id).
    async fn conversation(&self, variant: usize, n: usize) {
        if variant == 0 {
            return self.raw_conversation().await;
        }
        let request = ChatRequest::new(self.history.clone())
            .stream(self.shape.stream)
            .with_extension(ConversationId::new(format!("conversation-{n}")));
        let response = self.stacks[variant - 1]
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), ANSWER);
        black_box(response);
    }

    /// The hand-written loop: POST, parse, run the tools, append, again until the model answers.
    async fn raw_conversation(&self) {
        let mut messages = self.raw_history.clone();
        loop {
            let body = serde_json::to_vec(&RawRequest {
                model: MODEL,
                messages: &messages,
                tools: &self.raw_tools,
                stream: self.shape.stream,
                stream_options: self.shape.stream.then(|| json!({"include_usage": true})),
            })
            .unwrap();
            let (answer, _) = raw_round_trip_split(
                &self.raw_client,
                &self.url,
                Bytes::from(body),
                self.shape.stream,
                RawParse::SameFields,
                self.shape.raw_split(),
            )
            .await;
            if answer.finish.as_deref() != Some("tool_calls") {
                assert_eq!(answer.text, ANSWER);
                black_box(answer);
                return;
            }
            let calls: Vec<Value> = answer
                .calls
                .iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
            for (id, _, arguments) in &answer.calls {
                let arguments: Value = serde_json::from_str(arguments).unwrap();
                messages.push(
                    json!({"role": "tool", "tool_call_id": id, "content": lookup(&arguments)}),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Modes.

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The subscriber of the `full` variant: `INFO` and up, formatted, written nowhere.
fn discarding_subscriber() -> tracing::Dispatch {
    tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish(),
    )
}

fn variant_index(name: &str) -> usize {
    VARIANTS
        .iter()
        .position(|v| *v == name)
        .unwrap_or_else(|| panic!("unknown variant {name}; one of {VARIANTS:?}"))
}

/// `STACK_COUNT_VARIANT`: one warm-up round of conversations (one, or `STACK_CONCURRENT` at once: every pooled
/// connection opened), then N, for callgrind.
fn count(variant: &str) {
    let conversations: usize = std::env::var("STACK_COUNT_CONVERSATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let index = variant_index(variant);
    if variant == "full" || std::env::var_os("STACK_COUNT_INFO_SUBSCRIBER").is_some() {
        tracing::dispatcher::set_global_default(discarding_subscriber()).unwrap();
    }
    let runtime = runtime();
    let shape = Shape::from_env();
    runtime.block_on(async {
        let fixture = Fixture::start(shape).await;
        fixture.conversations(index, 0, shape.concurrent).await;
        fixture
            .conversations(index, shape.concurrent, conversations)
            .await;
    });
    eprintln!("{variant}: {conversations} conversations of {shape:?}");
}

/// `STACK_INTERLEAVE_ROUNDS`: interleaved wall clock.
fn interleave(rounds: usize) {
    let runtime = runtime();
    let shape = Shape::from_env();
    // Enough for every concurrent conversation to run twice.
    let conversations_per_run = 10.max(2 * shape.concurrent);
    let fixture = runtime.block_on(Fixture::start(shape));
    let subscriber = discarding_subscriber();
    let mut next = 0;
    let mut run = |variant: usize| {
        let start = std::time::Instant::now();
        let mut work = || {
            runtime.block_on(fixture.conversations(variant, next, conversations_per_run));
            next += conversations_per_run;
        };
        if VARIANTS[variant] == "full" {
            tracing::dispatcher::with_default(&subscriber, work);
        } else {
            work();
        }
        start.elapsed().as_secs_f64() * 1e6 / conversations_per_run as f64
    };
    for variant in 0..VARIANTS.len() {
        run(variant); // warm-up
    }
    let mut times = vec![Vec::with_capacity(rounds); VARIANTS.len()];
    for round in 0..rounds {
        for k in 0..VARIANTS.len() {
            let variant = (round + k) % VARIANTS.len();
            times[variant].push(run(variant));
        }
    }
    let median = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    println!("{rounds} interleaved rounds of {conversations_per_run} conversations per variant, {shape:?}");
    println!(
        "{:<18} {:>22} {:>22}",
        "variant", "median µs/conversation", "median ratio to raw"
    );
    for (variant, name) in VARIANTS.iter().enumerate() {
        let ratios = times[variant]
            .iter()
            .zip(&times[0])
            .map(|(t, raw)| t / raw)
            .collect();
        println!(
            "{name:<18} {:>22.1} {:>22.3}",
            median(times[variant].clone()),
            median(ratios)
        );
    }
}

fn criterion_benches() {
    let mut criterion = Criterion::default().configure_from_args();
    let runtime = runtime();
    let shape = Shape::from_env();
    let fixture = Arc::new(runtime.block_on(Fixture::start(shape)));
    let subscriber = discarding_subscriber();
    let mut group = criterion.benchmark_group("tool_conversation");
    let mut next = 0;
    for (variant, name) in VARIANTS.iter().enumerate() {
        group.bench_function(*name, |b| {
            // One iteration: one conversation, or one round of `STACK_CONCURRENT` at once.
            let mut iteration = || {
                runtime.block_on(fixture.conversations(variant, next, shape.concurrent));
                next += shape.concurrent;
            };
            if *name == "full" {
                tracing::dispatcher::with_default(&subscriber, || b.iter(&mut iteration));
            } else {
                b.iter(&mut iteration);
            }
        });
    }
    group.finish();
    criterion.final_summary();
}

fn main() {
    if std::env::var_os("STACK_SERVE").is_some() {
        return serve(Shape::from_env());
    }
    if let Ok(variant) = std::env::var("STACK_COUNT_VARIANT") {
        return count(&variant);
    }
    if let Some(rounds) = std::env::var("STACK_INTERLEAVE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return interleave(rounds);
    }
    criterion_benches();
}
