//! [`MemoryStore`]: counters in this process, behind one mutex.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::limits::{CounterKind, Scope, ScopeKey};
use crate::plan::ScopePlan;
use crate::store::{
    Admission, CounterUsage, Demand, LimitStore, PlannedCounter, Rejection, StoreReply, Ticket,
};

/// Counters in this process: the default store, exact for one process (each replica of a service has its own;
/// use [`crate::RedisStore`] to share limits).
///
/// Each scope's counters are one allocation that the layer's plans hold ([`LimitStore::resolve`]), so a call
/// reaches them without a lookup. Every check and change happens under one mutex, so a check-then-charge over
/// several scopes is atomic. Scopes whose windows have all ended, with no call in progress and no plan holding
/// them, are swept from time to time.
#[derive(Debug)]
pub struct MemoryStore {
    /// Tells this store's counters from another's (a handle resolved by one store is no use to another).
    id: u64,
    state: Mutex<State>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        MemoryStore {
            id: NEXT_ID.fetch_add(1, Relaxed),
            state: Mutex::default(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// foldhash, seeded per map: callers are the application's own ids (API keys, users), not free input.
    scopes: foldhash::HashMap<ScopeKey, Arc<Counters>>,
    reserves_since_sweep: u32,
}

/// One scope's counters, indexed by [`CounterKind::index`].
///
/// Atomics only so that a plan can hold them outside the map: they are read and written solely while the
/// store's mutex is held, so plain (relaxed) loads and stores are enough and no update is lost.
#[derive(Debug)]
struct Counters {
    /// The [`MemoryStore::id`] of the store they belong to.
    store: u64,
    slots: [Slot; 6],
    /// When the last window charged ends: past it, with no call in progress and no plan holding the counters,
    /// the scope can go.
    expires_at: AtomicU64,
    /// `[from, until)`: the instants every slot in `windowed` (a bit per [`CounterKind::index`]) holds, so a
    /// call starting inside it skips the slots' own checks (kept by [`Counters::cover`] whenever a slot's
    /// window is set).
    from: AtomicU64,
    until: AtomicU64,
    windowed: AtomicU64,
}

/// One counter and the window it counts in.
#[derive(Debug, Default)]
struct Slot {
    /// The window `used` counts: `[start, end)` in milliseconds since the epoch (`[0, u64::MAX)` for calls in
    /// progress, which have none). A call whose start falls in it counts here; any other call starts the
    /// slot over in its own window (the same answer as comparing the call's window with the slot's, without
    /// computing the window on every call).
    start: AtomicU64,
    end: AtomicU64,
    used: AtomicU64,
}

impl Slot {
    /// Whether a call starting at `at` counts in the slot's current window.
    fn holds(&self, at: u64) -> bool {
        self.start.load(Relaxed) <= at && at < self.end.load(Relaxed)
    }

    /// What a call starting at `at` finds used.
    fn used_at(&self, at: u64) -> u64 {
        if self.holds(at) {
            self.used.load(Relaxed)
        } else {
            0
        }
    }

    fn add(&self, amount: u64) {
        self.used
            .store(self.used.load(Relaxed).saturating_add(amount), Relaxed);
    }
}

impl Counters {
    fn new(store: u64) -> Self {
        let counters = Counters {
            store,
            slots: Default::default(),
            expires_at: AtomicU64::new(0),
            from: AtomicU64::new(0),
            until: AtomicU64::new(0),
            windowed: AtomicU64::new(0),
        };
        // Calls in progress have no window: every call counts in the same one.
        let concurrent = &counters.slots[CounterKind::Concurrent.index()];
        concurrent.end.store(u64::MAX, Relaxed);
        counters
    }

    /// Whether every windowed slot of `plan` holds a call starting at `at`, known without looking at them.
    #[inline]
    fn all_hold(&self, plan: &ScopePlan, at: u64) -> bool {
        self.from.load(Relaxed) <= at
            && at < self.until.load(Relaxed)
            && plan.windowed() & !self.windowed.load(Relaxed) == 0
    }

    /// Recompute `[from, until)` and `windowed` after a slot's window was set.
    fn cover(&self) {
        let (mut from, mut until, mut windowed) = (0, u64::MAX, 0);
        for kind in CounterKind::ALL {
            let slot = &self.slots[kind.index()];
            let end = slot.end.load(Relaxed);
            if kind == CounterKind::Concurrent || end == 0 {
                continue;
            }
            from = from.max(slot.start.load(Relaxed));
            until = until.min(end);
            windowed |= 1 << kind.index();
        }
        self.from.store(from, Relaxed);
        self.until.store(until, Relaxed);
        self.windowed.store(windowed, Relaxed);
    }

    /// Whether the sweep may drop these counters at `now`.
    fn ended(counters: &Arc<Counters>, now: u64) -> bool {
        Arc::strong_count(counters) == 1
            && counters.expires_at.load(Relaxed) <= now
            && counters.slots[CounterKind::Concurrent.index()]
                .used
                .load(Relaxed)
                == 0
    }
}

impl State {
    /// The counters of `key`, created empty when the scope has none.
    fn counters_of(&mut self, store: u64, key: &ScopeKey) -> Arc<Counters> {
        if let Some(counters) = self.scopes.get(key) {
            return counters.clone();
        }
        let counters = Arc::new(Counters::new(store));
        self.scopes.insert(key.clone(), counters.clone());
        counters
    }

    /// Drop the scopes whose windows have all ended, with no call in progress and no plan holding them. Under
    /// the mutex no handle is being resolved, so a count of one means only the map holds the counters.
    fn sweep(&mut self, now: u64) {
        self.scopes.retain(|_, c| !Counters::ended(c, now));
    }
}

/// The full counter whose window ends last (the last one among equals), if any counter of the scopes lacks room.
fn worst_over(ticket: &Ticket, scopes: &[&Counters]) -> Option<(PlannedCounter, u64)> {
    let at = ticket.at();
    let amounts = ticket.reserved().amounts();
    let mut worst: Option<(PlannedCounter, u64, Duration)> = None;
    for (index, (plan, counters)) in ticket.plan().plans.iter().zip(scopes).enumerate() {
        for c in plan.counters() {
            let amount = amounts[c.kind.index()];
            let used = counters.slots[c.kind.index()].used_at(at);
            if used.saturating_add(amount) > c.limit {
                let over = PlannedCounter {
                    scope: index,
                    kind: c.kind,
                    limit: c.limit,
                    window: c.window(at),
                    amount,
                };
                let wait = over.retry_after(at);
                if worst.is_none_or(|(_, _, w)| wait >= w) {
                    worst = Some((over, used, wait));
                }
            }
        }
    }
    worst.map(|(c, used, _)| (c, used))
}

/// Add a reservation to one scope's counters (a slot whose window does not hold the call starts over in the
/// call's window).
fn charge(plan: &ScopePlan, counters: &Counters, at: u64, amounts: &[u64; 6]) {
    let mut started = false;
    for c in plan.counters() {
        let slot = &counters.slots[c.kind.index()];
        let amount = amounts[c.kind.index()];
        if slot.holds(at) {
            slot.add(amount);
            continue;
        }
        match c.window(at) {
            Some(w) => {
                slot.start.store(w.start, Relaxed);
                slot.end.store(w.end, Relaxed);
                slot.used.store(amount, Relaxed);
                let expires_at = counters.expires_at.load(Relaxed).max(w.end);
                counters.expires_at.store(expires_at, Relaxed);
                started = true;
            }
            None => slot.add(amount),
        }
    }
    if started {
        counters.cover();
    }
}

/// The usual case of a reservation: every scope's counters hold the call's window (known from
/// [`Counters::all_hold`], without looking at the slots), so each scope's six slots are checked as six lanes
/// (a kind the scope does not limit adds nothing against no limit) and, when every lane of every scope has
/// room, charged. Charges nothing and answers false otherwise, for the per-counter path to decide.
#[inline]
fn charge_lanes(ticket: &Ticket, scopes: &[&Counters]) -> bool {
    let at = ticket.at();
    let amounts = ticket.reserved().amounts();
    let plans = &ticket.plan().plans;
    let mut next = [[0u64; 6]; 3];
    if scopes.len() > next.len() {
        return false;
    }
    for ((plan, counters), next) in plans.iter().zip(scopes).zip(&mut next) {
        if !counters.all_hold(plan, at) {
            return false;
        }
        let (limits, masks) = (plan.lane_limits(), plan.lane_masks());
        let mut fits = true;
        for k in 0..6 {
            let (used, overflow) = counters.slots[k]
                .used
                .load(Relaxed)
                .overflowing_add(amounts[k] & masks[k]);
            fits &= !overflow & (used <= limits[k]);
            next[k] = used;
        }
        if !fits {
            return false;
        }
    }
    for (counters, next) in scopes.iter().zip(&next) {
        for (slot, used) in counters.slots.iter().zip(next) {
            slot.used.store(*used, Relaxed);
        }
    }
    true
}

/// The common case of a reservation in one pass: every slot already counts in the call's window and has
/// room, so each is checked and charged in turn. Stops at the first that does not (no room, a window to start
/// over, an overflow) after taking back what it charged, so the caller can decide with the exact two-pass
/// check; under the store's mutex nobody sees the partial charge.
fn charge_in_place(ticket: &Ticket, scopes: &[&Counters]) -> bool {
    let at = ticket.at();
    let amounts = ticket.reserved().amounts();
    let plans = &ticket.plan().plans;
    for (scope, (plan, counters)) in plans.iter().zip(scopes).enumerate() {
        let all_hold = counters.all_hold(plan, at);
        for (index, c) in plan.counters().iter().enumerate() {
            let slot = &counters.slots[c.kind.index()];
            let amount = amounts[c.kind.index()];
            let charged = match slot.used.load(Relaxed).checked_add(amount) {
                Some(used) if used <= c.limit && (all_hold || slot.holds(at)) => used,
                _ => {
                    // Take back the counters charged so far: this scope's first `index`, every earlier scope's.
                    let earlier = plans.iter().zip(scopes).take(scope);
                    let this = std::iter::once((plan, counters));
                    for (n, (plan, counters)) in earlier.chain(this).enumerate() {
                        let upto = if n == scope {
                            index
                        } else {
                            plan.counters().len()
                        };
                        for c in &plan.counters()[..upto] {
                            let slot = &counters.slots[c.kind.index()];
                            let used = slot.used.load(Relaxed) - amounts[c.kind.index()];
                            slot.used.store(used, Relaxed);
                        }
                    }
                    return false;
                }
            };
            slot.used.store(charged, Relaxed);
        }
    }
    true
}

/// Sweep ended scopes after this many reservations.
const SWEEP_EVERY: u32 = 4096;

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// How many scopes have counters (ended ones are swept from time to time).
    pub fn scope_count(&self) -> usize {
        self.lock().scopes.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a counter half-updated in a way that matters more than
        // losing every limit: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters of scope `index` of `ticket`, when the layer resolved them with this store.
    fn resolved<'t>(&self, ticket: &'t Ticket, index: usize) -> Option<&'t Counters> {
        ticket
            .resolved(index)?
            .downcast_ref::<Counters>()
            .filter(|c| c.store == self.id)
    }

