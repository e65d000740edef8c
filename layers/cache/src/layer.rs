//! [`CacheLayer`]: builds the configuration every service built from one layer shares.

use std::sync::Arc;
use std::time::Duration;

use tower_chat::ModelInfo;
use tower_layer::Layer;

use crate::config::Config;
use crate::key::CacheScope;
use crate::service::Cached;
use crate::stats::CacheStatsSnapshot;
use crate::store::{CacheStore, MemoryCacheStore};

/// Answers repeated chat calls from a cache; see the [crate docs](crate).
///
/// `CacheLayer::new()` keeps up to 64 MiB of answers in this process for an hour each, per caller. Every
/// option is a method on the layer. Clones share the store, the calls in flight and the statistics.
#[derive(Clone, Debug)]
pub struct CacheLayer {
    config: Config,
}

impl Default for CacheLayer {
    fn default() -> Self {
        CacheLayer::new()
    }
}

impl CacheLayer {
    /// A cache in this process ([`MemoryCacheStore::default`], 64 MiB), answers kept for an hour, per caller,
    /// callers joining an identical call in flight for up to 30 s before calling on their own.
    pub fn new() -> Self {
        CacheLayer {
            config: Config {
                store: Arc::new(MemoryCacheStore::default()),
                ttl: Duration::from_secs(3600),
                model_ttls: Arc::default(),
                scope: CacheScope::Caller,
                follow_timeout: Duration::from_secs(30),
                store_timeout: Duration::from_millis(250),
                runtime: Arc::default(),
            },
        }
    }

    /// Keep answers in `store` (a [`MemoryCacheStore`] of another size, a `RedisCacheStore`, your own).
    pub fn store(mut self, store: impl CacheStore) -> Self {
        self.config.store = Arc::new(store);
        self
    }

    /// How long an answer is kept (default one hour); zero turns the cache off for models without a time to
    /// live of their own.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// How long answers of `model` are kept, instead of [`CacheLayer::ttl`]; zero never caches that model.
    pub fn model_ttl(mut self, model: impl Into<String>, ttl: Duration) -> Self {
        Arc::make_mut(&mut self.config.model_ttls).insert(model.into(), ttl);
        self
    }

    /// Who may receive a stored answer (default [`CacheScope::Caller`]).
    pub fn scope(mut self, scope: CacheScope) -> Self {
        self.config.scope = scope;
        self
    }

    /// How long a caller that joined an identical call in flight waits for that call to make progress (be
    /// accepted by the provider) before calling the model itself (default 30 s).
    pub fn follow_timeout(mut self, timeout: Duration) -> Self {
        self.config.follow_timeout = timeout;
        self
    }

    /// How long one store operation may take before it counts as a miss or a lost write (default 250 ms).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.config.store_timeout = timeout;
        self
    }

    /// What the cache did so far (shared by every clone of the layer and every service built from it).
    pub fn stats(&self) -> CacheStatsSnapshot {
        self.config
            .runtime
            .stats
            .snapshot(self.config.runtime.flights.load())
    }

    /// How long answers of `model` are kept.
    pub fn ttl_of(&self, model: Option<&str>) -> Duration {
        self.config.ttl_of(model)
    }

    /// The scope answers are kept in.
    pub fn cache_scope(&self) -> &CacheScope {
        &self.config.scope
    }

    /// The store.
    pub fn cache_store(&self) -> &Arc<dyn CacheStore> {
        &self.config.store
    }
}

impl<S: ModelInfo> Layer<S> for CacheLayer {
    type Service = Cached<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let default_model = inner.model_metadata().model_id.map(Arc::from);
        Cached::from_config(inner, self.config.clone(), default_model)
    }
}

/// Building a [`Cached`] by hand, from a layer's configuration.
impl<S> Cached<S> {
    /// Wrap `inner`, which reports no default model: requests that name no model are keyed under none. (The
    /// layer reads the default model from an inner service that implements [`ModelInfo`].)
    pub fn new(inner: S, layer: CacheLayer) -> Self {
        Cached::from_config(inner, layer.config, None)
    }

    /// Wrap `inner`, keying requests that name no model under `default_model`.
    pub fn with_default_model(
        inner: S,
        layer: CacheLayer,
        default_model: Option<Arc<str>>,
    ) -> Self {
        Cached::from_config(inner, layer.config, default_model)
    }

    /// A layer with this service's configuration (statistics, settings), sharing its store and counts.
    pub fn layer(&self) -> CacheLayer {
        CacheLayer {
            config: self.config().clone(),
        }
    }
}
