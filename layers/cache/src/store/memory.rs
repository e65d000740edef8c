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

#[cfg(test)]
mod tests {
    use tower_chat::{ChatEvent, ChatRequest, FinishReason, Message};

    use super::*;
    use crate::key::CacheScope;

    fn key(question: &str) -> CacheKey {
        let request = ChatRequest::new(vec![Message::user(question)]);
        CacheKey::of(&request, Some("model"), &CacheScope::Shared)
    }

    fn answer(text: &str) -> CachedAnswer {
        CachedAnswer::storable(vec![
            ChatEvent::text(text),
            ChatEvent::finish(FinishReason::Stop),
        ])
        .expect("a complete answer")
    }

    #[tokio::test]
    async fn an_answer_is_gone_once_its_time_to_live_has_passed() {
        let store = MemoryCacheStore::default();
        store
            .put(key("short"), answer("soon gone"), Duration::from_millis(50))
            .await
            .unwrap();
        store
            .put(key("long"), answer("still here"), Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(
            store.get(key("short")).await.unwrap(),
            Some(answer("soon gone"))
        );
        // moka checks expiry against its own clock on every read: past the deadline the entry is not returned,
        // whether or not its housekeeping has run.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(store.get(key("short")).await.unwrap(), None, "expired");
        assert_eq!(
            store.get(key("long")).await.unwrap(),
            Some(answer("still here")),
            "an entry with a longer time to live is unaffected"
        );
    }

    #[tokio::test]
    async fn the_store_holds_no_more_than_its_bound_in_bytes() {
        let one = answer(&"x".repeat(1_000)).to_json().len() as u64;
        let store = MemoryCacheStore::new(20 * one);
        for index in 0..200 {
            store
                .put(
                    key(&format!("question {index}")),
                    answer(&"x".repeat(1_000)),
                    Duration::from_secs(600),
                )
                .await
                .unwrap();
        }
        assert!(
            store.weighed_bytes() <= 20 * one,
            "{} bytes held against a bound of {}",
            store.weighed_bytes(),
            20 * one
        );
        assert!(store.entries() > 0, "the bound evicts, it does not empty");
    }

    #[tokio::test]
    async fn an_answer_larger_than_a_quarter_of_the_bound_is_not_kept() {
        let large = answer(&"x".repeat(4_000));
        let store = MemoryCacheStore::new(large.to_json().len() as u64 * 3);
        store
            .put(key("large"), large, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(store.get(key("large")).await.unwrap(), None);
        assert_eq!(store.entries(), 0);
    }
}
