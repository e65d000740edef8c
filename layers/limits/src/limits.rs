//! What is limited: [`Limits`] for one scope, and the [`LimitPolicy`] that says which limits apply to a call.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tower_chat::Cost;

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

    /// The window's length in milliseconds.
    pub(crate) fn len_ms(&self) -> u64 {
        self.window
            .as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(self.window.subsec_millis()))
    }

    /// The window containing `now` (milliseconds since the epoch).
    fn window_at(&self, now: u64) -> Window {
        window::fixed(now, self.len_ms())
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

impl CounterKind {
    /// `amount` of this counter in its unit, as a person reads it: dollars for a cost (`$0.60`, never the
    /// nano-dollars counted), tokens, requests or calls in progress otherwise.
    pub fn amount(self, amount: u64) -> String {
        match self {
            CounterKind::Requests => format!("{amount} requests"),
            CounterKind::InputTokens => format!("{amount} input tokens"),
            CounterKind::OutputTokens => format!("{amount} output tokens"),
            CounterKind::CostPerDay | CounterKind::CostPerMonth => dollars(amount),
            CounterKind::Concurrent => format!("{amount} calls in progress"),
        }
    }
}

/// Nano-dollars as dollars: cents when the amount is whole cents (`$0.60`), else as many decimals as it needs.
fn dollars(nanos: u64) -> String {
    let (whole, fraction) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if fraction % 10_000_000 == 0 {
        return format!("${whole}.{:02}", fraction / 10_000_000);
    }
    let digits = format!("{fraction:09}");
    format!("${whole}.{}", digits.trim_end_matches('0'))
}

impl fmt::Display for CounterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a set of counters belongs to: a caller, a caller's use of one model, or a team.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScopeKey {
    /// The caller ([`tower_chat::CallerIdentity`]; calls without one share the caller [`ANONYMOUS`]), or the
    /// team's name when [`ScopeKey::team`] is set.
    pub caller: Arc<str>,
    /// The model, for a per-model scope.
    pub model: Option<Arc<str>>,
    /// Whether these are a team's counters, shared by its members (a team and a caller of the same name have
    /// counters of their own each).
    pub team: bool,
}

impl ScopeKey {
    /// One caller's own counters.
    pub fn caller(caller: impl Into<Arc<str>>) -> Self {
        ScopeKey {
            caller: caller.into(),
            model: None,
            team: false,
        }
    }

    /// A team's counters.
    pub fn team(team: impl Into<Arc<str>>) -> Self {
        ScopeKey {
            caller: team.into(),
            model: None,
            team: true,
        }
    }
}

impl fmt::Display for ScopeKey {
    /// `caller alice`, `caller alice (model gpt-4o)`, `team research`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = if self.team { "team" } else { "caller" };
        write!(f, "{whose} {}", self.caller)?;
        if let Some(model) = &self.model {
            write!(f, " (model {model})")?;
        }
        Ok(())
    }
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

/// Which limits apply to a call: per caller (an entry for the caller, else the default), for models with an
/// entry per caller and model as well (every caller gets their own counters of that model's limits), and, for a
/// member of a team with limits, the team's (one set of counters shared by every member).
#[derive(Clone, Debug, Default)]
pub struct LimitPolicy {
    default: Arc<Limits>,
    // foldhash, like the rest of the crate (looked up when a caller's plan is built, not per call).
    callers: foldhash::HashMap<Arc<str>, Arc<Limits>>,
    models: foldhash::HashMap<Arc<str>, Arc<Limits>>,
    /// Caller → model → limits (nested, so a lookup borrows both strings instead of building a key).
    caller_models: foldhash::HashMap<Arc<str>, foldhash::HashMap<Arc<str>, Arc<Limits>>>,
    teams: foldhash::HashMap<Arc<str>, Arc<Limits>>,
    /// Caller → team.
    members: foldhash::HashMap<Arc<str>, Arc<str>>,
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

    /// Limits shared by every member of `team` ([`LimitPolicy::member`]): each member's call is counted in its
    /// own scopes and in the team's, reserved and settled together.
    pub fn team(mut self, team: impl Into<String>, limits: Limits) -> Self {
        self.teams.insert(Arc::from(team.into()), Arc::new(limits));
        self
    }

    /// Make `caller` a member of `team` (a caller belongs to one team: a later call moves it). A member of a
    /// team without [`LimitPolicy::team`] limits is counted in its own scopes only.
    pub fn member(mut self, caller: impl Into<String>, team: impl Into<String>) -> Self {
        self.members
            .insert(Arc::from(caller.into()), Arc::from(team.into()));
        self
    }

    /// The limits of callers without an entry.
    pub fn default_limits(&self) -> &Limits {
        &self.default
    }

    /// The team `caller` belongs to, if any.
    pub fn team_of(&self, caller: &str) -> Option<&str> {
        self.members.get(caller).map(|t| &**t)
    }

    /// The scope of `team`'s counters, when the team has limits.
    pub fn team_scope(&self, team: &str) -> Option<Scope> {
        let (name, limits) = self.teams.get_key_value(team)?;
        Some(Scope {
            key: ScopeKey::team(name.clone()),
            limits: limits.clone(),
        })
    }

    /// The scopes a call by `caller` to `model` is counted in: the caller's, then the caller-and-model one if
    /// that model has limits, then the caller's team's if it has limits.
    pub fn scopes(&self, caller: &str, model: Option<&str>) -> Vec<Scope> {
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
        let team = self.team_of(caller).and_then(|t| self.team_scope(t));
        let mut scopes = Vec::with_capacity(
            1 + usize::from(model_limits.is_some()) + usize::from(team.is_some()),
        );
        scopes.push(Scope {
            key: ScopeKey::caller(caller_key.clone()),
            limits,
        });
        if let Some((model, limits)) = model_limits {
            scopes.push(Scope {
                key: ScopeKey {
                    caller: caller_key,
                    model: Some(model),
                    team: false,
                },
                limits,
            });
        }
        scopes.extend(team);
        scopes
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