    /// Lock the store and run `f` over the counters of every scope of `ticket` (created when missing): through
    /// the ticket's resolved handles for a call of the layer, by key for a ticket made by hand.
    fn with_scopes<R>(&self, ticket: &Ticket, f: impl FnOnce(&mut State, &[&Counters]) -> R) -> R {
        let mut state = self.lock();
        let resolved = match ticket.scopes().len() {
            1 => self.resolved(ticket, 0).map(|a| ([a, a, a], 1)),
            2 => self
                .resolved(ticket, 0)
                .zip(self.resolved(ticket, 1))
                .map(|(a, b)| ([a, b, b], 2)),
            // A team member's call to a model with limits: the caller's, the caller-and-model and the team's.
            3 => self
                .resolved(ticket, 0)
                .zip(self.resolved(ticket, 1))
                .zip(self.resolved(ticket, 2))
                .map(|((a, b), c)| ([a, b, c], 3)),
            _ => None,
        };
        // One call of `f` (so it is inlined): the resolved counters, or those found by key.
        let held: Vec<Arc<Counters>>;
        let by_key: Vec<&Counters>;
        let scopes: &[&Counters] = match &resolved {
            Some((pair, len)) => &pair[..*len],
            None => {
                held = ticket
                    .scopes()
                    .iter()
                    .map(|s| state.counters_of(self.id, &s.key))
                    .collect();
                by_key = held.iter().map(|c| &**c).collect();
                &by_key
            }
        };
        f(&mut state, scopes)
    }
}

