//! What is limited: [`Limits`] for one scope, and the [`LimitPolicy`] that says which limits apply to a call.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tower_chat::Cost;

use crate::store::{Demand, PlannedCounter};
use crate::window::{self, Window};

/// At most `max` units per fixed window of `window` (windows are aligned to the Unix epoch: a one-minute
/// window starts on the minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLimit {
    /// The most units per window.
    pub max: u64,
    /// The window's length.
    pub window: Duration,
}

impl WindowLimit {
    /// `max` per `window`.
    pub fn new(max: u64, window: Duration) -> Self {
        WindowLimit { max, window }
    }

    /// `max` per minute.
    pub fn per_minute(max: u64) -> Self {
        WindowLimit::new(max, Duration::from_secs(60))
    }

    /// The window containing `now` (milliseconds since the epoch).
    fn window_at(&self, now: u64) -> Window {
        let len = self
            .window
            .as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(self.window.subsec_millis()));
        window::fixed(now, len)
    }
}

/// The limits of one scope (a caller, or a caller's use of one model). Every limit is optional; a scope with
/// none admits everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Calls per window.
    pub requests: Option<WindowLimit>,
    /// Input (prompt) tokens per window.
    pub input_tokens: Option<WindowLimit>,
    /// Output (generated) tokens per window.
    pub output_tokens: Option<WindowLimit>,
    /// Spend per UTC calendar day.
    pub cost_per_day: Option<Cost>,
    /// Spend per UTC calendar month.
    pub cost_per_month: Option<Cost>,
    /// Calls in progress at once (from admission until the response stream ends or is dropped).
    pub concurrent: Option<u64>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Self {
        Limits::default()
    }

    /// Limit calls per window.
    pub fn requests(mut self, limit: WindowLimit) -> Self {
        self.requests = Some(limit);
        self
    }

    /// Limit input tokens per window.
    pub fn input_tokens(mut self, limit: WindowLimit) -> Self {
        self.input_tokens = Some(limit);
        self
    }

    /// Limit output tokens per window.
    pub fn output_tokens(mut self, limit: WindowLimit) -> Self {
        self.output_tokens = Some(limit);
        self
    }

    /// Limit spend per UTC day.
    pub fn cost_per_day(mut self, budget: Cost) -> Self {
        self.cost_per_day = Some(budget);
        self
    }

    /// Limit spend per UTC calendar month.
    pub fn cost_per_month(mut self, budget: Cost) -> Self {
        self.cost_per_month = Some(budget);
        self
    }

    /// Limit calls in progress at once.
    pub fn concurrent(mut self, max: u64) -> Self {
        self.concurrent = Some(max);
        self
    }

    /// Whether a cost budget is set (a call then needs a priced model).
    pub fn has_cost_limit(&self) -> bool {
        self.cost_per_day.is_some() || self.cost_per_month.is_some()
    }

    /// The counter of `kind`: its limit and the window containing `now` (`None` for concurrency, which has no
    /// window), or `None` when that limit is not set.
    pub fn counter(&self, kind: CounterKind, now: u64) -> Option<(u64, Option<Window>)> {
        let windowed = |l: &Option<WindowLimit>| l.map(|l| (l.max, Some(l.window_at(now))));
        match kind {
            CounterKind::Requests => windowed(&self.requests),
            CounterKind::InputTokens => windowed(&self.input_tokens),
            CounterKind::OutputTokens => windowed(&self.output_tokens),
            CounterKind::CostPerDay => self
                .cost_per_day
                .map(|c| (c.as_nanos(), Some(window::day(now)))),
            CounterKind::CostPerMonth => self
                .cost_per_month
                .map(|c| (c.as_nanos(), Some(window::month(now)))),
            CounterKind::Concurrent => self.concurrent.map(|c| (c, None)),
        }
    }
}

