//! [`PersistenceLayer`]: configuration, and the handle to the background writer.

use std::sync::Arc;

use futures_util::FutureExt;
use tower_chat::{
    ChatError, ChatRequest, ChatStream, GuardedCall, GuardrailAudit, ModelInfo, PriceTable,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::config::Config;
use crate::recorder::{FailurePolicy, PersistenceStats, Recorder};
use crate::service::Persistence;
use crate::store::{Store, StoreError};

/// Records every call that passes through it in a [`Store`].
///
/// Placed inside a tool loop it records each model round trip; placed outside it records whole turns (tool
/// results included). Cloning is cheap: clones, and the services they build, share one background writer,
/// which starts with the first record (building the layer needs no runtime and cannot panic) and runs until the
/// last of them is dropped. Call [`PersistenceLayer::flush`] before shutting the runtime down so that records
/// still in the buffer are written.
///
/// Configured like every tower-chat layer (see `layers/README.md`): [`PersistenceLayer::new`] with the store,
/// then options as methods on the layer. The provider recorded with each call is the one the inner service
/// reports through [`ModelInfo`]: nothing to repeat here.
#[derive(Clone, Debug)]
pub struct PersistenceLayer {
    config: Config,
}

impl PersistenceLayer {
    /// A fail-closed layer over `store` with default options.
    pub fn new(store: impl Store) -> Self {
        PersistenceLayer::shared(Arc::new(store))
    }

    /// A layer over a store shared with other users (an application's read API, another layer).
    pub fn shared(store: Arc<dyn Store>) -> Self {
        let (buffer, max_batch) = (1024, 128);
        PersistenceLayer {
            config: Config {
                recorder: Recorder::new(store, FailurePolicy::default(), buffer, max_batch),
                in_flight: false,
                prices: None,
                buffer,
                max_batch,
            },
        }
    }

    /// A fresh (not yet started) writer with these settings. Options are set while the stack is built, before
    /// any record exists; layers cloned earlier keep their own writer.
    fn with_writer(mut self, policy: FailurePolicy, buffer: usize, max_batch: usize) -> Self {
        self.config.recorder = Recorder::new(
            self.config.recorder.store().clone(),
            policy,
            buffer,
            max_batch,
        );
        self.config.buffer = buffer;
        self.config.max_batch = max_batch;
        self
    }

    /// Price every record with this table ([`crate::CallRecord::cost`]): the requested model's price, else the
    /// answering model's. Use the same table as the limits layer so budgets and records agree.
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.config.prices = Some(Arc::new(prices));
        self
    }

    /// How many finished records may wait for the writer (default 1024). What happens when it is full depends
    /// on the [`FailurePolicy`].
    pub fn buffer(self, records: usize) -> Self {
        let (policy, max_batch) = (self.policy(), self.config.max_batch);
        self.with_writer(policy, records, max_batch)
    }

    /// The most records written in one transaction (default 128).
    pub fn max_batch(self, records: usize) -> Self {
        let (policy, buffer) = (self.policy(), self.config.buffer);
        self.with_writer(policy, buffer, records)
    }

    /// What a store failure does to calls (default [`FailurePolicy::FailClosed`]).
    pub fn failure_policy(self, policy: FailurePolicy) -> Self {
        let (buffer, max_batch) = (self.config.buffer, self.config.max_batch);
        self.with_writer(policy, buffer, max_batch)
    }

    /// Shorthand for [`FailurePolicy::FailOpen`].
    pub fn fail_open(self) -> Self {
        self.failure_policy(FailurePolicy::FailOpen)
    }

    /// Also record each call when it starts, as [`crate::CallOutcome::InFlight`] (default off). The final record
    /// replaces it when the call ends, so a record still in flight after a crash names a call the process was
    /// serving when it died (the "process killed mid-stream" case, which otherwise leaves no trace). Costs a
    /// second write per call; the start record is handed over without waiting, like a dropped stream's.
    pub fn record_in_flight(mut self, enabled: bool) -> Self {
        self.config.in_flight = enabled;
        self
    }

    /// The store records go to (for the read API).
    pub fn store(&self) -> &Arc<dyn Store> {
        self.config.recorder.store()
    }

    /// The failure policy in force.
    pub fn policy(&self) -> FailurePolicy {
        self.config.recorder.policy()
    }

    /// The writer's counters.
    pub fn stats(&self) -> PersistenceStats {
        self.config.recorder.stats()
    }

    /// Record a call that a layer outside this one refused before it came here (a content policy that blocked
    /// the request): recorded as this layer records a call an inner layer refused — failed with `error`, the
    /// request's size and model kept instead of its messages — with the verdicts of `request`'s
    /// [`tower_chat::GuardrailAudit`]. `error` should be one refused before sending
    /// ([`ChatError::is_refused_before_sending`]); another is recorded with the request's messages.
    pub fn record_refused(&self, mut request: ChatRequest, error: &ChatError) {
        let verdicts = request
            .extensions
            .get::<GuardrailAudit>()
            .map(GuardrailAudit::verdicts)
            .unwrap_or_default();
        request.extensions.insert(GuardedCall::new(verdicts, None));
        // The inner future is ready at once, so the record is handed to the writer here.
        // What is recorded of an error is its kind, message and whether it was sent: a copy of those.
        let mut copy = ChatError::new(error.kind().clone(), error.message());
        if error.is_refused_before_sending() {
            copy = copy.refused_before_sending();
        }
        let _ = Persistence::new(Refuse(Some(copy)), self.clone())
            .call(request)
            .now_or_never();
    }

    /// Wait until every record handed to the writer before this call has been written (visible to every
    /// connection to the database) or has failed. Call it before shutting down: records still in the buffer
    /// when the process ends are lost.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.config.recorder.flush().await
    }
}

/// A service that fails every call with its error: what [`PersistenceLayer::record_refused`] records around.
struct Refuse(Option<ChatError>);

impl Service<ChatRequest> for Refuse {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = std::future::Ready<Result<ChatStream, ChatError>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ChatError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: ChatRequest) -> Self::Future {
        let error = self
            .0
            .take()
            .unwrap_or_else(|| ChatError::new(tower_chat::ErrorKind::Cancelled, "refused once"));
        std::future::ready(Err(error))
    }
}

/// Records the provider the inner service reports ([`ModelInfo`]). For an inner service without `ModelInfo`
/// (a test double), [`Persistence::new`] wraps it and records no provider.
impl<S: ModelInfo> Layer<S> for PersistenceLayer {
    type Service = Persistence<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let provider: Arc<str> = Arc::from(inner.model_metadata().provider.as_ref());
        Persistence::from_config(inner, self.config.clone(), Some(provider))
    }
}

/// Building a [`Persistence`] by hand, from a layer.
impl<S> Persistence<S> {
    /// Wrap `inner`, recording through `layer`'s writer, with no provider name: for an inner service that
    /// implements no [`ModelInfo`] (`Layer::layer` reads the provider from it otherwise).
    pub fn new(inner: S, layer: PersistenceLayer) -> Self {
        Persistence::from_config(inner, layer.config, None)
    }

    /// The layer this service was built from (store, stats, flush), sharing its writer.
    pub fn layer(&self) -> PersistenceLayer {
        PersistenceLayer {
            config: self.config().clone(),
        }
    }
}
