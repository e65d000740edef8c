//! What the pages of managed keys, teams and their audit log share: the managed keys behind them (or the page
//! saying the gateway has none), the operator a form acts as, a refused change shown as a page or beside its
//! form, the counters of a key or team against its limits, and the numbers and lists the forms take.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::response::Response;
use http::StatusCode;
use maud::{html, Markup};
use tower_chat::Cost;
use tower_chat_limits::{CounterKind, CounterUsage, UsageReport};
use tower_chat_persistence::UtcDay;

use super::format::{dollars, utc};
use super::layout::{check_csrf, error_page};
use super::session::Session;
use super::spend_range::Period;
use super::state::ConsoleState;
use crate::config::limits::LimitsEntry;
use crate::error::ApiError;
use crate::keys::admin::AdminState;
use crate::keys::record::KeyDoc;
use crate::operator::Operator;

/// The managed keys, or the page saying this gateway has none.
pub(super) fn keys(state: &ConsoleState) -> Result<&AdminState, Box<Response>> {
    state.managed.as_ref().ok_or_else(|| {
        Box::new(error_page(
            StatusCode::NOT_FOUND,
            "This gateway manages no keys: that takes --api-keys-file, --operator-keys-file and a database \
             (--db or --database-url).",
        ))
    })
}

/// The managed keys for a change a form posted: its CSRF token checked first, or the page refusing.
pub(super) fn keys_to_change<'a>(
    state: &'a ConsoleState,
    session: &Session,
    csrf: Option<&str>,
) -> Result<&'a AdminState, Box<Response>> {
    check_csrf(session, csrf)?;
    keys(state)
}

/// The operator a session's forms act as: the same identity the admin API records for the operator's key.
pub(super) fn operator(session: &Session) -> Operator {
    Operator::named(&session.operator)
}

/// A refused change as a page: its status and its message, as the admin API would answer it.
pub(super) fn refused(error: &ApiError) -> Response {
    error_page(error.status, &format!("Refused: {}", error.message))
}

/// A key's status: `active`, `rotating` (its previous secret still accepted), `revoked` or `expired`.
pub(super) fn status(doc: &KeyDoc, has_previous: bool, now_ms: i64) -> &'static str {
    match doc.status(now_ms) {
        "active"
            if has_previous && doc.previous_valid_until.is_some_and(|until| until > now_ms) =>
        {
            "rotating"
        }
        other => other,
    }
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub(super) fn at(unix_seconds: i64) -> String {
    let time =
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(unix_seconds).unwrap_or(0));
    format!("{} UTC", utc(time))
}

/// A list of names or patterns as shown (`any` when empty: everything is allowed).
pub(super) fn patterns(list: &[String]) -> String {
    if list.is_empty() {
        "any".to_owned()
    } else {
        list.join(", ")
    }
}

/// A counter's kind as a person reads it.
fn counter_label(kind: CounterKind) -> &'static str {
    match kind {
        CounterKind::Requests => "requests",
        CounterKind::InputTokens => "input tokens per minute",
        CounterKind::OutputTokens => "output tokens per minute",
        CounterKind::CostPerDay => "spend today (UTC)",
        CounterKind::CostPerMonth => "spend this month (UTC)",
        CounterKind::Concurrent => "calls in progress",
    }
}

/// A counter's amount: dollars for the budgets, a plain number for the rest.
fn amount(kind: CounterKind, value: u64) -> String {
    match kind {
        CounterKind::CostPerDay | CounterKind::CostPerMonth => dollars(Cost::from_nanos(value)),
        _ => value.to_string(),
    }
}

/// `used of limit`, for a counter.
pub(super) fn used_of(counter: &CounterUsage) -> String {
    format!(
        "{} of {}",
        amount(counter.kind, counter.used),
        amount(counter.kind, counter.limit)
    )
}

