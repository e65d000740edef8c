//! [`LimitsLayer`]: the policy, the store, the price table and the clock, shared by every service it builds.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde::Serialize;
use tower_chat::{ChatError, ModelInfo, PriceTable};
use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::limits::{CounterKind, LimitPolicy};
use crate::plan::PlanCache;
use crate::service::Limited;
use crate::shared::{Counters, InFlight, LimitStats, Shared, StoreFailure};
use crate::store::{CounterUsage, LimitStore, MemoryStore};

/// Rate limits and budgets for every call that passes through it.
///
/// Cloning is cheap; clones and the services they build share one store, policy and set of counters.
#[derive(Clone, Debug)]
pub struct LimitsLayer {
    pub(crate) shared: Arc<Shared>,
}

impl LimitsLayer {
    /// A layer with `policy`, counting in this process ([`MemoryStore`]), without prices. Options are methods on
    /// the layer (the style of every tower-chat layer: `layers/README.md`).
    pub fn new(policy: LimitPolicy) -> Self {
        LimitsLayer {
            shared: Arc::new(Shared {
                store: Arc::new(MemoryStore::new()),
                policy,
                prices: PriceTable::new(),
                clock: Arc::new(SystemClock),
                default_max_output_tokens: 4096,
                chars_per_token: 4,
                on_store_error: StoreFailure::default(),
                counters: Counters::default(),
                settling: InFlight::default(),
                next_ticket: AtomicU64::new(0),
                plans: PlanCache::default(),
            }),
        }
    }

    /// The configuration, to change while the stack is built (a layer cloned before gets a copy of its own).
    fn configure(mut self, change: impl FnOnce(&mut Shared)) -> Self {
        change(Arc::make_mut(&mut self.shared));
        self
    }

    /// Where counters live (default: a fresh [`MemoryStore`]).
    pub fn store(self, store: impl LimitStore) -> Self {
        self.store_shared(Arc::new(store))
    }

    /// A store shared with other layers or an application.
    pub fn store_shared(self, store: Arc<dyn LimitStore>) -> Self {
        self.configure(|shared| shared.store = store)
    }

    /// Prices by model, for cost budgets and the cost of each call.
    pub fn prices(self, prices: PriceTable) -> Self {
        self.configure(|shared| shared.prices = prices)
    }

    /// The clock windows are computed from (default: [`SystemClock`]).
    pub fn clock(self, clock: impl Clock) -> Self {
        self.configure(|shared| shared.clock = Arc::new(clock))
    }

    /// Output tokens reserved for a call that sets no `max_output_tokens` (default 4096).
    pub fn default_max_output_tokens(self, tokens: u32) -> Self {
        self.configure(|shared| shared.default_max_output_tokens = tokens)
    }

    /// Characters per token assumed when estimating a prompt, or output that arrived without a usage report
    /// (default 4; at least 1).
    pub fn chars_per_token(self, chars: u32) -> Self {
        self.configure(|shared| shared.chars_per_token = chars.max(1))
    }

    /// What a store failure does (default [`StoreFailure::FailClosed`]).
    pub fn on_store_error(self, policy: StoreFailure) -> Self {
        self.configure(|shared| shared.on_store_error = policy)
    }

    /// The policy.
    pub fn policy(&self) -> &LimitPolicy {
        &self.shared.policy
    }

    /// The price table in force.
    pub fn price_table(&self) -> &PriceTable {
        &self.shared.prices
    }

    /// The store counters live in.
    pub fn limit_store(&self) -> &Arc<dyn LimitStore> {
        &self.shared.store
    }

    /// The decision counters.
    pub fn stats(&self) -> LimitStats {
        self.shared.stats()
    }

    /// Wait until every settlement handed to the runtime so far has been applied (or has failed). With the
    /// in-process store settlements are applied at once and this returns at once.
    pub async fn settled(&self) {
        self.shared.settled().await;
    }

    /// `caller`'s counters now: their own scope, then one per model with limits of its own.
    pub async fn usage(&self, caller: &str) -> Result<UsageReport, ChatError> {
        let shared = &self.shared;
        let now = shared.clock.now_millis();
        let mut scopes = shared.policy.scopes(caller, None);
        for model in shared.policy.models_for(caller) {
            scopes.extend(
                shared
                    .policy
                    .scopes(caller, Some(&model))
                    .into_iter()
                    .skip(1),
            );
        }
        let mut report = UsageReport {
            caller: caller.to_owned(),
            scopes: Vec::with_capacity(scopes.len()),
        };
        for scope in scopes {
            let counters = shared.store.usage(&scope, now).wait().await?;
            report.scopes.push(ScopeUsage {
                model: scope.key.model.as_deref().map(str::to_owned),
                counters,
            });
        }
        Ok(report)
    }
}

/// Counts a request that names no model under the inner service's default model ([`ModelInfo`]'s `model_id`,
/// the leaf's, through every tower-chat layer and the common tower middleware), for per-model limits and prices.
/// For an inner service without `ModelInfo` (a test double), [`Limited::new`] wraps it: such requests then count
/// under no model.
impl<S: ModelInfo> Layer<S> for LimitsLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let default_model = inner.model_metadata().model_id.map(Arc::from);
        Limited::from_shared(inner, self.shared.clone(), default_model)
    }
}

/// Building a [`Limited`] by hand, from a layer.
impl<S> Limited<S> {
    /// Wrap `inner`, which reports no default model: requests that name no model count under none. (The layer
    /// reads the default model from an inner service that implements [`ModelInfo`].)
    pub fn new(inner: S, layer: LimitsLayer) -> Self {
        Limited::from_shared(inner, layer.shared, None)
    }

    /// Wrap `inner`, counting requests that name no model under `default_model`.
    pub fn with_default_model(
        inner: S,
        layer: LimitsLayer,
        default_model: Option<Arc<str>>,
    ) -> Self {
        Limited::from_shared(inner, layer.shared, default_model)
    }

    /// The layer this service was built from (usage, stats), sharing its store and counters.
    pub fn layer(&self) -> LimitsLayer {
        LimitsLayer {
            shared: self.shared().clone(),
        }
    }
}

/// A caller's counters, as [`LimitsLayer::usage`] reads them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UsageReport {
    /// The caller.
    pub caller: String,
    /// The caller's own scope first, then one per model with limits of its own.
    pub scopes: Vec<ScopeUsage>,
}

impl UsageReport {
    /// The counter of `kind` in the caller's own scope.
    pub fn counter(&self, kind: CounterKind) -> Option<&CounterUsage> {
        self.scopes
            .first()?
            .counters
            .iter()
            .find(|c| c.kind == kind)
    }
}

/// One scope's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScopeUsage {
    /// The model, for a per-model scope.
    pub model: Option<String>,
    /// Every counter the scope's limits define.
    pub counters: Vec<CounterUsage>,
}