impl Limits {
    /// Append this scope's counters for a call at `at` reserving `reserved`, in [`CounterKind::ALL`] order: the
    /// same as [`Limits::counter`] per kind, written out once per call instead of matched per kind.
    pub(crate) fn plan_into(
        &self,
        scope: usize,
        at: u64,
        reserved: &Demand,
        out: &mut Vec<PlannedCounter>,
    ) {
        let mut push = |kind, limit, window, amount| {
            out.push(PlannedCounter {
                scope,
                kind,
                limit,
                window,
                amount,
            })
        };
        if let Some(l) = self.requests {
            push(CounterKind::Requests, l.max, Some(l.window_at(at)), 1);
        }
        if let Some(l) = self.input_tokens {
            let window = Some(l.window_at(at));
            push(
                CounterKind::InputTokens,
                l.max,
                window,
                reserved.input_tokens,
            );
        }
        if let Some(l) = self.output_tokens {
            let window = Some(l.window_at(at));
            push(
                CounterKind::OutputTokens,
                l.max,
                window,
                reserved.output_tokens,
            );
        }
        let cost = reserved.cost.as_nanos();
        if let Some(budget) = self.cost_per_day {
            push(
                CounterKind::CostPerDay,
                budget.as_nanos(),
                Some(window::day(at)),
                cost,
            );
        }
        if let Some(budget) = self.cost_per_month {
            push(
                CounterKind::CostPerMonth,
                budget.as_nanos(),
                Some(window::month(at)),
                cost,
            );
        }
        if let Some(max) = self.concurrent {
            push(CounterKind::Concurrent, max, None, 1);
        }
    }
}

/// One kind of counter a scope may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// Calls per window.
    Requests,
    /// Input tokens per window.
    InputTokens,
    /// Output tokens per window.
    OutputTokens,
    /// Nano-dollars per UTC day.
    CostPerDay,
    /// Nano-dollars per UTC calendar month.
    CostPerMonth,
    /// Calls in progress.
    Concurrent,
}

impl CounterKind {
    /// Every kind, in a fixed order (stores index per-scope slots by it).
    pub const ALL: [CounterKind; 6] = [
        CounterKind::Requests,
        CounterKind::InputTokens,
        CounterKind::OutputTokens,
        CounterKind::CostPerDay,
        CounterKind::CostPerMonth,
        CounterKind::Concurrent,
    ];

    /// A short stable name (`requests`, `input_tokens`, …), used in Redis keys and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            CounterKind::Requests => "requests",
            CounterKind::InputTokens => "input_tokens",
            CounterKind::OutputTokens => "output_tokens",
            CounterKind::CostPerDay => "cost_per_day",
            CounterKind::CostPerMonth => "cost_per_month",
            CounterKind::Concurrent => "concurrent",
        }
    }

    /// Its position in [`CounterKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for CounterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a set of counters belongs to: a caller, or a caller's use of one model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScopeKey {
    /// The caller ([`tower_chat::CallerIdentity`]; calls without one share the caller [`ANONYMOUS`]).
    pub caller: Arc<str>,
    /// The model, for a per-model scope.
    pub model: Option<Arc<str>>,
}

/// The caller id of calls that carry no [`tower_chat::CallerIdentity`].
pub const ANONYMOUS: &str = "anonymous";

/// A scope and the limits that apply to it.
#[derive(Clone, Debug)]
pub struct Scope {
    /// Whose counters.
    pub key: ScopeKey,
    /// Their limits.
    pub limits: Arc<Limits>,
}

/// A call's scopes, held inline: a call has its caller's scope and at most one per-model scope, and a `Vec`
/// would cost an allocation per call.
#[derive(Clone, Debug)]
pub(crate) enum CallScopes {
    /// The caller's scope.
    One([Scope; 1]),
    /// The caller's scope, then the caller-and-model one.
    Two([Scope; 2]),
    /// Any other list (a ticket built by hand).
    Many(Vec<Scope>),
}

impl CallScopes {
    pub(crate) fn as_slice(&self) -> &[Scope] {
        match self {
            CallScopes::One(s) => s,
            CallScopes::Two(s) => s,
            CallScopes::Many(s) => s,
        }
    }
}

/// Which limits apply to a call: per caller (an entry for the caller, else the default), and, for models with
/// an entry, per caller and model as well (every caller gets their own counters of that model's limits).
#[derive(Clone, Debug, Default)]
pub struct LimitPolicy {
    default: Arc<Limits>,
    // foldhash: looked up on every call (SipHash dominated the layer's overhead).
    callers: foldhash::HashMap<Arc<str>, Arc<Limits>>,
    models: foldhash::HashMap<Arc<str>, Arc<Limits>>,
    /// Caller → model → limits (nested, so a lookup borrows both strings instead of building a key).
    caller_models: foldhash::HashMap<Arc<str>, foldhash::HashMap<Arc<str>, Arc<Limits>>>,
}

