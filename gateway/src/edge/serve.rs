//! Serving: the accept loop, HTTP/1.1 and HTTP/2 on one listener, and graceful shutdown.
//!
//! Each accepted connection is served by hyper-util's [`auto::Builder`]: HTTP/1.1, or HTTP/2 when the client
//! opens with the HTTP/2 preface (h2c with prior knowledge; TLS and ALPN are a proxy's business). hyper-util's
//! [`GracefulShutdown`] asks every connection to close after its current responses once the shutdown signal
//! comes, and tells when all have. Each request goes to [`Gateway::app`]: the router inside the edge middleware
//! ([`crate::edge::middleware`]), where the body limit and timeout are tower layers.
//!
//! Own code here is only the connection cap, at accept: over `--max-connections` a connection is answered
//! `503` with `Retry-After` and closed (no library counts connections before they are served). The answer
//! speaks the client's protocol: its first bytes are peeked, and a client that opened with the HTTP/2 preface
//! gets a real HTTP/2 `503` from hyper's HTTP/2 server (its first stream answered, then `GOAWAY`), any other
//! client (or one that sent nothing within half a second) the HTTP/1.1 answer. Refusing must stay cheap under a
//! flood: refusals take no place under `--max-connections`, at most [`REFUSALS_AT_ONCE`] are answered at once
//! (past that a connection over the cap is closed at once, unanswered), and each is given [`REFUSAL_DEADLINE`]
//! in all. The deadlines per connection (idle, slow head, stalled reader) are [`crate::edge::connection_deadlines`]'s.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tower::{Service, ServiceExt};

use crate::edge::connection_deadlines::{self, Activity, WatchedIo, HTTP2_PREFACE};
use crate::edge::in_flight::{ConnectionLimits, GuardedBody, PeerAddr};
use crate::telemetry::warning_throttle::WarnLimit;

/// How long the requests still in flight when the drain time is over get to write their `shutting_down` error
/// (their connections close after it); a client that does not read it loses it.
pub(crate) const FINAL_WORDS: Duration = Duration::from_secs(1);

/// The body of the answer to a connection over `max_connections`, in both protocols.
macro_rules! overloaded_json {
    () => {
        "{\"error\":{\"message\":\"too many open connections; retry later\",\"type\":\"server_error\",\
         \"code\":\"overloaded\",\"param\":null}}"
    };
}

/// The answer to an HTTP/1 connection over `max_connections`, written without reading the request.
const OVERLOADED: &[u8] = concat!(
    "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\n\
     connection: close\r\ncontent-length: 117\r\n\r\n",
    overloaded_json!()
)
.as_bytes();

/// Connections over `max_connections` being answered at once; past this they are closed unanswered, so a
/// flood of connections costs a bounded number of tasks and sockets beyond the cap.
const REFUSALS_AT_ONCE: usize = 64;

/// How long answering a connection over `max_connections` may take in all, from accept to close.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(2);

/// How long a refusal waits for the client's first bytes to tell HTTP/2 from HTTP/1. An HTTP/2 client sends its
/// preface as soon as it is connected; a client silent this long gets the HTTP/1 answer.
const FIRST_BYTES_WAIT: Duration = Duration::from_millis(500);

/// What a refused HTTP/1 client may still send while it reads the answer: read and dropped, so the close is an
/// orderly one after the answer rather than a reset (which unread bytes would cause) that could destroy it.
const REFUSAL_DRAIN: usize = 64 * 1024;

/// The service every connection calls: the router inside the edge middleware ([`Gateway::app`]).
pub(crate) trait App:
    Service<Request<Incoming>, Response = Response, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<A> App for A where
    A: Service<Request<Incoming>, Response = Response, Error = Infallible, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// Accept connections on `listener` and serve `app` on each until `shutdown` resolves; then stop accepting,
/// ask every connection to close after its current response, and return once all have closed.
pub(crate) async fn serve<A>(
    listener: TcpListener,
    app: A,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) where
    A: App,
{
    let max = limits
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let slots = Arc::new(Semaphore::new(max));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let builder = Arc::new(builder(&limits));
    let limits = Arc::new(limits);
    let graceful = GracefulShutdown::new();
    static ACCEPT_FAILED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 1);
    static SHED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 1);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    if let Some(suppressed) = ACCEPT_FAILED.admit(std::time::Instant::now()) {
                        tracing::warn!(%error, suppressed, "accept failed");
                    }
                    // Out of file descriptors (or similar): accepting again at once would spin.
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_millis(20)) => continue,
                    }
                }
            },
        };
        // SSE chunks are small writes; without TCP_NODELAY, Nagle's algorithm and delayed ACKs hold each one
        // back for tens of milliseconds.
        let (tcp, peer) = tcp;
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let connection = Connection {
                    peer,
                    app: app.clone(),
                    builder: builder.clone(),
                    limits: limits.clone(),
                    watcher: graceful.watcher(),
                    _slot: slot,
                };
                tokio::spawn(connection.serve(tcp));
            }
            Err(_) => {
                if let Some(suppressed) = SHED.admit(std::time::Instant::now()) {
                    tracing::warn!(
                        max,
                        suppressed,
                        "connection limit reached: shedding connections"
                    );
                }
                // Past the refusals already being answered the socket is dropped, closed unanswered.
                if let Ok(refusing) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REFUSAL_DEADLINE, refuse(tcp)).await;
                        drop(refusing);
                    });
                }
            }
        }
    }
    drop(listener);
    // Every connection is asked to close after its current responses; an idle or half-open one closes at once
    // or at its watchdog deadline.
    graceful.shutdown().await;
}

