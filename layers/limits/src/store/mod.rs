//! The [`LimitStore`] trait: where counters live. [`MemoryStore`] (one process, the default) and, with the
//! `redis` feature, [`RedisStore`] (several replicas).

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use serde::Serialize;
use tower_chat::{ChatError, Cost, ErrorKind};

use crate::limits::{CounterKind, Scope, ScopeKey};
use crate::plan::CallPlan;
use crate::window::Window;

pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis::{RedisStore, RedisStoreBuilder};

/// What a call consumes, or is expected to consume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost; zero when none of the call's scopes has a cost budget (the layer prices a call only for one).
    pub cost: Cost,
}

impl Demand {
    /// What this demand adds to each counter kind, indexed by [`CounterKind::index`].
    pub(crate) fn amounts(&self) -> [u64; 6] {
        let cost = self.cost.as_nanos();
        [1, self.input_tokens, self.output_tokens, cost, cost, 1]
    }

    /// What this demand adds to a counter of `kind` (one request, one call in progress, tokens, nano-dollars).
    pub fn amount(&self, kind: CounterKind) -> u64 {
        match kind {
            CounterKind::Requests | CounterKind::Concurrent => 1,
            CounterKind::InputTokens => self.input_tokens,
            CounterKind::OutputTokens => self.output_tokens,
            CounterKind::CostPerDay | CounterKind::CostPerMonth => self.cost.as_nanos(),
        }
    }

    /// What settling `actual` against this reservation adds to a counter of `kind`: the difference for tokens
    /// and cost, nothing for requests (a call stays counted), minus one for calls in progress.
    /// A difference beyond `i64` saturates at its bound.
    pub fn settle_delta(&self, actual: &Demand, kind: CounterKind) -> i64 {
        match kind {
            CounterKind::Requests => 0,
            CounterKind::Concurrent => -1,
            kind => difference(actual.amount(kind), self.amount(kind)),
        }
    }

    /// [`Demand::settle_delta`] of every kind, indexed by [`CounterKind::index`].
    pub(crate) fn settle_deltas(&self, actual: &Demand) -> [i64; 6] {
        let cost = difference(actual.cost.as_nanos(), self.cost.as_nanos());
        [
            0,
            difference(actual.input_tokens, self.input_tokens),
            difference(actual.output_tokens, self.output_tokens),
            cost,
            cost,
            -1,
        ]
    }
}

/// `actual - reserved`, saturated to `i64`.
fn difference(actual: u64, reserved: u64) -> i64 {
    if actual >= reserved {
        i64::try_from(actual - reserved).unwrap_or(i64::MAX)
    } else {
        i64::try_from(reserved - actual).map_or(i64::MIN, |d| -d)
    }
}

/// One admitted-or-not call: its scopes, when it started (windows are the ones containing that instant; usage is
/// settled into them), what was reserved, and every counter that reservation touches.
///
/// Everything that depends only on the caller and the model (the scopes, their counters and limits, the store's
/// handles from [`LimitStore::resolve`], the price) is resolved once per caller and model and shared by their
/// calls: a ticket is that plan's `Arc` plus the call's own start instant and estimate, so it is cheap to make,
/// clone and drop.
#[derive(Clone, Debug)]
pub struct Ticket {
    id: u64,
    at: u64,
    reserved: Demand,
    plan: Arc<CallPlan>,
}

impl Ticket {
    /// A ticket for a call counted in `scopes`, starting at `at` (milliseconds since the epoch), reserving
    /// `reserved`. `id` must be unique among the tickets of one layer. Its scopes are not resolved (a store
    /// finds their counters by key).
    pub fn new(id: u64, scopes: Vec<Scope>, at: u64, reserved: Demand) -> Self {
        Ticket::planned(
            id,
            Arc::new(CallPlan::new(scopes, None, None, |_| None)),
            at,
            reserved,
        )
    }

    pub(crate) fn planned(id: u64, plan: Arc<CallPlan>, at: u64, reserved: Demand) -> Self {
        Ticket {
            id,
            at,
            reserved,
            plan,
        }
    }

    /// Unique among the tickets of one layer (stores that track calls in progress one by one key them by it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The scopes counted.
    pub fn scopes(&self) -> &[Scope] {
        &self.plan.scopes
    }

    /// What the store's [`LimitStore::resolve`] answered for the scope at `index` of [`Ticket::scopes`], when
    /// the layer resolved it (a store downcasts it to its own type, and finds the counters by key otherwise).
    pub fn resolved(&self, index: usize) -> Option<&(dyn Any + Send + Sync)> {
        self.plan.plans.get(index)?.resolved.as_deref()
    }

    /// When the call started, in milliseconds since the epoch.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// The estimate reserved at the start.
    pub fn reserved(&self) -> &Demand {
        &self.reserved
    }

