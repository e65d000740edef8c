//! Connection and request limits: what the command line sets ([`ConnectionLimits`]), the in-flight caps (overall
//! and per caller) with load shedding (`503` / `429` + `Retry-After`) instead of stalling, and the `408` of a
//! request body that did not arrive in time.
//!
//! Where each limit is enforced:
//!
//! - `max_connections`: at accept ([`crate::edge::serve`]): over it a connection is answered `503` in the protocol it
//!   opens with and closed, without being served;
//! - `idle_timeout`, `header_timeout`, `write_timeout`: the connection's watchdog ([`crate::edge::connection_deadlines`]);
//! - `body_timeout`: tower-http's `RequestBodyTimeoutLayer` around the router ([`crate::edge::serve`]);
//! - `max_media_in_flight`: [`MediaInFlight`], once a request is parsed (its media's decoded size is known only
//!   then), held like the in-flight slot until its response's last byte;
//! - `max_in_flight`, `max_in_flight_per_key`: [`InFlight`], after authentication. Own code, because the slot
//!   must be held for a response's whole life, a stream's body included: tower's `ConcurrencyLimit` gives its
//!   permit back when the response head is ready, and nothing in tower counts per caller.
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
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower_chat::CallerIdentity;

use crate::error::ApiError;

pub use crate::config::connections::ConnectionLimits;

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

/// The TCP peer of the connection a request came on (a request extension; the console's login limit counts
/// failures by it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerAddr(pub(crate) std::net::SocketAddr);

/// A request body that did not arrive within `--body-timeout` ([`crate::edge::body_deadline`] fails it with
/// [`BodyDeadlineExceeded`](crate::edge::body_deadline::BodyDeadlineExceeded)).
#[derive(Debug)]
pub(crate) struct BodyTimeout;

impl BodyTimeout {
    pub(crate) const MESSAGE: &'static str =
        "the request body did not arrive within the body timeout";

    /// Whether `error` is a body that missed its deadline, or wraps one (as axum's rejections do).
    pub(crate) fn caused(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(error);
        while let Some(error) = next {
            if error.is::<crate::edge::body_deadline::BodyDeadlineExceeded>() {
                return true;
            }
            next = error.source();
        }
        false
    }
}

/// The largest data frame a response body hands an HTTP/2 connection at once: a larger one goes in pieces, so
/// that how long a piece waits to be followed tells how fast its client reads (hyper asks for the next frame only
/// once the last one fits the client's window). HTTP/2's default largest frame: the pieces add no frames on the
/// wire.
pub(crate) const HAND_OVER_PIECE: usize = 16 * 1024;

/// What a response body's guard hears of how the connection takes the body: over HTTP/2 a body that handed a
/// frame over and is not asked for the next one is blocked on its client ([`crate::edge::connection_deadlines`]).
pub(crate) trait BodyGuard: Unpin {
    /// Whether hand-overs are counted: large data frames are then handed over in pieces of at most
    /// [`HAND_OVER_PIECE`] bytes.
    fn counts_hand_overs(&self) -> bool {
        false
    }

    /// The body handed the connection a frame.
    fn handed_over(&mut self) {}

    /// The connection asked the body for its next frame.
    fn asked(&mut self) {}
}

impl BodyGuard for () {}

impl BodyGuard for InFlightPermit {}

impl BodyGuard for MediaPermit {}

/// A response body that keeps something (a request guard, an in-flight permit) alive until it has been sent
/// or dropped, and tells it when frames are asked for and handed over.
pub(crate) struct GuardedBody<G> {
    inner: Body,
    guard: Option<G>,
    /// What is left of a data frame handed over in pieces.
    rest: Bytes,
}

impl<G> GuardedBody<G> {
    pub(crate) fn new(inner: Body, guard: G) -> Self {
        GuardedBody {
            inner,
            guard: Some(guard),
            rest: Bytes::new(),
        }
    }
}

impl<G: BodyGuard> HttpBody for GuardedBody<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        // Released at the end (with nothing left in pieces): what remains is the inner body's business.
        let Some(guard) = &mut this.guard else {
            return Pin::new(&mut this.inner).poll_frame(cx);
        };
        guard.asked();
        if !this.rest.is_empty() {
            let piece = this.rest.split_to(this.rest.len().min(HAND_OVER_PIECE));
            guard.handed_over();
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                if guard.counts_hand_overs() {
                    if let Some(data) = frame.data_mut().filter(|d| d.len() > HAND_OVER_PIECE) {
                        this.rest = data.split_off(HAND_OVER_PIECE);
                    }
                }
                guard.handed_over();
                Poll::Ready(Some(Ok(frame)))
            }
            // The end: release now, the connection may never poll or drop this body promptly.
            end @ Poll::Ready(None | Some(Err(_))) => {
                this.guard.take();
                end
            }
            // Waiting on its own source, not on the client.
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        if self.rest.is_empty() {
            return inner;
        }
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
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
}

