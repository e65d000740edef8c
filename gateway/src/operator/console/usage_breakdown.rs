//! The usage page's breakdown tables: per model and per caller, the calls, errors and their rate, tokens, cost,
//! latency percentiles and what the response cache saved, from the store's aggregates.

use std::collections::HashMap;
use std::time::Duration;

use maud::{html, Markup};
use tower_chat::{Cost, PriceTable};
use tower_chat_persistence::UsageAggregate;

use super::format::{dollars, millis};

/// A group's name: its model or caller, or what stands for none.
pub(super) fn model_name(row: &UsageAggregate) -> String {
    row.model
        .clone()
        .unwrap_or_else(|| "(unknown model)".into())
}

/// See [`model_name`].
pub(super) fn caller_name(row: &UsageAggregate) -> String {
    row.caller
        .as_ref()
        .map_or_else(|| "(no key)".into(), |c| c.as_str().to_owned())
}

/// What the response cache saved a group: cached calls priced at their model's price (the replay's tokens
/// are the ones the original call was paid for), and how many of them have no price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Savings {
    pub(super) cached: u64,
    pub(super) saved: Cost,
    pub(super) unpriced: u64,
}

impl Savings {
    fn add(&mut self, row: &UsageAggregate, prices: &PriceTable) {
        if row.cached_calls == 0 {
            return;
        }
        self.cached += row.cached_calls;
        let usage = tower_chat::Usage {
            input_tokens: row.cached_input_tokens,
            output_tokens: row.cached_output_tokens,
            ..tower_chat::Usage::default()
        };
        match row.model.as_deref().and_then(|m| prices.price(m)) {
            Some(price) => self.saved += price.cost(&usage),
            None => self.unpriced += row.cached_calls,
        }
    }

    /// What the cached calls would have cost; `—` when none of them has a price.
    pub(super) fn text(&self) -> String {
        if self.cached == 0 {
            dollars(Cost::ZERO)
        } else if self.unpriced == self.cached {
            "—".to_owned()
        } else if self.unpriced > 0 {
            format!("{} + {} unpriced", dollars(self.saved), self.unpriced)
        } else {
            dollars(self.saved)
        }
    }
}

/// Savings per model, per caller and in all, from aggregates by model and caller.
#[derive(Debug, Default)]
pub(super) struct SavingsBy {
    pub(super) model: HashMap<String, Savings>,
    pub(super) caller: HashMap<String, Savings>,
    pub(super) all: Savings,
}

impl SavingsBy {
    pub(super) fn of(rows: &[UsageAggregate], prices: &PriceTable) -> Self {
        let mut by = SavingsBy::default();
        for row in rows {
            by.model
                .entry(model_name(row))
                .or_default()
                .add(row, prices);
            by.caller
                .entry(caller_name(row))
                .or_default()
                .add(row, prices);
            by.all.add(row, prices);
        }
        by
    }
}

/// `40.0 %`: the share of the calls that went wrong.
pub(super) fn error_rate(row: &UsageAggregate) -> String {
    if row.calls == 0 {
        return "—".to_owned();
    }
    format!("{:.1} %", row.error_rate() * 100.0)
}

fn cost(row: &UsageAggregate) -> String {
    if row.unpriced_calls == row.calls {
        "—".to_owned()
    } else if row.unpriced_calls > 0 {
        format!("{} + {} unpriced", dollars(row.cost), row.unpriced_calls)
    } else {
        dollars(row.cost)
    }
}

const HEADINGS: [&str; 15] = [
    "model calls",
    "errors",
    "error rate",
    "refused, not sent",
    "blocked by guardrail",
    "cancelled",
    "input tokens",
    "output tokens",
    "cost",
    "p50",
    "p90",
    "p99",
    "p50 first token",
    "cache hits",
    "saved by the cache",
];

/// A breakdown table (`id`): one row per group, busiest first, then all calls. `name` names a row's group,
/// `savings` holds what the cache saved each group.
pub(super) fn table(
    id: &str,
    heading: &str,
    rows: &[UsageAggregate],
    all: Option<&UsageAggregate>,
    name: fn(&UsageAggregate) -> String,
    savings: &HashMap<String, Savings>,
    all_savings: Savings,
) -> Markup {
    let mut sorted: Vec<&UsageAggregate> = rows.iter().collect();
    sorted.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| name(a).cmp(&name(b))));
    // Seconds past one: a 60 s outlier reads as such, not as 60000 ms.
    let ms = |d: Duration| {
        if d >= Duration::from_secs(1) {
            format!("{:.2} s", d.as_secs_f64())
        } else {
            millis(d)
        }
    };
    let line = |row: &UsageAggregate, label: String, saved: Savings| {
        let cells = [
            row.calls.to_string(),
            row.failed_calls.to_string(),
            error_rate(row),
            row.refused_calls.to_string(),
            row.blocked_calls.to_string(),
            row.cancelled_calls.to_string(),
            row.input_tokens.to_string(),
            row.output_tokens.to_string(),
            cost(row),
            ms(row.latency.p50),
            ms(row.latency.p90),
            ms(row.latency.p99),
            row.time_to_first_token_p50
                .map_or_else(|| "—".to_owned(), ms),
            row.cached_calls.to_string(),
            saved.text(),
        ];
        html! {
            tr {
                th scope="row" data-label=(heading) { (label) }
                @for (cell, heading) in cells.iter().zip(HEADINGS) {
                    td class="number" data-label=(heading) { (cell) }
                }
            }
        }
    };
    // Fifteen columns do not fit a narrow desktop window: the table scrolls inside its frame, never the page
    // (a phone shows it as cards); the frame is focusable so a keyboard can scroll it.
    html! {
        div class="table-frame" tabindex="0" role="region" aria-label=(format!("Usage by {heading}")) {
        table id=(id) class="totals" {
            thead {
                tr {
                    th scope="col" { (heading) }
                    @for heading in HEADINGS { th scope="col" { (heading) } }
                }
            }
            tbody {
                @for row in sorted {
                    @let label = name(row);
                    @let saved = savings.get(&label).copied().unwrap_or_default();
                    (line(row, label, saved))
                }
                @if let Some(all) = all {
                    (line(all, "all".to_owned(), all_savings))
                }
            }
        }
        }
    }
}