impl LimitStore for MemoryStore {
    fn resolve(&self, scope: &ScopeKey) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(self.lock().counters_of(self.id, scope))
    }

    fn reserve(&self, ticket: &Ticket) -> StoreReply<Admission> {
        let admission = self.with_scopes(ticket, |state, scopes| {
            if charge_lanes(ticket, scopes) || charge_in_place(ticket, scopes) {
                state.reserves_since_sweep += 1;
                if state.reserves_since_sweep >= SWEEP_EVERY {
                    state.reserves_since_sweep = 0;
                    state.sweep(ticket.at());
                }
                return Admission::Admitted;
            }
            // Check every scope before charging any: all or nothing.
            if let Some((worst, used)) = worst_over(ticket, scopes) {
                return Admission::Rejected(Rejection::of(ticket, &worst, used, ticket.at()));
            }
            let amounts = ticket.reserved().amounts();
            for (plan, counters) in ticket.plan().plans.iter().zip(scopes) {
                charge(plan, counters, ticket.at(), &amounts);
            }
            state.reserves_since_sweep += 1;
            if state.reserves_since_sweep >= SWEEP_EVERY {
                state.reserves_since_sweep = 0;
                state.sweep(ticket.at());
            }
            Admission::Admitted
        });
        StoreReply::Ready(Ok(admission))
    }

    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()> {
        // Per kind, not per counter: every scope's counter of one kind moves by the same amount.
        let deltas = ticket.reserved().settle_deltas(actual);
        let at = ticket.at();
        self.with_scopes(ticket, |_, scopes| {
            for (plan, counters) in ticket.plan().plans.iter().zip(scopes) {
                let all_hold = counters.all_hold(plan, at);
                if all_hold {
                    // Every slot counts the call's window: six lanes alike (a kind the scope does not limit, and
                    // the requests, move by zero).
                    let masks = plan.lane_masks();
                    for (k, slot) in counters.slots.iter().enumerate() {
                        let delta = deltas[k] & masks[k] as i64;
                        let used = slot.used.load(Relaxed);
                        // `saturating_add_signed`, one sign at a time (fewer steps per counter).
                        let used = if delta >= 0 {
                            used.saturating_add(delta.unsigned_abs())
                        } else {
                            used.saturating_sub(delta.unsigned_abs())
                        };
                        slot.used.store(used, Relaxed);
                    }
                    continue;
                }
                for c in plan.settled_counters() {
                    let delta = deltas[c.kind.index()];
                    let slot = &counters.slots[c.kind.index()];
                    // Nothing to change, or the window the call was charged in has ended: its counts no longer
                    // matter.
                    if delta != 0 && slot.holds(at) {
                        let used = slot.used.load(Relaxed);
                        // `saturating_add_signed`, one sign at a time (fewer steps per counter).
                        let used = if delta > 0 {
                            used.saturating_add(delta.unsigned_abs())
                        } else {
                            used.saturating_sub(delta.unsigned_abs())
                        };
                        slot.used.store(used, Relaxed);
                    }
                }
            }
        });
        StoreReply::Ready(Ok(()))
    }

    fn usage(&self, scope: &Scope, now: u64) -> StoreReply<Vec<CounterUsage>> {
        let state = self.lock();
        let counters = state.scopes.get(&scope.key);
        let usage = CounterKind::ALL
            .into_iter()
            .filter_map(|kind| {
                let (limit, window) = scope.limits.counter(kind, now)?;
                let used = counters.map_or(0, |c| c.slots[kind.index()].used_at(now));
                Some(CounterUsage::new(kind, used, limit, window))
            })
            .collect();
        StoreReply::Ready(Ok(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{Limits, WindowLimit};

    fn scope(caller: &str, limits: &Limits) -> Scope {
        Scope {
            key: ScopeKey::caller(Arc::from(caller)),
            limits: Arc::new(limits.clone()),
        }
    }

    fn ticket(id: u64, caller: &str, limits: &Limits, at: u64, input_tokens: u64) -> Ticket {
        let reserved = Demand {
            input_tokens,
            ..Demand::default()
        };
        Ticket::new(id, vec![scope(caller, limits)], at, reserved)
    }

    fn admitted(reply: StoreReply<Admission>) -> bool {
        matches!(reply, StoreReply::Ready(Ok(Admission::Admitted)))
    }

    fn input_used(store: &MemoryStore, caller: &str, limits: &Limits, now: u64) -> u64 {
        let StoreReply::Ready(Ok(usage)) = store.usage(&scope(caller, limits), now) else {
            panic!("the memory store answers at once");
        };
        usage
            .iter()
            .find(|c| c.kind == CounterKind::InputTokens)
            .map_or(0, |c| c.used)
    }

    #[test]
    fn a_sweep_drops_ended_scopes_but_never_counters_a_plan_holds() {
        let tokens = Limits::none().input_tokens(WindowLimit::per_minute(1_000_000));
        let store = MemoryStore::new();
        // Held by a plan (as a layer holds it) and charged in the epoch's first minute, like "old".
        let held = store.resolve(&scope("held", &tokens).key).unwrap();
        assert!(admitted(
            store.reserve(&ticket(0, "old", &tokens, 30_000, 10))
        ));
        assert!(admitted(
            store.reserve(&ticket(1, "held", &tokens, 30_000, 10))
        ));
        // Later: enough reserves of another caller to run a sweep.
        let later = 180_000;
        for id in 2..=u64::from(SWEEP_EVERY) + 1 {
            assert!(admitted(
                store.reserve(&ticket(id, "busy", &tokens, later, 1))
            ));
        }
        assert_eq!(
            store.scope_count(),
            2,
            "\"old\" was swept, \"held\" and \"busy\" were not"
        );
        let again = store.resolve(&scope("held", &tokens).key).unwrap();
        assert!(
            Arc::ptr_eq(&held, &again),
            "the held counters are still the store's"
        );
        // Once nothing holds them, ended counters go at the next sweep.
        drop((held, again));
        for id in 0..u64::from(SWEEP_EVERY) {
            assert!(admitted(
                store.reserve(&ticket(id, "busy", &tokens, later, 1))
            ));
        }
        assert_eq!(store.scope_count(), 1);
    }

    #[test]
    fn a_call_through_resolved_counters_and_one_by_key_count_in_the_same_scope() {
        let tokens = Limits::none().input_tokens(WindowLimit::per_minute(100));
        let store = MemoryStore::new();
        let other = MemoryStore::new();
        let resolved = |store: &MemoryStore, id, input_tokens| {
            let scope = scope("alice", &tokens);
            let plan =
                crate::plan::CallPlan::new(vec![scope], None, None, |s| store.resolve(&s.key));
            let reserved = Demand {
                input_tokens,
                ..Demand::default()
            };
            Ticket::planned(id, Arc::new(plan), 30_000, reserved)
        };
        assert!(admitted(store.reserve(&resolved(&store, 0, 60))));
        assert_eq!(input_used(&store, "alice", &tokens, 30_000), 60);
        // A ticket resolved by another store is counted here by key, and the other store is left alone.
        assert!(!admitted(store.reserve(&resolved(&other, 1, 41))));
        assert!(admitted(store.reserve(&resolved(&other, 2, 40))));
        assert_eq!(input_used(&store, "alice", &tokens, 30_000), 100);
        assert_eq!(input_used(&other, "alice", &tokens, 30_000), 0);
        // A hand-made ticket (no handle) settles into the same counters.
        let by_key = ticket(3, "alice", &tokens, 30_000, 40);
        let actual = Demand {
            input_tokens: 15,
            ..Demand::default()
        };
        assert!(matches!(
            store.settle(&by_key, &actual),
            StoreReply::Ready(Ok(()))
        ));
        assert_eq!(input_used(&store, "alice", &tokens, 30_000), 75);
    }

    #[test]
    fn a_window_rollover_starts_over_and_a_late_settlement_leaves_the_new_window_alone() {
        let tokens = Limits::none()
            .input_tokens(WindowLimit::per_minute(100))
            .concurrent(1);
        let store = MemoryStore::new();
        let first = ticket(0, "alice", &tokens, 59_999, 90);
        assert!(admitted(store.reserve(&first)));
        // Same minute: 90 + 20 > 100, and the only slot in progress is taken.
        assert!(!admitted(
            store.reserve(&ticket(1, "alice", &tokens, 30_000, 20))
        ));
        // The next minute starts over for tokens, but calls in progress have no window.
        let second = ticket(2, "alice", &tokens, 60_000, 20);
        assert!(
            !admitted(store.reserve(&second)),
            "the first call is still in progress"
        );
        let actual = Demand {
            input_tokens: 5,
            ..Demand::default()
        };
        assert!(matches!(
            store.settle(&first, &actual),
            StoreReply::Ready(Ok(()))
        ));
        assert_eq!(input_used(&store, "alice", &tokens, 59_999), 5);
        assert!(admitted(store.reserve(&second)));
        assert_eq!(input_used(&store, "alice", &tokens, 60_000), 20);
        assert_eq!(
            input_used(&store, "alice", &tokens, 59_999),
            0,
            "one window at a time"
        );
        // A call of the ended minute settling now changes no count of the new one.
        let late = ticket(3, "alice", &tokens, 59_000, 50);
        assert!(matches!(
            store.settle(&late, &actual),
            StoreReply::Ready(Ok(()))
        ));
        assert_eq!(input_used(&store, "alice", &tokens, 60_000), 20);
        assert!(matches!(
            store.settle(&second, &actual),
            StoreReply::Ready(Ok(()))
        ));
        assert_eq!(input_used(&store, "alice", &tokens, 60_000), 5);
        assert!(admitted(
            store.reserve(&ticket(4, "alice", &tokens, 119_999, 95))
        ));
    }

    #[test]
    fn a_refused_call_leaves_every_counter_of_every_scope_as_it_was() {
        let own = Limits::none()
            .requests(WindowLimit::per_minute(10))
            .input_tokens(WindowLimit::per_minute(100));
        let per_model = Limits::none().requests(WindowLimit::per_minute(1));
        let scopes = || {
            let mut model = scope("alice", &per_model);
            model.key.model = Some(Arc::from("m"));
            vec![scope("alice", &own), model]
        };
        let store = MemoryStore::new();
        let call = |id, scopes: Vec<Scope>, input_tokens| {
            let reserved = Demand {
                input_tokens,
                ..Demand::default()
            };
            Ticket::new(id, scopes, 30_000, reserved)
        };
        let used = |index: usize| {
            let StoreReply::Ready(Ok(usage)) = store.usage(&scopes()[index], 30_000) else {
                panic!("the memory store answers at once");
            };
            usage.iter().map(|c| (c.kind, c.used)).collect::<Vec<_>>()
        };
        assert!(admitted(store.reserve(&call(0, scopes(), 40))));
        let before = (used(0), used(1));
        assert_eq!(
            before,
            (
                vec![(CounterKind::Requests, 1), (CounterKind::InputTokens, 40)],
                vec![(CounterKind::Requests, 1)]
            )
        );
        // The caller's scope has room (charged first), the per-model one does not: all of it is taken back.
        let StoreReply::Ready(Ok(Admission::Rejected(rejection))) =
            store.reserve(&call(1, scopes(), 20))
        else {
            panic!("over the per-model limit");
        };
        assert_eq!(
            (rejection.scope.model.as_deref(), rejection.kind),
            (Some("m"), CounterKind::Requests)
        );
        assert_eq!((used(0), used(1)), before);
        // Within one scope: the requests have room (charged first), the input tokens do not.
        let own_only = || vec![scopes().swap_remove(0)];
        let StoreReply::Ready(Ok(Admission::Rejected(rejection))) =
            store.reserve(&call(2, own_only(), 70))
        else {
            panic!("over the caller's input limit");
        };
        assert_eq!(
            (rejection.scope.model, rejection.kind),
            (None, CounterKind::InputTokens)
        );
        assert_eq!((used(0), used(1)), before);
        assert!(admitted(store.reserve(&call(3, own_only(), 60))));
        assert_eq!(
            used(0),
            [(CounterKind::Requests, 2), (CounterKind::InputTokens, 100)]
        );
    }

    #[test]
    fn the_lanes_move_only_the_counters_a_scope_limits_and_stop_exactly_at_the_limit() {
        let tokens = Limits::none().input_tokens(WindowLimit::per_minute(100));
        let store = MemoryStore::new();
        let slots = || {
            let counters = store
                .lock()
                .scopes
                .get(&scope("alice", &tokens).key)
                .cloned();
            counters.map_or([0; 6], |c| {
                CounterKind::ALL.map(|k| c.slots[k.index()].used.load(Relaxed))
            })
        };
        let call = |id, input_tokens, output_tokens| {
            let reserved = Demand {
                input_tokens,
                output_tokens,
                cost: tower_chat::Cost::from_nanos(7),
            };
            Ticket::new(id, vec![scope("alice", &tokens)], 30_000, reserved)
        };
        // The first call starts the window (the per-counter path); the next ones find it held (the lanes).
        let first = call(0, 40, 9);
        assert!(admitted(store.reserve(&first)));
        let second = call(1, 60, 9);
        assert!(admitted(store.reserve(&second)));
        assert_eq!(
            slots(),
            [0, 100, 0, 0, 0, 0],
            "requests, output, cost and calls in progress are not limited"
        );
        assert!(!admitted(store.reserve(&call(2, 1, 0))), "100 + 1 > 100");
        assert!(
            !admitted(store.reserve(&call(3, u64::MAX, 0))),
            "an overflow is over the limit"
        );
        assert_eq!(
            slots(),
            [0, 100, 0, 0, 0, 0],
            "a refused call charges nothing"
        );
        let actual = Demand {
            input_tokens: 25,
            output_tokens: 30,
            cost: tower_chat::Cost::from_nanos(1_000),
        };
        for ticket in [&first, &second] {
            assert!(matches!(
                store.settle(ticket, &actual),
                StoreReply::Ready(Ok(()))
            ));
        }
        assert_eq!(slots(), [0, 50, 0, 0, 0, 0]);
    }
}
