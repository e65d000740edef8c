use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_chat::{ChatError, ChatRequest, ChatStream, ModelInfo, ModelMetadata};
use tower_service::Service;

use crate::config::Config;
use crate::stream::{LoopCore, State, ToolLoop};
use crate::toolset::{RequestTools, Resolved};

/// A chat service that runs tools until the model is done; see [`FunctionInvocationLayer`](crate::FunctionInvocationLayer).
#[derive(Clone)]
pub struct FunctionInvocation<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> FunctionInvocation<S> {
    pub(crate) fn from_config(inner: S, config: Arc<Config>) -> Self {
        FunctionInvocation { inner, config }
    }

    tower_chat::define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for FunctionInvocation<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionInvocation")
            .field("inner", &self.inner)
            .field("tools", &self.config.tools)
            .finish_non_exhaustive()
    }
}

impl<S: ModelInfo> ModelInfo for FunctionInvocation<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S> Service<ChatRequest> for FunctionInvocation<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        // The service polled ready goes with this request; the one left behind must be polled again.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        if request.cancellation().is_some_and(|t| t.is_cancelled()) {
            return ResponseFuture::failed(ChatError::cancelled());
        }
        let own_tools =
            request.extensions.get::<RequestTools>().is_some() || !request.options.tools.is_empty();
        let tools = if own_tools {
            let registry = self.config.registry.as_deref();
            match Resolved::for_request(&self.config.tools, registry, &mut request) {
                Ok(resolved) => Arc::new(resolved),
                Err(error) => return ResponseFuture::failed(error),
            }
        } else {
            self.config.base.clone()
        };
        let mut core = LoopCore::new(inner, self.config.clone(), tools, request);
        if core.resumes() {
            let stream: ChatStream = Box::pin(ToolLoop::new(core, State::Resume));
            return ResponseFuture {
                kind: Kind::Ready {
                    stream: Some(stream),
                },
            };
        }
        let first = core.next_request();
        let future = core.inner_mut().call(first);
        ResponseFuture {
            kind: Kind::Calling {
                future,
                core: Some(core),
            },
        }
    }
}

pin_project! {
    /// The future of [`FunctionInvocation`]: resolves with the loop's stream once the first model call was accepted
    /// (so authentication and rate-limit errors of the first call stay service errors), or at once when the
    /// request resumes pending tool calls.
    pub struct ResponseFuture<S>
    where
        S: Service<ChatRequest>,
    {
        #[pin]
        kind: Kind<S>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S>
    where
        S: Service<ChatRequest>,
    {
        Failed { error: Option<ChatError> },
        Ready { stream: Option<ChatStream> },
        Calling { #[pin] future: S::Future, core: Option<LoopCore<S>> },
    }
}

impl<S: Service<ChatRequest>> ResponseFuture<S> {
    fn failed(error: ChatError) -> Self {
        ResponseFuture {
            kind: Kind::Failed { error: Some(error) },
        }
    }
}

impl<S: Service<ChatRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .expect("ResponseFuture polled after completion"))),
            KindProj::Ready { stream } => Poll::Ready(Ok(stream
                .take()
                .expect("ResponseFuture polled after completion"))),
            KindProj::Calling { future, core } => {
                let stream = ready!(future.poll(cx))?;
                let core = core.take().expect("ResponseFuture polled after completion");
                Poll::Ready(Ok(Box::pin(ToolLoop::new(
                    core,
                    State::Streaming { stream },
                ))))
            }
        }
    }
}
