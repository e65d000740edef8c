//! Spend per caller, team, model and UTC day, read from the rollup the stores keep beside the call records
//! ([`crate::Store::spend_rollup`]): what a spend page or a budget check sums, at a cost that grows with the
//! days and groups asked for, not with the calls recorded.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower_chat::{CallerIdentity, Cost};

/// A UTC calendar day, counted in days since 1970-01-01 (the rollup's `day` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(i64);

const DAY_SECS: u64 = 86_400;

impl UtcDay {
    /// The day `days` days after 1970-01-01.
    pub const fn from_days_since_epoch(days: i64) -> Self {
        UtcDay(days)
    }

    /// The UTC day an instant falls on (instants before 1970 fall on day 0).
    pub fn of(instant: SystemTime) -> Self {
        let secs = instant
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        UtcDay((secs / DAY_SECS) as i64)
    }

    /// Days since 1970-01-01.
    pub const fn days_since_epoch(self) -> i64 {
        self.0
    }

    /// Midnight UTC at the start of this day.
    pub fn start(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.0.max(0) as u64 * DAY_SECS)
    }

    /// The day `n` days later (earlier when negative).
    pub const fn plus(self, n: i64) -> Self {
        UtcDay(self.0 + n)
    }
}

/// Which rollup rows [`crate::Store::spend_rollup`] sums and how it groups them: the days in `[from, until)`,
/// one group per day, caller, team and/or model when asked (an axis not asked for is summed over).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendRollupQuery {
    /// The first day summed.
    pub from: UtcDay,
    /// The first day not summed.
    pub until: UtcDay,
    /// Only this caller's spend.
    pub caller: Option<CallerIdentity>,
    /// Only this team's spend (calls recorded with this [`crate::CallerTeam`]).
    pub team: Option<String>,
    /// One group per day.
    pub by_day: bool,
    /// One group per caller.
    pub by_caller: bool,
    /// One group per team.
    pub by_team: bool,
    /// One group per model.
    pub by_model: bool,
}

impl SpendRollupQuery {
    /// Every call of the days `[from, until)` as one group.
    pub fn days(from: UtcDay, until: UtcDay) -> Self {
        SpendRollupQuery {
            from,
            until,
            caller: None,
            team: None,
            by_day: false,
            by_caller: false,
            by_team: false,
            by_model: false,
        }
    }

    /// Only `caller`'s calls.
    pub fn caller(mut self, caller: impl Into<CallerIdentity>) -> Self {
        self.caller = Some(caller.into());
        self
    }

    /// Only the calls of `team`'s members.
    pub fn team(mut self, team: impl Into<String>) -> Self {
        self.team = Some(team.into());
        self
    }

    /// One group per day.
    pub fn by_day(mut self) -> Self {
        self.by_day = true;
        self
    }

    /// One group per caller.
    pub fn by_caller(mut self) -> Self {
        self.by_caller = true;
        self
    }

    /// One group per team.
    pub fn by_team(mut self) -> Self {
        self.by_team = true;
        self
    }

    /// One group per model.
    pub fn by_model(mut self) -> Self {
        self.by_model = true;
        self
    }
}

/// One group of a [`SpendRollupQuery`]: its keys (each `None` when the query does not group by it, or for calls
/// without one) and its sums over the final calls (not in flight) of the group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpendRow {
    /// The day, when grouped by day.
    pub day: Option<UtcDay>,
    /// The caller, when grouped by caller and the calls had one.
    pub caller: Option<CallerIdentity>,
    /// The caller's team, when grouped by team and the calls were recorded with one.
    pub team: Option<String>,
    /// The model, when grouped by model and the calls named one.
    pub model: Option<String>,
    /// Final calls.
    pub calls: u64,
    /// Calls a layer refused before they reached a provider (a limit, a content policy).
    pub refused_calls: u64,
    /// Calls that failed or broke off (`failed`, `interrupted`), refusals apart.
    pub error_calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache (a part of `input_tokens`).
    pub cached_input_tokens: u64,
    /// The recorded cost of the priced calls.
    pub cost: Cost,
    /// Calls without a recorded cost (no price for their model).
    pub unpriced_calls: u64,
}