impl LimitPolicy {
    /// Every caller gets `default` (their own counters each).
    pub fn new(default: Limits) -> Self {
        LimitPolicy {
            default: Arc::new(default),
            ..LimitPolicy::default()
        }
    }

    /// Limits for one caller instead of the default.
    pub fn caller(mut self, caller: impl Into<String>, limits: Limits) -> Self {
        self.callers
            .insert(Arc::from(caller.into()), Arc::new(limits));
        self
    }

    /// Limits on every caller's use of one model (matched exactly against the request's model), on top of the
    /// caller's own.
    pub fn model(mut self, model: impl Into<String>, limits: Limits) -> Self {
        self.models
            .insert(Arc::from(model.into()), Arc::new(limits));
        self
    }

    /// Limits on one caller's use of one model, instead of [`LimitPolicy::model`]'s for that caller.
    pub fn caller_model(
        mut self,
        caller: impl Into<String>,
        model: impl Into<String>,
        limits: Limits,
    ) -> Self {
        self.caller_models
            .entry(Arc::from(caller.into()))
            .or_default()
            .insert(Arc::from(model.into()), Arc::new(limits));
        self
    }

    /// The limits of callers without an entry.
    pub fn default_limits(&self) -> &Limits {
        &self.default
    }

    /// The scopes a call by `caller` to `model` is counted in: the caller's, then the caller-and-model one if
    /// that model has limits.
    pub fn scopes(&self, caller: &str, model: Option<&str>) -> Vec<Scope> {
        self.call_scopes(caller, model).as_slice().to_vec()
    }

    /// [`LimitPolicy::scopes`] without a heap allocation for the list (the per-call path).
    pub(crate) fn call_scopes(&self, caller: &str, model: Option<&str>) -> CallScopes {
        let (caller_key, limits) = match self.callers.get_key_value(caller) {
            Some((key, limits)) => (key.clone(), limits.clone()),
            None => (Arc::from(caller), self.default.clone()),
        };
        let model_limits = model.and_then(|model| {
            self.caller_models
                .get(caller)
                .and_then(|models| models.get_key_value(model))
                .or_else(|| self.models.get_key_value(model))
                .map(|(m, l)| (m.clone(), l.clone()))
        });
        let own = Scope {
            key: ScopeKey {
                caller: caller_key.clone(),
                model: None,
            },
            limits,
        };
        match model_limits {
            None => CallScopes::One([own]),
            Some((model, limits)) => CallScopes::Two([
                own,
                Scope {
                    key: ScopeKey {
                        caller: caller_key,
                        model: Some(model),
                    },
                    limits,
                },
            ]),
        }
    }

    /// The models with limits of their own for `caller` (for a usage report).
    pub fn models_for(&self, caller: &str) -> Vec<Arc<str>> {
        let mut models: Vec<Arc<str>> = self.models.keys().cloned().collect();
        for m in self
            .caller_models
            .get(caller)
            .into_iter()
            .flat_map(|m| m.keys())
        {
            if !models.contains(m) {
                models.push(m.clone());
            }
        }
        models.sort();
        models
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_lists_the_same_counters_as_counter_per_kind() {
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
        let reserved = Demand {
            input_tokens: 12,
            output_tokens: 34,
            cost: Cost::from_nanos(56),
        };
        // 2026-11-30T13:05:07.123Z and a month boundary.
        for at in [1_795_957_507_123, 1_796_083_200_000 - 1, 1_796_083_200_000] {
            for limits in [&full, &some, &Limits::none()] {
                let mut planned = Vec::new();
                limits.plan_into(1, at, &reserved, &mut planned);
                let expected: Vec<PlannedCounter> = CounterKind::ALL
                    .into_iter()
                    .filter_map(|kind| {
                        let (limit, window) = limits.counter(kind, at)?;
                        Some(PlannedCounter {
                            scope: 1,
                            kind,
                            limit,
                            window,
                            amount: reserved.amount(kind),
                        })
                    })
                    .collect();
                assert_eq!(planned, expected, "at {at}, {limits:?}");
            }
        }
    }
}
