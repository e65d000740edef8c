//! [`LimitedStream`]: passes events through while summing usage, and settles the call's reservation when the
//! stream ends, fails or is dropped.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tower_chat::{ChatError, ChatEvent, ChatStream, Usage};

use crate::shared::Lease;

/// A call checked against the policy, before the store is asked: the response stream it will return, with
/// its lease inside and no inner stream yet. One allocation carries the call from admission to settlement (the
/// future moves a pointer, and the stream needs no second box).
pub(crate) type Prepared = Box<LimitedStream>;

/// The stream a [`crate::Limited`] service returns.
///
/// Per event it adds [`ChatEvent::Usage`] increments and counts output characters (in its lease); nothing else.
/// The lease is settled exactly once (its `armed` flag): when the inner stream ends (after any usage that
/// follows `Finish`), when it yields an error (partial usage counted), or from the lease's `Drop` when the
/// caller drops the stream early (the cancelled call is charged what it was seen to use: its usage events, or
/// the estimated prompt and the output characters seen when the provider's usage report never arrived).
pub struct LimitedStream {
    /// The inner stream; `None` while the call is being admitted and the inner service called.
    inner: Option<ChatStream>,
    lease: Lease,
    ended: bool,
}

impl fmt::Debug for LimitedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitedStream")
            .field("lease", &self.lease)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl LimitedStream {
    /// A call's stream before it has an inner stream: the lease travels in it from admission on.
    pub(crate) fn prepared(lease: Lease) -> Prepared {
        // Allocated first and filled in place: built on the stack, the ~150-byte stream would be copied.
        let boxed = Box::<LimitedStream>::new_uninit();
        Box::write(
            boxed,
            LimitedStream {
                inner: None,
                lease,
                ended: false,
            },
        )
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The lease, for the store's answer to arm.
    #[inline]
    pub(crate) fn lease_mut(&mut self) -> &mut Lease {
        &mut self.lease
    }

    /// The inner service answered: pass its events through from now on.
    #[inline]
    pub(crate) fn start(&mut self, inner: ChatStream) {
        self.inner = Some(inner);
    }

    /// The inner service failed: the provider refused or could not be reached, nothing was generated.
    pub(crate) fn refused(&mut self) {
        self.lease.settle(false);
    }
}

impl Stream for LimitedStream {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut().filter(|_| !this.ended) else {
            return Poll::Ready(None);
        };
        // Inspected where it lies and returned as it is: the ~100-byte item is not moved out and back.
        let poll = inner.as_mut().poll_next(cx);
        let Poll::Ready(item) = &poll else {
            return poll;
        };
        let lease = &mut this.lease;
        match item {
            Some(Ok(event)) => match event {
                ChatEvent::Usage { usage } => {
                    let charged = lease.usage.get_or_insert_with(Usage::default);
                    // A response cache's replay was paid for by the call that produced it: the usage is known
                    // (no estimate is charged) and owes nothing.
                    if !usage.from_response_cache {
                        charged.add(usage);
                    }
                }
                ChatEvent::TextDelta { text } | ChatEvent::ReasoningDelta { text } => {
                    lease.output_chars += text.len() as u64
                }
                ChatEvent::ToolCallDelta { arguments, .. } => {
                    lease.output_chars += arguments.len() as u64
                }
                _ => {}
            },
            Some(Err(_)) | None => {
                this.ended = true;
                lease.settle(true);
            }
        }
        poll
    }
}
