//! [`Persistence`], the service the layer builds, and its response future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::SystemTime;

use pin_project_lite::pin_project;
use tower_chat::{
    ChatError, ChatRequest, ChatStream, ConversationId, ErrorKind, ModelInfo, ModelMetadata,
    PriceTable, ResponseBuilder,
};
use tower_service::Service;

use crate::layer::PersistenceLayer;
use crate::record::{
    round_index, stored_options, CallId, CallOutcome, CallRecord, RecordedError, RecordedRequest,
    RequestedCallId,
};
use crate::recorder::Recorder;
use crate::stream::RecordingStream;

/// Records every call to the inner service; built by [`PersistenceLayer`].
#[derive(Clone, Debug)]
pub struct Persistence<S> {
    inner: S,
    layer: PersistenceLayer,
    /// The provider recorded with every call: the inner service's ([`ModelInfo`]) when the layer built this.
    provider: Option<Arc<str>>,
}

impl<S> Persistence<S> {
    /// Wrap `inner`, recording through `layer`'s writer, with no provider name: for an inner service that
    /// implements no [`ModelInfo`] (`Layer::layer` reads the provider from it otherwise).
    pub fn new(inner: S, layer: PersistenceLayer) -> Self {
        Persistence::with_provider(inner, layer, None)
    }

    pub(crate) fn with_provider(
        inner: S,
        layer: PersistenceLayer,
        provider: Option<Arc<str>>,
    ) -> Self {
        Persistence {
            inner,
            layer,
            provider,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The layer (store, stats, flush).
    pub fn layer(&self) -> &PersistenceLayer {
        &self.layer
    }
}

impl<S: ModelInfo> ModelInfo for Persistence<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S> Service<ChatRequest> for Persistence<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        let started_at = SystemTime::now();
        let conversation_id = match request.conversation_id() {
            Some(id) => id.clone(),
            None => {
                // Inner layers (and a tool loop's later rounds) see the generated id, so every record of this
                // turn shares it.
                let id = ConversationId::new(uuid::Uuid::now_v7().to_string());
                request.extensions.insert(id.clone());
                id
            }
        };
        // A front end that hands the id to its client names the record itself; taken out, so a nested layer
        // does not reuse it.
        let call_id = match request.extensions.remove::<RequestedCallId>() {
            Some(RequestedCallId(id)) => id,
            None => CallId::generate(),
        };
        request.extensions.insert(call_id.clone());
        let draft = Draft {
            call_id,
            conversation_id,
            caller: request.caller().cloned(),
            round_index: round_index(&request.messages),
            started_at,
            provider: self.provider.clone(),
            prices: self.layer.prices.clone(),
            request: RecordedRequest {
                messages: request.messages.clone(),
                options: stored_options(&request.options),
            },
        };
        if self.layer.in_flight {
            self.layer.recorder.submit(draft.in_flight());
        }
        ResponseFuture {
            inner: self.inner.call(request),
            draft: Some(draft),
            recorder: self.layer.recorder.clone(),
        }
    }
}

/// What is known of a call before its response: everything but the outcome.
#[derive(Debug)]
pub(crate) struct Draft {
    call_id: CallId,
    conversation_id: ConversationId,
    caller: Option<tower_chat::CallerIdentity>,
    round_index: u32,
    started_at: SystemTime,
    provider: Option<Arc<str>>,
    prices: Option<Arc<PriceTable>>,
    request: RecordedRequest,
}

impl Draft {
    /// The record of the call as it starts.
    fn in_flight(&self) -> CallRecord {
        CallRecord {
            call_id: self.call_id.clone(),
            conversation_id: self.conversation_id.clone(),
            caller: self.caller.clone(),
            round_index: self.round_index,
            started_at: self.started_at,
            first_token_at: None,
            ended_at: self.started_at,
            provider: self.provider.as_deref().map(str::to_owned),
            model: self.request.options.model.clone(),
            request: self.request.clone(),
            response: tower_chat::ChatResponse::default(),
            outcome: CallOutcome::InFlight,
            cost: None,
        }
    }

    pub(crate) fn finish(
        self,
        builder: ResponseBuilder,
        first_token_at: Option<SystemTime>,
        outcome: CallOutcome,
    ) -> CallRecord {
        let response = builder.finish();
        let cost = self.prices.as_deref().and_then(|prices| {
            [
                self.request.options.model.as_deref(),
                response.model.as_deref(),
            ]
            .into_iter()
            .flatten()
            .find_map(|model| prices.cost(model, &response.usage))
        });
        CallRecord {
            cost,
            model: response
                .model
                .clone()
                .or_else(|| self.request.options.model.clone()),
            call_id: self.call_id,
            conversation_id: self.conversation_id,
            caller: self.caller,
            round_index: self.round_index,
            started_at: self.started_at,
            first_token_at,
            ended_at: SystemTime::now(),
            provider: self.provider.as_deref().map(str::to_owned),
            request: self.request,
            response,
            outcome,
        }
    }
}

/// The outcome of an error that ended a call; `output_began` says whether any event arrived before it.
pub(crate) fn outcome_of_error(error: &ChatError, output_began: bool) -> CallOutcome {
    if *error.kind() == ErrorKind::Cancelled {
        CallOutcome::Cancelled
    } else if output_began {
        CallOutcome::Interrupted {
            error: Some(RecordedError::from(error)),
        }
    } else {
        CallOutcome::Failed {
            error: RecordedError::from(error),
        }
    }
}

pin_project! {
    /// The future of [`Persistence::call`]: the inner future, then the inner stream wrapped in a recorder.
    ///
    /// If the inner call fails, the failure is recorded (without waiting for the write) and returned as it was.
    /// If this future is dropped before the inner call resolved, the call is recorded as cancelled.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        draft: Option<Draft>,
        recorder: Recorder,
    }

    impl<F> PinnedDrop for ResponseFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(draft) = this.draft.take() {
                let record = draft.finish(ResponseBuilder::new(), None, CallOutcome::Cancelled);
                this.recorder.submit(record);
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("draft", &self.draft)
            .finish_non_exhaustive()
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ChatStream, ChatError>>,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let draft = this
            .draft
            .take()
            .expect("ResponseFuture polled after completion");
        Poll::Ready(match result {
            Ok(stream) => Ok(Box::pin(RecordingStream::new(
                stream,
                draft,
                this.recorder.clone(),
            ))),
            Err(error) => {
                let outcome = outcome_of_error(&error, false);
                this.recorder
                    .submit(draft.finish(ResponseBuilder::new(), None, outcome));
                Err(error)
            }
        })
    }
}
