//! [`Persistence`], the service the layer builds, and its response future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::SystemTime;

use pin_project_lite::pin_project;
use tower_chat::{
    ChatError, ChatOptions, ChatRequest, ChatStream, ConversationId, ErrorKind, EstimatedUsage,
    GuardedCall, GuardrailAudit, GuardrailVerdict, ModelInfo, ModelMetadata, PriceTable,
    ResponseBuilder, Shared, Usage,
};
use tower_service::Service;

use crate::layer::PersistenceLayer;
use crate::record::{
    round_index, stored_options, CallId, CallOutcome, CallRecord, RecordedError, RecordedRequest,
    RequestId, RequestSize, RequestedCallId,
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

    tower_chat::define_inner_service_accessors!();

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
        // What an inner layer charged when it had to estimate the usage (the limits layer), for the record.
        let estimate = EstimatedUsage::new();
        request.extensions.insert(estimate.clone());
        // What a content policy inside decides, for the record (passed on to an audit from outside too).
        let audit = match request.extensions.get::<GuardrailAudit>() {
            Some(outer) => GuardrailAudit::nested(outer.clone()),
            None => GuardrailAudit::new(),
        };
        request.extensions.insert(audit.clone());
        let draft = Draft {
            call_id,
            conversation_id,
            caller: request.caller().cloned(),
            request_id: request.extensions.get::<RequestId>().cloned(),
            round_index: round_index(&request.messages),
            started_at,
            provider: self.provider.clone(),
            prices: self.layer.prices.clone(),
            request: RecordedRequest {
                messages: request.messages.clone(),
                options: stored_options(&request.options),
                omitted: None,
            },
            estimate,
            audit,
            guarded: request.extensions.get::<GuardedCall>().cloned(),
            screened: Vec::new(),
        };
        if self.layer.in_flight {
            self.layer.recorder.submit(draft.in_flight());
        }
        ResponseFuture {
            inner: self.inner.call(request),
            pending: PendingRecord {
                draft: Some(draft),
                recorder: self.layer.recorder.clone(),
            },
        }
    }
}

/// What is known of a call before its response: everything but the outcome.
#[derive(Debug)]
pub(crate) struct Draft {
    call_id: CallId,
    conversation_id: ConversationId,
    caller: Option<tower_chat::CallerIdentity>,
    request_id: Option<RequestId>,
    round_index: u32,
    started_at: SystemTime,
    provider: Option<Arc<str>>,
    prices: Option<Arc<PriceTable>>,
    request: RecordedRequest,
    /// Set by an inner layer that charged the call an estimate (read when the record is built).
    estimate: EstimatedUsage,
    /// Filled by a guardrail layer inside (read when the record is built).
    audit: GuardrailAudit,
    /// Left by a guardrail layer outside: the request's verdicts, and the screens the answer is kept through.
    pub(crate) guarded: Option<GuardedCall>,
    /// The verdicts the screens of a guardrail outside gave the answer.
    pub(crate) screened: Vec<GuardrailVerdict>,
}

impl Draft {
    /// The record of the call as it starts.
    fn in_flight(&self) -> CallRecord {
        CallRecord {
            call_id: self.call_id.clone(),
            conversation_id: self.conversation_id.clone(),
            caller: self.caller.clone(),
            request_id: self.request_id.clone(),
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
            usage_estimated: false,
            guardrail: Vec::new(),
        }
    }

    /// The request as recorded for a call refused before it was sent: its size and model, not its messages
    /// (nor the tools and options, which a request can make as large as its messages).
    fn omit_request(&mut self) {
        let messages = std::mem::take(&mut self.request.messages);
        self.request = RecordedRequest {
            omitted: Some(RequestSize::of(&messages)),
            messages: Shared::new(Vec::new()),
            options: Shared::new(ChatOptions {
                model: self.request.options.model.clone(),
                ..ChatOptions::default()
            }),
        };
    }

    pub(crate) fn finish(
        mut self,
        builder: ResponseBuilder,
        first_token_at: Option<SystemTime>,
        outcome: CallOutcome,
    ) -> CallRecord {
        // A stream cut midway keeps the tool calls it was still streaming, with their argument text so far.
        let mut response = builder.finish_with_open_calls();
        // A policy inside redacted the request: what was sent is what is kept.
        if self.request.omitted.is_none() {
            if let Some(sent) = self.audit.sent_messages() {
                self.request.messages = sent;
            }
        }
        // No usage reported, and an inner layer charged an estimate: the record carries what was charged.
        let estimated = match self.estimate.get() {
            Some(estimate) if response.usage == Usage::default() => {
                response.usage = estimate;
                true
            }
            _ => false,
        };
        let cost = self.prices.as_deref().and_then(|prices| {
            [
                self.request.options.model.as_deref(),
                response.model.as_deref(),
            ]
            .into_iter()
            .flatten()
            .find_map(|model| prices.cost(model, &response.usage))
        });
        let guardrail = self.verdicts();
        CallRecord {
            cost,
            model: response
                .model
                .clone()
                .or_else(|| self.request.options.model.clone()),
            call_id: self.call_id,
            conversation_id: self.conversation_id,
            caller: self.caller,
            request_id: self.request_id,
            round_index: self.round_index,
            started_at: self.started_at,
            first_token_at,
            ended_at: SystemTime::now(),
            provider: self.provider.as_deref().map(str::to_owned),
            request: self.request,
            response,
            outcome,
            usage_estimated: estimated,
            guardrail,
        }
    }
}

impl Draft {
    /// The call's verdicts: those of a policy inside (as it made them), then those of a policy outside (the
    /// request's, then the answer's as screened here).
    fn verdicts(&mut self) -> Vec<GuardrailVerdict> {
        let mut verdicts = self.audit.verdicts();
        if let Some(guarded) = &self.guarded {
            verdicts.extend(guarded.take_request_verdicts());
        }
        verdicts.append(&mut self.screened);
        verdicts
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
