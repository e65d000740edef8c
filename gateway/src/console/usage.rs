//! The usage page: model calls, tokens and latency percentiles over time, by model or by caller, drawn as SVG on
//! the server (no charting library, no script).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use tower_chat::{Cost, PriceTable};
use tower_chat_persistence::{CallQuery, CallSummary};

use maud::{html, Markup};

use super::chart::{line_chart, Series, TimeAxis};
use super::format::{count, dollars, millis, utc};
use super::session::Session;
use super::{error_page, html_response, layout, ConsoleState, Nav};
use crate::extract::PageQuery;

/// The usage page's query: the time `range` and what the series are `by` (`model` or `caller`).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct UsageParams {
    range: Option<String>,
    by: Option<String>,
}

/// How long a rendered usage page is reused (its plots' resolution is a minute or more anyway).
pub(crate) const CACHE_FOR: Duration = Duration::from_secs(5);

/// Rendered usage pages: (range, by) → when rendered, the page's `<main>` content.
pub(crate) type Cache = HashMap<(&'static str, &'static str), (std::time::Instant, Markup)>;

/// The most calls one page reads (the latest of the range).
const MAX_CALLS: u32 = 50_000;
/// Series drawn per chart; the rest are summed as "other".
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
    fn key(self, call: &CallSummary) -> String {
        match self {
            By::Model => call
                .model
                .clone()
                .unwrap_or_else(|| "(unknown model)".into()),
            By::Caller => call
                .caller
                .as_ref()
                .map_or_else(|| "(no key)".into(), |c| c.as_str().to_owned()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Caller => "caller",
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// One group's (a model's or a caller's) numbers.
#[derive(Debug, Default)]
struct Group {
    name: String,
    requests: Vec<f64>,
    tokens: Vec<f64>,
    latencies: Vec<Vec<f64>>,
    all_latencies: Vec<f64>,
    ttft: Vec<f64>,
    total_requests: u64,
    input_tokens: u64,
    output_tokens: u64,
    cost: Cost,
    unpriced: u64,
    errors: u64,
    /// Calls the response cache answered, what they would have cost at the model's price, and how many of
    /// them have no price.
    cached: u64,
    saved: Cost,
    saved_unpriced: u64,
}

impl Group {
    fn new(name: String, buckets: usize) -> Self {
        Group {
            name,
            requests: vec![0.0; buckets],
            tokens: vec![0.0; buckets],
            latencies: vec![Vec::new(); buckets],
            ..Group::default()
        }
    }

    fn add(&mut self, bucket: usize, call: &CallSummary, prices: &PriceTable) {
        let latency = call.latency().as_secs_f64() * 1000.0;
        self.requests[bucket] += 1.0;
        self.tokens[bucket] += (call.input_tokens + call.output_tokens) as f64;
        self.latencies[bucket].push(latency);
        self.all_latencies.push(latency);
        if let Some(t) = call.time_to_first_token() {
            self.ttft.push(t.as_secs_f64() * 1000.0);
        }
        self.total_requests += 1;
        self.input_tokens += call.input_tokens;
        self.output_tokens += call.output_tokens;
        match call.cost {
            Some(cost) => self.cost += cost,
            None => self.unpriced += 1,
        }
        if call.outcome.as_str() != "completed" {
            self.errors += 1;
        }
        if call.from_response_cache {
            self.cached += 1;
            // The replay's tokens are the ones the original call was paid for: priced as if sent again.
            let usage = tower_chat::Usage {
                input_tokens: call.input_tokens,
                output_tokens: call.output_tokens,
                ..tower_chat::Usage::default()
            };
            match call.model.as_deref().and_then(|m| prices.price(m)) {
                Some(price) => self.saved += price.cost(&usage),
                None => self.saved_unpriced += 1,
            }
        }
    }

    /// `3 of 10 (30 %)`.
    fn hit_rate(&self) -> String {
        if self.total_requests == 0 {
            return "—".to_owned();
        }
        let percent = self.cached as f64 * 100.0 / self.total_requests as f64;
        format!(
            "{} of {} ({percent:.0} %)",
            self.cached, self.total_requests
        )
    }

    /// What the cached calls would have cost; `—` when none of them has a price.
    fn saved_text(&self) -> String {
        if self.cached == 0 {
            dollars(Cost::ZERO)
        } else if self.saved_unpriced == self.cached {
            "—".to_owned()
        } else if self.saved_unpriced > 0 {
            format!("{} + {} unpriced", dollars(self.saved), self.saved_unpriced)
        } else {
            dollars(self.saved)
        }
    }
}

impl Usage {
    fn axis(&self) -> TimeAxis {
        TimeAxis {
            start: self.start,
            bucket: self.range.bucket,
            buckets: self.range.buckets,
        }
    }
}

/// The calls of a range, bucketed: one group per series (the busiest, then "other") and one for all.
#[derive(Debug)]
struct Usage {
    start: SystemTime,
    range: Range,
    groups: Vec<Group>,
    all: Group,
}

fn bucket_calls(
    calls: &[CallSummary],
    start: SystemTime,
    range: Range,
    by: By,
    prices: &PriceTable,
) -> Usage {
    let mut counts: HashMap<String, u64> = HashMap::new();
    for call in calls {
        *counts.entry(by.key(call)).or_default() += 1;
    }
    let mut names: Vec<(String, u64)> = counts.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let kept: Vec<String> = if names.len() > MAX_SERIES {
        names
            .iter()
            .take(MAX_SERIES - 1)
            .map(|(n, _)| n.clone())
            .collect()
    } else {
        names.iter().map(|(n, _)| n.clone()).collect()
    };
    let mut groups: Vec<Group> = kept
        .iter()
        .map(|n| Group::new(n.clone(), range.buckets))
        .collect();
    if names.len() > MAX_SERIES {
        groups.push(Group::new("(other)".into(), range.buckets));
    }
    let mut all = Group::new("all".into(), range.buckets);
    for call in calls {
        let Ok(offset) = call.started_at.duration_since(start) else {
            continue;
        };
        let bucket = (offset.as_secs_f64() / range.bucket.as_secs_f64()) as usize;
        if bucket >= range.buckets {
            continue;
        }
        let key = by.key(call);
        let at = kept
            .iter()
            .position(|k| *k == key)
            .unwrap_or(groups.len() - 1);
        groups[at].add(bucket, call, prices);
        all.add(bucket, call, prices);
    }
    for group in groups.iter_mut().chain(std::iter::once(&mut all)) {
        group.all_latencies.sort_by(f64::total_cmp);
        group.ttft.sort_by(f64::total_cmp);
        for bucket in &mut group.latencies {
            bucket.sort_by(f64::total_cmp);
        }
    }
    Usage {
        start,
        range,
        groups,
        all,
    }
}

/// One series per group (model or caller), its values picked by `values`.
fn per_group<'a>(
    groups: &'a [Group],
    values: impl Fn(&Group) -> Vec<Option<f64>>,
) -> Vec<Series<'a>> {
    groups
        .iter()
        .map(|g| Series {
            name: &g.name,
            values: values(g),
        })
        .collect()
}

fn counts(values: &[f64]) -> Vec<Option<f64>> {
    values.iter().map(|v| Some(*v)).collect()
}

fn bucket_percentile(group: &Group, p: f64) -> Vec<Option<f64>> {
    group.latencies.iter().map(|b| percentile(b, p)).collect()
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

/// The usage page's content for `range` and `by`.
async fn render(
    records: &dyn tower_chat_persistence::Store,
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
    let calls = match records
        .call_summaries(&CallQuery::between(start, end).limit(MAX_CALLS))
        .await
    {
        Ok(calls) => calls,
        Err(e) => {
            return Err(Box::new(error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Reading the store failed: {e}"),
            )))
        }
    };
    let usage = bucket_calls(&calls, start, range, by, prices);
    let by_name = by.name();
    let requests = per_group(&usage.groups, |g| counts(&g.requests));
    let tokens = per_group(&usage.groups, |g| counts(&g.tokens));
    let percentiles = [
        Series {
            name: "p50",
            values: bucket_percentile(&usage.all, 50.0),
        },
        Series {
            name: "p90",
            values: bucket_percentile(&usage.all, 90.0),
        },
        Series {
            name: "p99",
            values: bucket_percentile(&usage.all, 99.0),
        },
    ];
    let p99 = per_group(&usage.groups, |g| bucket_percentile(g, 99.0));
    let ms = |v: Option<f64>| {
        v.map_or_else(
            || "—".to_owned(),
            |v| millis(Duration::from_secs_f64(v / 1000.0)),
        )
    };
    Ok(html! {
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
            (count(usage.all.total_requests, "model call", "model calls")) " from " (utc(start)) " to " (utc(end)) " UTC"
            @if calls.len() as u32 >= MAX_CALLS { " (the latest 50,000)" }
        }
        p class="summary" id="cache-summary" {
            "Response cache: " (usage.all.hit_rate()) " model calls answered from the cache, saving "
            (usage.all.saved_text()) " (their tokens at the model's price)"
        }
        (line_chart("requests", &format!("Model calls by {by_name}"), "model calls", &usage.axis(), &requests))
        (line_chart("tokens", &format!("Tokens (input + output) by {by_name}"), "tokens", &usage.axis(), &tokens))
        (line_chart("latency", "Latency percentiles, all model calls", "ms", &usage.axis(), &percentiles))
        (line_chart("latency-by", &format!("p99 latency by {by_name}"), "ms", &usage.axis(), &p99))
        h2 { "Totals by " (by_name) }
        table id="usage-totals" class="totals" {
            thead {
                tr {
                    @for heading in [by_name, "model calls", "not completed", "input tokens", "output tokens", "cost",
                        "p50", "p90", "p99", "p50 first token", "cache hits", "saved by the cache"] {
                        th { (heading) }
                    }
                }
            }
            tbody {
                @for g in usage.groups.iter().chain(std::iter::once(&usage.all)) {
                    @let cost = if g.unpriced == g.total_requests {
                        "—".to_owned()
                    } else if g.unpriced > 0 {
                        format!("{} + {} unpriced", dollars(g.cost), g.unpriced)
                    } else {
                        dollars(g.cost)
                    };
                    tr {
                        td { (g.name) }
                        @for cell in [
                            g.total_requests.to_string(),
                            g.errors.to_string(),
                            g.input_tokens.to_string(),
                            g.output_tokens.to_string(),
                            cost,
                            ms(percentile(&g.all_latencies, 50.0)),
                            ms(percentile(&g.all_latencies, 90.0)),
                            ms(percentile(&g.all_latencies, 99.0)),
                            ms(percentile(&g.ttft, 50.0)),
                            g.cached.to_string(),
                            g.saved_text(),
                        ] {
                            td class="number" { (cell) }
                        }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::chart::nice_max;
    use super::*;
    use tower_chat_persistence::{CallId, CallOutcome};

    fn call(at: SystemTime, model: &str, latency_ms: u64) -> CallSummary {
        CallSummary {
            call_id: CallId::generate(),
            conversation_id: "c".into(),
            caller: None,
            started_at: at,
            first_token_at: Some(at + Duration::from_millis(1)),
            ended_at: at + Duration::from_millis(latency_ms),
            model: Some(model.into()),
            outcome: CallOutcome::Completed,
            input_tokens: 10,
            output_tokens: 5,
            cost: None,
            from_response_cache: false,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 1.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn calls_land_in_their_bucket_and_series_and_the_chart_draws_them() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let range = RANGES[0];
        let calls = vec![
            call(start + Duration::from_secs(5), "a", 100),
            call(start + Duration::from_secs(65), "a", 300),
            call(start + Duration::from_secs(70), "<b>", 200),
            call(start - Duration::from_secs(5), "a", 1),
        ];
        let usage = bucket_calls(&calls, start, range, By::Model, &PriceTable::new());
        assert_eq!(usage.groups.len(), 2);
        assert_eq!(usage.groups[0].name, "a");
        assert_eq!(usage.groups[0].requests[..3], [1.0, 1.0, 0.0]);
        assert_eq!(usage.groups[1].requests[1], 1.0);
        assert_eq!(
            usage.all.total_requests, 3,
            "the call before the range is left out"
        );
        assert_eq!(usage.all.tokens[1], 30.0);
        assert_eq!(percentile(&usage.all.latencies[1], 99.0), Some(300.0));
        let series: Vec<Series<'_>> = usage
            .groups
            .iter()
            .map(|g| Series {
                name: &g.name,
                values: counts(&g.requests),
            })
            .collect();
        let svg =
            line_chart("requests", "Requests", "requests", &usage.axis(), &series).into_string();
        assert!(svg.contains("data-points=\"120\""), "60 buckets × 2 series");
        assert_eq!(svg.matches("<circle").count(), 120);
        assert!(
            svg.contains("&lt;b&gt;") && !svg.contains("<b>"),
            "series names are escaped"
        );
        let p99 = [Series {
            name: "p99",
            values: bucket_percentile(&usage.all, 99.0),
        }];
        let svg = line_chart("latency", "Latency", "ms", &usage.axis(), &p99).into_string();
        assert!(
            svg.contains("data-points=\"2\""),
            "only buckets with calls: {svg}"
        );
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(120.0), 200.0);
    }
}
