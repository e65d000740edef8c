//! Where answers are kept: the [`CacheStore`] trait, [`MemoryCacheStore`] (one process) and, with the `redis`
//! feature, [`RedisCacheStore`] (every replica).
//!
//! A store is allowed to fail: the layer treats an error or a store call that outlasts
//! [`crate::CacheLayer::store_timeout`] as a miss (and a lost write), logs it and counts it in
//! [`crate::CacheStats::store_errors`], and never fails the caller for it.

mod cache_store;
mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use cache_store::{CacheStore, CacheStoreError};
pub use memory::MemoryCacheStore;
#[cfg(feature = "redis")]
pub use redis::{RedisCacheStore, RedisCacheStoreBuilder};
