//! The per-connection deadlines no library enforces: how long a kept-alive connection may sit idle, how long a
//! request head may take from its first byte, and how long a response may wait for a client that stopped
//! reading.
//!
//! Own code because hyper and tower cannot tell these apart: hyper's `header_read_timeout` runs from the moment
//! it waits for a head, idle time included (and is HTTP/1 only); tower and tower-http time requests and bodies,
//! which exist only once a head has been read, and never see a socket that takes no bytes. So the socket is
//! wrapped ([`WatchedIo`]) to report bytes received and writes refused, each request holds a [`RequestGuard`],
//! and [`watch`] closes the connection when the deadline in force passes:
//!
//! - no request in flight: `idle_timeout` from the moment the connection opened (or its last response was
//!   written) to the first byte of the next request, then `header_timeout` to the complete head;
//! - a response blocked writing (the client's receive window and the socket's send buffer are full):
//!   `write_timeout` from the first refused write; a slow reader that keeps reading is never cut;
//! - over HTTP/2, a response blocked on the client's flow-control window: `write_timeout` (at most half as
//!   long again) from the moment its body handed over a frame (or a 16 KiB piece) it was not asked to follow;
//! - a request in flight otherwise: none (the body timeout and the upstream timeout are tower layers).
//!
//! Over HTTP/2 (recognised by its connection preface) frames arrive while no request is in flight (pings,
//! settings, window updates), so bytes do not start the header clock and writes do not refresh the idle clock:
//! a connection without an open stream closes `idle_timeout` after its last stream ended.
//!
//! A client that stops reading over HTTP/2 closes its flow-control window long before the socket fills: hyper
//! then waits for window and stops asking the response body for frames, nothing is written, and no write is
//! ever refused. So every response body reports to its [`RequestGuard`] when it hands a frame over and when it
//! is asked for the next one ([`crate::edge::in_flight::BodyGuard`]); a body waiting on its own upstream has been
//! asked and is not counted. hyper asks for the next frame once the last one fits the client's window, so a
//! frame's wait is how long the client takes to read it: large frames are handed over in pieces of at most
//! 16 KiB ([`crate::edge::in_flight::HAND_OVER_PIECE`]), and a response counts as blocked when not one piece of it
//! could go out in `write_timeout` (a reader slower than 16 KiB per `write_timeout` is cut; one that keeps
//! reading faster is not). Time is kept coarsely, so the cost per frame is two uncontended atomic additions
//! and no clock: the watchdog opens a new epoch every half `write_timeout`, a hand-over is counted in the
//! epoch it happened in until the body is asked again, and a count left three epochs back (at least two whole
//! epochs, `write_timeout`, ago) closes the connection, as a refused write does over HTTP/1 (hyper does not
//! poll the body, so the body cannot end the stream itself).
//!
//! HTTP/1 keeps the refused write as its only signal: there the socket is the flow control, a refused write
//! says exactly that the client stopped reading, and it also catches an answer handed over whole whose bytes
//! are still going out (no hand-over is pending then). Its bodies skip the counting (one branch a frame) and
//! its watchdog never wakes to open epochs.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::edge::in_flight::ConnectionLimits;
use crate::telemetry::warning_throttle::WarnLimit;

/// The first bytes of every HTTP/2 connection (RFC 9113, section 3.4).
pub(crate) const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the first bytes a client sent open an HTTP/2 connection: three bytes tell (`PRI` starts no HTTP/1
/// method), the rest must match as far as they go.
pub(crate) fn opens_http2(first: &[u8]) -> bool {
    first.len() >= 3 && HTTP2_PREFACE.starts_with(&first[..first.len().min(HTTP2_PREFACE.len())])
}

/// What a connection's watchdog knows: requests in flight, bytes received and written, and over HTTP/2 the
/// responses waiting for their client to want more.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
    handed_over: HandOvers,
}

/// Epochs in one `write_timeout`; a stalled response is cut between one and `STALE / EPOCHS_PER_TIMEOUT`
/// write timeouts after its last hand-over.
const EPOCHS_PER_TIMEOUT: usize = 2;

/// How many epochs back a hand-over still pending closes the connection: at least `EPOCHS_PER_TIMEOUT` whole
/// epochs have passed since it.
const STALE: usize = EPOCHS_PER_TIMEOUT + 1;

/// Slots counting hand-overs by epoch: the epochs not yet stale, and the stale one being checked.
const EPOCHS: usize = STALE + 1;

/// Over HTTP/2: responses whose body handed the connection a frame and has not been asked for the next one,
/// counted by the epoch they did it in. The watchdog alone opens epochs; bodies only read the current one.
#[derive(Debug, Default)]
struct HandOvers {
    epoch: AtomicUsize,
    pending: [AtomicUsize; EPOCHS],
}

impl HandOvers {
    /// A body handed a frame over: count it in the current epoch, whose slot the body keeps to uncount it.
    fn handed(&self) -> usize {
        let slot = self.epoch.load(Relaxed) % EPOCHS;
        self.pending[slot].fetch_add(1, Relaxed);
        slot
    }

    /// The body that counted a hand-over in `slot` was asked for its next frame, or is gone.
    fn asked(&self, slot: usize) {
        self.pending[slot].fetch_sub(1, Relaxed);
    }

