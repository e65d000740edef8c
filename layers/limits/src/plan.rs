//! A call's plan, resolved once per caller and model and kept by the layer for their later calls: the scopes
//! the call is counted in, each scope's counters (limit, and how its window follows from an instant), the
//! store's handle on each scope's counters ([`crate::LimitStore::resolve`]) and the model's price.
//!
//! ```text
//! request ──(caller, model)──▶ PlanCache (one hash lookup) ──▶ Arc<CallPlan> ──▶ Ticket { id, at, reserved, plan }
//!                                  │ miss: policy scopes, store.resolve per scope, price
//! ```
//!
//! The price table and the store do not change after the layer is built; the policy may be replaced
//! ([`crate::LimitsLayer::set_policy`]), and each policy comes with a cache of its own, so a cached plan is always
//! the one its policy gives, and a call admitted under the old policy keeps its plan (its `Arc`) until it settles.
//! Windows are not part of a plan (a call computes its own from its start instant).

use std::any::Any;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock};

use tower_chat::{Cost, ModelPrice, Usage};

use crate::limits::{CounterKind, Limits, Scope};
use crate::store::Demand;
use crate::window::{self, Window};

/// How a counter's window follows from an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    /// Aligned multiples of this many milliseconds (at least one).
    Fixed(u64),
    /// The UTC calendar day.
    Day,
    /// The UTC calendar month.
    Month,
    /// No window: calls in progress.
    Unwindowed,
}

/// One counter of a scope, as its limits define it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CounterPlan {
    pub(crate) kind: CounterKind,
    pub(crate) limit: u64,
    span: Span,
}

impl CounterPlan {
    /// The window containing `at` (`None` for calls in progress): the same as [`Limits::counter`].
    pub(crate) fn window(&self, at: u64) -> Option<Window> {
        match self.span {
            Span::Fixed(len) => Some(window::fixed(at, len)),
            Span::Day => Some(window::day(at)),
            Span::Month => Some(window::month(at)),
            Span::Unwindowed => None,
        }
    }
}

/// The counters one scope's limits define, in [`CounterKind::ALL`] order, and the store's handle on them.
#[derive(Clone, Debug)]
pub(crate) struct ScopePlan {
    counters: [CounterPlan; 6],
    len: usize,
    windowed: u64,
    /// Per [`CounterKind::index`]: the limit (`u64::MAX` for a kind the scope does not limit) and a mask of all
    /// ones for a limited kind, zero for the others, so a store can treat the six counters alike.
    lane_limits: [u64; 6],
    lane_masks: [u64; 6],
    /// What the store's [`crate::LimitStore::resolve`] answered for the scope.
    pub(crate) resolved: Option<Arc<dyn Any + Send + Sync>>,
}

impl ScopePlan {
    fn new(limits: &Limits, resolved: Option<Arc<dyn Any + Send + Sync>>) -> Self {
        const UNUSED: CounterPlan = CounterPlan {
            kind: CounterKind::Concurrent,
            limit: 0,
            span: Span::Unwindowed,
        };
        let mut plan = ScopePlan {
            counters: [UNUSED; 6],
            len: 0,
            windowed: 0,
            lane_limits: [u64::MAX; 6],
            lane_masks: [0; 6],
            resolved,
        };
        let mut push = |kind: CounterKind, limit, span| {
            plan.counters[plan.len] = CounterPlan { kind, limit, span };
            plan.len += 1;
            plan.lane_limits[kind.index()] = limit;
            plan.lane_masks[kind.index()] = u64::MAX;
            if span != Span::Unwindowed {
                plan.windowed |= 1 << kind.index();
            }
        };
        let fixed = |l: crate::WindowLimit| Span::Fixed(l.len_ms().max(1));
        if let Some(l) = limits.requests {
            push(CounterKind::Requests, l.max, fixed(l));
        }
        if let Some(l) = limits.input_tokens {
            push(CounterKind::InputTokens, l.max, fixed(l));
        }
        if let Some(l) = limits.output_tokens {
            push(CounterKind::OutputTokens, l.max, fixed(l));
        }
        if let Some(budget) = limits.cost_per_day {
            push(CounterKind::CostPerDay, budget.as_nanos(), Span::Day);
        }
        if let Some(budget) = limits.cost_per_month {
            push(CounterKind::CostPerMonth, budget.as_nanos(), Span::Month);
        }
        if let Some(max) = limits.concurrent {
            push(CounterKind::Concurrent, max, Span::Unwindowed);
        }
        plan
    }

