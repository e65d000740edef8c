//! The usage page: model calls, errors and their rate, tokens, cost and latency percentiles over time, by model
//! or by caller, drawn as SVG on the server (no charting library, no script), and breakdown tables per model and
//! per caller. Every number is summed by the store ([`tower_chat_persistence::Store::usage`]), not by reading
//! each call.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use tower_chat::PriceTable;
use tower_chat_persistence::{Store, StoreError, UsageAggregate, UsageQuery};

use maud::{html, Markup};

use super::chart::{chart, Chart, Series, TimeAxis, Unit};
use super::extract::PageQuery;
use super::format::{count, utc};
use super::layout::{error_page, html_response, layout, Nav};
use super::session::Session;
use super::state::ConsoleState;
use super::usage_breakdown::{caller_name, model_name, table, SavingsBy};

/// The usage page's query: the time `range` and what the series are `by` (`model` or `caller`).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct UsageParams {
    range: Option<String>,
    by: Option<String>,
}

/// How long a rendered usage page is reused (its plots' resolution is a minute or more anyway).
pub(crate) const CACHE_FOR: Duration = Duration::from_secs(5);

/// Series drawn per chart; the rest are summed as "(other)".
const MAX_SERIES: usize = 6;

/// A time range and how it is cut into buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    name: &'static str,
    bucket: Duration,
    buckets: usize,
}

const RANGES: [Range; 3] = [
    Range {
        name: "1h",
        bucket: Duration::from_secs(60),
        buckets: 60,
    },
    Range {
        name: "24h",
        bucket: Duration::from_secs(30 * 60),
        buckets: 48,
    },
    Range {
        name: "7d",
        bucket: Duration::from_secs(3 * 3600),
        buckets: 56,
    },
];

/// What the series are split by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    Model,
    Caller,
}

impl By {
    /// The query's grouping for this split.
    fn split(self, query: UsageQuery) -> UsageQuery {
        match self {
            By::Model => query.by_model(),
            By::Caller => query.by_caller(),
        }
    }

    /// A row's group name for this split.
    fn group(self, row: &UsageAggregate) -> String {
        match self {
            By::Model => model_name(row),
            By::Caller => caller_name(row),
        }
    }

    fn name(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Caller => "caller",
        }
    }
}

/// `GET /console/usage?range=1h|24h|7d&by=model|caller`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(params): PageQuery<UsageParams>,
) -> Response {
    let Some(records) = &state.records else {
        return error_page(StatusCode::NOT_FOUND, "This gateway keeps no call records.");
    };
    let range = match params.range.as_deref() {
        None => RANGES[1],
        Some(name) => match RANGES.into_iter().find(|r| r.name == name) {
            Some(range) => range,
            None => {
                return error_page(
                    StatusCode::BAD_REQUEST,
                    &format!("Unknown range `{name}`: choose 1h, 24h or 7d (?range=24h)."),
                )
            }
        },
    };
    let by = match params.by.as_deref() {
        None | Some("model") => By::Model,
        Some("caller") => By::Caller,
        Some(other) => {
            return error_page(
                StatusCode::BAD_REQUEST,
                &format!("Unknown split `{other}`: choose model or caller (?by=model)."),
            )
        }
    };
    let key = (range.name, by.name());
    let cached = {
        let cache = state.usage_cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(&key)
            .filter(|(at, _)| at.elapsed() < CACHE_FOR)
            .map(|(_, body)| body.clone())
    };
    let body = match cached {
        Some(body) => body,
        None => {
            let body = match render(records.as_ref(), &state.operators.prices, range, by).await {
                Ok(body) => body,
                Err(refused) => return *refused,
            };
            let mut cache = state.usage_cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.insert(key, (std::time::Instant::now(), body.clone()));
            body
        }
    };
    html_response(
        StatusCode::OK,
        layout("Usage", Nav::Usage, Some(&session), body),
    )
}