    /// Open the next epoch; whether a hand-over from `STALE` epochs back is still pending. Its slot is the one
    /// the following epoch counts in: when this returns `false` it is empty, so a slot never holds two epochs.
    fn advance(&self) -> bool {
        let next = self.epoch.load(Relaxed).wrapping_add(1);
        self.epoch.store(next, Relaxed);
        let stale = next.wrapping_sub(STALE) % EPOCHS;
        self.pending[stale].load(Relaxed) > 0
    }
}

#[derive(Debug)]
struct ActivityState {
    in_flight: usize,
    /// An HTTP/2 connection: frames arrive and leave with no request in flight.
    multiplexed: bool,
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
    pub(crate) fn new() -> Self {
        Activity {
            state: Mutex::new(ActivityState {
                in_flight: 0,
                multiplexed: false,
                idle_since: Instant::now(),
                head_started: None,
                write_blocked_since: None,
            }),
            changed: Notify::new(),
            handed_over: HandOvers::default(),
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
        if state.in_flight == 0 && state.head_started.is_none() && !state.multiplexed {
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
        if state.in_flight == 0 && !state.multiplexed {
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

    /// The connection speaks HTTP/2: the watchdog starts opening epochs.
    fn multiplexed(&self) {
        self.lock().multiplexed = true;
        self.changed.notify_one();
    }

    fn is_multiplexed(&self) -> bool {
        self.lock().multiplexed
    }

    /// A request arrived; it counts as in flight until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> RequestGuard {
        let mut state = self.lock();
        state.in_flight += 1;
        state.head_started = None;
        RequestGuard {
            activity: self.clone(),
            multiplexed: state.multiplexed,
            handed: None,
        }
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
pub(crate) struct RequestGuard {
    activity: Arc<Activity>,
    /// An HTTP/2 stream: hand-overs are counted.
    multiplexed: bool,
    /// The epoch slot of a frame handed over whose successor has not been asked for.
    handed: Option<usize>,
}

impl crate::edge::in_flight::BodyGuard for RequestGuard {
    fn counts_hand_overs(&self) -> bool {
        self.multiplexed
    }

    fn handed_over(&mut self) {
        if self.multiplexed {
            self.handed = Some(self.activity.handed_over.handed());
        }
    }

    fn asked(&mut self) {
        if let Some(slot) = self.handed.take() {
            self.activity.handed_over.asked(slot);
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        // A body handing over its last frame is not asked again: it is dropped.
        crate::edge::in_flight::BodyGuard::asked(self);
        let mut state = self.activity.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
        drop(state);
        self.activity.changed.notify_one();
    }
}

/// Drive `connection` until it ends, or close it (by dropping it) when the deadline in force passes.
pub(crate) async fn watch<F, E>(
    connection: F,
    activity: &Activity,
    limits: &ConnectionLimits,
    peer: std::net::SocketAddr,
) where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(connection);
    let epoch = epoch_length(limits.write_timeout);
    let mut next_epoch = Instant::now() + epoch;
    loop {
        let mut deadline = activity.deadline(limits).map(Deadline::at);
        if activity.is_multiplexed() {
            deadline = Some(deadline.map_or(next_epoch, |at| at.min(next_epoch)));
        }
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = activity.changed.notified() => {}
            () = sleep_until(deadline) => {
                let now = Instant::now();
                if next_epoch <= now && activity.is_multiplexed() {
                    next_epoch = now + epoch;
                    if activity.handed_over.advance() {
                        stopped_reading(peer, limits);
                        return;
                    }
                }
                match activity.deadline(limits) {
                    Some(Deadline::Write(at)) if at <= now => {
                        stopped_reading(peer, limits);
                        return;
                    }
                    Some(deadline) if deadline.at() <= now => {
                        tracing::debug!("closing a connection idle or half-open past its timeout");
                        return;
                    }
                    _ => {}
                }
            }
        }
    }
}

/// How often the watchdog of an HTTP/2 connection opens an epoch ([`HandOvers`]); never zero, so a tiny
/// `--write-timeout` cannot make it spin.
fn epoch_length(write_timeout: Duration) -> Duration {
    (write_timeout / EPOCHS_PER_TIMEOUT as u32).max(Duration::from_millis(1))
}

fn stopped_reading(peer: std::net::SocketAddr, limits: &ConnectionLimits) {
    static STALLED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 10);
    if let Some(suppressed) = STALLED.admit(std::time::Instant::now()) {
        tracing::warn!(
            %peer,
            write_timeout = ?limits.write_timeout,
            suppressed,
            "closing a connection whose client stopped reading its response"
        );
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The socket, telling the watchdog when bytes arrive and whether writes are taken.
pub(crate) struct WatchedIo {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// Nothing has been read yet: the first bytes tell HTTP/2 from HTTP/1.
    first_read: bool,
}

impl WatchedIo {
    pub(crate) fn new(inner: TcpStream, activity: Arc<Activity>) -> Self {
        WatchedIo {
            inner,
            activity,
            first_read: true,
        }
    }
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        let fresh = &buf.filled()[before..];
        if !fresh.is_empty() {
            if std::mem::take(&mut self.first_read) && opens_http2(fresh) {
                self.activity.multiplexed();
            }
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

#[cfg(test)]
mod tests;