    /// Every counter this ticket touches, grouped by scope in [`Ticket::scopes`] order and by kind in
    /// [`CounterKind::ALL`] order: scope index, kind, limit, window (the one containing [`Ticket::at`]), and the
    /// reserved amount.
    pub fn counters(&self) -> impl Iterator<Item = PlannedCounter> + '_ {
        let amounts = self.reserved.amounts();
        self.plan
            .plans
            .iter()
            .enumerate()
            .flat_map(move |(scope, plan)| {
                plan.counters().iter().map(move |c| PlannedCounter {
                    scope,
                    kind: c.kind,
                    limit: c.limit,
                    window: c.window(self.at),
                    amount: amounts[c.kind.index()],
                })
            })
    }

    pub(crate) fn plan(&self) -> &CallPlan {
        &self.plan
    }
}

/// One counter of a [`Ticket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedCounter {
    /// Index into [`Ticket::scopes`].
    pub scope: usize,
    /// Which counter.
    pub kind: CounterKind,
    /// Its limit.
    pub limit: u64,
    /// Its window (`None` for calls in progress).
    pub window: Option<Window>,
    /// What the call reserves in it.
    pub amount: u64,
}

impl PlannedCounter {
    /// How long until this counter's window ends, seen from `now`; for calls in progress, which end when other
    /// calls end, [`CONCURRENT_RETRY_AFTER`].
    pub fn retry_after(&self, now: u64) -> Duration {
        match self.window {
            Some(w) => Duration::from_millis(w.end.saturating_sub(now).max(1)),
            None => CONCURRENT_RETRY_AFTER,
        }
    }
}

/// The wait a call refused for lack of a concurrency slot is told to observe (`Retry-After: 1` through the
/// gateway). A slot frees when another call of the caller ends, which no store can predict; one second is
/// short next to a model call and long enough not to turn a full caller into a busy loop.
pub const CONCURRENT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Whether a reservation was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Every counter had room; all were charged.
    Admitted,
    /// At least one counter had no room; nothing was charged.
    Rejected(Rejection),
}

/// Why a call was refused: the counter that had no room (the one whose window ends last, when several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Whose counter.
    pub scope: ScopeKey,
    /// Which counter.
    pub kind: CounterKind,
    /// Its limit.
    pub limit: u64,
    /// How long until every full counter's window has ended ([`CONCURRENT_RETRY_AFTER`] when only calls in
    /// progress are full).
    pub retry_after: Duration,
    /// When the full counter's window ends (`None` for calls in progress, which free when other calls end).
    pub retry_at: Option<SystemTime>,
}

impl Rejection {
    /// The rejection for the full counters of `ticket` (`over`, not empty), seen from `now`.
    pub fn from_counters(ticket: &Ticket, over: &[PlannedCounter], now: u64) -> Rejection {
        let worst = over
            .iter()
            .max_by_key(|c| c.retry_after(now))
            .copied()
            .unwrap_or(over[0]);
        Rejection::of(ticket, &worst, now)
    }

    /// The rejection for one full counter of `ticket`, seen from `now`.
    pub(crate) fn of(ticket: &Ticket, worst: &PlannedCounter, now: u64) -> Rejection {
        Rejection {
            scope: ticket.scopes()[worst.scope].key.clone(),
            kind: worst.kind,
            limit: worst.limit,
            retry_after: worst.retry_after(now),
            retry_at: worst
                .window
                .map(|w| UNIX_EPOCH + Duration::from_millis(w.end)),
        }
    }
}

/// One counter's state, for a usage report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CounterUsage {
    /// Which counter.
    pub kind: CounterKind,
    /// Used in the current window (tokens, requests, nano-dollars, calls in progress).
    pub used: u64,
    /// The limit.
    pub limit: u64,
    /// `limit - used`, or zero.
    pub remaining: u64,
    /// When the current window ends, in milliseconds since the epoch (`None` for calls in progress).
    pub resets_at_ms: Option<u64>,
}

impl CounterUsage {
    pub(crate) fn new(kind: CounterKind, used: u64, limit: u64, window: Option<Window>) -> Self {
        CounterUsage {
            kind,
            used,
            limit,
            remaining: limit.saturating_sub(used),
            resets_at_ms: window.map(|w| w.end),
        }
    }
}

