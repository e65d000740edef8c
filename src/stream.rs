//! [`ChatStream`], the response type of every chat service, and helpers to consume it.

use std::future::Future;
use std::pin::Pin;

use futures_core::Stream;
use futures_util::StreamExt;

use crate::error::ChatError;
use crate::event::ChatEvent;
use crate::request::ChatRequest;
use crate::response::{ChatResponse, ResponseBuilder};

/// The response of every chat service: a stream of events, failures after the first byte arriving as `Err`
/// items. After an `Err` item the stream ends.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatEvent, ChatError>> + Send + 'static>>;

/// Consuming a chat event stream.
pub trait ChatStreamExt: Stream<Item = Result<ChatEvent, ChatError>> + Sized {
    /// Collect the whole stream into a [`ChatResponse`]; the first error item ends collection with that error.
    fn collect_response(self) -> impl Future<Output = Result<ChatResponse, ChatError>> + Send
    where
        Self: Send,
    {
        async move {
            let mut stream = std::pin::pin!(self);
            let mut builder = ResponseBuilder::new();
            while let Some(item) = stream.next().await {
                builder.push_owned(item?);
            }
            Ok(builder.finish())
        }
    }
}

impl<S: Stream<Item = Result<ChatEvent, ChatError>>> ChatStreamExt for S {}

/// A `tower::Service` that answers a [`ChatRequest`] with a [`ChatStream`]: the bound every layer puts on the
/// service it wraps. Implemented for every such service.
pub trait ChatService:
    tower_service::Service<ChatRequest, Response = ChatStream, Error = ChatError>
{
}

impl<S> ChatService for S where
    S: tower_service::Service<ChatRequest, Response = ChatStream, Error = ChatError>
{
}

/// End `stream` with an [`ErrorKind::Cancelled`](crate::ErrorKind::Cancelled) error item as soon as `token` is
/// cancelled (the inner stream is dropped at once, which closes its connection).
pub fn cancellable(stream: ChatStream, token: tokio_util::sync::CancellationToken) -> ChatStream {
    Box::pin(Cancellable {
        stream: Some(stream),
        cancelled: Box::pin(token.clone().cancelled_owned()),
        token,
    })
}

struct Cancellable {
    stream: Option<ChatStream>,
    token: tokio_util::sync::CancellationToken,
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl Stream for Cancellable {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = &mut *self;
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(None);
        };
        // An atomic load per event; the waker is registered only while the inner stream waits.
        let next = if this.token.is_cancelled() {
            Poll::Pending
        } else {
            stream.as_mut().poll_next(cx)
        };
        if next.is_pending() && this.cancelled.as_mut().poll(cx).is_ready() {
            this.stream = None;
            return Poll::Ready(Some(Err(ChatError::cancelled())));
        }
        if matches!(next, Poll::Ready(None | Some(Err(_)))) {
            this.stream = None;
        }
        next
    }
}
