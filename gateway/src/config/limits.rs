//! `[limits]`: rate limits and budgets per key and per model, and prices (built by `stack::rate_limits`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `[limits]` table: where counters live, the default limits, per-key and per-model limits, and prices.
/// Without any limit set, no limits layer runs.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// `"memory"` (default: this process only) or `"redis"` (shared by every replica using `redis_url`).
    #[serde(default)]
    pub store: StoreKind,
    /// The Redis server, for `store = "redis"` (default `redis://127.0.0.1:6379`).
    pub redis_url: Option<String>,
    /// The prefix of the Redis keys (default `tower-chat:limits:`).
    pub redis_prefix: Option<String>,
    /// `"fail_closed"` (default: a store failure refuses calls with 500 `store_failed`) or `"fail_open"`
    /// (admitted unchecked, logged and counted).
    #[serde(default)]
    pub on_store_error: OnStoreError,
    /// Output tokens reserved for a request without `max_tokens` (default 4096).
    pub default_max_output_tokens: Option<u32>,
    /// Limits of every key without an entry in `keys`.
    #[serde(default)]
    pub default: LimitsEntry,
    /// Limits per caller id (the `name` of a `name:key` line of the API keys file), instead of the default.
    #[serde(default)]
    pub keys: BTreeMap<String, LimitsEntry>,
    /// Limits on every caller's use of one model, on top of the caller's own.
    #[serde(default)]
    pub models: BTreeMap<String, LimitsEntry>,
    /// Teams: limits shared by every member key (one set of counters for the team), on top of each key's own.
    #[serde(default)]
    pub teams: BTreeMap<String, TeamEntry>,
    /// Prices per model id (or id prefix), in dollars per million tokens.
    #[serde(default)]
    pub prices: BTreeMap<String, PriceEntry>,
}

/// Where the counters live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// In this process.
    #[default]
    Memory,
    /// In Redis.
    Redis,
}

/// What a store failure does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Refuse the call.
    #[default]
    FailClosed,
    /// Admit it unchecked.
    FailOpen,
}

/// One set of limits; every field is optional.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsEntry {
    /// Calls per minute.
    pub requests_per_minute: Option<u64>,
    /// Calls per UTC day (instead of `requests_per_minute`, which wins when both are set).
    pub requests_per_day: Option<u64>,
    /// Input tokens per minute.
    pub input_tokens_per_minute: Option<u64>,
    /// Output tokens per minute.
    pub output_tokens_per_minute: Option<u64>,
    /// Dollars per UTC day.
    pub cost_per_day_usd: Option<f64>,
    /// Dollars per UTC calendar month.
    pub cost_per_month_usd: Option<f64>,
    /// Calls in progress at once.
    pub concurrent: Option<u64>,
}

/// A team: its members (caller ids, as in `keys`) and the limits they share (the fields of [`LimitsEntry`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamEntry {
    /// The team's members: a key belongs to one team at most (a member need not have a `keys` entry, nor be in
    /// the API keys file yet: keys issued later join their team by name).
    #[serde(default)]
    pub members: Vec<String>,
    /// Calls per minute, for the whole team.
    pub requests_per_minute: Option<u64>,
    /// Calls per UTC day (instead of `requests_per_minute`, which wins when both are set).
    pub requests_per_day: Option<u64>,
    /// Input tokens per minute.
    pub input_tokens_per_minute: Option<u64>,
    /// Output tokens per minute.
    pub output_tokens_per_minute: Option<u64>,
    /// Dollars per UTC day.
    pub cost_per_day_usd: Option<f64>,
    /// Dollars per UTC calendar month.
    pub cost_per_month_usd: Option<f64>,
    /// Calls in progress at once.
    pub concurrent: Option<u64>,
}

impl TeamEntry {
    /// The team's limits as an entry like any other. (Its own table rather than a flattened entry: serde does
    /// not refuse an unknown field through `flatten`.)
    pub fn limits(&self) -> LimitsEntry {
        LimitsEntry {
            requests_per_minute: self.requests_per_minute,
            requests_per_day: self.requests_per_day,
            input_tokens_per_minute: self.input_tokens_per_minute,
            output_tokens_per_minute: self.output_tokens_per_minute,
            cost_per_day_usd: self.cost_per_day_usd,
            cost_per_month_usd: self.cost_per_month_usd,
            concurrent: self.concurrent,
        }
    }
}

/// A model's price, in dollars per million tokens.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Cached input tokens (default: the input price).
    pub cached_input: Option<f64>,
    /// Input tokens written to the provider's prompt cache (default: the input price).
    pub cache_write_input: Option<f64>,
    /// Reasoning tokens (default: the output price).
    pub reasoning: Option<f64>,
}