/// The store's aggregates for one page: per bucket (in all and per group of the split), per model, per caller,
/// in all, and per model and caller (for what the cache saved).
struct Aggregates {
    per_bucket: Vec<UsageAggregate>,
    per_bucket_and_group: Vec<UsageAggregate>,
    per_model: Vec<UsageAggregate>,
    per_caller: Vec<UsageAggregate>,
    all: Option<UsageAggregate>,
    per_model_and_caller: Vec<UsageAggregate>,
}

impl Aggregates {
    async fn read(
        store: &dyn Store,
        period: UsageQuery,
        range: Range,
        by: By,
    ) -> Result<Self, StoreError> {
        let bucketed = period.clone().per_bucket(range.bucket);
        Ok(Aggregates {
            per_bucket: store.usage(&bucketed).await?,
            per_bucket_and_group: store.usage(&by.split(bucketed)).await?,
            per_model: store.usage(&period.clone().by_model()).await?,
            per_caller: store.usage(&period.clone().by_caller()).await?,
            all: store.usage(&period).await?.into_iter().next(),
            per_model_and_caller: store.usage(&period.by_model().by_caller()).await?,
        })
    }
}

/// One value per bucket from per-bucket rows (`None` for a bucket without calls).
fn per_bucket(
    rows: &[&UsageAggregate],
    buckets: usize,
    value: impl Fn(&UsageAggregate) -> f64,
) -> Vec<Option<f64>> {
    let mut values = vec![None; buckets];
    for row in rows {
        if let Some(slot) = row.bucket.and_then(|b| values.get_mut(b as usize)) {
            *slot = Some(slot.unwrap_or(0.0) + value(row));
        }
    }
    values
}

/// The series of a per-group chart: the busiest groups (by `totals`), the rest summed as "(other)"; a bucket
/// without calls counts zero.
fn group_series(
    rows: &[UsageAggregate],
    totals: &[UsageAggregate],
    by: By,
    buckets: usize,
    value: impl Fn(&UsageAggregate) -> f64,
) -> Vec<(String, Vec<Option<f64>>)> {
    let mut names: Vec<(String, u64)> = totals.iter().map(|r| (by.group(r), r.calls)).collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let kept: Vec<String> = if names.len() > MAX_SERIES {
        names
            .iter()
            .take(MAX_SERIES - 1)
            .map(|(n, _)| n.clone())
            .collect()
    } else {
        names.into_iter().map(|(n, _)| n).collect()
    };
    let mut series: Vec<(String, Vec<&UsageAggregate>)> =
        kept.iter().map(|n| (n.clone(), Vec::new())).collect();
    let mut other = Vec::new();
    for row in rows {
        match kept.iter().position(|k| *k == by.group(row)) {
            Some(at) => series[at].1.push(row),
            None => other.push(row),
        }
    }
    if !other.is_empty() {
        series.push(("(other)".to_owned(), other));
    }
    series
        .into_iter()
        .map(|(name, rows)| {
            let values = per_bucket(&rows, buckets, &value)
                .into_iter()
                .map(|v| Some(v.unwrap_or(0.0)))
                .collect();
            (name, values)
        })
        .collect()
}

fn tokens(row: &UsageAggregate) -> f64 {
    (row.input_tokens + row.output_tokens) as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The usage page's content for `range` and `by`.
async fn render(
    records: &dyn Store,
    prices: &PriceTable,
    range: Range,
    by: By,
) -> Result<Markup, Box<Response>> {
    let now = SystemTime::now();
    let span = range.bucket * range.buckets as u32;
    // Buckets end at the next whole bucket after now.
    let bucket_secs = range.bucket.as_secs();
    let now_secs = crate::operator::unix(now);
    let end =
        SystemTime::UNIX_EPOCH + Duration::from_secs((now_secs / bucket_secs + 1) * bucket_secs);
    let start = end - span;
    let data = Aggregates::read(records, UsageQuery::between(start, end), range, by)
        .await
        .map_err(|e| {
            Box::new(error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Reading the store failed: {e}"),
            ))
        })?;
    Ok(content(&data, prices, start, end, range, by))
}

