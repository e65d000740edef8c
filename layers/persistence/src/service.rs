//! [`Persistence`], the service the layer builds, and its response future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::SystemTime;

use pin_project_lite::pin_project;
use tower_chat::{
    ChatError, ChatRequest, ChatStream, ConversationId, EstimatedUsage, GuardedCall,
    GuardrailAudit, ModelInfo, ModelMetadata, ResponseBuilder, Shared,
};
use tower_service::Service;

use crate::config::Config;
use crate::draft::{outcome_of_error, Draft};
use crate::record::{
    round_index, stored_options, CallId, CallOutcome, RecordedRequest, RequestId, RequestedCallId,
};
use crate::recorder::Recorder;
use crate::stream::RecordingStream;

/// Records every call to the inner service; built by [`PersistenceLayer`](crate::PersistenceLayer).
#[derive(Clone, Debug)]
pub struct Persistence<S> {
    inner: S,
    config: Config,
    /// The provider recorded with every call: the inner service's ([`ModelInfo`]) when the layer built this.
    provider: Option<Arc<str>>,
}

impl<S> Persistence<S> {
    pub(crate) fn from_config(inner: S, config: Config, provider: Option<Arc<str>>) -> Self {
        Persistence {
            inner,
            config,
            provider,
        }
    }

    tower_chat::define_inner_service_accessors!();

    pub(crate) fn config(&self) -> &Config {
        &self.config
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
        // What an inner layer charged when it had to estimate the usage (the limits layer), for the record.
        let estimate = EstimatedUsage::new();
        request.extensions.insert(estimate.clone());
        // What a content policy inside decides, for the record (passed on to an audit from outside too).
        let audit = match request.extensions.get::<GuardrailAudit>() {
            Some(outer) => GuardrailAudit::nested(outer.clone()),
            None => GuardrailAudit::new(),
        };
        request.extensions.insert(audit.clone());
        let guarded = request.extensions.get::<GuardedCall>().cloned();
        // A later round of a tool loop inside a policy: what the loop added is kept as the client saw it.
        let (messages, screened) = match guarded
            .as_ref()
            .and_then(|guarded| crate::screening::screen_request(guarded, &request.messages))
        {
            Some((messages, verdicts)) => (Shared::new(messages), verdicts),
            None => (request.messages.clone(), Vec::new()),
        };
        let draft = Draft {
            call_id,
            conversation_id,
            caller: request.caller().cloned(),
            request_id: request.extensions.get::<RequestId>().cloned(),
            team: request
                .extensions
                .get::<crate::record::CallerTeam>()
                .cloned(),
            round_index: round_index(&request.messages),
            started_at,
            provider: self.provider.clone(),
            prices: self.config.prices.clone(),
            request: RecordedRequest {
                messages,
                options: stored_options(&request.options),
                omitted: None,
            },
            estimate,
            audit,
            guarded,
            screened,
        };
        if self.config.in_flight {
            self.config.recorder.submit(draft.in_flight());
        }
        ResponseFuture {
            inner: self.inner.call(request),
            pending: PendingRecord {
                draft: Some(draft),
                recorder: self.config.recorder.clone(),
            },
        }
    }
}

pin_project! {
    /// The future of [`Persistence::call`]: the inner future, then the inner stream wrapped in a recorder.
    ///
    /// If the inner call fails, the failure is recorded (without waiting for the write) and returned as it was;
    /// a call an inner layer refused before sending it ([`ChatError::is_refused_before_sending`]) is recorded
    /// without its request (see [`RecordedRequest`]). If this future is dropped before the inner call resolved,
    /// the call is recorded as cancelled.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // Declared after `inner`, so dropped after it: what the inner future settles as it is dropped (a limits
        // layer's estimated charge) is in the cancelled call's record.
        pending: PendingRecord,
    }
}

/// The record of a call whose service call has not resolved: recorded as cancelled if dropped so.
struct PendingRecord {
    draft: Option<Draft>,
    recorder: Recorder,
}

impl Drop for PendingRecord {
    fn drop(&mut self) {
        if let Some(draft) = self.draft.take() {
            let record = draft.finish(ResponseBuilder::new(), None, CallOutcome::Cancelled);
            self.recorder.submit(record);
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("draft", &self.pending.draft)
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
        let pending = this.pending;
        let mut draft = pending
            .draft
            .take()
            .expect("ResponseFuture polled after completion");
        Poll::Ready(match result {
            Ok(stream) => Ok(Box::pin(RecordingStream::new(
                stream,
                draft,
                pending.recorder.clone(),
            ))),
            Err(error) => {
                if error.is_refused_before_sending() {
                    draft.omit_request();
                }
                let outcome = outcome_of_error(&error, false);
                pending
                    .recorder
                    .submit(draft.finish(ResponseBuilder::new(), None, outcome));
                Err(error)
            }
        })
    }
}
