//! [`Turn`]: the service that rebuilds a turn's conversation before the stack sees it, and keeps what the
//! stack's answer leaves for a later request.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower_chat::{ChatError, ChatRequest, ChatStream};

use crate::turn::future::ResponseFuture;
use crate::turn::layer::Keeping;
use crate::turn::stream::KeptStream;

/// See the [module docs](crate::turn).
#[derive(Clone)]
pub(crate) struct Turn<S> {
    inner: S,
    keeping: Arc<Keeping>,
}

impl<S> std::fmt::Debug for Turn<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").finish_non_exhaustive()
    }
}

impl<S> Turn<S> {
    pub(super) fn new(inner: S, keeping: Arc<Keeping>) -> Self {
        Turn { inner, keeping }
    }
}

impl<S> tower::Service<ChatRequest> for Turn<S>
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> ResponseFuture {
        // The clone that was polled ready goes to the call; this service keeps a fresh one (axum's
        // `from_fn` does the same): the call first awaits its lookups, and only then calls the stack.
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        let keeping = self.keeping.clone();
        ResponseFuture::new(async move {
            let (request, kept) = crate::turn::resume::prepare(&keeping, request)
                .await
                .map_err(super::failed)?;
            let stream = inner.call(request).await.map_err(super::failed_chat)?;
            Ok(Box::pin(KeptStream::new(stream, kept)) as ChatStream)
        })
    }
}
