//! A stream watched up to its first content event: whoever waits for the verdict of a call (a circuit breaker, a
//! balancer's latency estimate) gets it exactly once, without holding the stream back.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use tower_chat::{ChatError, ChatEvent, ChatStream};

use crate::first::is_content;

/// Told once how a call went: `Ok` at its first content event (or a clean end), `Err` at a failure before it.
/// A call dropped before either is never told (the implementor's `Drop` sees that).
pub(crate) trait Verdict: Send + 'static {
    fn settle(self, outcome: Result<(), &ChatError>);
}

/// The stream of a watched call.
pub(crate) struct Watched<V> {
    stream: ChatStream,
    verdict: Option<V>,
}

impl<V: Verdict> Watched<V> {
    pub(crate) fn new(stream: ChatStream, verdict: V) -> Self {
        Watched {
            stream,
            verdict: Some(verdict),
        }
    }
}

impl<V: Verdict + Unpin> Stream for Watched<V> {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = ready!(self.stream.as_mut().poll_next(cx));
        if self.verdict.is_some() {
            let outcome = match &next {
                Some(Ok(event)) if !is_content(event) => None,
                Some(Ok(_)) | None => Some(Ok(())),
                Some(Err(error)) => Some(Err(error)),
            };
            if let Some(outcome) = outcome {
                if let Some(verdict) = self.verdict.take() {
                    verdict.settle(outcome);
                }
            }
        }
        Poll::Ready(next)
    }
}

pin_project! {
    /// A call's response future that settles its verdict on failure and wraps its stream in [`Watched`].
    pub(crate) struct WatchedCall<F, V> {
        #[pin]
        future: F,
        verdict: Option<V>,
    }
}

impl<F, V> WatchedCall<F, V> {
    pub(crate) fn new(future: F, verdict: V) -> Self {
        WatchedCall {
            future,
            verdict: Some(verdict),
        }
    }
}

impl<F, V> Future for WatchedCall<F, V>
where
    F: Future<Output = Result<ChatStream, ChatError>>,
    V: Verdict + Unpin,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.future.poll(cx));
        let verdict = this
            .verdict
            .take()
            .expect("WatchedCall polled after completion");
        Poll::Ready(match result {
            Ok(stream) => Ok(Box::pin(Watched::new(stream, verdict))),
            Err(error) => {
                verdict.settle(Err(&error));
                Err(error)
            }
        })
    }
}
