//! [`BoxedChatFuture`]: the one response future of the layers whose call is an `async` block.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_chat::{ChatError, ChatStream};

/// A boxed future resolving to a chat stream: the response future of [`Retry`](crate::Retry),
/// [`Fallback`](crate::Fallback) and [`Balance`](crate::Balance) (named [`RetryFuture`](crate::RetryFuture),
/// [`FallbackFuture`](crate::FallbackFuture) and [`BalanceFuture`](crate::BalanceFuture) there).
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