    /// The scope's counters.
    pub(crate) fn counters(&self) -> &[CounterPlan] {
        &self.counters[..self.len]
    }

    /// The kinds of the scope's windowed counters, a bit per [`CounterKind::index`].
    pub(crate) fn windowed(&self) -> u64 {
        self.windowed
    }

    /// Per [`CounterKind::index`], the limit: `u64::MAX` for a kind the scope does not limit.
    #[inline]
    pub(crate) fn lane_limits(&self) -> &[u64; 6] {
        &self.lane_limits
    }

    /// Per [`CounterKind::index`], all ones for a kind the scope limits and zero for the others (an amount
    /// masked with it adds nothing to a counter the scope does not have).
    #[inline]
    pub(crate) fn lane_masks(&self) -> &[u64; 6] {
        &self.lane_masks
    }

    /// The counters a settlement can move: all but the requests (a call stays counted), which come first.
    pub(crate) fn settled_counters(&self) -> &[CounterPlan] {
        let requests = self
            .counters()
            .first()
            .is_some_and(|c| c.kind == CounterKind::Requests);
        &self.counters[usize::from(requests)..self.len]
    }
}

/// Everything about a call that depends only on its caller and model.
#[derive(Debug)]
pub(crate) struct CallPlan {
    /// The cache key: the caller and the model as the request named them.
    caller: Arc<str>,
    model: Option<Arc<str>>,
    hash: u64,
    /// The caller's scope, then the caller-and-model one when that model has limits.
    pub(crate) scopes: Vec<Scope>,
    /// Per scope, in the same order.
    pub(crate) plans: Vec<ScopePlan>,
    /// The model's price, kept only when a scope has a cost budget: a call's cost moves no other counter, so
    /// without one nothing is priced.
    pub(crate) price: Option<ModelPrice>,
    /// A cost budget applies and the model has no price: every call is refused before the store.
    pub(crate) unpriced: bool,
    /// Per kind, the lowest limit of any scope (`u64::MAX` for none): an estimate within all of them fits
    /// every counter on its own.
    lowest: [u64; 6],
}

impl CallPlan {
    /// The plan of a call counted in `scopes`, priced at `price`, with the store's handles `resolve` gives.
    pub(crate) fn new(
        scopes: Vec<Scope>,
        model: Option<&str>,
        price: Option<ModelPrice>,
        mut resolve: impl FnMut(&Scope) -> Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        let costed = scopes.iter().any(|s| s.limits.has_cost_limit());
        let unpriced = costed && price.is_none();
        let plans: Vec<ScopePlan> = scopes
            .iter()
            .map(|s| ScopePlan::new(&s.limits, if unpriced { None } else { resolve(s) }))
            .collect();
        let mut lowest = [u64::MAX; 6];
        for c in plans.iter().flat_map(ScopePlan::counters) {
            lowest[c.kind.index()] = lowest[c.kind.index()].min(c.limit);
        }
        CallPlan {
            lowest,
            caller: scopes
                .first()
                .map_or_else(|| Arc::from(""), |s| s.key.caller.clone()),
            model: model.map(Arc::from),
            hash: 0,
            scopes,
            plans,
            price: price.filter(|_| costed),
            unpriced,
        }
    }

    fn is(&self, caller: &str, model: Option<&str>) -> bool {
        *self.caller == *caller && self.model.as_deref() == model
    }

    /// The first counter (in scope order, then [`CounterKind::ALL`] order) that `reserved` alone exceeds: its
    /// scope, kind, limit and the amount.
    #[inline]
    pub(crate) fn exceeded_by(&self, reserved: &Demand) -> Option<(&Scope, CounterKind, u64, u64)> {
        let amounts = reserved.amounts();
        if amounts.iter().zip(&self.lowest).all(|(a, l)| a <= l) {
            return None;
        }
        self.first_exceeded(&amounts)
    }

    #[cold]
    fn first_exceeded(&self, amounts: &[u64; 6]) -> Option<(&Scope, CounterKind, u64, u64)> {
        self.scopes
            .iter()
            .zip(&self.plans)
            .find_map(|(scope, plan)| {
                plan.counters()
                    .iter()
                    .find(|c| amounts[c.kind.index()] > c.limit)
                    .map(|c| (scope, c.kind, c.limit, amounts[c.kind.index()]))
            })
    }
}