/// The answer of a store: at once (an in-process store) or after I/O (a networked one). The layer takes the
/// ready path without allocating a future.
pub enum StoreReply<T> {
    /// The result is known.
    Ready(Result<T, LimitStoreError>),
    /// The result arrives later.
    Pending(BoxFuture<'static, Result<T, LimitStoreError>>),
}

impl<T> StoreReply<T> {
    /// Wait for the result.
    pub async fn wait(self) -> Result<T, LimitStoreError> {
        match self {
            StoreReply::Ready(result) => result,
            StoreReply::Pending(future) => future.await,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for StoreReply<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreReply::Ready(result) => f.debug_tuple("Ready").field(result).finish(),
            StoreReply::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// Where counters live.
///
/// `reserve` must be atomic over all of a ticket's counters: either every counter has room and all are charged,
/// or none is charged. `settle` adds each counter's [`Demand::settle_delta`] to the window the ticket was
/// charged in (a window that has ended meanwhile is left alone) and never lets a counter go below zero.
pub trait LimitStore: fmt::Debug + Send + Sync + 'static {
    /// This store's handle on the counters of `scope`, taken once when the layer first sees the scope and kept
    /// with it (for as long as the layer keeps the caller's plan): every ticket counted in the scope carries it
    /// ([`Ticket::resolved`]), so `reserve` and `settle` reach the counters without finding them by key. A
    /// store that keeps counters in memory must keep them in place while a handle on them lives. `None` (the
    /// default): the store finds counters by key.
    fn resolve(&self, scope: &ScopeKey) -> Option<Arc<dyn Any + Send + Sync>> {
        let _ = scope;
        None
    }

    /// Check every counter of `ticket` and charge its reservation if all have room.
    fn reserve(&self, ticket: &Ticket) -> StoreReply<Admission>;

    /// Replace `ticket`'s reservation by `actual` and release its slot among calls in progress.
    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()>;

    /// The counters of `scope` as of `now` (milliseconds since the epoch).
    fn usage(&self, scope: &Scope, now: u64) -> StoreReply<Vec<CounterUsage>>;
}

/// A store could not be reached or answered nonsense.
#[derive(Debug)]
pub struct LimitStoreError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl LimitStoreError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        LimitStoreError {
            message: message.into(),
            source: None,
        }
    }

    /// An error with a message and its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LimitStoreError {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

impl fmt::Display for LimitStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LimitStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<LimitStoreError> for ChatError {
    fn from(error: LimitStoreError) -> Self {
        ChatError::new(ErrorKind::Store, format!("limits store: {error}")).with_source(error)
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "caller {}", self.scope.caller)?;
        if let Some(model) = &self.scope.model {
            write!(f, " (model {model})")?;
        }
        write!(
            f,
            " is over its {} limit of {}",
            self.kind,
            self.kind.amount(self.limit)
        )?;
        let wait = in_words(self.retry_after);
        match self.retry_at {
            Some(at) => write!(f, "; retry at {} (in {wait})", httpdate::fmt_http_date(at)),
            None => write!(f, "; retry in {wait}"),
        }
    }
}

impl std::error::Error for Rejection {}

/// A wait as a person reads it: `21 h 34 min`, `3 min 5 s`, `2 s`, rounded up to the second.
fn in_words(wait: Duration) -> String {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let (days, hours, minutes, seconds) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds} s"),
        (0, 0, _) => format!("{minutes} min {seconds} s"),
        (0, _, _) => format!("{hours} h {minutes} min"),
        _ => format!("{days} d {hours} h"),
    }
}

/// A rejection is a [`ErrorKind::RateLimited`] error carrying `retry_after`; the [`Rejection`] itself is its
/// source (downcast it for the scope and the counter).
impl From<Rejection> for ChatError {
    fn from(rejection: Rejection) -> Self {
        ChatError::new(
            ErrorKind::RateLimited {
                retry_after: Some(rejection.retry_after),
            },
            rejection.to_string(),
        )
        .with_source(rejection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_and_deltas_per_kind_agree_with_the_per_kind_answers() {
        let reserved = Demand {
            input_tokens: 100,
            output_tokens: 4096,
            cost: Cost::from_nanos(u64::MAX),
        };
        let actual = Demand {
            input_tokens: 120,
            output_tokens: 3,
            cost: Cost::ZERO,
        };
        let amounts = reserved.amounts();
        let deltas = reserved.settle_deltas(&actual);
        for kind in CounterKind::ALL {
            assert_eq!(amounts[kind.index()], reserved.amount(kind), "{kind}");
            assert_eq!(
                deltas[kind.index()],
                reserved.settle_delta(&actual, kind),
                "{kind}"
            );
        }
        assert_eq!(deltas[CounterKind::InputTokens.index()], 20);
        assert_eq!(deltas[CounterKind::OutputTokens.index()], -4093);
        // Beyond i64 the difference saturates on its own side.
        assert_eq!(deltas[CounterKind::CostPerDay.index()], i64::MIN);
        assert_eq!(
            actual.settle_delta(&reserved, CounterKind::CostPerMonth),
            i64::MAX
        );
    }
}
