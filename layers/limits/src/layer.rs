//! [`LimitsLayer`]: the policy, the store, the price table and the clock, shared by every service it builds.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde::Serialize;
use tower_chat::{ChatError, ModelInfo, PriceTable};
use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::limits::{CounterKind, LimitPolicy, Scope};
use crate::plan::PlanCache;
use crate::service::Limited;
use crate::shared::{Counters, InFlight, LimitStats, Live, Shared, StoreFailure};
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
                live: Live::new(policy),
                prices: PriceTable::new(),
                clock: Arc::new(SystemClock),
                default_max_output_tokens: 4096,
                chars_per_token: 4,
                on_store_error: StoreFailure::default(),
                counters: Counters::default(),
                settling: InFlight::default(),
                next_ticket: AtomicU64::new(0),
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

    /// The policy in force.
    pub fn policy(&self) -> Arc<LimitPolicy> {
        self.shared.live.load().policy.clone()
    }

    /// Replace the policy for every call that starts from now on, through this layer, its clones and every
    /// service built from them. Calls already admitted keep the scopes and limits they were admitted with and
    /// settle into them; counters carry over (a scope's counters are the store's, found by its key).
    pub fn set_policy(&self, policy: LimitPolicy) {
        // A fresh plan cache with the policy: plans built from the old one are never handed out again.
        self.shared.live.store(Arc::new(Live {
            policy: Arc::new(policy),
            plans: PlanCache::default(),
        }));
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

    /// `caller`'s counters now: their own scope, then one per model with limits of its own, then their team's
    /// when they are a member of a team with limits.
    pub async fn usage(&self, caller: &str) -> Result<UsageReport, ChatError> {
        let policy = self.policy();
        let mut scopes = vec![policy.scopes(caller, None).swap_remove(0)];
        for model in policy.models_for(caller) {
            scopes.extend(
                policy
                    .scopes(caller, Some(&model))
                    .into_iter()
                    .filter(|s| s.key.model.is_some()),
            );
        }
        scopes.extend(policy.team_of(caller).and_then(|t| policy.team_scope(t)));
        self.report(caller, scopes).await
    }

    /// `team`'s counters now (one scope), or `None` when the policy gives the team no limits.
    pub async fn team_usage(&self, team: &str) -> Result<Option<UsageReport>, ChatError> {
        match self.policy().team_scope(team) {
            Some(scope) => Ok(Some(self.report(team, vec![scope]).await?)),
            None => Ok(None),
        }
    }

    async fn report(&self, caller: &str, scopes: Vec<Scope>) -> Result<UsageReport, ChatError> {
        let now = self.shared.clock.now_millis();
        let mut report = UsageReport {
            caller: caller.to_owned(),
            scopes: Vec::with_capacity(scopes.len()),
        };
        for scope in scopes {
            let counters = self.shared.store.usage(&scope, now).wait().await?;
            report.scopes.push(ScopeUsage {
                model: scope.key.model.as_deref().map(str::to_owned),
                team: scope.key.team.then(|| scope.key.caller.to_string()),
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

/// A caller's counters, as [`LimitsLayer::usage`] reads them (or a team's, from [`LimitsLayer::team_usage`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UsageReport {
    /// The caller (or the team).
    pub caller: String,
    /// The caller's own scope first, then one per model with limits of its own, then its team's.
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
    /// The team, for a team's scope (shared by its members).
    pub team: Option<String>,
    /// Every counter the scope's limits define.
    pub counters: Vec<CounterUsage>,
}
