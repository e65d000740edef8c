//! The stream wrapper: polls the inner stream inside the call's span and ends the call exactly once.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tower_chat::{ChatError, ChatEvent, ChatStream};

use crate::call::CallState;
use crate::metrics::Metrics;

/// The stream a traced call returns (boxed as a [`ChatStream`]). Modelled on tower-http's trace `ResponseBody`:
/// the span is entered for every poll, so whatever the inner stream does while polled (a tool loop running a
/// tool, a log line) nests under the call; the call ends at the first error item or the end of the stream, and
/// if the stream is dropped before either, [`CallState`]'s drop ends it as cancelled.
pub(crate) struct TracedStream<M: Metrics> {
    /// `None` once the inner stream has ended: the wrapper is fused, as consumers may poll once more.
    inner: Option<ChatStream>,
    /// `None` once the call has ended; later polls go straight to the inner stream.
    state: Option<CallState<M>>,
}

impl<M: Metrics> TracedStream<M> {
    pub(crate) fn new(inner: ChatStream, state: CallState<M>) -> Self {
        TracedStream {
            inner: Some(inner),
            state: Some(state),
        }
    }
}

impl<M: Metrics> Stream for TracedStream<M> {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let Some(state) = this.state.as_mut() else {
            let poll = inner.as_mut().poll_next(cx);
            if let Poll::Ready(None) = poll {
                this.inner = None;
            }
            return poll;
        };
        let poll = {
            let _entered = state.span().enter();
            inner.as_mut().poll_next(cx)
        };
        match &poll {
            Poll::Pending => {}
            Poll::Ready(Some(Ok(event))) => state.observe(event),
            Poll::Ready(Some(Err(error))) => {
                state.fail(error);
                this.state = None;
            }
            Poll::Ready(None) => {
                state.end_of_stream();
                this.state = None;
                this.inner = None;
            }
        }
        poll
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => (0, Some(0)),
        }
    }
}
