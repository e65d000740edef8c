//! Soak: 10,000 concurrent streaming requests through the gateway to a slow upstream.
//! Ignored (it takes minutes and needs ~25,000 file descriptors per process); run it with
//!
//! ```sh
//! cargo test -p tower-chat-gateway --test soak -- --ignored --nocapture ten_thousand
//! ```
//!
//! The gateway runs in a child process (this test binary re-run as the ignored `gateway_process` test), so its
//! RSS is the gateway's alone: the clients and the upstream live in this process. The upstream sends each stream's
//! first words, then holds every stream until all of them are open at once (a signal, not a sleep), then
//! finishes them. Asserted: every stream completes with the whole answer, every call is recorded in the store
//! (counted in the SQLite file after the gateway stopped), peak RSS above idle is at most 64 KiB per open
//! stream, and RSS is back within 25% of its idle value once the load is over.
//!
//! The allocator is the one the installed gateway uses (`src/main.rs`): jemalloc with background threads, which
//! give freed pages back to the system on their own timer, and the thread-cache cap of `.cargo/config.toml`.
//!
//! The gateway speaks HTTP/2 to the upstream (h2c, prior knowledge, as vLLM offers it): one upstream
//! connection for all streams. Over HTTP/1.1 each stream needs an upstream connection of its own, so the
//! gateway holds two descriptors per stream, and this machine's hard limit (20,000, no `CAP_SYS_RESOURCE` to
//! raise it) stops below 10,000 streams; `SOAK_UPSTREAM_HTTP1=1 SOAK_STREAMS=9900` runs that variant. The stack
//! is the gateway's own (`stores` + `stack` + `Gateway::with_stack`: tracing, persistence, approvals, tool
//! loop); only the leaf differs from what `Gateway::new` builds, by its HTTP/2 switch.
//!
//! `SOAK_STREAMS=N` runs with another count. Traffic goes to 127.0.0.1 only.

#![cfg(not(target_env = "msvc"))]

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Part, Reply};
use tower_chat::transport::Timeouts;
use tower_chat_gateway::{Gateway, Upstream};
use tower_chat_persistence::{SpendQuery, SqliteStore, Store};

/// The gateway binary's allocator, so the child process measures what the installed gateway does.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const STREAMS: usize = 10_000;
/// Requests completed before the idle RSS is taken, so lazily built state (pools, statement caches, the
/// runtime's buffers) counts as idle rather than as load.
const WARM_UP: usize = 200;
/// Clients between connecting and their first streamed words at any time: the ramp stays within the listen
/// backlog (a dropped SYN is retried only after a second).
const RAMP: usize = 256;
/// The memory budget per open stream.
const BYTES_PER_STREAM: u64 = 64 * 1024;
/// The upstream's answer: the client sees `soak-answer ` while held, `words done` after the release.
const ANSWER: &str = "soak-answer words done";
/// Bounds so that a regression fails instead of hanging.
const RAMP_LIMIT: Duration = Duration::from_secs(900);
const DRAIN_LIMIT: Duration = Duration::from_secs(300);
/// jemalloc gives freed pages back within seconds; the store forgets the conversations it cached for its next
/// writes 60–120 s after the last record (`RELEASE_CACHES_AFTER`); the pooled upstream connection, with the
/// state of the 10,000 streams it carried, closes 90–180 s after its last stream (`pool_idle_timeout` of the
/// leaf's client).
const SETTLE_LIMIT: Duration = Duration::from_secs(240);

/// `SOAK_UPSTREAM_HTTP1=1`: HTTP/1.1 to the upstream, one connection per stream.
fn http1() -> bool {
    std::env::var_os("SOAK_UPSTREAM_HTTP1").is_some()
}

fn streams() -> usize {
    std::env::var("SOAK_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(STREAMS)
}

/// Both processes hold a socket per stream, two over HTTP/1.1 (gateway: client side and upstream side; this
/// process: the clients and the upstream's connections). Raise the hard limit too when allowed
/// (`CAP_SYS_RESOURCE`), else use what the hard limit gives.
fn raise_fd_limit(wanted: u64) -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: Some(wanted),
        maximum: Some(wanted.max(now.maximum.unwrap_or(u64::MAX))),
    };
    if setrlimit(Resource::Nofile, raised).is_err() {
        tower_chat_gateway::connection::raise_open_files_limit();
    }
    getrlimit(Resource::Nofile).current.unwrap_or(1024)
}

