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
                builder.push(&item?);
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