/// What `usage` costs at `price`: [`ModelPrice::cost`], with its usual case inline (no cached, cache-written or reasoning
/// tokens, products and sum within `u64`), where its other terms are zero and the sum is the same.
#[inline]
pub(crate) fn cost(price: &ModelPrice, usage: &Usage) -> Cost {
    if usage.cached_input_tokens.unwrap_or(0) == 0
        && usage.cache_write_input_tokens.unwrap_or(0) == 0
        && usage.reasoning_tokens.unwrap_or(0) == 0
    {
        let input = usage.input_tokens.checked_mul(price.input);
        let output = usage.output_tokens.checked_mul(price.output);
        if let Some(per_million) = input.zip(output).and_then(|(i, o)| i.checked_add(o)) {
            return Cost::from_nanos(per_million.div_ceil(1_000_000));
        }
    }
    price.cost(usage)
}

/// Plans by (caller, model): one hash lookup per call, under a read lock.
///
/// Bounded: when it has grown to twice its size after the last sweep (at least [`PlanCache::MIN_SWEEP`]), the
/// plans no call holds are dropped (they are rebuilt on their caller's next call; the counters stay in the
/// store), so distinct callers or model names cannot grow it without bound.
#[derive(Debug)]
pub(crate) struct PlanCache {
    hasher: foldhash::fast::RandomState,
    table: RwLock<Table>,
}

#[derive(Debug)]
struct Table {
    plans: hashbrown::HashTable<Arc<CallPlan>>,
    sweep_at: usize,
}

impl Default for PlanCache {
    fn default() -> Self {
        PlanCache {
            hasher: foldhash::fast::RandomState::default(),
            table: RwLock::new(Table {
                plans: hashbrown::HashTable::new(),
                sweep_at: PlanCache::MIN_SWEEP,
            }),
        }
    }
}

impl PlanCache {
    /// The size below which the cache is never swept.
    pub(crate) const MIN_SWEEP: usize = 1024;

    /// The plan of `caller`'s calls to `model`, built by `build` (outside any lock) the first time.
    pub(crate) fn get(
        &self,
        caller: &str,
        model: Option<&str>,
        build: impl FnOnce() -> CallPlan,
    ) -> Arc<CallPlan> {
        let hash = self.hash(caller, model);
        {
            let table = self.table.read().unwrap_or_else(|e| e.into_inner());
            if let Some(plan) = table.plans.find(hash, |p| p.is(caller, model)) {
                return plan.clone();
            }
        }
        self.insert(hash, caller, model, build)
    }

    /// The key's hash: the caller's bytes, a byte no UTF-8 string contains, then the model's (so no two keys
    /// share their input), and whether there is a model.
    fn hash(&self, caller: &str, model: Option<&str>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(caller.as_bytes());
        hasher.write_u8(0xff);
        match model {
            Some(model) => {
                hasher.write(model.as_bytes());
                hasher.write_u8(1);
            }
            None => hasher.write_u8(0),
        }
        hasher.finish()
    }

    /// The first call of `caller` to `model` (out of line: the per-call path is the lookup above).
    #[cold]
    #[inline(never)]
    fn insert(
        &self,
        hash: u64,
        caller: &str,
        model: Option<&str>,
        build: impl FnOnce() -> CallPlan,
    ) -> Arc<CallPlan> {
        let mut plan = build();
        plan.caller = Arc::from(caller);
        plan.model = model.map(Arc::from);
        plan.hash = hash;
        let plan = Arc::new(plan);
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(raced) = table.plans.find(hash, |p| p.is(caller, model)) {
            return raced.clone();
        }
        if table.plans.len() >= table.sweep_at {
            // Under the write lock no plan is being handed out: a count of one means only the cache holds it.
            table.plans.retain(|p| Arc::strong_count(p) > 1);
            table.sweep_at = (table.plans.len() * 2).max(PlanCache::MIN_SWEEP);
        }
        table.plans.insert_unique(hash, plan.clone(), |p| p.hash);
        plan
    }

    /// How many plans are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .plans
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower_chat::Cost;

    use super::*;
    use crate::limits::{ScopeKey, WindowLimit};