/// jemalloc's own figures, in bytes: what the program holds (`allocated`), the pages of the slabs holding it
/// (`active`; the difference is free space in slabs still partly used), the allocator's bookkeeping
/// (`metadata`) and the pages it maps (`resident`).
fn malloc_stats() -> [u64; 4] {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The figures are cached: a new epoch refreshes them.
    epoch::advance().expect("jemalloc epoch");
    [
        stats::allocated::read(),
        stats::active::read(),
        stats::metadata::read(),
        stats::resident::read(),
    ]
    .map(|v| v.expect("jemalloc stats") as u64)
}

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes.
fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| {
                v.trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap()
                    * 1024
            })
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Not a test of its own: the gateway, run in a child process by the soak. Serves on 127.0.0.1 with the
/// upstream `SOAK_UPSTREAM` and the SQLite store `SOAK_DB`, prints `LISTENING <addr>`, and shuts down (flushing
/// the store) when its stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the soak as a child process"]
async fn gateway_process() {
    let Ok(upstream) = std::env::var("SOAK_UPSTREAM") else {
        return;
    };
    let streams = streams();
    raise_fd_limit(4 * streams as u64 + 4096);
    let mut config = tower_chat_gateway::Config::new(upstream.clone());
    config.db = std::env::var("SOAK_DB").unwrap().into();
    config.connections.max_connections = 2 * streams + 1024;
    config.connections.max_in_flight = 2 * streams + 1024;
    config.connections.max_in_flight_per_key = 2 * streams + 1024;
    config.shutdown_timeout = Duration::from_secs(60);
    // The gateway's own stack (tracing, persistence, approvals, tool loop) around the leaf
    // `Gateway::new` would build, except for HTTP/2 to the upstream (see the module docs). The first streams
    // wait for the last ones to open: the ramp, not the upstream, sets that wait.
    let timeouts = Timeouts {
        first_byte: Some(RAMP_LIMIT),
        idle: Some(RAMP_LIMIT),
        ..Timeouts::default()
    };
    let leaf = OpenAiChat::builder()
        .base_url(&upstream)
        .timeouts(timeouts)
        .http2_prior_knowledge(!http1())
        .build()
        .expect("leaf");
    let stores = tower_chat_gateway::stores(&config).await.expect("store");
    let stack = tower_chat_gateway::stack(
        &config,
        Upstream::OpenAi(leaf),
        tower_chat_gateway::StackOptions {
            persistence: Some(&stores.persistence),
            approvals: Some(&stores.approvals),
            ..Default::default()
        },
    )
    .expect("stack");
    let gateway = Gateway::with_stack(&config, stack).expect("gateway");
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(4096).unwrap();
    println!("LISTENING {}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    // Shut down when stdin closes; a `STATS` line is answered with the allocator's figures.
    let stdin_closed = async {
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {
                if line.trim() == "STATS" {
                    let [allocated, active, metadata, resident] = malloc_stats();
                    println!("STATS {allocated} {active} {metadata} {resident}");
                    std::io::stdout().flush().unwrap();
                }
                line.clear();
            }
        })
        .await;
    };
    gateway.serve(listener, stdin_closed).await.unwrap();
    // Records of the last calls may still sit in the writer's buffer.
    stores.persistence.flush().await.expect("flush");
    println!("STOPPED");
}

