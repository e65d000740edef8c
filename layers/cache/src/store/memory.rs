//! [`MemoryCacheStore`]: answers in this process, bounded by their size.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use moka::sync::Cache;
use moka::Expiry;

use crate::answer::CachedAnswer;
use crate::key::CacheKey;
use crate::store::{CacheStore, CacheStoreError};

/// What an entry keeps: the answer, its time to live, and its weight.
#[derive(Clone)]
struct Entry {
    answer: CachedAnswer,
    ttl: Duration,
    weight: u32,
}

/// Each entry lives for the time to live it was stored with.
struct PerEntryTtl;

impl Expiry<CacheKey, Entry> for PerEntryTtl {
    fn expire_after_create(
        &self,
        _key: &CacheKey,
        entry: &Entry,
        _now: Instant,
    ) -> Option<Duration> {
        Some(entry.ttl)
    }
}

/// Answers in this process (a `moka` cache), bounded by the bytes of their JSON form: past the bound the least
/// useful entries are evicted. Cloning is cheap; clones share the entries.
#[derive(Clone)]
pub struct MemoryCacheStore {
    cache: Cache<CacheKey, Entry>,
    max_bytes: u64,
}

impl std::fmt::Debug for MemoryCacheStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCacheStore")
            .field("max_bytes", &self.max_bytes)
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

impl Default for MemoryCacheStore {
    /// 64 MiB of answers.
    fn default() -> Self {
        MemoryCacheStore::new(64 << 20)
    }
}

impl MemoryCacheStore {
    /// A store holding at most about `max_bytes` of answers (their JSON size; an answer larger than a quarter
    /// of the bound is not kept).
    pub fn new(max_bytes: u64) -> Self {
        let cache = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_key: &CacheKey, entry: &Entry| entry.weight)
            .expire_after(PerEntryTtl)
            .build();
        MemoryCacheStore { cache, max_bytes }
    }

    /// The bytes the entries weigh now (eviction and expiry settle shortly after each change).
    pub fn weighed_bytes(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }

    /// How many answers are held now.
    pub fn entries(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }
}

impl CacheStore for MemoryCacheStore {
    fn get(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<CachedAnswer>, CacheStoreError>> {
        let found = self.cache.get(&key).map(|entry| entry.answer);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn put(
        &self,
        key: CacheKey,
        answer: CachedAnswer,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<(), CacheStoreError>> {
        // Weighed once, when stored: the JSON form is what the answer costs in any store.
        let bytes = answer.to_json().len() as u64;
        if bytes <= self.max_bytes / 4 {
            let weight = u32::try_from(bytes).unwrap_or(u32::MAX);
            self.cache.insert(
                key,
                Entry {
                    answer,
                    ttl,
                    weight,
                },
            );
        }
        Box::pin(std::future::ready(Ok(())))
    }
}