fn content(
    data: &Aggregates,
    prices: &PriceTable,
    start: SystemTime,
    end: SystemTime,
    range: Range,
    by: By,
) -> Markup {
    let by_name = by.name();
    let axis = TimeAxis {
        start,
        bucket: range.bucket,
        buckets: range.buckets,
    };
    let buckets = range.buckets;
    let all_buckets: Vec<&UsageAggregate> = data.per_bucket.iter().collect();
    let totals = match by {
        By::Model => &data.per_model,
        By::Caller => &data.per_caller,
    };
    let calls_by = group_series(&data.per_bucket_and_group, totals, by, buckets, |r| {
        r.calls as f64
    });
    let tokens_by = group_series(&data.per_bucket_and_group, totals, by, buckets, tokens);
    let cost_by = group_series(&data.per_bucket_and_group, totals, by, buckets, |r| {
        r.cost.as_usd()
    });
    let zero_filled = |v: Vec<Option<f64>>| v.into_iter().map(|v| Some(v.unwrap_or(0.0))).collect();
    let calls = zero_filled(per_bucket(&all_buckets, buckets, |r| r.calls as f64));
    let errors = zero_filled(per_bucket(&all_buckets, buckets, |r| r.failed_calls as f64));
    // Refused before sending (limits, a content policy) and cut short by a policy: not provider errors.
    let refused = zero_filled(per_bucket(&all_buckets, buckets, |r| {
        r.refused_calls as f64
    }));
    let blocked = zero_filled(per_bucket(&all_buckets, buckets, |r| {
        r.blocked_calls as f64
    }));
    let rate = per_bucket(&all_buckets, buckets, |r| r.error_rate() * 100.0);
    let p50 = per_bucket(&all_buckets, buckets, |r| ms(r.latency.p50));
    let p90 = per_bucket(&all_buckets, buckets, |r| ms(r.latency.p90));
    let p99 = per_bucket(&all_buckets, buckets, |r| ms(r.latency.p99));
    // Far above the typical latency, one slow call turns the latency axis logarithmic.
    let typical = data.all.as_ref().map(|all| ms(all.latency.p90));
    let savings = SavingsBy::of(&data.per_model_and_caller, prices);
    let total_calls = data.all.as_ref().map_or(0, |a| a.calls);
    let hit_rate = if total_calls == 0 {
        "—".to_owned()
    } else {
        format!(
            "{} of {} ({:.0} %)",
            savings.all.cached,
            total_calls,
            savings.all.cached as f64 * 100.0 / total_calls as f64
        )
    };
    let charts = [
        Chart {
            id: "calls",
            title: format!("Model calls by {by_name}"),
            unit: Unit::Count("model calls"),
            axis,
            series: as_series(&calls_by),
            bands: false,
            typical: None,
        },
        Chart {
            id: "errors",
            title: "Model calls and errors (failed or interrupted), refusals (not sent) and answers blocked \
                    by guardrail, all model calls"
                .to_owned(),
            unit: Unit::Count("model calls"),
            axis,
            series: vec![
                Series {
                    name: "model calls",
                    values: calls,
                },
                Series {
                    name: "errors",
                    values: errors,
                },
                Series {
                    name: "refused, not sent",
                    values: refused,
                },
                Series {
                    name: "blocked by guardrail",
                    values: blocked,
                },
            ],
            bands: false,
            typical: None,
        },
        Chart {
            id: "error-rate",
            title: "Error rate (errors ÷ model calls)".to_owned(),
            unit: Unit::Percent,
            axis,
            series: vec![Series {
                name: "error rate",
                values: rate,
            }],
            bands: false,
            typical: None,
        },
        Chart {
            id: "tokens",
            title: format!("Tokens (input + output) by {by_name}"),
            unit: Unit::Count("tokens"),
            axis,
            series: as_series(&tokens_by),
            bands: false,
            typical: None,
        },
        Chart {
            id: "cost",
            title: format!("Cost by {by_name} (priced model calls)"),
            unit: Unit::Dollars,
            axis,
            series: as_series(&cost_by),
            bands: false,
            typical: None,
        },
        Chart {
            id: "latency",
            title: "Latency percentiles (p50, p90, p99), all model calls".to_owned(),
            unit: Unit::Millis,
            axis,
            series: vec![
                Series {
                    name: "p50",
                    values: p50,
                },
                Series {
                    name: "p90",
                    values: p90,
                },
                Series {
                    name: "p99",
                    values: p99,
                },
            ],
            bands: true,
            typical,
        },
    ];
    html! {
        p class="choices" {
            @for r in RANGES {
                a href=(format!("/console/usage?range={}&by={}", r.name, by_name)) class=[(r == range).then_some("current")] {
                    (r.name)
                }
            }
            " · "
            @for b in [By::Model, By::Caller] {
                a href=(format!("/console/usage?range={}&by={}", range.name, b.name())) class=[(b == by).then_some("current")] {
                    "by " (b.name())
                }
            }
        }
        p class="summary" id="usage-summary" {
            (count(total_calls, "model call", "model calls")) " from " (utc(start)) " to " (utc(end)) " UTC"
        }
        p class="summary" id="cache-summary" {
            "Response cache: " (hit_rate) " model calls answered from the cache, saving "
            (savings.all.text()) " (their tokens at the model's price)"
        }
        @for c in &charts { (chart(c)) }
        h2 { "By model" }
        (table("usage-by-model", "model", &data.per_model, data.all.as_ref(), model_name, &savings.model, savings.all))
        h2 { "By caller" }
        (table("usage-by-caller", "caller", &data.per_caller, data.all.as_ref(), caller_name, &savings.caller, savings.all))
    }
}

