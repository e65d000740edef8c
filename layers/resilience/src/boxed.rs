//! [`BoxedChatFuture`]: the response future of a layer whose call is an `async` block.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_chat::{ChatError, ChatStream};

/// A boxed future resolving to a chat stream: the response future of [`Balance`](crate::Balance) (named
/// [`BalanceFuture`](crate::BalanceFuture) there). [`Retry`](crate::Retry) and [`Fallback`](crate::Fallback) have
/// hand-written state machines instead: they sit on every call's happy path.
pub struct BoxedChatFuture {
    inner: Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send + 'static>>,
}

impl BoxedChatFuture {
    pub(crate) fn new(
        future: impl Future<Output = Result<ChatStream, ChatError>> + Send + 'static,
    ) -> Self {
        BoxedChatFuture {
            inner: Box::pin(future),
        }
    }
}

impl fmt::Debug for BoxedChatFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxedChatFuture").finish_non_exhaustive()
    }
}

impl Future for BoxedChatFuture {
    type Output = Result<ChatStream, ChatError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
