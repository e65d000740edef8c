//! TCP connections that notice when the upstream has closed them while they sat in the pool.
//!
//! An upstream may close a kept-alive connection at any moment after an answer without saying so (no
//! `Connection: close`; its keep-alive timeout, a restart). hyper-util's pooled client then still holds the
//! connection as reusable until its connection task reads the end of the stream, and the runtime learns of that
//! end only when it next asks the operating system which sockets are ready. A request checked out in between
//! is written into a socket whose peer is gone, and fails with `IncompleteMessage` or a reset (a `502` at the
//! gateway), although the upstream never saw it.
//!
//! hyper reads a connection before it writes the next request on it, and hyper-util sends a request again, on
//! another connection, when its connection closed before the request was written (`retry_canceled_requests`,
//! on by default). So these connections make that read tell the truth: when the runtime has no news of the
//! socket, the read asks the socket itself (a `MSG_PEEK`, which consumes nothing), and an end of stream or a
//! reset found there is reported at once. The request is then never written to the dead connection; hyper-util
//! retries it once, transparently, and [`StaleConnections`] counts it.
//!
//! A close that crosses the request on the wire (the upstream closes while the request is on its way) cannot be
//! told from an upstream that read the request and failed; that one still fails, as it must.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How many pooled connections were found closed by the upstream just before a request would have been
/// written to them (each such request was sent again on another connection). Shared by the clones of a
/// transport.
#[derive(Clone, Debug, Default)]
pub struct StaleConnections(Arc<AtomicU64>);

impl StaleConnections {
    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn found(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// [`HttpConnector`] whose connections are [`WatchedTcp`].
#[derive(Clone, Debug)]
pub(super) struct WatchedConnector {
    inner: HttpConnector,
    stale: StaleConnections,
}

impl WatchedConnector {
    pub(super) fn new(inner: HttpConnector, stale: StaleConnections) -> Self {
        WatchedConnector { inner, stale }
    }
}

impl tower::Service<Uri> for WatchedConnector {
    type Response = WatchedTcp;
    type Error = <HttpConnector as tower::Service<Uri>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<WatchedTcp, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let stale = self.stale.clone();
        Box::pin(async move {
            Ok(WatchedTcp {
                inner: connecting.await?,
                fresh: false,
                stale,
            })
        })
    }
}

/// A client TCP connection whose reads see a close by the peer even before the runtime does.
#[derive(Debug)]
pub(super) struct WatchedTcp {
    inner: TokioIo<TcpStream>,
    /// The last read got bytes: the runtime's view of the socket is as fresh as that read (a stream being
    /// received), so a read that would wait needs no second look.
    fresh: bool,
    stale: StaleConnections,
}

impl WatchedTcp {
    /// Whether the socket holds the end of the stream (or a reset) that the runtime has not seen yet. A peek
    /// consumes nothing: bytes found are left for the next read.
    fn closed_by_peer(&self) -> Option<io::Result<()>> {
        let mut probe = [MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(self.inner.inner()).peek(&mut probe) {
            Ok(0) => Some(Ok(())),
            Err(error) if error.kind() == io::ErrorKind::ConnectionReset => Some(Err(error)),
            // Bytes waiting (the runtime will report them), nothing yet (`WouldBlock`), or an error the next
            // real read will report.
            _ => None,
        }
    }
}

impl Read for WatchedTcp {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // An unfilled buffer that stays unfilled is an end of stream; the cursor cannot be asked afterwards.
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => {
                if std::mem::take(&mut self.fresh) {
                    return Poll::Pending;
                }
                match self.closed_by_peer() {
                    Some(end) => {
                        tracing::debug!(
                            "the upstream closed a pooled connection: a request waiting for it goes to \
                             another connection"
                        );
                        self.stale.found();
                        Poll::Ready(end)
                    }
                    None => Poll::Pending,
                }
            }
            Poll::Ready(Ok(())) => {
                self.fresh = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
        }
    }
}

impl Write for WatchedTcp {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}

impl Connection for WatchedTcp {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}
