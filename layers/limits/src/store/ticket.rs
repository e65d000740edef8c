//! [`Ticket`]: one call as a store sees it (its scopes, start, reservation and counters), and each of its
//! [`PlannedCounter`]s.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use super::demand::Demand;
use crate::limits::{CounterKind, Scope};
use crate::plan::CallPlan;
use crate::window::Window;

/// One admitted-or-not call: its scopes, when it started (windows are the ones containing that instant; usage is
/// settled into them), what was reserved, and every counter that reservation touches.
///
/// Everything that depends only on the caller and the model (the scopes, their counters and limits, the store's
/// handles from [`LimitStore::resolve`](crate::store::LimitStore::resolve), the price) is resolved once per caller and model and shared by their
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

    /// The same call reserving `reserved` instead.
    pub(crate) fn with_reserved(&self, reserved: Demand) -> Self {
        Ticket {
            reserved,
            ..self.clone()
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

    /// What the store's [`LimitStore::resolve`](crate::store::LimitStore::resolve) answered for the scope at `index` of [`Ticket::scopes`], when
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