/// The slow upstream: every request gets `ANSWER` as an OpenAI stream; after the first write (the role and
/// the first word) it waits until `release` says `true`.
async fn upstream(release: watch::Receiver<bool>, received: Arc<AtomicUsize>) -> SocketAddr {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener: TcpListener = socket.listen(4096).unwrap();
    let addr = listener.local_addr().unwrap();
    let events: Vec<Bytes> = Reply::openai_text(ANSWER)
        .parts
        .into_iter()
        .filter_map(|p| match p {
            Part::Bytes(b) => Some(b),
            _ => None,
        })
        .collect();
    // Two writes per stream: the role and first word, then the rest. Sent as one small DATA frame per event,
    // 10,000 streams released at once trip h2's guard against floods of small frames (h2 0.4.20: frames under
    // 256 bytes spend a per-connection budget until read; the client answers GOAWAY ENHANCE_YOUR_CALM
    // "too_many_data_frames", which ends every stream on the connection).
    let parts: Arc<Vec<Bytes>> = Arc::new(vec![
        events[..2].concat().into(),
        events[2..].concat().into(),
    ]);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (release, received, parts) = (release.clone(), received.clone(), parts.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let (release, received, parts) =
                        (release.clone(), received.clone(), parts.clone());
                    async move {
                        let _ = request.into_body().collect().await;
                        received.fetch_add(1, Ordering::SeqCst);
                        let body = futures_util::stream::unfold(
                            (0usize, release),
                            move |(i, mut release)| {
                                let parts = parts.clone();
                                async move {
                                    if i == 1 {
                                        let _ = release.wait_for(|go| *go).await;
                                    }
                                    let part = parts.get(i)?.clone();
                                    Some((Ok::<_, Infallible>(Frame::data(part)), (i + 1, release)))
                                }
                            },
                        );
                        let mut response = Response::new(UnsyncBoxBody::new(StreamBody::new(body)));
                        response.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static("text/event-stream"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let io = TokioIo::new(stream);
                let served = if http1() {
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                } else {
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .max_concurrent_streams(u32::MAX)
                        .serve_connection(io, service)
                        .await
                };
                if let Err(error) = served {
                    eprintln!("upstream connection failed: {error:?}");
                }
            });
        }
    });
    addr
}

