//! Serving connections with limits: how long a client may take to send a request head and a body, how long a
//! kept-alive connection may sit idle, how many connections may be open, and how many requests may be in
//! flight (overall and per caller), with load shedding (`503` + `Retry-After`) instead of stalling.
//!
//! Each connection has a watchdog. While no request is in flight and no response is being written it allows
//! `idle_timeout` from the moment the connection opened (or the last byte of its last response was written)
//! until the first byte of the next request, then `header_timeout` from that byte to the complete head; past
//! either the connection is closed. While a request is in flight its body must arrive within `body_timeout` of
//! the head (else `408`, connection closed); how long the response takes is not limited here (a slow upstream
//! is the upstream timeout's business), but a response the client stopped reading is: once a write has made no
//! progress for `write_timeout` (the client's receive window and the socket's send buffer are full), the
//! connection is closed with a warning, which drops the response and gives back its in-flight slot. A slow
//! reader that keeps reading is never cut, by either timeout. On shutdown every connection is asked to close
//! after its current response; an idle or half-open one closes at once or at its watchdog deadline, so none
//! delays shutdown beyond the idle timeout.
//!
//! ```
//! use std::time::Duration;
//! use tower_chat_gateway::connection::ConnectionLimits;
//!
//! let limits = ConnectionLimits {
//!     header_timeout: Duration::from_secs(5),
//!     max_connections: 50_000,
//!     ..ConnectionLimits::default()
//! };
//! assert_eq!(limits.idle_timeout, Duration::from_secs(60));
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;
use tower_chat::CallerIdentity;

use crate::error::ApiError;
use crate::idle_memory::{Busy, IdleTracker};
use crate::warn_limit::WarnLimit;

/// Connection and concurrency limits. [`Default`] gives the command line's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `--header-timeout SECS`: from a request's first byte to its complete head (default 10).
    pub header_timeout: Duration,
    /// `--body-timeout SECS`: from a request's head to the end of its body (default 30).
    pub body_timeout: Duration,
    /// `--idle-timeout SECS`: how long a connection may stay open with no request in flight, no response being
    /// written and no byte of a new request received (default 60).
    pub idle_timeout: Duration,
    /// `--write-timeout SECS`: how long a response may wait to write its next byte because the client is not
    /// reading; past it the connection is closed (default 30).
    pub write_timeout: Duration,
    /// `--max-connections N`: open connections; more are answered `503` and closed (default 16384; lowered at
    /// start to what the open-files limit allows).
    pub max_connections: usize,
    /// `--max-in-flight N`: requests being handled, streaming responses included; more get `503` with
    /// `Retry-After` (default 4096).
    pub max_in_flight: usize,
    /// `--max-in-flight-per-key N`: requests in flight per caller (gateway key); more get `429` with
    /// `Retry-After` (default 256).
    pub max_in_flight_per_key: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_connections: 16_384,
            max_in_flight: 4096,
            max_in_flight_per_key: 256,
        }
    }
}

/// Raise this process's soft open-files limit to its hard limit (connections are file descriptors), and
/// return the soft limit now in force, if known.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current
}

/// The answer to a connection over `max_connections`, written without reading the request.
const OVERLOADED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\n\
connection: close\r\ncontent-length: 117\r\n\r\n{\"error\":{\"message\":\"too many open connections; retry later\",\
\"type\":\"server_error\",\"code\":\"overloaded\",\"param\":null}}";

/// Accept connections on `listener` and serve `router` on each until `shutdown` resolves; then stop accepting,
/// ask every connection to close after its current response, and return once all have closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let max = limits
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let slots = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let limits = Arc::new(limits);
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
                let (router, limits, stop) = (router.clone(), limits.clone(), stop_rx.clone());
                tokio::spawn(connection(tcp, peer, router, limits, stop, slot));
            }
            Err(_) => {
                if let Some(suppressed) = SHED.admit(std::time::Instant::now()) {
                    tracing::warn!(
                        max,
                        suppressed,
                        "connection limit reached: shedding connections"
                    );
                }
                // Best effort, never waiting: a fresh socket's send buffer takes these bytes at once.
                let _ = tcp.try_write(OVERLOADED);
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it has closed.
    let _ = slots.acquire_many(max as u32).await;
}

/// What a connection's watchdog knows.
#[derive(Debug)]
struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
}

