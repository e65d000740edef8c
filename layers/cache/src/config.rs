//! What a [`CacheLayer`](crate::CacheLayer) is configured with, held by every service it builds: the store, the
//! times to live, the scope, the timeouts, and the calls in flight and counts its services share.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::answer::CachedAnswer;
use crate::flight::Flights;
use crate::key::{CacheKey, CacheScope};
use crate::stats::CacheStats;
use crate::store::CacheStore;

/// A layer's settings; clones share the store, the calls in flight and the counts.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) store: Arc<dyn CacheStore>,
    pub(crate) ttl: Duration,
    pub(crate) model_ttls: Arc<HashMap<String, Duration>>,
    pub(crate) scope: CacheScope,
    pub(crate) follow_timeout: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) runtime: Arc<Runtime>,
}

/// What the services of one layer share: the calls in flight and the counts.
#[derive(Debug, Default)]
pub(crate) struct Runtime {
    pub(crate) flights: Flights,
    pub(crate) stats: CacheStats,
}

impl Config {
    /// How long answers of `model` are kept.
    pub(crate) fn ttl_of(&self, model: Option<&str>) -> Duration {
        model
            .and_then(|model| self.model_ttls.get(model))
            .copied()
            .unwrap_or(self.ttl)
    }

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
