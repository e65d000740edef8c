//! [`ResponseFuture`]: the future of a [`Turn`](crate::turn::service::Turn) call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_chat::{ChatError, ChatStream};

type Boxed = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

/// The turn rebuilt (its lookups in the pending store, the approval store and the call records are awaited)
/// and the stack called. One box: the lookups are async calls into the stores, a state per await would be a
/// state machine as long as the code it runs.
pub(crate) struct ResponseFuture {
    inner: Boxed,
}

impl ResponseFuture {
    pub(super) fn new(
        future: impl Future<Output = Result<ChatStream, ChatError>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            inner: Box::pin(future),
        }
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<ChatStream, ChatError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