#[derive(Debug)]
struct ActivityState {
    in_flight: usize,
    /// When the connection opened, its last response ended, or (after that) a byte of it was last written.
    idle_since: Instant,
    /// The first byte received while idle: a request head is arriving.
    head_started: Option<Instant>,
    /// Since when the socket has taken none of the bytes a response is waiting to write: the client is not
    /// reading.
    write_blocked_since: Option<Instant>,
}

/// What the watchdog waits for, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deadline {
    /// The first byte of the next request.
    Idle(Instant),
    /// The rest of a request head.
    Header(Instant),
    /// The client to read what a response is waiting to write.
    Write(Instant),
}

impl Deadline {
    fn at(self) -> Instant {
        match self {
            Deadline::Idle(at) | Deadline::Header(at) | Deadline::Write(at) => at,
        }
    }
}

impl Activity {
    fn new() -> Self {
        Activity {
            state: Mutex::new(ActivityState {
                in_flight: 0,
                idle_since: Instant::now(),
                head_started: None,
                write_blocked_since: None,
            }),
            changed: Notify::new(),
        }
    }

    /// What a write on the socket tells the watchdog.
    fn written(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) if *n > 0 => self.wrote(),
            Poll::Pending => self.write_blocked(),
            _ => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn received(&self) {
        let mut state = self.lock();
        if state.in_flight == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    /// The socket took bytes of a response: the client reads. Bytes still going out after the response's body
    /// ended (a slow reader of a large answer) keep the connection from counting as idle.
    fn wrote(&self) {
        let mut state = self.lock();
        state.write_blocked_since = None;
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
    }

    /// The socket took none of a response's bytes: the write timeout runs until it takes some.
    fn write_blocked(&self) {
        let mut state = self.lock();
        if state.write_blocked_since.is_none() {
            state.write_blocked_since = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }

    fn begin(self: &Arc<Self>) -> RequestGuard {
        let mut state = self.lock();
        state.in_flight += 1;
        state.head_started = None;
        RequestGuard(self.clone())
    }

    /// When the connection must be closed if nothing changes; `None` while a request is in flight and its
    /// response is not blocked writing.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Deadline> {
        let state = self.lock();
        if let Some(blocked) = state.write_blocked_since {
            return Some(Deadline::Write(blocked + limits.write_timeout));
        }
        if state.in_flight > 0 {
            return None;
        }
        Some(match state.head_started {
            Some(started) => Deadline::Header(started + limits.header_timeout),
            None => Deadline::Idle(state.idle_since + limits.idle_timeout),
        })
    }
}

/// Held while a request is in flight (until its response body has been sent or dropped).
#[derive(Debug)]
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
        drop(state);
        self.0.changed.notify_one();
    }
}

/// The TCP peer of the connection a request came on (a request extension; the console's login limit counts
/// failures by it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerAddr(pub(crate) std::net::SocketAddr);

