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

/// A series of a line chart: a name and one value per bucket (`None`: no data, the line breaks).
struct Series<'a> {
    name: &'a str,
    values: Vec<Option<f64>>,
}

/// Chart geometry.
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 22.0;
const BOTTOM: f64 = 28.0;

/// A round upper bound for the y axis (1, 2 or 5 × 10ⁿ).
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= max)
        .unwrap_or(10.0 * magnitude)
}

fn axis_number(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// An SVG line chart with its legend; points carry a `<title>` with their value. `data-points` counts the
/// points drawn (what the browser test checks). SVG shapes are written with a closing tag: inside HTML, a
/// foreign element's start tag without one would swallow its siblings.
fn line_chart(
    id: &'static str,
    title: &str,
    unit: &str,
    usage: &Usage,
    series: &[Series<'_>],
) -> Markup {
    let buckets = usage.range.buckets;
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let top = nice_max(max);
    let x = |i: usize| LEFT + (WIDTH - LEFT - RIGHT) * (i as f64 + 0.5) / buckets as f64;
    let y = |v: f64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - v / top);
    let points: usize = series
        .iter()
        .map(|s| s.values.iter().flatten().count())
        .sum();
    let time_label = |i: usize| {
        let label = utc(usage.start + usage.range.bucket * i as u32);
        if usage.range.bucket >= Duration::from_secs(3600) {
            label[5..16].to_owned()
        } else {
            label[11..16].to_owned()
        }
    };
    html! {
        figure class="chart" id=(id) {
            figcaption { (title) }
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img"
                aria-label=(title) data-points=(points) data-series=(series.len()) {
                // Grid and y labels.
                @for step in 0..=4 {
                    @let value = top * f64::from(step) / 4.0;
                    @let at = format!("{:.1}", y(value));
                    line class="grid" x1=(LEFT) x2=(WIDTH - RIGHT) y1=(at) y2=(at) {}
                    text class="axis" x=(LEFT - 6.0) y=(format!("{:.1}", y(value) + 4.0)) text-anchor="end" {
                        (axis_number(value))
                    }
                }
                text class="axis unit" x="4" y="12" { (unit) }
                // Time labels: five, evenly spread.
                @for tick in 0..5 {
                    @let i = tick * (buckets - 1) / 4;
                    text class="axis" x=(format!("{:.1}", x(i))) y=(HEIGHT - 8.0) text-anchor="middle" {
                        (time_label(i))
                    }
                }
                @for (n, s) in series.iter().enumerate() {
                    @let class = SERIES_CLASSES[n % SERIES_CLASSES.len()];
                    // One polyline per run of buckets with data.
                    @for run in runs(&s.values, &x, &y) {
                        polyline class=(class.0) points=(run) {}
                    }
                    @for (i, value) in s.values.iter().enumerate() {
                        @if let Some(v) = value {
                            circle class=(class.1) cx=(format!("{:.1}", x(i))) cy=(format!("{:.1}", y(*v))) r="2.5" {
                                title {
                                    (s.name) ": " (axis_number(*v)) " " (unit) " at "
                                    (utc(usage.start + usage.range.bucket * i as u32)) " UTC"
                                }
                            }
                        }
                    }
                }
            }
            ul class="legend" {
                @for (n, s) in series.iter().enumerate() {
                    li { span class=(SERIES_CLASSES[n % SERIES_CLASSES.len()].2) {} (s.name) }
                }
            }
        }
    }
}

/// The `points` of each run of buckets that have a value.
fn runs(values: &[Option<f64>], x: &impl Fn(usize) -> f64, y: &impl Fn(f64) -> f64) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    for (i, value) in values.iter().enumerate() {
        match value {
            Some(v) => {
                if !run.is_empty() {
                    run.push(' ');
                }
                run.push_str(&format!("{:.1},{:.1}", x(i), y(*v)));
            }
            None if !run.is_empty() => runs.push(std::mem::take(&mut run)),
            None => {}
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// Per series: line class, point class, legend swatch class (colours live in console.css).
const SERIES_CLASSES: [(&str, &str, &str); 6] = [
    ("line s0", "point s0", "swatch s0"),
    ("line s1", "point s1", "swatch s1"),
    ("line s2", "point s2", "swatch s2"),
    ("line s3", "point s3", "swatch s3"),
    ("line s4", "point s4", "swatch s4"),
    ("line s5", "point s5", "swatch s5"),
];

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
        (line_chart("requests", &format!("Model calls by {by_name}"), "model calls", &usage, &requests))
        (line_chart("tokens", &format!("Tokens (input + output) by {by_name}"), "tokens", &usage, &tokens))
        (line_chart("latency", "Latency percentiles, all model calls", "ms", &usage, &percentiles))
        (line_chart("latency-by", &format!("p99 latency by {by_name}"), "ms", &usage, &p99))
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
        let svg = line_chart("requests", "Requests", "requests", &usage, &series).into_string();
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
        let svg = line_chart("latency", "Latency", "ms", &usage, &p99).into_string();
        assert!(
            svg.contains("data-points=\"2\""),
            "only buckets with calls: {svg}"
        );
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(120.0), 200.0);
    }
}
