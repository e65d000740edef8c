//! [`MemoryStore`]: counters in this process, behind one mutex.

use std::sync::atomic::Ordering;
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
    /// Scope → its slot in `entries`. foldhash, seeded per map: the key is hashed on every reserve, and SipHash
    /// cost more than the rest of the store's work. Callers are the application's own ids (API keys, users), not
    /// free input.
    index: foldhash::HashMap<ScopeKey, u32>,
    /// The scopes' counters by slot (`None`: a slot freed by a sweep, listed in `free`). A ticket remembers the
    /// slots it was charged in ([`Ticket::slot_hint`]), so settlement needs no second lookup.
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    reserves_since_sweep: u32,
}

#[derive(Debug)]
struct Entry {
    key: ScopeKey,
    slots: Slots,
}

impl State {
    /// The slot of `key`, created empty when the scope has none.
    fn slot_of(&mut self, key: &ScopeKey) -> u32 {
        if let Some(&slot) = self.index.get(key) {
            return slot;
        }
        let entry = Some(Entry {
            key: key.clone(),
            slots: Slots::default(),
        });
        let slot = match self.free.pop() {
            Some(slot) => {
                self.entries[slot as usize] = entry;
                slot
            }
            None => {
                self.entries.push(entry);
                u32::try_from(self.entries.len() - 1).expect("fewer than 2^32 scopes")
            }
        };
        self.index.insert(key.clone(), slot);
        slot
    }

    fn slots_mut(&mut self, slot: u32) -> &mut Slots {
        &mut self.entries[slot as usize]
            .as_mut()
            .expect("an indexed slot is occupied")
            .slots
    }

    /// The counters of `key`, through the slot `hint` when it still holds that scope, else by lookup.
    fn find_mut(&mut self, key: &ScopeKey, hint: u32) -> Option<&mut Slots> {
        let hinted = matches!(
            self.entries.get(hint as usize),
            Some(Some(entry)) if entry.key == *key
        );
        let slot = if hinted { hint } else { *self.index.get(key)? };
        Some(self.slots_mut(slot))
    }

    fn get(&self, key: &ScopeKey) -> Option<&Slots> {
        let slot = *self.index.get(key)?;
        self.entries[slot as usize].as_ref().map(|e| &e.slots)
    }

    /// Drop the scopes whose windows have all ended and that have no call in progress.
    fn sweep(&mut self, now: u64) {
        let (entries, free) = (&mut self.entries, &mut self.free);
        self.index.retain(|_, &mut slot| {
            let entry = &mut entries[slot as usize];
            let keep = entry.as_ref().is_some_and(|e| {
                e.slots.expires_at > now || e.slots.slots[CounterKind::Concurrent.index()].used > 0
            });
            if !keep {
                *entry = None;
                free.push(slot);
            }
            keep
        });
    }
}

/// The hint word of a ticket charged in `slots` (its first two scopes).
fn hint_word(first: u32, second: u32) -> u64 {
    u64::from(first) | u64::from(second) << 32
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
        self.lock().index.len()
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
            let slot = state.slot_of(&scope.key);
            let slots = state.slots_mut(slot);
            if let Some(worst) = worst_over(counters.iter().map(|c| (c, Some(&*slots))), ticket) {
                return StoreReply::Ready(Ok(Admission::Rejected(Rejection::of(
                    ticket,
                    worst,
                    ticket.at(),
                ))));
            }
            charge(slots, counters);
            ticket
                .slot_hint
                .store(hint_word(slot, u32::MAX), Ordering::Relaxed);
        } else {
            // Check every scope before charging any: all or nothing.
            let found = ticket
                .scopes()
                .iter()
                .enumerate()
                .flat_map(|(index, scope)| {
                    let slots = state.get(&scope.key);
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
            let mut hint = [u32::MAX; 2];
            for (index, scope) in ticket.scopes().iter().enumerate() {
                let slot = state.slot_of(&scope.key);
                if let Some(h) = hint.get_mut(index) {
                    *h = slot;
                }
                charge(state.slots_mut(slot), scope_counters(counters, index));
            }
            ticket
                .slot_hint
                .store(hint_word(hint[0], hint[1]), Ordering::Relaxed);
        }
        state.reserves_since_sweep += 1;
        if state.reserves_since_sweep >= SWEEP_EVERY {
            state.reserves_since_sweep = 0;
            state.sweep(ticket.at());
        }
        StoreReply::Ready(Ok(Admission::Admitted))
    }

    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()> {
        let counters = ticket.counters();
        // Per kind, not per counter: every scope's counter of one kind moves by the same amount.
        let deltas = CounterKind::ALL.map(|kind| ticket.reserved().settle_delta(actual, kind));
        let hint = ticket.slot_hint.load(Ordering::Relaxed);
        let mut state = self.lock();
        for (index, scope) in ticket.scopes().iter().enumerate() {
            let hinted = match index {
                0 => hint as u32,
                1 => (hint >> 32) as u32,
                _ => u32::MAX,
            };
            let Some(slots) = state.find_mut(&scope.key, hinted) else {
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
        let slots = state.get(&scope.key);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::limits::{Limits, WindowLimit};

    fn ticket(id: u64, caller: &str, limits: &Limits, at: u64, input_tokens: u64) -> Ticket {
        let scope = Scope {
            key: ScopeKey {
                caller: Arc::from(caller),
                model: None,
            },
            limits: Arc::new(limits.clone()),
        };
        let reserved = Demand {
            input_tokens,
            ..Demand::default()
        };
        Ticket::new(id, vec![scope], at, reserved)
    }

    #[test]
    fn a_settlement_after_its_slot_was_swept_and_reused_leaves_the_new_scope_alone() {
        let tokens = Limits::none().input_tokens(WindowLimit::per_minute(1_000_000));
        let requests = Limits::none().requests(WindowLimit::per_minute(1_000_000));
        let store = MemoryStore::new();
        // In the epoch's first minute: its input-token window starts at 0, like a slot never charged.
        let old = ticket(0, "old", &tokens, 30_000, 10);
        assert!(matches!(
            store.reserve(&old),
            StoreReply::Ready(Ok(Admission::Admitted))
        ));
        // Later: enough reserves of another caller to run a sweep, which frees "old"'s slot.
        let later = 180_000;
        for id in 1..=u64::from(SWEEP_EVERY) {
            let _ = store.reserve(&ticket(id, "busy", &tokens, later, 1));
        }
        assert_eq!(store.scope_count(), 1, "the ended scope was swept");
        // A new caller (requests only) takes the freed slot; the old ticket's hint now points at it.
        let new = ticket(9_999, "new", &requests, later, 7);
        assert!(matches!(
            store.reserve(&new),
            StoreReply::Ready(Ok(Admission::Admitted))
        ));
        let slot = new.slot_hint.load(Ordering::Relaxed) as u32;
        assert_eq!(slot, old.slot_hint.load(Ordering::Relaxed) as u32);
        let actual = Demand {
            input_tokens: 500,
            ..Demand::default()
        };
        assert!(matches!(
            store.settle(&old, &actual),
            StoreReply::Ready(Ok(()))
        ));
        let input = store.lock().slots_mut(slot).slots[CounterKind::InputTokens.index()].used;
        assert_eq!(input, 0, "the old call's settlement reached another caller");
    }
}
