//! [`RedisStore`]: counters in Redis, shared by every replica that points at the same server.
//!
//! Each operation is one round trip: admission is one Lua script that checks every counter of a call and, only
//! if all have room, charges them all (atomic: Redis runs a script alone); settlement is one script that applies
//! every counter's correction; a usage report is one pipeline. Window counters are plain integers whose keys
//! expire shortly after their window; calls in progress are a sorted set per scope with one member per call,
//! scored by a lease deadline, so a replica that dies mid-call cannot leak its slots for longer than the lease.

use std::any::Any;
use std::fmt::{self, Write as _};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use crate::limits::{CounterKind, Scope, ScopeKey};
use crate::store::{
    Admission, CounterUsage, Demand, LimitStore, LimitStoreError, PlannedCounter, Rejection,
    StoreReply, Ticket,
};

/// Checks every counter, then charges all of them or none. `ARGV`: now, the call's member id, then per key:
/// kind (`w` window counter, `c` calls in progress), amount, limit, ttl (ms). Returns, per key without room, its
/// 1-based index and what it holds (empty: admitted).
const RESERVE: &str = r"
local now = tonumber(ARGV[1])
local member = ARGV[2]
local over = {}
for i, key in ipairs(KEYS) do
  local b = 2 + (i - 1) * 4
  local kind, amount, limit = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local used
  if kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    used = redis.call('ZCARD', key)
  else
    used = tonumber(redis.call('GET', key) or '0')
  end
  if used + amount > limit then
    over[#over + 1] = i
    over[#over + 1] = used
  end
end
if #over > 0 then return over end
for i, key in ipairs(KEYS) do
  local b = 2 + (i - 1) * 4
  local kind, amount, ttl = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 4])
  if kind == 'c' then
    redis.call('ZADD', key, now + ttl, member)
  else
    redis.call('INCRBY', key, amount)
  end
  redis.call('PEXPIRE', key, ttl)
end
return over
";

/// Applies corrections: `ARGV[1]` the call's member id, then per key a signed delta or `c` (leave the calls in
/// progress). A window key that has expired is left alone; no counter goes below zero.
const SETTLE: &str = r"
local member = ARGV[1]
for i, key in ipairs(KEYS) do
  local delta = ARGV[i + 1]
  if delta == 'c' then
    redis.call('ZREM', key, member)
  elseif redis.call('EXISTS', key) == 1 then
    local v = redis.call('INCRBY', key, delta)
    if v < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
  end
end
return 0
";

static RESERVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RESERVE));
static SETTLE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE));

/// How long a window key outlives its window, so that a call settling just after its window ended still finds
/// its counter.
const WINDOW_GRACE_MS: u64 = 60_000;

/// Run one Redis operation within `timeout`, as a store error if it fails or takes too long.
async fn timed<T>(
    what: &'static str,
    timeout: Duration,
    operation: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, LimitStoreError> {
    match tokio::time::timeout(timeout, operation).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(LimitStoreError::with_source(
            format!("Redis {what} failed"),
            error,
        )),
        Err(_) => Err(LimitStoreError::new(format!(
            "Redis {what} timed out after {timeout:?}"
        ))),
    }
}

/// Counters in Redis, for several replicas enforcing one cap. Cloning is cheap (one multiplexed connection,
/// reconnected on failure).
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
    /// Distinguishes this store's calls in progress from other replicas' (ticket ids are per process).
    instance: Arc<str>,
    lease: Duration,
    timeout: Duration,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("instance", &self.instance)
            .field("lease", &self.lease)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Options for a [`RedisStore`].
#[derive(Clone, Debug)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    lease: Duration,
    timeout: Duration,
}

impl RedisStoreBuilder {
    /// The prefix of every key (default `tower-chat:limits:`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a call counts as in progress at most, should its replica die before settling (default 10 min).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long an operation (connecting included) may take before it counts as a store failure (default 1 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Build the store. It connects on first use (and reconnects after failures), so an unreachable server is
    /// a store failure of the calls that need it, handled by the layer's
    /// [`crate::StoreFailure`] policy, not a startup error.
    ///
    /// # Errors
    /// The URL is not a Redis URL.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn build(self) -> Result<RedisStore, LimitStoreError> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            LimitStoreError::with_source(format!("bad Redis URL {:?}", self.url), e)
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| LimitStoreError::with_source("cannot set up the Redis connection", e))?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(RedisStore {
            connection,
            prefix: Arc::from(self.prefix),
            instance: Arc::from(format!("{:x}-{:x}", std::process::id(), nanos)),
            lease: self.lease,
            timeout: self.timeout,
        })
    }
}

