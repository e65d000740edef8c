//! Connection limits: 10,000 idle and half-open connections neither stop a good client nor outlive their
//! timeouts nor delay shutdown; the connection cap sheds with 503 in the client's protocol (HTTP/1.1 or HTTP/2),
//! and refusing a flood costs a bounded number of brief refusals; bodies time out with 408; the in-flight caps
//! answer 503 / 429 with `Retry-After` at once.
//!
//! The 10,000 client sockets live in a child process (this test binary re-run as the ignored
//! `holder_process` test), so each process needs only 10,000 descriptors.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{get, request, Harness};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_chat::test_server::Reply;
use tower_chat_gateway::connection::raise_open_files_limit;
use tower_chat_testkit::{within, BOUND};

const CONNECTIONS: usize = 10_000;
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);
const HALF_A_REQUEST: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";

/// How many connections this machine lets a process hold (both processes need one descriptor per socket).
fn connections() -> usize {
    let limit = raise_open_files_limit().unwrap_or(1024) as usize;
    let wanted = std::env::var("TEST_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CONNECTIONS);
    let n = wanted.min(limit.saturating_sub(512));
    if n < CONNECTIONS {
        eprintln!(
            "open-files limit {limit}: testing with {n} connections instead of {CONNECTIONS}"
        );
    }
    n
}

/// Not a test of its own: the child process holding the sockets. Opens `HOLDER_COUNT` connections to
/// `HOLDER_ADDR` (every second one sends half a request head; a health check every 256 keeps the listen
/// backlog from overflowing), prints `READY`, then waits until the server
/// has closed every one (bounded) and prints `CLOSED <count> <earliest ms> <latest idle ms> <latest half-open
/// ms>`, each time measured from that socket's own last byte sent.
#[tokio::test]
#[ignore = "run by the connection tests as a child process"]
async fn holder_process() {
    let Ok(addr) = std::env::var("HOLDER_ADDR") else {
        return;
    };
    let count: usize = std::env::var("HOLDER_COUNT").unwrap().parse().unwrap();
    raise_open_files_limit();
    // Each socket is watched from the moment it is open, so a close is timed when it happens.
    let mut waits = Vec::with_capacity(count);
    for i in 0..count {
        let mut socket = TcpStream::connect(&addr).await.expect("connect");
        if i % 2 == 1 {
            socket.write_all(HALF_A_REQUEST).await.unwrap();
        }
        let since = Instant::now();
        waits.push(tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let closed = tokio::time::timeout(BOUND, async {
                loop {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            closed.ok().map(|()| (i % 2 == 1, since.elapsed()))
        }));
        if i % 256 == 255 {
            // The server accepts in order: once a request on a fresh connection is answered, every earlier
            // connection has been accepted. Without this pacing the listen backlog overflows, and the kernel
            // completes a dropped connection only when it retransmits its SYN-ACK, seconds later, which
            // would count against the server's timeouts here.
            let mut probe = TcpStream::connect(&addr).await.expect("connect");
            probe
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut answer = Vec::new();
            probe.read_to_end(&mut answer).await.unwrap();
        }
    }
    println!("READY");
    let mut closed = Vec::with_capacity(count);
    for wait in waits {
        closed.extend(wait.await.unwrap());
    }
    let latest = |half_open: bool| {
        closed
            .iter()
            .filter(|(h, _)| *h == half_open)
            .map(|(_, t)| t.as_millis())
            .max()
            .unwrap_or_default()
    };
    let earliest = closed.iter().map(|(_, t)| t.as_millis()).min();
    println!(
        "CLOSED {} {} {} {}",
        closed.len(),
        earliest.unwrap_or_default(),
        latest(false),
        latest(true)
    );
}

struct Holder {
    child: tower_chat_testkit::ProcessGroup,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Holder {
    /// Start the child and wait until its sockets are open.
    fn start(addr: std::net::SocketAddr, count: usize) -> Holder {
        let mut child = tower_chat_testkit::ProcessGroup::spawn(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &common::test_path(module_path!(), "holder_process"),
                    "--ignored",
                    "--nocapture",
                    "--quiet",
                ])
                .env("HOLDER_ADDR", addr.to_string())
                .env("HOLDER_COUNT", count.to_string())
                .stdout(Stdio::piped()),
        )
        .unwrap();
        let stdout = child.stdout.take();
        let mut holder = Holder {
            child,
            lines: BufReader::new(stdout.unwrap()).lines(),
        };
        loop {
            let line = holder.lines.next().expect("holder exited early").unwrap();
            if line == "READY" {
                return holder;
            }
        }
    }

    /// `(closed, earliest, latest idle, latest half-open)` once the child saw every socket closed (or gave up).
    fn closed(&mut self) -> (usize, Duration, Duration, Duration) {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("CLOSED ") {
                let v: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                return (
                    v[0] as usize,
                    Duration::from_millis(v[1]),
                    Duration::from_millis(v[2]),
                    Duration::from_millis(v[3]),
                );
            }
        }
        panic!("the holder ended without a CLOSED line");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn gateway(tweak: impl FnOnce(&mut tower_chat_gateway::Config)) -> Harness {
    Harness::start(
        |_, _| Reply::openai_text("hello there"),
        |config| {
            config.connections.header_timeout = HEADER_TIMEOUT;
            config.connections.idle_timeout = IDLE_TIMEOUT;
            config.connections.max_connections = 20_000;
            config.shutdown_timeout = Duration::from_secs(60);
            tweak(config);
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_and_half_open_connections_neither_stop_a_good_client_nor_delay_shutdown()
{
    let n = connections();
    let gw = gateway(|_| {}).await;
    let addr = gw.addr;
    let holder = tokio::task::spawn_blocking(move || Holder::start(addr, n))
        .await
        .unwrap();
    // All of them open (their deadlines are seconds away): a good client is still served.
    assert_eq!(get(&gw.url("/healthz")).await.status, 200);
    let answer = gw.chat(&request(false, "hi")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"],
        "hello there"
    );
    let (closed, earliest, idle, half_open) = tokio::task::spawn_blocking(move || {
        let mut holder = holder;
        holder.closed()
    })
    .await
    .unwrap();
    eprintln!(
        "{n} connections: {closed} closed by the server, the first after {earliest:?}, the last idle one \
         after {idle:?}, the last half-open one after {half_open:?}"
    );
    // The exact deadlines are the connection module's paused-clock tests; here every socket is closed by the
    // server within the holder's bound, which the default idle timeout (60 s) would exceed.
    assert_eq!(closed, n, "connections the server never closed");

    // Again, and this time shut down while they are open. (One test, not two: two sets of 10,000 would
    // need twice the descriptors in this process.)
    let mut gw = gw;
    let holder = tokio::task::spawn_blocking(move || Holder::start(addr, n))
        .await
        .unwrap();
    gw.shutdown();
    // The drain time is 60 s, longer than the bound: the idle timeout ends the drain.
    within("the shutdown", gw.server.take().unwrap())
        .await
        .unwrap()
        .unwrap();
    let (closed, _, _, _) = tokio::task::spawn_blocking(move || {
        let mut holder = holder;
        holder.closed()
    })
    .await
    .unwrap();
    assert_eq!(closed, n);
}

#[tokio::test]
async fn over_the_connection_cap_new_connections_get_503() {
    let gw = gateway(|c| c.connections.max_connections = 20).await;
    let held = fill(gw.addr, 20).await;
    let mut extra = TcpStream::connect(gw.addr).await.unwrap();
    let mut answer = Vec::new();
    extra.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    // A slot freed is a slot usable.
    drop(held);
    let healthy = loop {
        let answer = get(&gw.url("/healthz")).await;
        if answer.status == 200 {
            break answer;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(healthy.status, 200);
}

/// Fill a gateway's `max_connections` places with idle connections, returned to be held; once a request on the
/// first is answered, every later one has been accepted too.
async fn fill(addr: std::net::SocketAddr, max_connections: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..max_connections {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = held[0].read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    held
}

/// An HTTP/2 client (prior knowledge) over the cap: the answer to its request, and its connection's end.
async fn http2_over_the_cap(
    addr: std::net::SocketAddr,
) -> (
    common::Answer,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("HTTP/2 handshake");
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(common::http2_request(
            addr,
            "POST",
            "/v1/chat/completions",
            &[("content-type", "application/json")],
            &request(false, "hi").to_string(),
        ))
        .await
        .expect("an HTTP/2 answer");
    assert_eq!(response.version(), http::Version::HTTP_2);
    (common::read(response).await, connection)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_connection_cap_an_http2_client_gets_an_http2_503_and_goaway() {
    // The held connections must not idle out while the test runs.
    let gw = gateway(|c| {
        c.connections.max_connections = 2;
        c.connections.idle_timeout = Duration::from_secs(600);
    })
    .await;
    let _held = fill(gw.addr, 2).await;
    let (answer, connection) = http2_over_the_cap(gw.addr).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(answer.headers["retry-after"], "1");
    assert_eq!(
        answer.json()["error"]["code"],
        "overloaded",
        "{}",
        answer.body
    );
    assert_eq!(
        answer.json()["error"]["type"],
        "server_error",
        "{}",
        answer.body
    );
    // The gateway says GOAWAY after the answer and closes the connection.
    within("the refused connection closing", connection)
        .await
        .unwrap()
        .expect("an orderly close");
    assert!(
        gw.provider.requests().is_empty(),
        "a refused request reaches no upstream"
    );
}

/// A flood of connections over the cap that never send a byte: a bounded number is answered (each within a
/// short deadline), the rest closed at once; none stays open, and once the refusals are over an HTTP/2 client
/// over the cap is answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_over_the_connection_cap_are_bounded_in_number_and_time() {
    const FLOOD: usize = 200;
    // The held connection must not idle out while the test runs: only the refusals' end may let a client in.
    let gw = gateway(|c| {
        c.connections.max_connections = 1;
        c.connections.idle_timeout = Duration::from_secs(600);
    })
    .await;
    let _held = fill(gw.addr, 1).await;
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(TcpStream::connect(gw.addr).await.unwrap());
    }
    // Every one is closed by the gateway, answered or not; the client keeps its socket open, so only the
    // gateway's deadline ends an answered refusal.
    let outcomes = flood.into_iter().map(|mut socket| async move {
        let mut answer = Vec::new();
        let closed = within(
            "a refused connection closing",
            socket.read_to_end(&mut answer),
        )
        .await;
        let answered = !answer.is_empty();
        if answered {
            let answer = String::from_utf8(answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
            assert!(
                closed.is_ok(),
                "an answered refusal ends orderly: {closed:?}"
            );
        }
        (answered, socket)
    });
    let outcomes = futures_util::future::join_all(outcomes).await;
    let answered = outcomes.iter().filter(|(answered, _)| *answered).count();
    assert!(answered > 0, "no refusal was answered");
    assert!(
        answered < FLOOD,
        "all {FLOOD} refusals were answered at once: their number is not bounded"
    );
    // The silent refusals still open hold their places until their deadline; then an HTTP/2 client over the
    // cap is answered.
    let answer = within("a refusal answered after the flood", async {
        loop {
            let tcp = TcpStream::connect(gw.addr).await.unwrap();
            let handshake = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(tcp),
            );
            if let Ok((mut sender, connection)) = handshake.await {
                tokio::spawn(connection);
                let request = common::http2_request(gw.addr, "GET", "/healthz", &[], "");
                if let Ok(response) = sender.send_request(request).await {
                    break common::read(response).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    drop(outcomes);
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closed() {
    let gw = gateway(|c| c.connections.body_timeout = Duration::from_millis(300)).await;
    let mut socket = TcpStream::connect(gw.addr).await.unwrap();
    // The gateway's own address as the Host: a keyless gateway answers no other.
    socket
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\n\r\n{{\"model\":",
                gw.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), socket.read_to_end(&mut answer))
        .await
        .expect("the server neither answered nor closed")
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(gw.provider.requests().is_empty());
}

/// Open a streaming request and return once its head arrived (the request is then in flight).
async fn open_stream(addr: std::net::SocketAddr, key: Option<&str>) -> (TcpStream, String) {
    common::open_request(addr, key, "/v1/chat/completions", &request(true, "hi")).await
}

#[tokio::test]
async fn over_the_in_flight_caps_requests_are_shed_at_once() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "a:sk-a\nb:sk-b\n").unwrap();
    let path = keys.path().to_owned();
    let gw = Harness::start(common::hanging, move |c| {
        c.api_keys_file = Some(path);
        c.connections.max_in_flight = 3;
        c.connections.max_in_flight_per_key = 2;
    })
    .await;
    let (_a1, head) = open_stream(gw.addr, Some("sk-a")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_a2, head) = open_stream(gw.addr, Some("sk-a")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_, head) = open_stream(gw.addr, Some("sk-a")).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        head.contains("retry-after: 1") && head.contains("too_many_in_flight"),
        "{head}"
    );
    let (b1, head) = open_stream(gw.addr, Some("sk-b")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_, head) = open_stream(gw.addr, Some("sk-b")).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(
        head.contains("retry-after: 1") && head.contains("overloaded"),
        "{head}"
    );
    // Health checks are not requests in flight.
    assert_eq!(get(&gw.url("/healthz")).await.status, 200);
    // A stream that ends gives its slot back.
    drop(b1);
    let answer = loop {
        let (socket, head) = open_stream(gw.addr, Some("sk-b")).await;
        if !head.starts_with("HTTP/1.1 503") {
            break (socket, head);
        }
        tokio::task::yield_now().await;
    };
    assert!(answer.1.starts_with("HTTP/1.1 200"), "{}", answer.1);
}

/// A connection whose socket takes only a few kilobytes at a time: a client that reads slowly, or not at all.
async fn slow_reader(addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Send a chat request on `socket` and read until the end of the answer's head; returns the head and the
/// `content-length` (if any). The Host is the gateway's own address: a keyless gateway answers no other.
async fn ask(socket: &mut TcpStream, body: &serde_json::Value) -> (String, Vec<u8>) {
    let body = body.to_string();
    let host = socket.peer_addr().unwrap();
    socket
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the head");
        received.extend_from_slice(&buf[..n]);
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).into_owned();
            return (head, received[end + 4..].to_vec());
        }
    }
}

/// Eight megabytes of text in one answer.
const LARGE: usize = 8 << 20;

/// A large answer handed over whole is written to a slow reader to its last byte: neither the idle timeout
/// nor the header timeout runs while its bytes are still going out, however long that takes.
#[tokio::test]
async fn a_large_answer_reaches_a_slow_reader_whole_past_the_idle_timeout() {
    let gw = Harness::start(
        |_, _| Reply::openai_text(&"x".repeat(LARGE)),
        |c| {
            c.connections.idle_timeout = Duration::from_millis(200);
            c.connections.header_timeout = Duration::from_millis(200);
            c.connections.write_timeout = Duration::from_secs(60);
        },
    )
    .await;
    let mut socket = slow_reader(gw.addr).await;
    let (head, mut body) = ask(&mut socket, &request(false, "hi")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a whole answer has a length")
        .parse()
        .unwrap();
    assert!(length > LARGE);
    // The reader stalls for several idle and header timeouts: the pause is what a slow reader does, not a wait
    // for the server. The answer's body was handed to the connection long before its bytes can all go out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut buf = vec![0u8; 64 * 1024];
    while body.len() < length {
        let n = tokio::time::timeout(Duration::from_secs(30), socket.read(&mut buf))
            .await
            .expect("the rest of the answer arrives")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    assert_eq!(body.len(), length, "the answer was cut");
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .len(),
        LARGE
    );
}

/// A client that stops reading a stream is cut off after the write timeout: its connection is closed and its
/// in-flight slot given back, so it holds neither the answer's memory nor a slot for long.
#[tokio::test]
async fn a_client_that_stops_reading_loses_its_stream_and_its_slot_after_the_write_timeout() {
    let gw = Harness::start(
        |_, index| {
            if index > 0 {
                return Reply::openai_text("small");
            }
            // Eight megabytes in 64 KiB deltas: far more than the socket buffers hold.
            let delta = "x".repeat(64 * 1024);
            let mut chunks = vec![
                json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            ];
            for _ in 0..LARGE / delta.len() {
                chunks.push(json!({"choices": [{"index": 0, "delta": {"content": delta}}]}));
            }
            chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
            Reply::openai_stream(&chunks)
        },
        |c| {
            c.connections.write_timeout = Duration::from_millis(300);
            c.connections.max_in_flight = 1;
        },
    )
    .await;
    let mut stalled = slow_reader(gw.addr).await;
    let (head, _) = ask(&mut stalled, &request(true, "hi")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The stream holds the one in-flight slot until the server gives up on its reader.
    let freed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let answer = gw.chat(&request(false, "hi")).await;
            if answer.status != 503 {
                break answer;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the stalled stream gives its slot back");
    assert_eq!(freed.status, 200, "{}", freed.body);
    // What the stalled client still finds on its socket ends without the stream's end.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stalled.read_to_end(&mut rest))
        .await
        .expect("the connection was closed");
    let rest = String::from_utf8_lossy(&rest);
    assert!(!rest.contains("[DONE]"), "the stream was not cut");
}

#[tokio::test]
async fn a_body_that_drips_past_its_deadline_is_408_however_short_its_gaps() {
    let gw = gateway(|c| c.connections.body_timeout = Duration::from_millis(600)).await;
    let mut socket = TcpStream::connect(gw.addr).await.unwrap();
    socket
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\n\r\n{{",
                gw.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // A byte every 150 ms: no gap comes near the timeout, but the body never ends in time.
    let (mut reader, mut writer) = socket.into_split();
    let drip = tokio::spawn(async move {
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            if writer.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(8), reader.read_to_end(&mut answer))
        .await
        .expect("the gateway let a dripping body run past its deadline")
        .unwrap();
    drip.abort();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(gw.provider.requests().is_empty());
}