/// HTTP/1.1 and HTTP/2 with the gateway's settings.
fn builder(limits: &ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own head timer starts when it waits for a head, idle time included: a backstop behind the
    // watchdog, which tells idle and header time apart. (It waits for a head only once the last response has
    // been written, so it does not cut a slow reader.)
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout + limits.header_timeout);
    // hyper's HTTP/2 defaults bound a connection's streams (200 at once) and refuse a flood of streams the
    // client opens and resets at once (CVE-2023-44487) with GOAWAY; no keep-alive pings, which would keep an
    // idle connection busy past the idle timeout.
    builder.http2().timer(TokioTimer::new());
    builder
}

/// One accepted connection and what serving it needs.
struct Connection<A> {
    peer: std::net::SocketAddr,
    app: A,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: Arc<ConnectionLimits>,
    watcher: Watcher,
    /// A place under `--max-connections`, held until the connection has closed.
    _slot: OwnedSemaphorePermit,
}

impl<A: App> Connection<A> {
    async fn serve(self, tcp: TcpStream) {
        let Connection {
            peer,
            app,
            builder,
            limits,
            watcher,
            _slot,
        } = self;
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(WatchedIo::new(tcp, activity.clone()));
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |mut request: Request<Incoming>| {
                let guard = activity.begin();
                request.extensions_mut().insert(PeerAddr(peer));
                let app = app.clone();
                async move {
                    let response = app.oneshot(request).await.unwrap_or_else(|e| match e {});
                    Ok::<_, Infallible>(
                        response.map(|body| Body::new(GuardedBody::new(body, guard))),
                    )
                }
            })
        };
        let connection = watcher.watch(builder.serve_connection(io, service));
        connection_deadlines::watch(connection, &activity, &limits, peer).await;
    }
}

/// Answer a connection over `max_connections` with `503` in the protocol it speaks, and close it.
async fn refuse(tcp: TcpStream) {
    if speaks_http2(&tcp).await {
        refuse_http2(tcp).await;
    } else {
        refuse_http1(tcp).await;
    }
}

/// Whether the client opened with the HTTP/2 preface, from its first bytes left unread for the server that
/// answers. `false` for anything else, for a client that closed, and for one silent for [`FIRST_BYTES_WAIT`].
async fn speaks_http2(tcp: &TcpStream) -> bool {
    let mut first = [0u8; HTTP2_PREFACE.len()];
    let waited = tokio::time::sleep(FIRST_BYTES_WAIT);
    tokio::pin!(waited);
    loop {
        let n = tokio::select! {
            peeked = tcp.peek(&mut first) => match peeked {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            },
            () = &mut waited => return false,
        };
        if connection_deadlines::opens_http2(&first[..n]) {
            return true;
        }
        if !HTTP2_PREFACE.starts_with(&first[..n]) {
            return false;
        }
        // One or two bytes of the preface so far: peeking again at once would find the same ones.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
            () = &mut waited => return false,
        }
    }
}

/// hyper's HTTP/2 server answers the client's streams with `503`; after the first answer it says `GOAWAY`, and
/// the connection closes once the streams already opened are answered.
async fn refuse_http2(tcp: TcpStream) {
    let answered = Arc::new(Notify::new());
    let service = {
        let answered = answered.clone();
        hyper::service::service_fn(move |_: Request<Incoming>| {
            answered.notify_one();
            std::future::ready(Ok::<_, Infallible>(overloaded_response()))
        })
    };
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // A client may open a few streams before it sees the GOAWAY; each costs an answer, never more.
    builder.timer(TokioTimer::new()).max_concurrent_streams(8);
    let connection = builder.serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = answered.notified() => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// The HTTP/2 form of [`OVERLOADED`].
fn overloaded_response() -> Response {
    let mut response = Response::new(Body::from(overloaded_json!()));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

async fn refuse_http1(mut tcp: TcpStream) {
    if tcp.write_all(OVERLOADED).await.is_err() || tcp.shutdown().await.is_err() {
        return;
    }
    let mut drained = 0;
    let mut sink = [0u8; 4096];
    while drained < REFUSAL_DRAIN {
        match tcp.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overload_answer_is_well_formed() {
        let text = std::str::from_utf8(OVERLOADED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "overloaded");
        assert_eq!(
            body,
            serde_json::from_str::<serde_json::Value>(overloaded_json!()).unwrap()
        );
    }

    #[test]
    fn the_first_bytes_tell_http2_from_http1() {
        assert!(connection_deadlines::opens_http2(HTTP2_PREFACE));
        assert!(connection_deadlines::opens_http2(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0"
        ));
        assert!(connection_deadlines::opens_http2(b"PRI"));
        assert!(!connection_deadlines::opens_http2(b"PR"), "too few to tell");
        assert!(!connection_deadlines::opens_http2(b"POST / HTTP/1.1\r\n"));
        assert!(!connection_deadlines::opens_http2(b"PRI * HTTP/1.1\r\n"));
    }
}
