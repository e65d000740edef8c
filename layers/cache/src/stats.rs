//! What a cache did: the counts its services keep, and the snapshot [`CacheLayer::stats`](crate::CacheLayer::stats)
//! reads.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::control::CacheStatus;

/// The counts behind [`CacheLayer::stats`](crate::CacheLayer::stats).
#[derive(Debug, Default)]
pub(crate) struct CacheStats {
    hits: AtomicU64,
    joined: AtomicU64,
    misses: AtomicU64,
    bypasses: AtomicU64,
    pub(crate) stored: AtomicU64,
    pub(crate) store_errors: AtomicU64,
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

    pub(crate) fn snapshot(
        &self,
        (in_flight, callers_in_flight): (usize, usize),
    ) -> CacheStatsSnapshot {
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
