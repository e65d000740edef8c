//! [`MemoryStore`]: counters in this process, behind one mutex.

use std::sync::Mutex;
use std::time::Duration;

use crate::limits::{CounterKind, Scope, ScopeKey};
use crate::store::{
    Admission, CounterUsage, Demand, LimitStore, PlannedCounter, Rejection, StoreReply, Ticket,
};
use crate::window::Window;

/// Counters in this process: the default store, exact for one process (each replica of a service has its own;
/// use [`crate::RedisStore`] to share limits). Operations take one short mutex and one hash lookup per scope,
/// and never allocate on the admit path of a known scope.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// foldhash, seeded per map: the key is hashed on every reserve and settle, and SipHash cost more than the
    /// rest of the store's work. Callers are the application's own ids (API keys, users), not free input.
    scopes: foldhash::HashMap<ScopeKey, Slots>,
    reserves_since_sweep: u32,
}

/// The counters of one scope, indexed by [`CounterKind::index`].
#[derive(Debug, Default)]
struct Slots {
    slots: [Slot; 6],
    /// When the last window charged ends: past it, and with no call in progress, the entry can go.
    expires_at: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The start of the window `used` counts (0 for calls in progress).
    window_start: u64,
    used: u64,
}

impl Slot {
    fn used_in(&self, window: Option<Window>) -> u64 {
        match window {
            Some(w) if w.start != self.window_start => 0,
            _ => self.used,
        }
    }
}

/// The full counter whose window ends last (the last one among equals), if any counter lacks room.
fn worst_over<'c, 's>(
    counters: impl Iterator<Item = (&'c PlannedCounter, Option<&'s Slots>)>,
    ticket: &Ticket,
) -> Option<&'c PlannedCounter> {
    let mut worst: Option<(&PlannedCounter, Duration)> = None;
    for (counter, slots) in counters {
        let used = slots.map_or(0, |s| s.slots[counter.kind.index()].used_in(counter.window));
        if used.saturating_add(counter.amount) > counter.limit {
            let wait = counter.retry_after(ticket.at());
            if worst.is_none_or(|(_, w)| wait >= w) {
                worst = Some((counter, wait));
            }
        }
    }
    worst.map(|(c, _)| c)
}

/// The counters of the scope at `index` (a ticket's counters are grouped by scope, in scope order).
fn scope_counters(counters: &[PlannedCounter], index: usize) -> &[PlannedCounter] {
    if counters.last().is_none_or(|c| c.scope == 0) {
        // Only the first scope has counters (the usual case): no search.
        return if index == 0 { counters } else { &[] };
    }
    let first = counters.partition_point(|c| c.scope < index);
    let end = counters.partition_point(|c| c.scope <= index);
    &counters[first..end]
}

/// Add a reservation to one scope's slots (a slot of an ended window starts over).
fn charge(slots: &mut Slots, counters: &[PlannedCounter]) {
    for counter in counters {
        let slot = &mut slots.slots[counter.kind.index()];
        match counter.window {
            Some(w) if w.start != slot.window_start => {
                *slot = Slot {
                    window_start: w.start,
                    used: counter.amount,
                };
            }
            _ => slot.used = slot.used.saturating_add(counter.amount),
        }
        if let Some(w) = counter.window {
            slots.expires_at = slots.expires_at.max(w.end);
        }
    }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a counter half-updated in a way that matters more than
        // losing every limit: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LimitStore for MemoryStore {
    fn reserve(&self, ticket: &Ticket) -> StoreReply<Admission> {
        let counters = ticket.counters();
        let mut state = self.lock();
        let state = &mut *state;
        if let [scope] = ticket.scopes() {
            // One scope (no per-model limits): check and charge through one lookup.
            let slots = match state.scopes.get_mut(&scope.key) {
                Some(slots) => slots,
                None => state.scopes.entry(scope.key.clone()).or_default(),
            };
            if let Some(worst) = worst_over(counters.iter().map(|c| (c, Some(&*slots))), ticket) {
                return StoreReply::Ready(Ok(Admission::Rejected(Rejection::of(
                    ticket,
                    worst,
                    ticket.at(),
                ))));
            }
            charge(slots, counters);
        } else {
            // Check every scope before charging any: all or nothing.
            let scopes = &state.scopes;
            let found = ticket
                .scopes()
                .iter()
                .enumerate()
                .flat_map(|(index, scope)| {
                    let slots = scopes.get(&scope.key);
                    scope_counters(counters, index)
                        .iter()
                        .map(move |c| (c, slots))
                });
            if let Some(worst) = worst_over(found, ticket) {
                return StoreReply::Ready(Ok(Admission::Rejected(Rejection::of(
                    ticket,
                    worst,
                    ticket.at(),
                ))));
            }
            for (index, scope) in ticket.scopes().iter().enumerate() {
                let slots = match state.scopes.get_mut(&scope.key) {
                    Some(slots) => slots,
                    None => state.scopes.entry(scope.key.clone()).or_default(),
                };
                charge(slots, scope_counters(counters, index));
            }
        }
        state.reserves_since_sweep += 1;
        if state.reserves_since_sweep >= SWEEP_EVERY {
            state.reserves_since_sweep = 0;
            let now = ticket.at();
            state.scopes.retain(|_, s| {
                s.expires_at > now || s.slots[CounterKind::Concurrent.index()].used > 0
            });
        }
        StoreReply::Ready(Ok(Admission::Admitted))
    }

    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()> {
        let counters = ticket.counters();
        // Per kind, not per counter: every scope's counter of one kind moves by the same amount.
        let deltas = CounterKind::ALL.map(|kind| ticket.reserved().settle_delta(actual, kind));
        let mut state = self.lock();
        for (index, scope) in ticket.scopes().iter().enumerate() {
            let Some(slots) = state.scopes.get_mut(&scope.key) else {
                continue;
            };
            for counter in scope_counters(counters, index) {
                let delta = deltas[counter.kind.index()];
                let slot = &mut slots.slots[counter.kind.index()];
                if delta == 0 || counter.window.is_some_and(|w| w.start != slot.window_start) {
                    // The window the call was charged in has ended: its counts no longer matter.
                    continue;
                }
                slot.used = slot.used.saturating_add_signed(delta);
            }
        }
        StoreReply::Ready(Ok(()))
    }

    fn usage(&self, scope: &Scope, now: u64) -> StoreReply<Vec<CounterUsage>> {
        let state = self.lock();
        let slots = state.scopes.get(&scope.key);
        let usage = CounterKind::ALL
            .into_iter()
            .filter_map(|kind| {
                let (limit, window) = scope.limits.counter(kind, now)?;
                let used = slots.map_or(0, |s| s.slots[kind.index()].used_in(window));
                Some(CounterUsage::new(kind, used, limit, window))
            })
            .collect();
        StoreReply::Ready(Ok(usage))
    }
}