/// The cell of a list for one budget of a report's own scope: its use against its limit; without one, the
/// spend the call records hold (`spent`), or `no limit`.
pub(super) fn budget_cell(
    report: Option<&UsageReport>,
    kind: CounterKind,
    spent: Option<Cost>,
) -> String {
    match (report.and_then(|r| r.counter(kind)), spent) {
        (Some(counter), _) => used_of(counter),
        (None, Some(cost)) => format!("{} (no budget)", dollars(cost)),
        (None, None) => "no limit".to_owned(),
    }
}

/// What each caller spent today and this month (UTC), from the store's spend rollup; empty without call
/// records or when they cannot be read (the budgets' counters still show).
pub(super) async fn spent(state: &ConsoleState) -> (HashMap<String, Cost>, HashMap<String, Cost>) {
    let Some(store) = state.records.as_deref() else {
        return Default::default();
    };
    let today = UtcDay::of(SystemTime::now());
    let mut sums = [HashMap::new(), HashMap::new()];
    for (sum, preset) in sums.iter_mut().zip(["today", "this-month"]) {
        let Ok(period) = Period::parse(Some(preset), None, None, today) else {
            continue;
        };
        match super::spend::rows(store, period).await {
            Ok(rows) => {
                for row in rows {
                    if let Some(caller) = row.caller {
                        let total: &mut Cost = sum.entry(caller.as_str().to_owned()).or_default();
                        *total = Cost::from_nanos(total.as_nanos() + row.cost.as_nanos());
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "console: cannot read the spend rollup"),
        }
    }
    let [day, month] = sums;
    (day, month)
}

/// Every counter of `report` (a key's own scope, per model, its team's; or a team's) against its limit.
pub(super) fn usage_table(report: Option<&UsageReport>, id: &str, limits_on: bool) -> Markup {
    let rows: Vec<(String, &CounterUsage)> = report
        .map(|r| {
            r.scopes
                .iter()
                .flat_map(|scope| {
                    let name = match (&scope.team, &scope.model) {
                        (Some(team), _) => format!("team {team}"),
                        (None, Some(model)) => format!("model {model}"),
                        (None, None) => "own".to_owned(),
                    };
                    scope.counters.iter().map(move |c| (name.clone(), c))
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        return html! {
            p class="empty" id=(format!("{id}-empty")) {
                @if limits_on { "No limits apply." } @else { "No counters: this gateway runs without a limits layer." }
            }
        };
    }
    html! {
        table id=(id) class="totals" {
            thead {
                tr {
                    th scope="col" { "scope" }
                    th scope="col" { "counter" }
                    th scope="col" { "used" }
                    th scope="col" { "limit" }
                    th scope="col" { "resets" }
                }
            }
            tbody {
                @for (scope, c) in &rows {
                    tr class=[(c.used >= c.limit).then_some("exhausted")] data-counter=(c.kind.as_str()) {
                        th scope="row" data-label="scope" { (scope) }
                        td data-label="counter" { (counter_label(c.kind)) }
                        td class="number" data-label="used" { (amount(c.kind, c.used)) }
                        td class="number" data-label="limit" { (amount(c.kind, c.limit)) }
                        td data-label="resets" {
                            @match c.resets_at_ms {
                                Some(ms) => (at(i64::try_from(ms / 1000).unwrap_or(i64::MAX))),
                                None => "—",
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The limits set on a key or team, as a definition list (only those set).
pub(super) fn limits_list(limits: &LimitsEntry) -> Markup {
    let set: Vec<(&str, String)> = [
        (
            "requests per minute",
            limits.requests_per_minute.map(|n| n.to_string()),
        ),
        (
            "requests per day",
            limits.requests_per_day.map(|n| n.to_string()),
        ),
        (
            "input tokens per minute",
            limits.input_tokens_per_minute.map(|n| n.to_string()),
        ),
        (
            "output tokens per minute",
            limits.output_tokens_per_minute.map(|n| n.to_string()),
        ),
        (
            "budget per day",
            limits.cost_per_day_usd.map(|usd| format!("${usd:.2}")),
        ),
        (
            "budget per month",
            limits.cost_per_month_usd.map(|usd| format!("${usd:.2}")),
        ),
        ("calls at once", limits.concurrent.map(|n| n.to_string())),
    ]
    .into_iter()
    .filter_map(|(label, value)| value.map(|v| (label, v)))
    .collect();
    html! {
        @if set.is_empty() {
            p class="empty" { "No limits of its own." }
        } @else {
            dl class="facts" {
                @for (label, value) in set {
                    dt { (label) } dd { (value) }
                }
            }
        }
    }
}

/// The limits fields of the key and team forms, as typed: every field of a `[limits]` entry (an empty field
/// sets none). Cloned back into a refused form, so the operator's input survives the refusal.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub(crate) struct LimitsForm {
    #[serde(default)]
    cost_per_day_usd: String,
    #[serde(default)]
    cost_per_month_usd: String,
    #[serde(default)]
    requests_per_minute: String,
    #[serde(default)]
    requests_per_day: String,
    #[serde(default)]
    input_tokens_per_minute: String,
    #[serde(default)]
    output_tokens_per_minute: String,
    #[serde(default)]
    concurrent: String,
}

/// One whole-number field as a form shows it: its label, its name, the end of its id, and its text.
type WholeField = (
    &'static str,
    &'static str,
    &'static str,
    fn(&LimitsForm) -> &str,
);

/// The whole-number fields, in the order the forms show them (after the two budgets).
const WHOLE_FIELDS: [WholeField; 5] = [
    ("Requests per minute", "requests_per_minute", "rpm", |f| {
        &f.requests_per_minute
    }),
    ("Requests per day", "requests_per_day", "rpd", |f| {
        &f.requests_per_day
    }),
    (
        "Input tokens per minute",
        "input_tokens_per_minute",
        "itpm",
        |f| &f.input_tokens_per_minute,
    ),
    (
        "Output tokens per minute",
        "output_tokens_per_minute",
        "otpm",
        |f| &f.output_tokens_per_minute,
    ),
    ("Calls at once", "concurrent", "concurrent", |f| {
        &f.concurrent
    }),
];

impl LimitsForm {
    /// The fields filled with `limits`, as an edit form shows them.
    pub(super) fn of(limits: &LimitsEntry) -> LimitsForm {
        let text = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        let usd = |n: Option<f64>| n.map(|n| n.to_string()).unwrap_or_default();
        LimitsForm {
            cost_per_day_usd: usd(limits.cost_per_day_usd),
            cost_per_month_usd: usd(limits.cost_per_month_usd),
            requests_per_minute: text(limits.requests_per_minute),
            requests_per_day: text(limits.requests_per_day),
            input_tokens_per_minute: text(limits.input_tokens_per_minute),
            output_tokens_per_minute: text(limits.output_tokens_per_minute),
            concurrent: text(limits.concurrent),
        }
    }

    /// The limits the fields set (an empty field sets none), or the field that is not a number.
    pub(super) fn limits(&self) -> Result<LimitsEntry, ApiError> {
        let dollars = |field: &str, text: &str| -> Result<Option<f64>, ApiError> {
            let text = text.trim().trim_start_matches('$');
            if text.is_empty() {
                return Ok(None);
            }
            text.parse().map(Some).map_err(|_| {
                crate::keys::record::invalid(
                    "invalid_limits",
                    format!("`{field}` must be a dollar amount, like 5 or 2.50"),
                )
            })
        };
        let whole = |field: &str, text: &str| -> Result<Option<u64>, ApiError> {
            let text = text.trim();
            if text.is_empty() {
                return Ok(None);
            }
            text.parse().map(Some).map_err(|_| {
                crate::keys::record::invalid(
                    "invalid_limits",
                    format!("`{field}` must be a whole number"),
                )
            })
        };
        Ok(LimitsEntry {
            cost_per_day_usd: dollars("cost per day", &self.cost_per_day_usd)?,
            cost_per_month_usd: dollars("cost per month", &self.cost_per_month_usd)?,
            requests_per_minute: whole("requests per minute", &self.requests_per_minute)?,
            requests_per_day: whole("requests per day", &self.requests_per_day)?,
            input_tokens_per_minute: whole(
                "input tokens per minute",
                &self.input_tokens_per_minute,
            )?,
            output_tokens_per_minute: whole(
                "output tokens per minute",
                &self.output_tokens_per_minute,
            )?,
            concurrent: whole("calls at once", &self.concurrent)?,
        })
    }
}

/// The limits fields of a form, filled with `values` (`prefix` keeps the ids of two forms on a page apart).
pub(super) fn limits_fields(prefix: &str, values: &LimitsForm) -> Markup {
    html! {
        label for=(format!("{prefix}-cost-day")) { "Budget per day (USD)" }
        input type="text" inputmode="decimal" id=(format!("{prefix}-cost-day")) name="cost_per_day_usd" autocomplete="off" value=(values.cost_per_day_usd);
        label for=(format!("{prefix}-cost-month")) { "Budget per month (USD)" }
        input type="text" inputmode="decimal" id=(format!("{prefix}-cost-month")) name="cost_per_month_usd" autocomplete="off" value=(values.cost_per_month_usd);
        @for (label, name, suffix, text) in WHOLE_FIELDS {
            @let id = format!("{prefix}-{suffix}");
            label for=(id) { (label) }
            input type="text" inputmode="numeric" id=(id) name=(name) autocomplete="off" value=(text(values));
        }
    }
}

/// A refused change, shown beside the form that asked for it (the form keeps what the operator typed).
pub(super) fn form_error(id: &str, error: &ApiError) -> Markup {
    html! {
        p class="error" role="alert" id=(id) data-code=(error.code) { "Refused: " (error.message) }
    }
}

/// Names or patterns typed into one field, separated by commas or spaces.
pub(super) fn split_list(text: &str) -> Vec<String> {
    text.split([',', ' ', '\n', '\t'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_fields_read_dollars_and_whole_numbers_and_name_what_is_not() {
        let form = LimitsForm {
            cost_per_day_usd: " $2.50 ".into(),
            requests_per_minute: "60".into(),
            concurrent: "4".into(),
            ..LimitsForm::default()
        };
        let limits = form.limits().unwrap();
        assert_eq!(limits.cost_per_day_usd, Some(2.5));
        assert_eq!(limits.cost_per_month_usd, None);
        assert_eq!(limits.requests_per_minute, Some(60));
        assert_eq!(limits.concurrent, Some(4));
        assert_eq!(limits.requests_per_day, None);
        // A form filled with limits reads back as the same limits.
        let every = LimitsEntry {
            requests_per_minute: Some(1),
            requests_per_day: Some(2),
            input_tokens_per_minute: Some(3),
            output_tokens_per_minute: Some(4),
            cost_per_day_usd: Some(0.1),
            cost_per_month_usd: Some(12.345),
            concurrent: Some(5),
        };
        assert_eq!(LimitsForm::of(&every).limits().unwrap(), every);
        let bad = LimitsForm {
            requests_per_minute: "sixty".into(),
            ..LimitsForm::default()
        };
        assert!(bad
            .limits()
            .unwrap_err()
            .message
            .contains("requests per minute"));
        let bad = LimitsForm {
            output_tokens_per_minute: "-1".into(),
            ..LimitsForm::default()
        };
        assert!(bad
            .limits()
            .unwrap_err()
            .message
            .contains("output tokens per minute"));
        assert_eq!(
            split_list("gpt-4o*, claude-*  x"),
            ["gpt-4o*", "claude-*", "x"]
        );
    }

    #[test]
    fn a_key_in_its_grace_period_is_rotating() {
        let doc = KeyDoc {
            previous_valid_until: Some(2_000),
            ..KeyDoc::default()
        };
        assert_eq!(status(&doc, true, 1_000), "rotating");
        assert_eq!(status(&doc, true, 2_000), "active");
        assert_eq!(status(&doc, false, 1_000), "active");
    }
}
