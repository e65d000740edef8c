//! A scripted provider over real loopback HTTP: the test double for OpenAI-compatible (Chat Completions and
//! Responses) and Anthropic servers (feature `test-server`).
//!
//! Each request is recorded and answered by a handler that returns a [`Reply`]: a status, headers and a body
//! made of [`Part`]s — bytes, pauses, an abrupt connection abort, or a hang — so tests can reproduce what real
//! providers do on the wire, split at any byte.
//!
//! ```
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let provider = ScriptedProvider::start(|_request, _index| Reply::openai_text("Hello!")).await;
//! assert!(provider.base_url().starts_with("http://127.0.0.1:"));
//! # }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

#[cfg(feature = "bedrock")]
mod bedrock;
mod folded;
mod gemini;
mod reply;
mod responses;

#[cfg(feature = "bedrock")]
pub use bedrock::{
    bedrock_event, bedrock_exception, check_bedrock_signature, parse_sigv4_authorization,
    SigV4Authorization,
};
pub use reply::{Part, RecordedRequest, Reply};
pub use responses::ScriptedReasoning;

/// The URL in `var` (`DATABASE_URL`, `REDIS_URL`) of a local service a test needs, or `None` after printing a
/// visible `SKIPPED` line, so the suite still passes on a fresh machine without the service. When `CI` is set a
/// missing URL fails the test instead: CI never passes by skipping.
pub fn service_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set, but CI is: the tests that need it must run in CI")
        }
        _ => {
            eprintln!("SKIPPED: {var} is not set; the tests that need it did not run");
            println!("SKIPPED: {var} is not set; the tests that need it did not run");
            None
        }
    }
}

type Handler = dyn Fn(&RecordedRequest, usize) -> Reply + Send + Sync;

