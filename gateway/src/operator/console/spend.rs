//! The spend page: cost and tokens per caller × model for a period (presets or dates, [`super::spend_range`]),
//! each caller's budget and how much of it is used (the limits layer's counters, where `[limits]` sets a
//! budget), and the same table as CSV ([`super::spend_csv`]). The sums come from the store's spend rollup
//! ([`Store::spend_rollup`]), never from the call records, so a month costs what a day does.

use std::time::SystemTime;

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::{html, Markup};
use tower_chat::Cost;
use tower_chat_limits::{CounterKind, LimitsLayer};
use tower_chat_persistence::{SpendRollupQuery, SpendRow, Store, StoreError, UtcDay};

use super::extract::PageQuery;
use super::format::{dollars, url_encode};
use super::layout::{error_page, html_response, layout, Nav};
use super::session::Session;
use super::spend_range::{date, Period, PRESETS};
use super::state::ConsoleState;

/// The spend page's query: a preset `range`, or `from` and `until` dates (`YYYY-MM-DD`, both included).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct SpendParams {
    range: Option<String>,
    from: Option<String>,
    until: Option<String>,
}

impl SpendParams {
    /// The period asked for, or the page refusing it.
    pub(super) fn period(&self) -> Result<Period, Box<Response>> {
        Period::parse(
            self.range.as_deref(),
            self.from.as_deref(),
            self.until.as_deref(),
            UtcDay::of(SystemTime::now()),
        )
        .map_err(|message| Box::new(error_page(StatusCode::BAD_REQUEST, &message)))
    }
}

/// The rows of a period: one per caller × model, ordered by caller then model.
pub(super) async fn rows(store: &dyn Store, period: Period) -> Result<Vec<SpendRow>, StoreError> {
    let query = SpendRollupQuery::days(period.from, period.until)
        .by_caller()
        .by_model();
    store.spend_rollup(&query).await
}

/// The store behind the page, or the page saying there is none.
pub(super) fn records(state: &ConsoleState) -> Result<&dyn Store, Box<Response>> {
    state.records.as_deref().ok_or_else(|| {
        Box::new(error_page(
            StatusCode::NOT_FOUND,
            "This gateway keeps no call records.",
        ))
    })
}

/// `GET /console/spend?range=…` or `?from=YYYY-MM-DD&until=YYYY-MM-DD`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(params): PageQuery<SpendParams>,
) -> Response {
    let (store, period) = match (records(&state), params.period()) {
        (Ok(store), Ok(period)) => (store, period),
        (Err(refused), _) | (_, Err(refused)) => return *refused,
    };
    let rows = match rows(store, period).await {
        Ok(rows) => rows,
        Err(error) => {
            tracing::error!(%error, "console: cannot read the spend rollup");
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The call records cannot be read right now.",
            );
        }
    };
    let budgets = budgets(state.limits.as_ref(), &rows).await;
    let main = html! {
        (choices(period, &params))
        p class="summary" id="spend-summary" {
            "From " (date(period.from)) " to " (date(period.last())) " (UTC days, both included). "
            a id="spend-csv" href=(format!("/console/spend.csv?{}", query_string(period))) download { "Download CSV" }
        }
        (table(&rows))
        h2 { "Budgets" }
        (budget_table(state.limits.is_some(), &budgets))
    };
    html_response(
        StatusCode::OK,
        layout("Spend", Nav::Spend, Some(&session), main),
    )
}

/// The query string that selects `period` again (for the CSV link): its preset, or its dates.
pub(super) fn query_string(period: Period) -> String {
    match period.preset {
        Some(preset) => format!("range={preset}"),
        None => format!("from={}&until={}", date(period.from), date(period.last())),
    }
}

/// The presets as links, and a form for dates.
fn choices(period: Period, params: &SpendParams) -> Markup {
    html! {
        p class="choices" {
            @for (name, label) in PRESETS {
                a href=(format!("/console/spend?range={}", url_encode(name))) class=[(period.preset == Some(name)).then_some("current")] {
                    (label)
                }
            }
        }
        form method="get" action="/console/spend" class="period" {
            label { "From " input type="date" name="from" value=(params.from.clone().unwrap_or_else(|| date(period.from))); }
            " "
            label { "until " input type="date" name="until" value=(params.until.clone().unwrap_or_else(|| date(period.last()))); }
            " "
            button type="submit" { "Show" }
        }
    }
}

/// A caller or model as shown (`—` when the calls had none).
pub(super) fn name(value: Option<&str>) -> &str {
    value.unwrap_or("—")
}

/// The cost as shown: dollars, with the calls that had no price named.
fn cost(row: &SpendRow) -> String {
    if row.calls > 0 && row.unpriced_calls == row.calls {
        "—".to_owned()
    } else if row.unpriced_calls > 0 {
        format!("{} + {} unpriced", dollars(row.cost), row.unpriced_calls)
    } else {
        dollars(row.cost)
    }
}

/// The table's column headings after caller and model (the CSV's are the same, in its own spelling).
const HEADINGS: [&str; 7] = [
    "model calls",
    "refused, not sent",
    "errors",
    "input tokens",
    "output tokens",
    "cached input tokens",
    "cost",
];

