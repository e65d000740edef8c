use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use tower_chat::{ApprovalDecisions, ChatError, ChatRequest, ChatStream, ModelInfo, ModelMetadata};
use tower_chat_function_invocation::{ApprovalPolicy, InsideToolLoop, ToolLoopPresence};
use tower_service::Service;

use crate::placement::ApprovalMisplaced;
use crate::policy::compose;
use crate::shared::Shared;
use crate::stream::{ApprovalStream, Binding};
use crate::verify;

/// A chat service with verified human approvals; see [`ApprovalLayer`](crate::ApprovalLayer).
#[derive(Clone)]
pub struct Approval<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Approval<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Approval { inner, shared }
    }

    tower_chat::define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Approval<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approval")
            .field("inner", &self.inner)
            .field("ttl", &self.shared.ttl)
            .finish_non_exhaustive()
    }
}

impl<S: ModelInfo> ModelInfo for Approval<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S> Service<ChatRequest> for Approval<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        if request.extensions.get::<InsideToolLoop>().is_some() {
            return ResponseFuture {
                kind: Kind::Misplaced {
                    error: Some(ApprovalMisplaced::InsideToolLoop.into()),
                },
                wrap: None,
            };
        }
        // Nested approval layers share one presence: the loop under the innermost marks it for all of them.
        if request.extensions.get::<ToolLoopPresence>().is_none() {
            request.extensions.insert(ToolLoopPresence::new());
        }
        let policy = match request.extensions.get::<ApprovalPolicy>() {
            Some(outer) => compose(outer.clone(), self.shared.policy.clone()),
            None => self.shared.policy.clone(),
        };
        request.extensions.insert(policy);
        let binding = Binding::of(&request);
        let shared = self.shared.clone();
        // Whatever decisions the request carries, only verified ones (translated to call ids) reach the loop.
        let decisions = request
            .extensions
            .remove::<ApprovalDecisions>()
            .filter(|d| !d.0.is_empty());
        let Some(decisions) = decisions else {
            return ResponseFuture {
                kind: Kind::Calling {
                    future: self.inner.call(request),
                },
                wrap: Some((shared, binding)),
            };
        };
        // The service polled ready goes with this request (it is called after the store answered); the one left
        // behind must be polled again.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let verifying = shared.clone();
        let future = Box::pin(async move {
            let verified = verify::verify(&verifying, &request, decisions).await?;
            request.extensions.insert(verified);
            inner.call(request).await
        });
        ResponseFuture {
            kind: Kind::Verifying { future },
            wrap: Some((shared, binding)),
        }
    }
}

pin_project! {
    /// The future of [`Approval`]: decisions are verified and taken from the store first (when the request
    /// carries any); then the inner service is called and its stream wrapped so approval requests are recorded
    /// before they are reported.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
        wrap: Option<(Arc<Shared>, Binding)>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Calling { #[pin] future: F },
        Verifying { future: BoxFuture<'static, Result<ChatStream, ChatError>> },
        Misplaced { error: Option<ChatError> },
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ChatStream, ChatError>>,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let stream = match this.kind.project() {
            KindProj::Calling { future } => ready!(future.poll(cx)),
            KindProj::Verifying { future } => ready!(future.as_mut().poll(cx)),
            KindProj::Misplaced { error } => {
                return Poll::Ready(Err(error
                    .take()
                    .expect("ResponseFuture polled after completion")))
            }
        }?;
        let (shared, binding) = this
            .wrap
            .take()
            .expect("ResponseFuture polled after completion");
        Poll::Ready(Ok(Box::pin(ApprovalStream::new(stream, shared, binding))))
    }
}
