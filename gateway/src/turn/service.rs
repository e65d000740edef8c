//! [`Turn`]: the service that rebuilds a turn's conversation before the stack sees it, and keeps what the
//! stack's answer leaves for a later request.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::ServiceExt;
use tower_chat::{ChatError, ChatRequest, ChatStream};

use crate::turn::future::ResponseFuture;
use crate::turn::stream::KeptStream;
use crate::turn::Keeping;

/// See the [module docs](crate::turn).
///
/// The stack is shared, not owned: a route clones this service for every request, and each call clones the
/// stack once and drives that clone to readiness itself (`oneshot`), after the turn's lookups. Owning it would
/// clone the whole stack (every layer in it) twice a request, once here and once for the call.
pub(crate) struct Turn<S> {
    inner: Arc<S>,
    keeping: Arc<Keeping>,
}

impl<S> Clone for Turn<S> {
    fn clone(&self) -> Self {
        Turn {
            inner: self.inner.clone(),
            keeping: self.keeping.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Turn<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").finish_non_exhaustive()
    }
}

impl<S> Turn<S> {
    pub(super) fn new(inner: S, keeping: Arc<Keeping>) -> Self {
        Turn {
            inner: Arc::new(inner),
            keeping,
        }
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

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        // The stack's own readiness is awaited by the call, on the clone it calls.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> ResponseFuture {
        let inner = S::clone(&self.inner);
        let keeping = self.keeping.clone();
        ResponseFuture::new(async move {
            let (request, kept) = crate::turn::resume::prepare(&keeping, request)
                .await
                .map_err(super::failed)?;
            let stream = inner.oneshot(request).await.map_err(super::failed_chat)?;
            Ok(Box::pin(KeptStream::new(stream, kept)) as ChatStream)
        })
    }
}
