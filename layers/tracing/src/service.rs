//! The [`Tracing`] service and its response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tower_chat::{ChatError, ChatRequest, ChatStream, ModelInfo};
use tower_service::Service;

use crate::call::{CallState, Shared};
use crate::metrics::{Metrics, NoMetrics};
use crate::stream::TracedStream;

/// Traces every call of the inner service with a `chat {model}` span, and records its metrics. Built by
/// [`TracingLayer`](crate::TracingLayer); see the crate docs.
pub struct Tracing<S, M = NoMetrics> {
    inner: S,
    shared: Arc<Shared<M>>,
}

impl<S, M> Tracing<S, M> {
    pub(crate) fn from_parts(inner: S, shared: Shared<M>) -> Self {
        Tracing {
            inner,
            shared: Arc::new(shared),
        }
    }

    tower_chat::define_inner_service_accessors!();
}

impl<S: Clone, M> Clone for Tracing<S, M> {
    fn clone(&self) -> Self {
        Tracing {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, M> fmt::Debug for Tracing<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracing")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S: ModelInfo, M> ModelInfo for Tracing<S, M> {
    fn model_metadata(&self) -> tower_chat::ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S, M> Service<ChatRequest> for Tracing<S, M>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
    M: Metrics,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S::Future, M>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let state = CallState::new(Arc::clone(&self.shared), &request);
        // Whatever the inner service does synchronously in `call` (a span, a log line) belongs to this call too.
        let inner = state.span().in_scope(|| self.inner.call(request));
        ResponseFuture {
            inner,
            state: Some(state),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`Tracing`] call: resolves to the traced stream, or to the service's error, which ends the
    /// call's span as failed. Dropping it before it resolves ends the span as cancelled.
    pub struct ResponseFuture<F, M: Metrics> {
        #[pin]
        inner: F,
        state: Option<CallState<M>>,
    }
}

impl<F, M: Metrics> fmt::Debug for ResponseFuture<F, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("ended", &self.state.is_none())
            .finish_non_exhaustive()
    }
}

impl<F, M> Future for ResponseFuture<F, M>
where
    F: Future<Output = Result<ChatStream, ChatError>>,
    M: Metrics,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = {
            let state = this
                .state
                .as_ref()
                .expect("ResponseFuture polled after completion");
            let _entered = state.span().enter();
            ready!(this.inner.poll(cx))
        };
        let mut state = this
            .state
            .take()
            .expect("ResponseFuture polled after completion");
        match result {
            Ok(stream) => Poll::Ready(Ok(Box::pin(TracedStream::new(stream, state)))),
            Err(error) => {
                state.fail(&error);
                Poll::Ready(Err(error))
            }
        }
    }
}
