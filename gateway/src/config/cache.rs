//! `[cache]`: a response cache, off without the table (built by `stack::cache`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The `[cache]` table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    /// `"memory"` (default: this process) or `"redis"` (shared by replicas).
    #[serde(default)]
    pub store: CacheStoreKind,
    /// For `store = "redis"`: the environment variable holding the Redis URL (default `REDIS_URL`).
    pub redis_url_env: Option<String>,
    /// How long an answer is kept, in seconds (default 3600).
    pub ttl_seconds: Option<u64>,
    /// The memory store's bound, in bytes of stored answers (default 64 MiB).
    pub max_bytes: Option<u64>,
    /// `"caller"` (default: one caller's answers are never another's) or `"shared"`.
    #[serde(default)]
    pub scope: CacheScopeName,
    /// Per model: how long its answers are kept, in seconds; 0 = never cached.
    #[serde(default)]
    pub models: BTreeMap<String, u64>,
    /// Per inbound route (`chat_completions`, `messages`, `responses`, or its path): how long answers to it
    /// are kept, in seconds, in place of the model's; 0 = never cached.
    #[serde(default)]
    pub routes: BTreeMap<String, u64>,
}

/// Where cached answers live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheStoreKind {
    /// In this process, bounded by bytes.
    #[default]
    Memory,
    /// In Redis, shared by every replica.
    Redis,
}

/// Whose answers a request may receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScopeName {
    /// Its own caller's only.
    #[default]
    Caller,
    /// Any caller's.
    Shared,
}
