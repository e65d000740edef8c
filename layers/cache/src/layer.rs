//! [`CacheLayer`]: the configuration, and what every service built from one layer shares.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower_chat::ModelInfo;
use tower_layer::Layer;

use crate::answer::CachedAnswer;
use crate::control::CacheStatus;
use crate::flight::Flights;
use crate::key::{CacheKey, CacheScope};
use crate::service::Cached;
use crate::store::{CacheStore, MemoryCacheStore};

/// Answers repeated chat calls from a cache; see the [crate docs](crate).
///
/// `CacheLayer::new()` keeps up to 64 MiB of answers in this process for an hour each, per caller. Every
/// option is a method on the layer. Clones share the store, the calls in flight and the statistics.
#[derive(Clone, Debug)]
pub struct CacheLayer {
    pub(crate) store: Arc<dyn CacheStore>,
    pub(crate) ttl: Duration,
    pub(crate) model_ttls: Arc<HashMap<String, Duration>>,
    pub(crate) scope: CacheScope,
    pub(crate) follow_timeout: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) runtime: Arc<Runtime>,
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
            store: Arc::new(MemoryCacheStore::default()),
            ttl: Duration::from_secs(3600),
            model_ttls: Arc::default(),
            scope: CacheScope::Caller,
            follow_timeout: Duration::from_secs(30),
            store_timeout: Duration::from_millis(250),
            runtime: Arc::default(),
        }
    }

    /// Keep answers in `store` (a [`MemoryCacheStore`] of another size, a `RedisCacheStore`, your own).
    pub fn store(mut self, store: impl CacheStore) -> Self {
        self.store = Arc::new(store);
        self
    }

    /// How long an answer is kept (default one hour); zero turns the cache off for models without a time to
    /// live of their own.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long answers of `model` are kept, instead of [`CacheLayer::ttl`]; zero never caches that model.
    pub fn model_ttl(mut self, model: impl Into<String>, ttl: Duration) -> Self {
        Arc::make_mut(&mut self.model_ttls).insert(model.into(), ttl);
        self
    }

    /// Who may receive a stored answer (default [`CacheScope::Caller`]).
    pub fn scope(mut self, scope: CacheScope) -> Self {
        self.scope = scope;
        self
    }

    /// How long a caller that joined an identical call in flight waits for that call to make progress (be
    /// accepted by the provider) before calling the model itself (default 30 s).
    pub fn follow_timeout(mut self, timeout: Duration) -> Self {
        self.follow_timeout = timeout;
        self
    }

    /// How long one store operation may take before it counts as a miss or a lost write (default 250 ms).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// What the cache did so far (shared by every clone of the layer and every service built from it).
    pub fn stats(&self) -> CacheStatsSnapshot {
        self.runtime.stats.snapshot(self.runtime.flights.load())
    }

    /// How long answers of `model` are kept.
    pub fn ttl_of(&self, model: Option<&str>) -> Duration {
        model
            .and_then(|model| self.model_ttls.get(model))
            .copied()
            .unwrap_or(self.ttl)
    }

    /// The scope answers are kept in.
    pub fn cache_scope(&self) -> &CacheScope {
        &self.scope
    }

    /// The store.
    pub fn cache_store(&self) -> &Arc<dyn CacheStore> {
        &self.store
    }
}

impl<S: ModelInfo> Layer<S> for CacheLayer {
    type Service = Cached<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let default_model = inner.model_metadata().model_id.map(Arc::from);
        Cached::with_default_model(inner, self.clone(), default_model)
    }
}

/// What the services of one layer share: the calls in flight and the counts.
#[derive(Debug, Default)]
pub(crate) struct Runtime {
    pub(crate) flights: Flights,
    pub(crate) stats: CacheStats,
}

impl CacheLayer {
    /// The answer under `key`; a failed or slow store is a miss (logged and counted).
    pub(crate) async fn read(&self, key: CacheKey) -> Option<CachedAnswer> {
        let stats = &self.runtime.stats;
        match tokio::time::timeout(self.store_timeout, self.store.get(key)).await {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "response cache read failed; treated as a miss");
                None
            }
            Err(_) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(timeout = ?self.store_timeout, "response cache read timed out; treated as a miss");
                None
            }
        }
    }

    /// Keep `answer`; a failed or slow store loses it (logged and counted).
    pub(crate) async fn write(&self, key: CacheKey, answer: CachedAnswer, ttl: Duration) {
        let stats = &self.runtime.stats;
        match tokio::time::timeout(self.store_timeout, self.store.put(key, answer, ttl)).await {
            Ok(Ok(())) => {
                stats.stored.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(error)) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "response cache write failed; the answer is not kept");
            }
            Err(_) => {
                stats.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(timeout = ?self.store_timeout, "response cache write timed out; the answer is not kept");
            }
        }
    }
}

/// The counts behind [`CacheLayer::stats`].
#[derive(Debug, Default)]
pub(crate) struct CacheStats {
    hits: AtomicU64,
    joined: AtomicU64,
    misses: AtomicU64,
    bypasses: AtomicU64,
    stored: AtomicU64,
    store_errors: AtomicU64,
}

impl CacheStats {
    pub(crate) fn count(&self, status: CacheStatus) {
        let counter = match status {
            CacheStatus::Hit => &self.hits,
            CacheStatus::Joined => &self.joined,
            CacheStatus::Miss => &self.misses,
            CacheStatus::Bypass => &self.bypasses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self, (in_flight, callers_in_flight): (usize, usize)) -> CacheStatsSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheStatsSnapshot {
            hits: read(&self.hits),
            joined: read(&self.joined),
            misses: read(&self.misses),
            bypasses: read(&self.bypasses),
            stored: read(&self.stored),
            store_errors: read(&self.store_errors),
            in_flight: in_flight as u64,
            callers_in_flight: callers_in_flight as u64,
        }
    }
}

/// What a cache did: calls by [`CacheStatus`], answers stored, store failures, calls in flight now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStatsSnapshot {
    /// Calls answered from the store.
    pub hits: u64,
    /// Calls that followed an identical call in flight.
    pub joined: u64,
    /// Calls that reached the model.
    pub misses: u64,
    /// Calls that did not use the cache.
    pub bypasses: u64,
    /// Answers written to the store.
    pub stored: u64,
    /// Store reads and writes that failed or timed out (each a miss or a lost write).
    pub store_errors: u64,
    /// Upstream calls in flight now.
    pub in_flight: u64,
    /// Callers reading those calls now (the first caller of each and those that joined it).
    pub callers_in_flight: u64,
}