/// One streaming request on a fresh connection: `opened` is called once the first words arrived; the whole
/// answer is then read to the end and checked.
async fn client(addr: SocketAddr, n: usize, opened: impl FnOnce()) -> Result<(), String> {
    let body = serde_json::json!({
        "model": "test-model",
        "messages": [{"role": "user", "content": format!("soak {n}")}],
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut socket = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    socket
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::with_capacity(2048);
    let mut buf = [0u8; 4096];
    let mut opened = Some(opened);
    loop {
        let read = socket
            .read(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..read]);
        if opened.is_some() && contains(&answer, b"soak-answer") {
            (opened.take().unwrap())();
        }
    }
    let text = String::from_utf8_lossy(&answer);
    if !text.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "status: {}",
            text.lines().next().unwrap_or_default()
        ));
    }
    for needle in ["soak-answer", "words", "done", "[DONE]"] {
        if !text.contains(needle) {
            return Err(format!(
                "answer without {needle:?}: {}",
                &text[text.len().saturating_sub(300)..]
            ));
        }
    }
    if opened.is_some() {
        return Err("the first words never arrived".into());
    }
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes, ~25,000 file descriptors per process; see the module docs"]
async fn ten_thousand_streams_hold_their_memory_budget_and_lose_nothing() {
    let n = streams();
    let limit = raise_fd_limit(4 * n as u64 + 4096);
    let sockets_per_stream = if http1() { 2 } else { 1 };
    assert!(
        limit >= sockets_per_stream * n as u64 + 256,
        "open-files limit {limit} is too low for {n} streams (run as root or raise the hard limit)"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("soak.db");
    let (release, held) = watch::channel(true);
    let received = Arc::new(AtomicUsize::new(0));
    let upstream_addr = upstream(held, received.clone()).await;

    let mut child = tower_chat_testkit::ProcessGroup::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "gateway_process",
                "--ignored",
                "--nocapture",
                "--quiet",
            ])
            .env("SOAK_UPSTREAM", format!("http://{upstream_addr}/v1"))
            .env("SOAK_DB", &db)
            .env("SOAK_STREAMS", n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    )
    .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr: SocketAddr = loop {
        let line = lines.next().expect("gateway exited early").unwrap();
        if let Some(addr) = line.strip_prefix("LISTENING ") {
            break addr.parse().unwrap();
        }
    };

    let mut stdin = child.stdin.take().unwrap();
    let mut stats = || {
        writeln!(stdin, "STATS").unwrap();
        stdin.flush().unwrap();
        let line = lines
            .by_ref()
            .map(Result::unwrap)
            .find(|l| l.starts_with("STATS "))
            .expect("gateway exited");
        let v: Vec<u64> = line[6..].split(' ').map(|x| x.parse().unwrap()).collect();
        format!(
            "allocated {:.1} MiB, active {:.1} MiB, metadata {:.1} MiB, resident {:.1} MiB",
            mib(v[0]),
            mib(v[1]),
            mib(v[2]),
            mib(v[3])
        )
    };

    // Warm up with the upstream not holding, then take the idle RSS.
    let warm = futures_util::future::join_all((0..WARM_UP).map(|i| client(addr, i, || {}))).await;
    assert!(warm.iter().all(Result::is_ok), "warm-up: {warm:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle, _) = rss(pid);
    let idle_stats = stats();

    // The load: the upstream holds every stream after its first words until all `n` are open.
    release.send_replace(false);
    let started = Instant::now();
    let ramp = Arc::new(Semaphore::new(RAMP));
    let open = Arc::new(AtomicUsize::new(0));
    let all_open = Arc::new(Notify::new());
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = ramp.clone().acquire_owned().await.unwrap();
        let (open, all_open) = (open.clone(), all_open.clone());
        tasks.push(tokio::spawn(async move {
            let mut permit = Some(permit);
            let result = client(addr, WARM_UP + i, || {
                drop(permit.take());
                if open.fetch_add(1, Ordering::SeqCst) + 1 == n {
                    all_open.notify_one();
                }
            })
            .await;
            drop(permit);
            result
        }));
    }
    let waited = tokio::time::timeout(RAMP_LIMIT, all_open.notified()).await;
    let ramp_took = started.elapsed();
    let (during, peak) = rss(pid);
    let during_stats = stats();
    assert!(
        waited.is_ok(),
        "only {} of {n} streams opened within {RAMP_LIMIT:?}",
        open.load(Ordering::SeqCst)
    );

    // Release them all and read every answer to its end.
    release.send_replace(true);
    let mut errors = Vec::new();
    let drained = tokio::time::timeout(DRAIN_LIMIT, async {
        for task in tasks {
            if let Err(error) = task.await.unwrap() {
                errors.push(error);
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "streams still open after {DRAIN_LIMIT:?}");
    let load_took = started.elapsed();

    // Wait (bounded) for the RSS to come back; the figure is the last sample.
    let settle = Instant::now();
    let mut after = rss(pid).0;
    let mut samples = Vec::new();
    while after > idle + idle / 4 && settle.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = rss(pid).0;
        samples.push(format!(
            "{:.0}s {:.1}",
            settle.elapsed().as_secs_f64(),
            mib(after)
        ));
    }
    let settled = settle.elapsed();
    eprintln!(
        "RSS while settling (MiB): {}",
        samples
            .iter()
            .step_by(10)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );

    // Where the rest is: memory still in use, or pages the allocator keeps?
    let after_stats = stats();

    // Stop the gateway (its store writer flushes on shutdown), then count the records.
    drop(stdin);
    let stopped = lines.any(|l| l.map(|l| l == "STOPPED").unwrap_or(false));
    let status = child.wait().unwrap();
    assert!(stopped && status.success(), "gateway: {status}");
    let store = SqliteStore::open(&db).await.unwrap();
    let spend = store.spend(&SpendQuery::default()).await.unwrap();

    let per_stream = peak.saturating_sub(idle) / n as u64;
    eprintln!(
        "soak: {n} streams (+{WARM_UP} warm-up), all open after {ramp_took:.1?}, done after {load_took:.1?}; \
         upstream requests {}; errors {}; records {} (output tokens {}); RSS idle {:.1} MiB, with all open \
         {:.1} MiB, peak {:.1} MiB ({} bytes = {:.1} KiB per stream above idle), after {:.1} MiB ({:+.1}% of idle) {settled:.1?} after the last stream ended\n  idle: {idle_stats}\n  all open: {during_stats}\n  after: {after_stats}",
        received.load(Ordering::SeqCst),
        errors.len(),
        spend.calls,
        spend.output_tokens,
        mib(idle),
        mib(during),
        mib(peak),
        per_stream,
        per_stream as f64 / 1024.0,
        mib(after),
        (after as f64 / idle as f64 - 1.0) * 100.0,
    );
    assert!(
        errors.is_empty(),
        "{} errors, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    let total = (n + WARM_UP) as u64;
    assert_eq!(spend.calls, total, "records lost");
    // Each completed answer carries the scripted usage (5 output tokens): no record is a partial one.
    assert_eq!(spend.output_tokens, total * 5, "records incomplete");
    assert!(
        per_stream <= BYTES_PER_STREAM,
        "{per_stream} bytes per open stream above idle (budget {BYTES_PER_STREAM})"
    );
    assert!(
        after <= idle + idle / 4,
        "RSS after the load {:.1} MiB, idle {:.1} MiB",
        mib(after),
        mib(idle)
    );
}
