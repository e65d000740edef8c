//! [`Limited`], the service the layer builds, and its response future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use tower_chat::{ChatError, ChatRequest, ChatStream, ModelInfo, ModelMetadata};
use tower_service::Service;

use crate::shared::Shared;
use crate::store::{Admission, LimitStoreError, StoreReply};
use crate::stream::{LimitedStream, Prepared};

/// Checks every call against the limits before calling the inner service; built by
/// [`LimitsLayer`](crate::LimitsLayer).
#[derive(Clone, Debug)]
pub struct Limited<S> {
    inner: S,
    shared: Arc<Shared>,
    /// The model a request that names none is counted under: the inner service's, read when the layer wrapped it.
    default_model: Option<Arc<str>>,
}

impl<S> Limited<S> {
    /// Wrap `inner` with a layer's shared state, counting requests that name no model under `default_model`.
    pub(crate) fn from_shared(
        inner: S,
        shared: Arc<Shared>,
        default_model: Option<Arc<str>>,
    ) -> Self {
        Limited {
            inner,
            shared,
            default_model,
        }
    }

    /// The model a request that names none is counted under.
    pub fn default_model(&self) -> Option<&str> {
        self.default_model.as_deref()
    }

    tower_chat::define_inner_service_accessors!();

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl<S: ModelInfo> ModelInfo for Limited<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S> Service<ChatRequest> for Limited<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let shared = &self.shared;
        let mut prepared = match shared.prepare(&request, self.default_model.as_deref()) {
            Ok(lease) => LimitedStream::prepared(lease),
            Err(error) => return ResponseFuture::failed(error),
        };
        // The inner service that was polled ready goes with this call (axum's clone-and-swap): a store that
        // answers later needs it after `call` has returned.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = match shared.store.reserve(prepared.lease().ticket()) {
            StoreReply::Ready(answer) => match shared.admitted(prepared.lease_mut(), answer) {
                Ok(()) => State::Calling {
                    future: inner.call(request),
                    call: Some(prepared),
                },
                Err(error) => State::Failed { error: Some(error) },
            },
            StoreReply::Pending(answer) => State::Reserving {
                answer,
                // Boxed: only a networked store takes this path, and an inline request would make every
                // call's future (the in-process store's too) larger to move.
                waiting: Some(Box::new((shared.clone(), prepared, inner, request))),
            },
        };
        ResponseFuture { state }
    }
}

pin_project! {
    /// The future of [`Limited::call`]:
    ///
    /// ```text
    /// Reserving ──admitted──▶ Calling ──inner resolved──▶ Done (stream wrapped in a LimitedStream)
    ///     │                      │
    ///     └─refused / store error└─inner failed ──▶ Done (error; the reservation released)
    /// ```
    ///
    /// Dropped while `Calling`, the call settles as one that reached the provider with no output seen. Dropped
    /// while `Reserving`, the store's answer is still awaited (on the runtime): a reservation the store made is
    /// settled as a call that sent nothing, so a cancelled admission leaves no charge and no slot behind.
    pub struct ResponseFuture<S: Service<ChatRequest>> {
        #[pin]
        state: State<S>,
    }

    impl<S: Service<ChatRequest>> PinnedDrop for ResponseFuture<S> {
        fn drop(this: Pin<&mut Self>) {
            if let StateProj::Reserving { answer, waiting } = this.project().state.project() {
                if let Some(waiting) = waiting.take() {
                    let answer = std::mem::replace(answer, Box::pin(std::future::pending()));
                    let (shared, mut call, _, _) = *waiting;
                    shared.abandoned(answer, move || {
                        call.lease_mut().arm();
                        call.refused();
                    });
                }
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S: Service<ChatRequest>> {
        /// Waiting for the store's answer; the inner service and the request wait with it.
        Reserving {
            answer: BoxFuture<'static, Result<Admission, LimitStoreError>>,
            waiting: Option<Box<(Arc<Shared>, Prepared, S, ChatRequest)>>,
        },
        /// Admitted: the inner call runs.
        Calling {
            #[pin]
            future: S::Future,
            call: Option<Prepared>,
        },
        /// Refused before any upstream call.
        Failed {
            error: Option<ChatError>,
        },
        Done,
    }
}

impl<S: Service<ChatRequest>> ResponseFuture<S> {
    fn failed(error: ChatError) -> Self {
        ResponseFuture {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<S: Service<ChatRequest>> std::fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Reserving { .. } => "reserving",
            State::Calling { .. } => "calling",
            State::Failed { .. } => "failed",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project().state.project() {
                StateProj::Reserving { answer, waiting } => {
                    let answer = ready!(answer.as_mut().poll(cx));
                    let (shared, mut prepared, mut inner, request) = *waiting
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let next = match shared.admitted(prepared.lease_mut(), answer) {
                        Ok(()) => State::Calling {
                            future: inner.call(request),
                            call: Some(prepared),
                        },
                        Err(error) => State::Failed { error: Some(error) },
                    };
                    self.as_mut().project().state.set(next);
                }
                StateProj::Calling { future, call } => {
                    let result = ready!(future.poll(cx));
                    let call = call.take();
                    self.as_mut().project().state.set(State::Done);
                    return Poll::Ready(match (result, call) {
                        (Ok(stream), Some(mut call)) => {
                            call.start(stream);
                            Ok(Box::into_pin(call))
                        }
                        (Ok(stream), None) => Ok(stream),
                        (Err(error), call) => {
                            if let Some(mut call) = call {
                                call.refused();
                            }
                            Err(error)
                        }
                    });
                }
                StateProj::Failed { error } => {
                    let error = error
                        .take()
                        .expect("ResponseFuture polled after completion");
                    self.as_mut().project().state.set(State::Done);
                    return Poll::Ready(Err(error));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}
