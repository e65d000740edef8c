//! [`PersistenceLayer`]: configuration, and the handle to the background writer.

use std::sync::Arc;

use tower_chat::PriceTable;
use tower_layer::Layer;

use crate::recorder::{FailurePolicy, PersistenceStats, Recorder};
use crate::service::Persistence;
use crate::store::{Store, StoreError};

/// Records every call that passes through it in a [`Store`].
///
/// Placed inside a tool loop it records each model round trip; placed outside it records whole turns (tool
/// results included). Cloning is cheap: clones, and the services they build, share one background writer,
/// which runs until the last of them is dropped. Call [`PersistenceLayer::flush`] before shutting the runtime
/// down so that records still in the buffer are written.
#[derive(Clone, Debug)]
pub struct PersistenceLayer {
    pub(crate) recorder: Recorder,
    pub(crate) provider: Option<Arc<str>>,
    pub(crate) in_flight: bool,
    pub(crate) prices: Option<Arc<PriceTable>>,
}

/// Options for a [`PersistenceLayer`].
#[derive(Clone, Debug)]
pub struct PersistenceLayerBuilder {
    store: Arc<dyn Store>,
    policy: FailurePolicy,
    buffer: usize,
    max_batch: usize,
    provider: Option<Arc<str>>,
    in_flight: bool,
    prices: Option<Arc<PriceTable>>,
}

impl PersistenceLayerBuilder {
    /// Price every record with this table ([`crate::CallRecord::cost`]): the requested model's price, else the
    /// answering model's. Use the same table as the limits layer so budgets and records agree.
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(Arc::new(prices));
        self
    }

    /// How many finished records may wait for the writer (default 1024). What happens when it is full depends
    /// on the [`FailurePolicy`].
    pub fn buffer(mut self, records: usize) -> Self {
        self.buffer = records;
        self
    }

    /// The most records written in one transaction (default 128).
    pub fn max_batch(mut self, records: usize) -> Self {
        self.max_batch = records;
        self
    }

    /// What a store failure does to calls (default [`FailurePolicy::FailClosed`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Shorthand for [`FailurePolicy::FailOpen`].
    pub fn fail_open(self) -> Self {
        self.failure_policy(FailurePolicy::FailOpen)
    }

    /// The provider name recorded with every call (`openai`, `anthropic`, …; as
    /// [`tower_chat::ModelMetadata::provider`] spells it).
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(Arc::from(provider.into()));
        self
    }

    /// Also record each call when it starts, as [`crate::CallOutcome::InFlight`] (default off). The final record
    /// replaces it when the call ends, so a record still in flight after a crash names a call the process was
    /// serving when it died (the "process killed mid-stream" case, which otherwise leaves no trace). Costs a
    /// second write per call; the start record is handed over without waiting, like a dropped stream's.
    pub fn record_in_flight(mut self, enabled: bool) -> Self {
        self.in_flight = enabled;
        self
    }

    /// Start the background writer and build the layer.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the writer is a Tokio task).
    pub fn build(self) -> PersistenceLayer {
        PersistenceLayer {
            recorder: Recorder::spawn(self.store, self.policy, self.buffer, self.max_batch),
            provider: self.provider,
            in_flight: self.in_flight,
            prices: self.prices,
        }
    }
}

impl PersistenceLayer {
    /// A fail-closed layer over `store` with default options.
    ///
    /// # Panics
    /// Outside a Tokio runtime (the writer is a Tokio task).
    pub fn new(store: impl Store) -> Self {
        PersistenceLayer::builder(store).build()
    }

    /// Options for a layer over `store`.
    pub fn builder(store: impl Store) -> PersistenceLayerBuilder {
        PersistenceLayer::builder_shared(Arc::new(store))
    }

    /// Options for a layer over a store shared with other users (an application's read API, another layer).
    pub fn builder_shared(store: Arc<dyn Store>) -> PersistenceLayerBuilder {
        PersistenceLayerBuilder {
            store,
            policy: FailurePolicy::default(),
            buffer: 1024,
            max_batch: 128,
            provider: None,
            in_flight: false,
            prices: None,
        }
    }

    /// The store records go to (for the read API).
    pub fn store(&self) -> &Arc<dyn Store> {
        self.recorder.store()
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.recorder.policy()
    }

    /// The writer's counters.
    pub fn stats(&self) -> PersistenceStats {
        self.recorder.stats()
    }

    /// Wait until every record handed to the writer before this call has been written or has failed.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.recorder.flush().await
    }
}

impl<S> Layer<S> for PersistenceLayer {
    type Service = Persistence<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Persistence::new(inner, self.clone())
    }
}