impl RedisStore {
    /// Options for a store at `url` (`redis://host:port/db`).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: "tower-chat:limits:".to_owned(),
            lease: Duration::from_secs(600),
            timeout: Duration::from_secs(1),
        }
    }

    /// A store at `url` with default options.
    ///
    /// # Errors
    /// The URL is not a Redis URL.
    pub fn new(url: impl Into<String>) -> Result<RedisStore, LimitStoreError> {
        RedisStore::builder(url).build()
    }

    /// The start of every key of one scope: the caller and model are length-prefixed so that no two scopes
    /// share a key; a team's keys start with `team:` where a caller's start with a digit, so a team and a
    /// caller of the same name never share one.
    fn scope_prefix(&self, scope: &ScopeKey) -> String {
        if scope.team {
            return format!(
                "{}team:{}:{}:",
                self.prefix,
                scope.caller.len(),
                scope.caller
            );
        }
        let model = scope.model.as_deref().unwrap_or("");
        format!(
            "{}{}:{}:{}:{}:",
            self.prefix,
            scope.caller.len(),
            scope.caller,
            model.len(),
            model,
        )
    }

    /// The key of one counter: the scope's prefix, the kind, and the window's start.
    fn key(&self, scope_prefix: &str, kind: CounterKind, window_start: Option<u64>) -> String {
        let mut key = String::with_capacity(scope_prefix.len() + 32);
        key.push_str(scope_prefix);
        key.push_str(kind.as_str());
        if let Some(start) = window_start {
            // Writing to a String cannot fail.
            let _ = write!(key, ":{start}");
        }
        key
    }

    fn counter_key(&self, ticket: &Ticket, counter: &PlannedCounter) -> String {
        let start = counter.window.map(|w| w.start);
        let resolved = ticket
            .resolved(counter.scope)
            .and_then(|r| r.downcast_ref::<ScopePrefix>())
            .filter(|p| Arc::ptr_eq(&p.store, &self.prefix));
        match resolved {
            Some(resolved) => self.key(&resolved.prefix, counter.kind, start),
            None => {
                let prefix = self.scope_prefix(&ticket.scopes()[counter.scope].key);
                self.key(&prefix, counter.kind, start)
            }
        }
    }

    fn member(&self, ticket: &Ticket) -> String {
        format!("{}:{}", self.instance, ticket.id())
    }
}

/// What [`RedisStore::resolve`] keeps per scope: the start of its keys.
#[derive(Debug)]
struct ScopePrefix {
    /// The prefix of the store that built it (a handle of another store's is not used).
    store: Arc<str>,
    prefix: String,
}

impl LimitStore for RedisStore {
    fn resolve(&self, scope: &ScopeKey) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(Arc::new(ScopePrefix {
            store: self.prefix.clone(),
            prefix: self.scope_prefix(scope),
        }))
    }

    fn reserve(&self, ticket: &Ticket) -> StoreReply<Admission> {
        let counters: Vec<PlannedCounter> = ticket.counters().collect();
        if counters.is_empty() {
            return StoreReply::Ready(Ok(Admission::Admitted));
        }
        let mut invocation = RESERVE_SCRIPT.prepare_invoke();
        invocation.arg(ticket.at()).arg(self.member(ticket));
        let lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX);
        for counter in &counters {
            invocation.key(self.counter_key(ticket, counter));
            let (kind, ttl) = match counter.window {
                Some(w) => ("w", w.end.saturating_sub(ticket.at()) + WINDOW_GRACE_MS),
                None => ("c", lease_ms),
            };
            invocation
                .arg(kind)
                .arg(counter.amount)
                .arg(counter.limit)
                .arg(ttl);
        }
        let mut connection = self.connection.clone();
        let ticket = ticket.clone();
        let timeout = self.timeout;
        StoreReply::Pending(Box::pin(async move {
            let over: Vec<u64> =
                timed("reserve", timeout, invocation.invoke_async(&mut connection)).await?;
            if over.is_empty() {
                return Ok(Admission::Admitted);
            }
            let over: Vec<(PlannedCounter, u64)> = over
                .chunks_exact(2)
                .filter_map(|pair| {
                    let index = usize::try_from(pair[0]).ok()?.checked_sub(1)?;
                    Some((*counters.get(index)?, pair[1]))
                })
                .collect();
            if over.is_empty() {
                return Err(LimitStoreError::new(
                    "the Redis reserve script answered with unknown counters",
                ));
            }
            Ok(Admission::Rejected(Rejection::from_counters(
                &ticket,
                &over,
                ticket.at(),
            )))
        }))
    }

    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()> {
        let mut invocation = SETTLE_SCRIPT.prepare_invoke();
        invocation.arg(self.member(ticket));
        let mut any = false;
        for counter in ticket.counters() {
            let delta = ticket.reserved().settle_delta(actual, counter.kind);
            if delta == 0 {
                continue;
            }
            any = true;
            invocation.key(self.counter_key(ticket, &counter));
            if counter.kind == CounterKind::Concurrent {
                invocation.arg("c");
            } else {
                invocation.arg(delta);
            }
        }
        if !any {
            return StoreReply::Ready(Ok(()));
        }
        let mut connection = self.connection.clone();
        let timeout = self.timeout;
        StoreReply::Pending(Box::pin(async move {
            timed(
                "settle",
                timeout,
                invocation.invoke_async::<()>(&mut connection),
            )
            .await
        }))
    }

    fn usage(&self, scope: &Scope, now: u64) -> StoreReply<Vec<CounterUsage>> {
        let planned: Vec<(CounterKind, u64, Option<crate::Window>)> = CounterKind::ALL
            .into_iter()
            .filter_map(|kind| {
                let (limit, window) = scope.limits.counter(kind, now)?;
                Some((kind, limit, window))
            })
            .collect();
        let mut pipe = redis::pipe();
        let prefix = self.scope_prefix(&scope.key);
        for (kind, _, window) in &planned {
            let key = self.key(&prefix, *kind, window.map(|w| w.start));
            if window.is_some() {
                pipe.get(key);
            } else {
                pipe.zcount(key, now, "+inf");
            }
        }
        let mut connection = self.connection.clone();
        let timeout = self.timeout;
        StoreReply::Pending(Box::pin(async move {
            let used: Vec<Option<i64>> =
                timed("usage", timeout, pipe.query_async(&mut connection)).await?;
            Ok(planned
                .into_iter()
                .zip(used)
                .map(|((kind, limit, window), used)| {
                    let used = u64::try_from(used.unwrap_or(0)).unwrap_or(0);
                    CounterUsage::new(kind, used, limit, window)
                })
                .collect())
        }))
    }
}