    #[test]
    fn a_scope_plan_has_the_same_counters_and_windows_as_counter_per_kind() {
        let full = Limits::none()
            .requests(WindowLimit::new(7, Duration::from_millis(90_500)))
            .input_tokens(WindowLimit::per_minute(1_000))
            .output_tokens(WindowLimit::new(500, Duration::from_secs(3_600)))
            .cost_per_day(Cost::from_usd(5.0))
            .cost_per_month(Cost::from_usd(50.0))
            .concurrent(3);
        let some = Limits::none()
            .output_tokens(WindowLimit::per_minute(9))
            .cost_per_month(Cost::from_usd(1.0));
        let zero_length = Limits::none().requests(WindowLimit::new(2, Duration::ZERO));
        // 2026-11-30T13:05:07.123Z and a month boundary.
        for at in [1_795_957_507_123, 1_796_083_200_000 - 1, 1_796_083_200_000] {
            for limits in [&full, &some, &zero_length, &Limits::none()] {
                let plan = ScopePlan::new(limits, None);
                let planned: Vec<_> = plan
                    .counters()
                    .iter()
                    .map(|c| (c.kind, c.limit, c.window(at)))
                    .collect();
                let expected: Vec<_> = CounterKind::ALL
                    .into_iter()
                    .filter_map(|kind| {
                        let (limit, window) = limits.counter(kind, at)?;
                        Some((kind, limit, window))
                    })
                    .collect();
                assert_eq!(planned, expected, "at {at}, {limits:?}");
            }
        }
    }

    fn plan_for(caller: &str) -> CallPlan {
        let scope = Scope {
            key: ScopeKey::caller(Arc::from(caller)),
            limits: Arc::new(Limits::none()),
        };
        CallPlan::new(vec![scope], None, None, |_| None)
    }

    #[test]
    fn the_inline_cost_is_model_price_cost() {
        let prices = [
            ModelPrice::per_million_usd(0.15, 0.6),
            ModelPrice {
                input: 3,
                output: 11,
                cached_input: Some(1),
                cache_write_input: Some(4),
                reasoning: Some(20),
            },
            ModelPrice {
                input: u64::MAX,
                output: u64::MAX / 3,
                cached_input: None,
                cache_write_input: None,
                reasoning: None,
            },
        ];
        let tokens = [0, 1, 999_999, 1_000_001, u64::MAX / 2, u64::MAX];
        for price in &prices {
            for input in tokens {
                for output in tokens {
                    for (cached, reasoning) in [
                        (None, None),
                        (Some(0), Some(0)),
                        (Some(7), None),
                        (None, Some(5)),
                    ] {
                        let usage = Usage {
                            from_response_cache: false,
                            input_tokens: input,
                            output_tokens: output,
                            cached_input_tokens: cached,
                            reasoning_tokens: reasoning,
                            cache_write_input_tokens: cached.map(|c| c / 2),
                        };
                        assert_eq!(
                            cost(price, &usage),
                            price.cost(&usage),
                            "{price:?} {usage:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_plan_keeps_the_price_only_when_a_scope_has_a_cost_budget() {
        let scope = |limits: Limits| Scope {
            key: ScopeKey::caller(Arc::from("alice")),
            limits: Arc::new(limits),
        };
        let price = Some(ModelPrice::per_million_usd(1.0, 2.0));
        let tokens = Limits::none().input_tokens(WindowLimit::per_minute(10));
        let plan = CallPlan::new(vec![scope(tokens.clone())], None, price, |_| None);
        assert_eq!(plan.price, None);
        assert!(!plan.unpriced);
        let budget = tokens.cost_per_month(Cost::from_usd(1.0));
        let plan = CallPlan::new(vec![scope(budget.clone())], None, price, |_| None);
        assert_eq!(plan.price, price);
        let plan = CallPlan::new(vec![scope(budget)], None, None, |_| None);
        assert!(plan.unpriced);
    }

    #[test]
    fn the_cache_builds_a_plan_once_per_caller_and_model() {
        let cache = PlanCache::default();
        let mut built = 0;
        let a = cache.get("alice", Some("m"), || {
            built += 1;
            plan_for("alice")
        });
        let again = cache.get("alice", Some("m"), || {
            built += 1;
            plan_for("alice")
        });
        assert!(Arc::ptr_eq(&a, &again));
        let other_model = cache.get("alice", None, || {
            built += 1;
            plan_for("alice")
        });
        assert!(!Arc::ptr_eq(&a, &other_model));
        assert_eq!(built, 2);
    }

    #[test]
    fn the_cache_drops_plans_no_call_holds_when_it_has_doubled() {
        let cache = PlanCache::default();
        let held = cache.get("held", None, || plan_for("held"));
        for i in 0..PlanCache::MIN_SWEEP {
            cache.get(&format!("caller-{i}"), None, || plan_for("x"));
        }
        // The sweep ran when the cache reached its threshold: only the held plan and the newest survived.
        assert_eq!(cache.len(), 2);
        let mut rebuilt = false;
        let again = cache.get("held", None, || {
            rebuilt = true;
            plan_for("held")
        });
        assert!(!rebuilt, "a plan a call holds is kept");
        assert!(Arc::ptr_eq(&held, &again));
    }
}
