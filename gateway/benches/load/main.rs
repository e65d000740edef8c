//! What the gateway adds under load, measured by `wrk` beside the same load sent straight to
//! the upstream, in one run:
//!
//! ```text
//! cargo bench -p tower-chat-gateway --bench load            # needs wrk on PATH (Debian: apt-get install wrk)
//! LOAD_CLIENT=h2load cargo bench -p tower-chat-gateway --bench load   # HTTP/1.1 and HTTP/2 (Debian: nghttp2-client)
//! LOAD_SECONDS=20 LOAD_CONNECTIONS="1 64" cargo bench -p tower-chat-gateway --bench load
//! ```
//!
//! The upstream is a minimal hyper server in this process answering every request with the same precomputed
//! bytes (a `chat.completion`, or 23 SSE chunks when the request asks to stream), so what is measured is the
//! gateway, not a test double's bookkeeping. The gateway runs in-process with its default settings (SQLite file
//! in a temporary directory, fail-closed, every upstream call recorded), on its own two-worker runtime. For each
//! concurrency, non-streamed then streamed, `wrk` (one thread, `--latency`) drives `LOAD_SECONDS` (default 10)
//! seconds against the upstream directly and then through the gateway, and the table gives p50/p99 latency and
//! requests per second of both and the difference. Everything listens on 127.0.0.1 and stops by itself.
//!
//! Instructions per request (callgrind, which counts every thread of this process: client, gateway, upstream):
//!
//! ```text
//! cargo bench -p tower-chat-gateway --bench load --no-run
//! LOAD_COUNT_REQUESTS=100 LOAD_COUNT_TARGET=gateway valgrind --tool=callgrind target/release/deps/load-<hash> --bench
//! ```
//!
//! sends `LOAD_COUNT_REQUESTS` plain requests (`LOAD_COUNT_STREAM=1`: streamed) one after another on one
//! keep-alive connection, after one warm-up request, to the gateway or (`LOAD_COUNT_TARGET=direct`) straight to
//! the upstream, and checks every answer. `LOAD_COUNT_FORMAT=messages|responses` sends the gateway the same
//! question as an Anthropic Messages or OpenAI Responses request instead of Chat Completions. The gateway's
//! cost per request is the slope of the gateway's counts between two request counts minus the direct slope;
//! wrk is not needed in this mode.
//!
//! Media: `LOAD_COUNT_IMAGE_BYTES=N` makes every counted request a Chat Completions question about one image of
//! `N` bytes sent as a `data:image/png;base64,` URL (pseudo-random bytes: the gateway never decodes images),
//! a different image in each request so that each is stored once, and raises the body limit to fit it;
//! `LOAD_COUNT_PROVIDER=anthropic` puts the gateway in front of an Anthropic upstream (plain requests only),
//! which gets the image as a Messages `image` block. The cost per MiB is the difference of the gateway's
//! per-request costs at two sizes, divided by the MiB between them.
//!
//! The gateway, its client and its upstream allocate with jemalloc, the gateway binary's allocator, through a
//! counter: count mode ends by printing `allocations: N`, the blocks the whole process asked for; allocations
//! per request are its slope between two request counts, like the instructions.
//!
//! Profiles: `LOAD_PROFILE=proxy` runs the gateway without call records or tracing (`--no-records
//! --no-tracing`), a plain proxy beside the default profile (every call recorded and traced).
//!
//! Where the instructions go, by concern (edge, wire parse, tracing, …): run count mode under callgrind with
//! a real output file and group its inclusive costs with `gateway/benches/load_profile.py` (its docs give the
//! commands).
//!
//! HTTP/2: `LOAD_COUNT_HTTP2=1` sends the counted requests to the gateway as streams of one HTTP/2 connection
//! (h2c, prior knowledge) instead of HTTP/1.1 requests; the upstream hop stays HTTP/1.1, so its slope is the
//! same direct slope. `LOAD_CLIENT=h2load` replaces `wrk` with `h2load` (Debian: nghttp2-client) and drives the
//! gateway over HTTP/1.1 (`--h1`) and over HTTP/2 (one stream at a time per connection) in one run, beside the
//! upstream over HTTP/1.1; `h2load` gives the mean and the slowest request, not percentiles.
//!
//! Response cache: `LOAD_CACHE=1` turns on the gateway's in-process cache (`[cache]`). The requests are
//! identical, so the warm-up request is the one miss and every counted (or wrk) request is a hit answered
//! without the upstream; the same run without it is the miss beside it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tower_chat::Blob;
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_gateway::{Config, Gateway, Provider};