/// Named per-bucket values as chart series.
fn as_series(series: &[(String, Vec<Option<f64>>)]) -> Vec<Series<'_>> {
    series
        .iter()
        .map(|(name, values)| Series {
            name,
            values: values.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat_persistence::LatencyPercentiles;

    fn row(bucket: u64, model: &str, calls: u64) -> UsageAggregate {
        UsageAggregate {
            bucket: Some(bucket),
            model: Some(model.into()),
            caller: None,
            calls,
            failed_calls: 0,
            refused_calls: 0,
            blocked_calls: 0,
            cancelled_calls: 0,
            input_tokens: 10 * calls,
            output_tokens: 5 * calls,
            cost: tower_chat::Cost::ZERO,
            unpriced_calls: calls,
            cached_calls: 0,
            cached_input_tokens: 0,
            cached_output_tokens: 0,
            latency: LatencyPercentiles::default(),
            time_to_first_token_p50: None,
        }
    }

    #[test]
    fn the_busiest_groups_get_a_series_and_the_rest_sum_as_other() {
        let mut rows = Vec::new();
        let mut totals = Vec::new();
        for (n, model) in ["a", "b", "c", "d", "e", "f", "g"].into_iter().enumerate() {
            let calls = 10 - n as u64;
            rows.push(row(n as u64 % 3, model, calls));
            totals.push(UsageAggregate {
                bucket: None,
                ..row(0, model, calls)
            });
        }
        let series = group_series(&rows, &totals, By::Model, 4, |r| r.calls as f64);
        let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "e", "(other)"]);
        assert_eq!(series[0].1, [Some(10.0), Some(0.0), Some(0.0), Some(0.0)]);
        // f (5 calls, bucket 2) and g (4 calls, bucket 0) are "(other)".
        assert_eq!(series[5].1, [Some(4.0), Some(0.0), Some(5.0), Some(0.0)]);
        let tokens = per_bucket(&rows.iter().collect::<Vec<_>>(), 4, tokens);
        assert_eq!(tokens[3], None, "a bucket without calls has no value");
        assert_eq!(tokens[0], Some(15.0 * (10 + 7 + 4) as f64));
    }
}