async fn connection(
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    limits: Arc<ConnectionLimits>,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(WatchedIo {
        inner: tcp,
        activity: activity.clone(),
    });
    let service = {
        let (activity, body_timeout) = (activity.clone(), limits.body_timeout);
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let guard = activity.begin();
            let mut request = request.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
            request.extensions_mut().insert(PeerAddr(peer));
            let router = router.clone();
            async move {
                let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
                Ok::<_, Infallible>(response.map(|body| Body::new(GuardedBody::new(body, guard))))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper's own head timer starts when it waits for a head, idle time included: a backstop behind the
    // watchdog, which tells idle and header time apart. (It waits for a head only once the last response has
    // been written, so it does not cut a slow reader.)
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout + limits.header_timeout);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = activity.deadline(&limits);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            () = activity.changed.notified() => {}
            () = sleep_until(deadline.map(Deadline::at)) => match activity.deadline(&limits) {
                Some(Deadline::Write(at)) if at <= Instant::now() => {
                    static STALLED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 10);
                    if let Some(suppressed) = STALLED.admit(std::time::Instant::now()) {
                        tracing::warn!(
                            %peer,
                            write_timeout = ?limits.write_timeout,
                            suppressed,
                            "closing a connection whose client stopped reading its response"
                        );
                    }
                    return;
                }
                Some(deadline) if deadline.at() <= Instant::now() => {
                    tracing::debug!("closing a connection idle or half-open past its timeout");
                    return;
                }
                _ => {}
            },
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The socket, telling the watchdog when bytes arrive.
struct WatchedIo {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.received();
        }
        result
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.written(&polled);
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.written(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The error a request body fails with when it did not arrive within `--body-timeout`.
#[derive(Debug)]
pub(crate) struct BodyTimeout;

impl BodyTimeout {
    pub(crate) const MESSAGE: &'static str =
        "the request body did not arrive within the body timeout";

    /// Whether `error` is a body that missed its deadline, or wraps one (as axum's rejections do).
    pub(crate) fn caused(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(error);
        while let Some(error) = next {
            if error.is::<BodyTimeout>() {
                return true;
            }
            next = error.source();
        }
        false
    }
}

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(Self::MESSAGE)
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body (hyper's `Incoming` when serving) that must end before a deadline.
struct DeadlineBody<B> {
    inner: B,
    deadline: Pin<Box<Sleep>>,
}

impl<B> DeadlineBody<B> {
    fn new(inner: B, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps something (a request guard, an in-flight permit) alive until it has been sent
/// or dropped.
pub(crate) struct GuardedBody<G> {
    inner: Body,
    guard: Option<G>,
}

impl<G> GuardedBody<G> {
    pub(crate) fn new(inner: Body, guard: G) -> Self {
        GuardedBody {
            inner,
            guard: Some(guard),
        }
    }
}

impl<G: Unpin> HttpBody for GuardedBody<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // The end: release now, the connection may never poll or drop this body promptly.
            self.guard.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Uses at once per key (a caller): a count each, none over the limit. The in-flight limit counts requests by
/// it, [`crate::operator`] long-polls.
#[derive(Debug)]
pub(crate) struct PerKey<K> {
    limit: usize,
    counts: Arc<Mutex<HashMap<K, usize>>>,
}

/// One use counted by a [`PerKey`], given back when dropped.
#[derive(Debug)]
pub(crate) struct KeyPermit<K: std::hash::Hash + Eq> {
    key: Option<K>,
    counts: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: std::hash::Hash + Eq + Clone> PerKey<K> {
    /// At most `limit` (at least one) uses at once per key.
    pub(crate) fn new(limit: usize) -> Self {
        PerKey {
            limit: limit.max(1),
            counts: Arc::default(),
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// One more use by `key`, or `None` when it has `limit` already.
    pub(crate) fn admit(&self, key: &K) -> Option<KeyPermit<K>> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(key.clone()).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(KeyPermit {
            key: Some(key.clone()),
            counts: self.counts.clone(),
        })
    }
}

impl<K: std::hash::Hash + Eq> Drop for KeyPermit<K> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = counts.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&key);
                }
            }
        }
    }
}

/// The in-flight limits: one semaphore for all requests, one count per caller.
#[derive(Debug)]
pub(crate) struct InFlight {
    all: Arc<Semaphore>,
    per_key: PerKey<CallerIdentity>,
    /// Counts the admitted requests for [`crate::idle_memory`].
    idle: Arc<IdleTracker>,
}

/// Releases a request's in-flight slots when dropped.
#[derive(Debug)]
pub(crate) struct InFlightPermit {
    _all: OwnedSemaphorePermit,
    _caller: Option<KeyPermit<CallerIdentity>>,
    _busy: Busy,
}

impl InFlight {
    pub(crate) fn new(limits: &ConnectionLimits) -> Self {
        InFlight {
            all: Arc::new(Semaphore::new(
                limits.max_in_flight.clamp(1, Semaphore::MAX_PERMITS),
            )),
            per_key: PerKey::new(limits.max_in_flight_per_key),
            idle: Arc::default(),
        }
    }

    /// The count of admitted requests that [`crate::idle_memory::release_when_idle`] watches.
    pub(crate) fn idle_tracker(&self) -> Arc<IdleTracker> {
        self.idle.clone()
    }

    /// Admit a request, or refuse it at once: `503` when the gateway is full, `429` when the caller is.
    pub(crate) fn admit(
        &self,
        caller: Option<&CallerIdentity>,
    ) -> Result<InFlightPermit, ApiError> {
        let Ok(all) = self.all.clone().try_acquire_owned() else {
            return Err(ApiError {
                retry_after: Some(Duration::from_secs(1)),
                ..ApiError::overloaded(
                    "the gateway is at its limit of requests in flight; retry later",
                )
            });
        };
        let caller = match caller {
            Some(caller) => match self.per_key.admit(caller) {
                Some(permit) => Some(permit),
                None => {
                    return Err(ApiError {
                        retry_after: Some(Duration::from_secs(1)),
                        ..ApiError::too_many_in_flight(self.per_key.limit())
                    })
                }
            },
            None => None,
        };
        Ok(InFlightPermit {
            _all: all,
            _caller: caller,
            _busy: self.idle.begin(),
        })
    }
}

/// `408` for a body that timed out; the connection is closed after it.
pub(crate) fn body_timeout_response() -> Response<Body> {
    let mut response = axum::response::IntoResponse::into_response(ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        ..ApiError::invalid_request("request_timeout", BodyTimeout::MESSAGE)
    });
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
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
    }

    #[test]
    fn per_key_and_global_in_flight_limits() {
        let limits = ConnectionLimits {
            max_in_flight: 3,
            max_in_flight_per_key: 2,
            ..ConnectionLimits::default()
        };
        let in_flight = InFlight::new(&limits);
        let alice = CallerIdentity::new("alice");
        let bob = CallerIdentity::new("bob");
        let a1 = in_flight.admit(Some(&alice)).unwrap();
        let _a2 = in_flight.admit(Some(&alice)).unwrap();
        let refused = in_flight.admit(Some(&alice)).unwrap_err();
        assert_eq!(refused.status.as_u16(), 429);
        assert!(refused.retry_after.is_some());
        let _b1 = in_flight.admit(Some(&bob)).unwrap();
        let full = in_flight.admit(Some(&bob)).unwrap_err();
        assert_eq!(full.status.as_u16(), 503);
        assert!(full.retry_after.is_some());
        drop(a1);
        let _a3 = in_flight.admit(Some(&alice)).unwrap();
        assert!(in_flight.admit(None).is_err());
    }

    /// The socket wrapper tells the watchdog about bytes received, and about nothing else: a read that finds no
    /// data leaves an idle connection idle, the first byte starts the header clock.
    #[tokio::test]
    async fn the_socket_reports_bytes_and_only_bytes_to_the_watchdog() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Far apart, so which deadline is in force shows without controlling time.
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(1_000),
            idle_timeout: Duration::from_secs(1),
            ..ConnectionLimits::default()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let activity = Arc::new(Activity::new());
        let mut socket = WatchedIo {
            inner: server,
            activity: activity.clone(),
        };
        let idle = activity.deadline(&limits).unwrap();
        let mut storage = [0u8; 16];
        let nothing = std::future::poll_fn(|cx| {
            let mut buf = ReadBuf::new(&mut storage);
            Poll::Ready(Pin::new(&mut socket).poll_read(cx, &mut buf).is_pending())
        })
        .await;
        assert!(nothing, "no byte was sent yet");
        assert_eq!(
            activity.deadline(&limits),
            Some(idle),
            "a read that found nothing"
        );
        client.write_all(b"P").await.unwrap();
        assert_eq!(socket.read(&mut storage).await.unwrap(), 1);
        let deadline = activity.deadline(&limits).unwrap();
        assert!(
            matches!(deadline, Deadline::Header(at) if at > Instant::now() + Duration::from_secs(900)),
            "the first byte of a head starts the header timeout"
        );
        // Writes pass through (hyper writes vectored; a plain `write` must work too). Without vectored writes
        // hyper would copy every body chunk into its head buffer first.
        assert!(socket.is_write_vectored());
        socket.write_all(b"ok").await.unwrap();
        socket.flush().await.unwrap();
        let mut answer = [0u8; 2];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"ok");
        // hyper ends a connection it closes with a shutdown: the peer must see the end while the socket is
        // still open here, not only once it is dropped.
        socket.shutdown().await.unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), client.read(&mut answer)).await;
        assert_eq!(
            end.expect("the shutdown reached the peer").unwrap(),
            0,
            "end of stream"
        );
        drop(socket);
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_tells_idle_from_header_time() {
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(7),
            ..ConnectionLimits::default()
        };
        let activity = Arc::new(Activity::new());
        let opened = Instant::now();
        assert_eq!(
            activity.deadline(&limits),
            Some(Deadline::Idle(opened + limits.idle_timeout))
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        activity.received();
        let first_byte = Instant::now();
        assert_eq!(
            activity.deadline(&limits),
            Some(Deadline::Header(first_byte + limits.header_timeout))
        );
        let guard = activity.begin();
        assert_eq!(activity.deadline(&limits), None);
        tokio::time::advance(Duration::from_secs(100)).await;
        activity.received();
        assert_eq!(activity.deadline(&limits), None, "bytes during a request");
        drop(guard);
        let ended = Instant::now();
        assert_eq!(
            activity.deadline(&limits),
            Some(Deadline::Idle(ended + limits.idle_timeout))
        );
    }

    /// A response the client reads, however slowly, is never cut; one it stopped reading is, after the write
    /// timeout, whether its body is still being produced or has been handed over whole.
    #[tokio::test(start_paused = true)]
    async fn the_watchdog_tells_a_slow_reader_from_one_that_stopped() {
        let limits = ConnectionLimits {
            idle_timeout: Duration::from_secs(7),
            write_timeout: Duration::from_secs(3),
            ..ConnectionLimits::default()
        };
        let activity = Arc::new(Activity::new());
        let guard = activity.begin();
        activity.written(&Poll::Ready(Ok(100)));
        assert_eq!(activity.deadline(&limits), None, "writing and in flight");
        activity.written(&Poll::Pending);
        let blocked = Instant::now();
        let stalled = Some(Deadline::Write(blocked + limits.write_timeout));
        assert_eq!(activity.deadline(&limits), stalled);
        tokio::time::advance(Duration::from_secs(1)).await;
        activity.written(&Poll::Pending);
        assert_eq!(
            activity.deadline(&limits),
            stalled,
            "from the first refusal"
        );
        activity.written(&Poll::Ready(Ok(1)));
        assert_eq!(activity.deadline(&limits), None, "progress ends the wait");
        // The body was handed over whole; its bytes are still going out.
        drop(guard);
        tokio::time::advance(Duration::from_secs(100)).await;
        activity.written(&Poll::Ready(Ok(1)));
        let last_byte = Instant::now();
        assert_eq!(
            activity.deadline(&limits),
            Some(Deadline::Idle(last_byte + limits.idle_timeout)),
            "idle from the last byte written, not from the end of the body"
        );
        activity.written(&Poll::Pending);
        assert_eq!(
            activity.deadline(&limits),
            Some(Deadline::Write(Instant::now() + limits.write_timeout))
        );
        activity.written(&Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())));
        assert_eq!(
            activity.deadline(&limits),
            Some(Deadline::Write(Instant::now() + limits.write_timeout)),
            "a failed write is no progress"
        );
    }

    /// The wrappers keep what the wrapped body says of its size and end: hyper writes `content-length` (not
    /// chunked) from a response body's exact size, and skips polling a body already at its end.
    #[tokio::test]
    async fn wrapped_bodies_keep_their_size_and_their_end() {
        let response = GuardedBody::new(Body::from("four"), ());
        assert_eq!(response.size_hint().exact(), Some(4));
        assert!(!response.is_end_stream());
        assert!(GuardedBody::new(Body::empty(), ()).is_end_stream());
        let timeout = Duration::from_secs(60);
        let request = DeadlineBody::new(http_body_util::Full::new(Bytes::from("four")), timeout);
        assert_eq!(request.size_hint().exact(), Some(4));
        assert!(!request.is_end_stream());
        assert!(DeadlineBody::new(http_body_util::Empty::<Bytes>::new(), timeout).is_end_stream());
    }

    /// The memory release watches the requests this gateway admits: once they are over and a quiet second
    /// has passed, memory goes back.
    #[tokio::test(start_paused = true)]
    async fn the_memory_release_sees_the_requests_admitted() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let in_flight = InFlight::new(&ConnectionLimits::default());
        let releases = Arc::new(AtomicUsize::new(0));
        let counted = releases.clone();
        let watcher = tokio::spawn(crate::idle_memory::release_when_idle(
            in_flight.idle_tracker(),
            crate::idle_memory::Schedule::default(),
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
                std::future::ready(())
            },
        ));
        drop(in_flight.admit(None).unwrap());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            releases.load(Ordering::SeqCst),
            1,
            "one release after the request"
        );
        watcher.abort();
    }
}
