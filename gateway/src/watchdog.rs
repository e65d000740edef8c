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
//! - a request in flight otherwise: none (the body timeout and the upstream timeout are tower layers).
//!
//! Over HTTP/2 (recognised by its connection preface) frames arrive while no request is in flight (pings,
//! settings, window updates), so bytes do not start the header clock and writes do not refresh the idle clock:
//! a connection without an open stream closes `idle_timeout` after its last stream ended.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::connection::ConnectionLimits;
use crate::warn_limit::WarnLimit;

/// The first bytes of every HTTP/2 connection (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection's watchdog knows: requests in flight, bytes received and written.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
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

    /// The connection speaks HTTP/2.
    fn multiplexed(&self) {
        self.lock().multiplexed = true;
    }

    /// A request arrived; it counts as in flight until the guard is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> RequestGuard {
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
pub(crate) struct RequestGuard(Arc<Activity>);

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
    loop {
        let deadline = activity.deadline(limits);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = activity.changed.notified() => {}
            () = sleep_until(deadline.map(Deadline::at)) => match activity.deadline(limits) {
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
            if std::mem::take(&mut self.first_read)
                && fresh.len() >= 3
                && HTTP2_PREFACE.starts_with(&fresh[..fresh.len().min(HTTP2_PREFACE.len())])
            {
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
mod tests {
    use super::*;
    use tokio::net::TcpListener;

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
        let mut socket = WatchedIo::new(server, activity.clone());
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

    /// Over HTTP/2 frames come and go with no request in flight (pings, settings): they neither start the header
    /// clock nor keep the connection from counting as idle. The preface tells the two protocols apart.
    #[tokio::test]
    async fn over_http2_frames_between_requests_leave_the_connection_idle() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(1_000),
            idle_timeout: Duration::from_secs(1),
            ..ConnectionLimits::default()
        };
        for (first, multiplexed) in [(HTTP2_PREFACE, true), (&b"POST / HTTP/1.1\r\n"[..], false)] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (server, _) = listener.accept().await.unwrap();
            let activity = Arc::new(Activity::new());
            let mut socket = WatchedIo::new(server, activity.clone());
            let idle = activity.deadline(&limits).unwrap();
            client.write_all(first).await.unwrap();
            let mut storage = vec![0u8; first.len()];
            socket.read_exact(&mut storage).await.unwrap();
            socket.write_all(b"settings").await.unwrap();
            let deadline = activity.deadline(&limits).unwrap();
            if multiplexed {
                assert_eq!(
                    deadline, idle,
                    "the preface, a frame and a reply: still idle"
                );
            } else {
                assert!(matches!(deadline, Deadline::Header(_)), "{deadline:?}");
            }
        }
    }
}