#[cfg(not(target_env = "msvc"))]
mod allocations;
mod clients;

/// The gateway binary's allocator (`src/main.rs`), so the counts are the installed gateway's; counting the
/// blocks it hands out for count mode's allocations per request.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: allocations::Counting = allocations::Counting;

const MODEL: &str = "gpt-4o-mini";
pub(crate) const ANSWER_WORDS: usize = 20;

/// The upstream's answers, built once.
struct Answers {
    completion: Bytes,
    stream: Bytes,
    /// The same answer as an Anthropic Messages `message`, for requests to `/v1/messages`.
    message: Bytes,
}

fn answers() -> Answers {
    let words: Vec<String> = (0..ANSWER_WORDS).map(|i| format!("word{i} ")).collect();
    let completion = json!({
        "id": "chatcmpl-load", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": words.concat()}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": ANSWER_WORDS, "total_tokens": 12 + ANSWER_WORDS},
    });
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    events.extend(words.iter().map(|w| chunk(json!({"content": w}), None)));
    events.push(chunk(json!({}), Some("stop")));
    events.push(json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 1,
        "model": MODEL, "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": ANSWER_WORDS, "total_tokens": 12 + ANSWER_WORDS}}));
    let mut stream = String::new();
    for event in events {
        stream.push_str(&format!("data: {event}\n\n"));
    }
    stream.push_str("data: [DONE]\n\n");
    let message = json!({
        "id": "msg_load", "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "text", "text": words.concat()}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": ANSWER_WORDS},
    });
    Answers {
        completion: Bytes::from(completion.to_string()),
        stream: Bytes::from(stream),
        message: Bytes::from(message.to_string()),
    }
}

/// Serve `answers` on 127.0.0.1 until the runtime stops.
async fn upstream(answers: &'static Answers) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: Request<Incoming>| async move {
                        let anthropic = request.uri().path().ends_with("/messages");
                        let body = request.into_body().collect().await.map(|b| b.to_bytes());
                        let streamed = body.is_ok_and(|b| asks_to_stream(&b[..]));
                        let (content_type, bytes) = if anthropic {
                            ("application/json", answers.message.clone())
                        } else if streamed {
                            ("text/event-stream", answers.stream.clone())
                        } else {
                            ("application/json", answers.completion.clone())
                        };
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", content_type)
                                .body(Full::new(bytes))
                                .unwrap(),
                        )
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
    addr
}

/// Whether a request body asks to stream (`"stream":true`, as the gateway and `wrk`'s body write it).
fn asks_to_stream(body: &[u8]) -> bool {
    body.windows(13).any(|w| w == b"\"stream\":true")
}

/// The chat request every client sends.
pub(crate) fn request_body(stream: bool) -> String {
    json!({"model": MODEL, "stream": stream,
        "messages": [{"role": "user", "content": "Say twenty words."}]})
    .to_string()
}

/// The same question as an Anthropic Messages request.
fn messages_body(stream: bool) -> String {
    json!({"model": MODEL, "max_tokens": 256, "stream": stream,
        "messages": [{"role": "user", "content": "Say twenty words."}]})
    .to_string()
}

/// The same question as an OpenAI Responses request.
fn responses_body(stream: bool) -> String {
    json!({"model": MODEL, "stream": stream, "input": "Say twenty words."}).to_string()
}

/// Chat Completions requests carrying one image each, as a base64 `data:` URL.
struct ImageRequests {
    /// The image's base64, built once; each request overwrites its first characters.
    base64: String,
}

