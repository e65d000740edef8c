//! What media requests leave in the gateway's memory: the installed binary (`tower-chat-gateway`, release, its
//! jemalloc) in front of an upstream on loopback, sent `MEDIA_RSS_REQUESTS` (default 20) chat requests one after
//! another, each carrying `MEDIA_RSS_MIB` (default 32, the default `--max-media-bytes`) of images as base64
//! `data:` URLs — two images of half that each, pseudo-random and different in every request, so the store keeps
//! each. The process's RSS is read after each answer, then every 10 s for `MEDIA_RSS_IDLE_SECS` (default 60)
//! with no requests at all.
//!
//! ```sh
//! cargo bench -p tower-chat-gateway --bench media_rss
//! ```
//!
//! The gateway runs with its defaults but for the upstream (`--upstream http://127.0.0.1:<port>/v1
//! --no-upstream-key`) and a SQLite file in a temporary directory. The upstream reads each request whole, keeps
//! nothing of it, and answers one `chat.completion`. Everything listens on 127.0.0.1 and stops by itself.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const COMPLETION: &str = r#"{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Two images."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#;

/// An upstream that reads each request whole and answers [`COMPLETION`].
async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                    let _ = request.into_body().collect().await;
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(COMPLETION.as_bytes())))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
    addr
}

/// `VmRSS` and `VmHWM` (its peak) of a process, in MiB.
fn rss(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `len` pseudo-random bytes behind a PNG signature, different for each `seed`.
fn image(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// A chat request asking about two images of `each` bytes.
fn body(each: usize, request: u64) -> Bytes {
    let mut text = String::from(
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"What are these?"}"#,
    );
    for n in 0..2 {
        let blob = tower_chat::Blob::new(image(each, request * 2 + n), "image/png");
        text.push_str(r#",{"type":"image_url","image_url":{"url":"data:image/png;base64,"#);
        text.push_str(blob.base64());
        text.push_str(r#""}}"#);
    }
    text.push_str("]}]}");
    Bytes::from(text)
}

/// POST `body` to the gateway's Chat Completions route; the status.
async fn post(gateway: SocketAddr, body: Bytes) -> u16 {
    let stream = tokio::net::TcpStream::connect(gateway).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::post("/v1/chat/completions")
        .header("host", gateway.to_string())
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    status
}

/// The gateway binary, killed when dropped.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let requests = setting("MEDIA_RSS_REQUESTS", 20);
    let mib = setting("MEDIA_RSS_MIB", 32);
    let idle = setting("MEDIA_RSS_IDLE_SECS", 60);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let upstream = upstream().await;
        let dir = tempfile::tempdir().unwrap();
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
            .arg("--listen")
            .arg(addr.to_string())
            .args(["--upstream", &format!("http://{upstream}/v1"), "--no-upstream-key"])
            .arg("--db")
            .arg(dir.path().join("gateway.db"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("the tower-chat-gateway binary starts");
        let gateway = Gateway(child);
        let pid = gateway.0.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "the gateway does not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // One small request first, so lazily built state (pools, statement caches) counts as idle.
        assert_eq!(post(addr, body(1024, u64::MAX / 4)).await, 200);
        let (before, _) = rss(pid);
        let each = (mib << 20) as usize / 2;
        let mut after_each = Vec::new();
        let mut body_bytes = 0;
        for request in 0..requests {
            let body = body(each, request);
            body_bytes = body.len();
            let status = post(addr, body).await;
            assert_eq!(status, 200, "request {request}");
            after_each.push(rss(pid).0);
        }
        let (_, peak) = rss(pid);
        let mut idle_samples = Vec::new();
        for at in (10..=idle).step_by(10) {
            tokio::time::sleep(Duration::from_secs(10)).await;
            idle_samples.push(format!("{at} s {:.1}", rss(pid).0));
        }
        let slope = match after_each.as_slice() {
            [first, .., last] => (last - first) / (after_each.len() - 1) as f64,
            _ => 0.0,
        };
        println!(
            "{requests} requests of {:.1} MB ({mib} MiB of images each), one after another: RSS before {before:.1} \
             MiB; after each (MiB) {}; peak {peak:.1} MiB; {slope:+.1} MiB a request from the first to the last; \
             then idle (MiB): {}",
            body_bytes as f64 / 1e6,
            after_each
                .iter()
                .map(|r| format!("{r:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            idle_samples.join(", ")
        );
        drop(gateway);
    });
}