/// The sum of rows (the table's total line).
pub(super) fn total(rows: &[SpendRow]) -> SpendRow {
    rows.iter().fold(SpendRow::default(), |mut sum, row| {
        sum.calls += row.calls;
        sum.refused_calls += row.refused_calls;
        sum.error_calls += row.error_calls;
        sum.input_tokens += row.input_tokens;
        sum.output_tokens += row.output_tokens;
        sum.cached_input_tokens += row.cached_input_tokens;
        sum.cost = Cost::from_nanos(sum.cost.as_nanos() + row.cost.as_nanos());
        sum.unpriced_calls += row.unpriced_calls;
        sum
    })
}

fn table(rows: &[SpendRow]) -> Markup {
    if rows.is_empty() {
        return html! { p class="empty" id="spend-empty" { "No calls in this period." } };
    }
    let line = |row: &SpendRow| {
        [
            row.calls.to_string(),
            row.refused_calls.to_string(),
            row.error_calls.to_string(),
            row.input_tokens.to_string(),
            row.output_tokens.to_string(),
            row.cached_input_tokens.to_string(),
            cost(row),
        ]
    };
    let all = total(rows);
    html! {
        div class="table-frame" tabindex="0" role="region" aria-label="Spend per caller and model" {
            table id="spend" class="totals" {
                thead {
                    tr {
                        th scope="col" { "caller" }
                        th scope="col" { "model" }
                        @for heading in HEADINGS { th scope="col" { (heading) } }
                    }
                }
                tbody {
                    @for row in rows {
                        tr {
                            th scope="row" data-label="caller" { (name(row.caller.as_ref().map(|c| c.as_str()))) }
                            td data-label="model" { (name(row.model.as_deref())) }
                            @for (cell, heading) in line(row).iter().zip(HEADINGS) {
                                td class="number" data-label=(heading) { (cell) }
                            }
                        }
                    }
                    tr class="total" {
                        th scope="row" data-label="caller" { "all" }
                        td data-label="model" { "all" }
                        @for (cell, heading) in line(&all).iter().zip(HEADINGS) {
                            td class="number" data-label=(heading) { (cell) }
                        }
                    }
                }
            }
        }
    }
}

/// One budget of a caller: its window (`per day` / `per month`), the limit (shown in cents: budgets are set in
/// dollars) and what is used of it now.
struct Budget {
    caller: String,
    window: &'static str,
    limit: Cost,
    used: Cost,
}

/// The budgets of the callers on the page, from the limits layer's counters (today's and this month's spend
/// against `cost_per_day_usd` / `cost_per_month_usd`); callers without one are left out.
async fn budgets(limits: Option<&LimitsLayer>, rows: &[SpendRow]) -> Vec<Budget> {
    let Some(limits) = limits else {
        return Vec::new();
    };
    let mut callers: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.caller.as_ref().map(|c| c.as_str()))
        .collect();
    callers.dedup();
    let mut budgets = Vec::new();
    for caller in callers {
        let report = match limits.usage(caller).await {
            Ok(report) => report,
            Err(error) => {
                tracing::warn!(caller, %error, "console: cannot read a caller's budget");
                continue;
            }
        };
        for (kind, window) in [
            (CounterKind::CostPerDay, "per day"),
            (CounterKind::CostPerMonth, "per month"),
        ] {
            if let Some(counter) = report.counter(kind) {
                budgets.push(Budget {
                    caller: caller.to_owned(),
                    window,
                    limit: Cost::from_nanos(counter.limit),
                    used: Cost::from_nanos(counter.used),
                });
            }
        }
    }
    budgets
}

fn budget_table(limits_on: bool, budgets: &[Budget]) -> Markup {
    if budgets.is_empty() {
        return html! {
            p class="empty" id="budgets-empty" {
                @if limits_on { "No caller on this page has a budget (cost_per_day_usd or cost_per_month_usd in [limits])." }
                @else { "No budgets: this gateway runs without [limits]." }
            }
        };
    }
    html! {
        p class="hint" { "Spend counted by the limits layer in the current UTC day or calendar month, whatever the period above." }
        table id="budgets" class="totals" {
            thead {
                tr {
                    th scope="col" { "caller" }
                    th scope="col" { "budget" }
                    th scope="col" { "used" }
                    th scope="col" { "used of the budget" }
                }
            }
            tbody {
                @for b in budgets {
                    @let share = if b.limit.as_nanos() == 0 { 100.0 } else { b.used.as_nanos() as f64 * 100.0 / b.limit.as_nanos() as f64 };
                    tr class=[(b.used >= b.limit).then_some("exhausted")] {
                        th scope="row" data-label="caller" { (b.caller) }
                        td data-label="budget" { (format!("${:.2}", b.limit.as_usd())) " " (b.window) }
                        td class="number" data-label="used" { (dollars(b.used)) }
                        td class="number" data-label="used of the budget" { (format!("{share:.1} %")) }
                    }
                }
            }
        }
    }
}