impl ImageRequests {
    fn new(size: usize) -> Self {
        assert!(size >= 12, "an image of at least 12 bytes");
        // xorshift64: incompressible bytes without a dependency.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let bytes: Vec<u8> = (0..size)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        ImageRequests {
            base64: Blob::new(bytes, "image/png").base64().to_owned(),
        }
    }

    /// Request `index`: the index's 16 decimal digits (base64 characters) replace the image's first 16, so
    /// every request carries different bytes of the same size.
    fn body(&self, index: usize) -> Bytes {
        let mut data = self.base64.clone();
        data.replace_range(..16, &format!("{index:016}"));
        Bytes::from(format!(
            r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":[{{"type":"text","text":"What is in this image?"}},{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{data}"}}}}]}}]}}"#
        ))
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing to run.
    if std::env::args().all(|a| a != "--bench") {
        return;
    }
    let count: Option<usize> = std::env::var("LOAD_COUNT_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok());
    let use_h2load = std::env::var("LOAD_CLIENT").is_ok_and(|c| c == "h2load");
    let (client, package) = if use_h2load {
        ("h2load", "nghttp2-client")
    } else {
        ("wrk", "wrk")
    };
    if count.is_none() && Command::new(client).arg("--version").output().is_err() {
        println!("skip: the gateway load bench needs {client} on PATH (Debian: apt-get install {package})");
        return;
    }
    let seconds: u64 = std::env::var("LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let concurrencies: Vec<usize> = std::env::var("LOAD_CONNECTIONS")
        .unwrap_or_else(|_| "1 64".into())
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect();
    let answers: &'static Answers = Box::leak(Box::new(answers()));
    let upstream_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream_addr = upstream_runtime.block_on(upstream(answers));
    let dir = tempfile::tempdir().unwrap();
    let gateway_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let image_bytes: Option<usize> = std::env::var("LOAD_COUNT_IMAGE_BYTES")
        .ok()
        .and_then(|n| n.parse().ok());
    let anthropic = std::env::var("LOAD_COUNT_PROVIDER").is_ok_and(|p| p == "anthropic");
    let mut config = Config::new(format!("http://{upstream_addr}/v1"));
    config.no_upstream_key = true;
    if anthropic {
        config.provider = Provider::Anthropic;
    }
    if let Some(size) = image_bytes {
        // The base64 text is 4/3 of the image.
        config.body_limit = config.body_limit.max(2 * size);
    }
    config.db = dir.path().join("gateway.db");
    config.shutdown_timeout = Duration::from_secs(1);
    // `LOAD_PROFILE=proxy`: no call records and no tracing (`--no-records --no-tracing`), the gateway as a
    // plain proxy; the default profile is the installed gateway's defaults.
    let profile = std::env::var("LOAD_PROFILE").unwrap_or_else(|_| "default".into());
    match profile.as_str() {
        "default" => {}
        "proxy" => {
            config.record_calls = false;
            config.trace_calls = false;
        }
        other => panic!("LOAD_PROFILE is `default` or `proxy`, not `{other}`"),
    }
    // `LOAD_CACHE=1`: the response cache in process; every request after the first identical one is a hit.
    if std::env::var("LOAD_CACHE").is_ok_and(|c| c == "1") {
        config.file =
            ConfigFile::parse("[cache]\nttl_seconds = 3600\n", "load.toml").expect("[cache]");
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (gateway_addr, served) = gateway_runtime.block_on(async {
        let gateway = Gateway::new(&config).await.expect("gateway");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = tokio::spawn(gateway.serve(listener, async {
            let _ = stopped.await;
        }));
        (addr, served)
    });
    let direct = format!("http://{upstream_addr}/v1/chat/completions");
    let through = format!("http://{gateway_addr}/v1/chat/completions");
    if let Some(requests) = count {
        let to_gateway = std::env::var("LOAD_COUNT_TARGET").map_or(true, |t| t != "direct");
        let stream = std::env::var("LOAD_COUNT_STREAM").is_ok_and(|s| s == "1");
        assert!(
            !(stream && anthropic),
            "the Anthropic upstream answers plain requests only"
        );
        let addr = if to_gateway {
            gateway_addr
        } else {
            upstream_addr
        };
        let client_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let format = std::env::var("LOAD_COUNT_FORMAT").unwrap_or_else(|_| "chat".into());
        let (path, body) = match (to_gateway, format.as_str()) {
            (true, "messages") => ("/v1/messages", messages_body(stream)),
            (true, "responses") => ("/v1/responses", responses_body(stream)),
            _ => ("/v1/chat/completions", request_body(stream)),
        };
        let body = Bytes::from(body);
        let images = image_bytes.map(ImageRequests::new);
        let http2 = std::env::var("LOAD_COUNT_HTTP2").is_ok_and(|h| h == "1");
        assert!(
            to_gateway || !http2,
            "the upstream speaks HTTP/1.1 only: LOAD_COUNT_HTTP2 counts the gateway"
        );
        client_runtime.block_on(send_one_after_another(
            addr,
            http2,
            path,
            |index| match &images {
                Some(images) => images.body(index),
                None => body.clone(),
            },
            requests + 1,
        ));
        println!(
            "sent {requests} (+1 warm-up) {}{} requests to the {} ({profile} profile)",
            if stream { "streamed" } else { "plain" },
            image_bytes.map_or(String::new(), |n| format!(" {n}-byte image")),
            if to_gateway { "gateway" } else { "upstream" }
        );
    } else if use_h2load {
        clients::run_h2load(&direct, &through, dir.path(), seconds, &concurrencies);
    } else {
        clients::run_wrk(&direct, &through, dir.path(), seconds, &concurrencies);
    }
    let _ = stop.send(());
    // The gateway's own shutdown flushes the persistence layer: records still in its buffer are written, and
    // that work belongs in the count.
    let _ = gateway_runtime.block_on(served);
    gateway_runtime.shutdown_timeout(Duration::from_secs(2));
    upstream_runtime.shutdown_timeout(Duration::from_secs(1));
    // After the shutdown's flush, so that the records' allocations are counted like their instructions.
    #[cfg(not(target_env = "msvc"))]
    if count.is_some() {
        println!("allocations: {}", allocations::count());
    }
}

/// One client connection, HTTP/1.1 or HTTP/2 (prior knowledge).
enum Connection {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Connection {
    async fn open(addr: SocketAddr, http2: bool) -> Self {
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        socket.set_nodelay(true).unwrap();
        let io = TokioIo::new(socket);
        if http2 {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            Connection::Http2(sender)
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(connection);
            Connection::Http1(sender)
        }
    }

    async fn send(&mut self, request: Request<Full<Bytes>>) -> Response<Incoming> {
        match self {
            Connection::Http1(sender) => {
                sender.ready().await.unwrap();
                sender.send_request(request).await.unwrap()
            }
            Connection::Http2(sender) => {
                sender.ready().await.unwrap();
                sender.send_request(request).await.unwrap()
            }
        }
    }
}

/// `requests` chat requests (`body(index)`), each sent after the previous answer was read whole, on one
/// HTTP/1.1 connection or as streams of one HTTP/2 connection.
async fn send_one_after_another(
    addr: SocketAddr,
    http2: bool,
    path: &str,
    mut body: impl FnMut(usize) -> Bytes,
    requests: usize,
) {
    let mut connection = Connection::open(addr, http2).await;
    for index in 0..requests {
        let mut request = Request::post(path).header("content-type", "application/json");
        // HTTP/2 carries the authority in the URI; HTTP/1.1 in `host`.
        request = if http2 {
            request.uri(format!("http://{addr}{path}"))
        } else {
            request.header("host", addr.to_string())
        };
        let request = request.body(Full::new(body(index))).unwrap();
        let response = connection.send(request).await;
        assert_eq!(response.status(), 200);
        let answer = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            answer.windows(6).any(|w| w == b"word19"),
            "an answer without the last word: {}",
            String::from_utf8_lossy(&answer)
        );
    }
}
