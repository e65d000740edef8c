//! The [`LimitStore`] trait: where counters live. [`MemoryStore`] (one process, the default) and, with the
//! `redis` feature, [`RedisStore`] (several replicas).

mod admission;
mod demand;
mod limit_store;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
mod ticket;
mod usage;

pub use admission::{Admission, Rejection};
pub use demand::Demand;
pub use limit_store::{LimitStore, LimitStoreError, StoreReply};
pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis::{RedisStore, RedisStoreBuilder};
pub use ticket::{PlannedCounter, Ticket, CONCURRENT_RETRY_AFTER};
pub use usage::CounterUsage;