/// Releases a request's in-flight slots when dropped.
#[derive(Debug)]
pub(crate) struct InFlightPermit {
    _all: OwnedSemaphorePermit,
    _caller: Option<KeyPermit<CallerIdentity>>,
}

impl InFlight {
    pub(crate) fn new(limits: &ConnectionLimits) -> Self {
        InFlight {
            all: Arc::new(Semaphore::new(
                limits.max_in_flight.clamp(1, Semaphore::MAX_PERMITS),
            )),
            per_key: PerKey::new(limits.max_in_flight_per_key),
        }
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
                        ..crate::error::too_many_in_flight(self.per_key.limit())
                    })
                }
            },
            None => None,
        };
        Ok(InFlightPermit {
            _all: all,
            _caller: caller,
        })
    }
}

/// The media bytes of all requests in flight, capped (`--max-media-in-flight`): a semaphore with a permit per
/// byte. A request is admitted or refused at once, never queued: a queue would hold the very bodies the cap is
/// there to bound.
#[derive(Debug)]
pub(crate) struct MediaInFlight {
    bytes: Arc<Semaphore>,
    limit: usize,
}

/// A request's share of [`MediaInFlight`], given back when dropped.
#[derive(Debug)]
pub(crate) struct MediaPermit {
    _bytes: Option<OwnedSemaphorePermit>,
}

impl MediaInFlight {
    pub(crate) fn new(limits: &ConnectionLimits) -> Self {
        let limit = limits
            .max_media_in_flight
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        MediaInFlight {
            bytes: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Admit a request carrying `bytes` of media, or refuse it (`503` + `Retry-After`). A request with more
    /// media than the whole cap takes all of it: it runs when nothing else with media is in flight.
    pub(crate) fn admit(&self, bytes: usize) -> Result<MediaPermit, ApiError> {
        if bytes == 0 {
            return Ok(MediaPermit { _bytes: None });
        }
        let wanted = u32::try_from(bytes.min(self.limit)).unwrap_or(u32::MAX);
        match self.bytes.clone().try_acquire_many_owned(wanted) {
            Ok(permit) => Ok(MediaPermit {
                _bytes: Some(permit),
            }),
            Err(_) => Err(ApiError {
                retry_after: Some(Duration::from_secs(1)),
                ..ApiError::overloaded(format!(
                    "the gateway holds its limit of media in flight (--max-media-in-flight, {} bytes) and this \
                     request carries {bytes} bytes of media; retry later",
                    self.limit
                ))
            }),
        }
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

    #[tokio::test]
    async fn wrapped_bodies_keep_their_size_and_their_end() {
        let response = GuardedBody::new(Body::from("four"), ());
        assert_eq!(response.size_hint().exact(), Some(4));
        assert!(!response.is_end_stream());
        assert!(GuardedBody::new(Body::empty(), ()).is_end_stream());
    }

    /// A guard counting hand-overs and asks, as a connection's watchdog does over HTTP/2.
    #[derive(Default)]
    struct Counting {
        handed: usize,
        asked: usize,
    }

    impl BodyGuard for Counting {
        fn counts_hand_overs(&self) -> bool {
            true
        }

        fn handed_over(&mut self) {
            self.handed += 1;
        }

        fn asked(&mut self) {
            self.asked += 1;
        }
    }

    /// Over HTTP/2 a large frame is handed over in pieces, each a hand-over of its own; the body's length and
    /// end stay right while pieces are left; a body waiting on its source hands nothing over.
    #[tokio::test]
    async fn large_frames_are_handed_over_in_pieces_each_counted() {
        use http_body_util::BodyExt;

        let whole = Bytes::from(vec![7u8; 2 * HAND_OVER_PIECE + 100]);
        let mut body = GuardedBody::new(Body::from(whole.clone()), Counting::default());
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            pieces.push(data.len());
            let left = (whole.len() - pieces.iter().sum::<usize>()) as u64;
            assert_eq!(body.size_hint().exact(), Some(left), "after {pieces:?}");
            assert_eq!(body.is_end_stream(), left == 0);
            if left == 0 {
                break;
            }
        }
        assert_eq!(pieces, [HAND_OVER_PIECE, HAND_OVER_PIECE, 100]);
        let guard = body.guard.as_ref().unwrap();
        assert_eq!((guard.handed, guard.asked), (3, 3));

        // Without counting (HTTP/1), a frame goes whole.
        let mut body = GuardedBody::new(Body::from(whole.clone()), ());
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            whole
        );

        // A body still waiting for its source has been asked and has handed nothing over.
        struct Waiting;
        impl HttpBody for Waiting {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                Poll::Pending
            }
        }
        let mut body = GuardedBody::new(Body::new(Waiting), Counting::default());
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        let guard = body.guard.as_ref().unwrap();
        assert_eq!((guard.handed, guard.asked), (0, 1));
    }
}