/// A scripted provider listening on `127.0.0.1`, speaking HTTP/1.1 and HTTP/2 (h2c). Stops when dropped.
pub struct ScriptedProvider {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    connections: Arc<AtomicUsize>,
    /// How many [`Part::Hang`] replies have seen their client go away.
    hangups: Arc<tokio::sync::watch::Sender<usize>>,
    secure: bool,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ScriptedProvider {
    /// Start on a free loopback port; `handler` gets each request and its 0-based position.
    pub async fn start(
        handler: impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::start_with(handler, None).await
    }

    /// Start speaking HTTPS with this server configuration (HTTP/2 or HTTP/1.1 by ALPN, as its
    /// `alpn_protocols` allow); the base URL is then `https://localhost:PORT/v1`.
    pub async fn start_tls(
        handler: impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static,
        tls: Arc<tokio_rustls::rustls::ServerConfig>,
    ) -> Self {
        Self::start_with(handler, Some(tokio_rustls::TlsAcceptor::from(tls))).await
    }

    async fn start_with(
        handler: impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = requests.clone();
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = connections.clone();
        let hangups = Arc::new(tokio::sync::watch::Sender::new(0));
        let hung_up = hangups.clone();
        let secure = tls.is_some();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let recorded = recorded.clone();
                let hung_up = hung_up.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        serve(request, handler.clone(), recorded.clone(), hung_up.clone())
                    });
                    let server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = match tls {
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) => {
                                server.serve_connection(TokioIo::new(stream), service).await
                            }
                            Err(_) => return,
                        },
                        None => server.serve_connection(TokioIo::new(stream), service).await,
                    };
                });
            }
        });
        ScriptedProvider {
            addr,
            requests,
            connections,
            hangups,
            secure,
            task,
        }
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1` (or `https://localhost:PORT/v1` when started with TLS), the base URL to give a
    /// leaf.
    pub fn base_url(&self) -> String {
        if self.secure {
            format!("https://localhost:{}/v1", self.addr.port())
        } else {
            format!("http://{}/v1", self.addr)
        }
    }

    /// How many TCP connections were accepted so far (to check that clients reuse pooled connections).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Wait until `count` replies ending in [`Part::Hang`] have seen their client go away (the client dropped
    /// the response body or closed the connection): a signal to wait on instead of a sleep.
    pub async fn hangups(&self, count: usize) {
        let mut seen = self.hangups.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = seen.wait_for(|&hangups| hangups >= count).await;
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for ScriptedProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type ReplyBody = StreamBody<tokio_stream_shim::Receiver>;

async fn serve(
    request: Request<Incoming>,
    handler: Arc<Handler>,
    recorded: Arc<Mutex<Vec<RecordedRequest>>>,
    hangups: Arc<tokio::sync::watch::Sender<usize>>,
) -> Result<Response<ReplyBody>, Infallible> {
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let record = RecordedRequest {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        raw_body: bytes,
        version: parts.version,
    };
    let index = {
        let mut all = recorded.lock().expect("requests lock");
        all.push(record.clone());
        all.len() - 1
    };
    let mut reply = handler(&record, index);
    if let Some(whole) = reply.whole.take() {
        // Gemini and Bedrock ask to stream by their URL's method, the others by a body field.
        let streaming = record.body.get("stream").and_then(Value::as_bool) == Some(true)
            || record.path.ends_with(":streamGenerateContent")
            || record.path.ends_with("/converse-stream");
        if !streaming {
            // The JSON reply's own content type, then the script's other headers and its delay.
            let mut json = Reply::json(200, whole);
            json.headers.extend(
                reply
                    .headers
                    .into_iter()
                    .filter(|(name, _)| !name.eq_ignore_ascii_case("content-type")),
            );
            json.delay = reply.delay;
            reply = json;
        }
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        for part in reply.parts {
            match part {
                Part::Bytes(bytes) => {
                    if tx.send(Ok(Frame::data(bytes))).await.is_err() {
                        return;
                    }
                }
                Part::Pause(pause) => tokio::time::sleep(pause).await,
                Part::Abort => {
                    let _ = tx.send(Err(std::io::Error::other("scripted abort"))).await;
                    return;
                }
                Part::Hang => {
                    tx.closed().await;
                    hangups.send_modify(|hangups| *hangups += 1);
                    return;
                }
            }
        }
    });
    let mut response = Response::new(StreamBody::new(tokio_stream_shim::Receiver(rx)));
    *response.status_mut() = reply.status;
    for (name, value) in reply.headers {
        response.headers_mut().append(
            http::HeaderName::try_from(name).expect("header name"),
            http::HeaderValue::try_from(value).expect("header value"),
        );
    }
    Ok(response)
}

/// How a scripted in-process stream delivers its events: the two shapes every layer should be tested on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Every event ready at once, as a non-streaming provider call gives them.
    AllAtOnce,
    /// Each event after a `Pending` poll (the stream wakes itself), as a network stream gives them.
    OneByOne,
}

/// A [`ChatStream`](crate::ChatStream) of scripted items, for an in-process stand-in of a model (a
/// `tower::service_fn` returning it) when testing a layer without HTTP.
pub fn scripted_stream(
    delivery: Delivery,
    items: Vec<Result<crate::ChatEvent, crate::ChatError>>,
) -> crate::ChatStream {
    match delivery {
        Delivery::AllAtOnce => Box::pin(futures_util::stream::iter(items)),
        Delivery::OneByOne => Box::pin(OneByOne {
            items: items.into(),
            held: false,
        }),
    }
}

struct OneByOne {
    items: std::collections::VecDeque<Result<crate::ChatEvent, crate::ChatError>>,
    held: bool,
}

impl futures_core::Stream for OneByOne {
    type Item = Result<crate::ChatEvent, crate::ChatError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if !self.held {
            self.held = true;
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        self.held = false;
        std::task::Poll::Ready(self.items.pop_front())
    }
}

/// A `Stream` over an mpsc receiver, without pulling in tokio-stream.
mod tokio_stream_shim {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use hyper::body::Frame;
    use tokio::sync::mpsc;

    pub(super) struct Receiver(pub(super) mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

    impl futures_core::Stream for Receiver {
        type Item = Result<Frame<Bytes>, std::io::Error>;

        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.poll_recv(cx)
        }
    }
}
