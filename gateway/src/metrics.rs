//! `GET /metrics`: Prometheus text format, fed by the tracing layer's metrics sink (one [`CallRecord`] per call)
//! and the resilience layers' observer (retries, fallbacks, breaker transitions). Breaker states are read from
//! the breakers themselves at scrape time. Nothing else counts calls.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `tower_chat_requests_total` | counter | `provider`, `model`, `outcome` (`completed`, `failed`, `cancelled`) |
//! | `tower_chat_errors_total` | counter | `provider`, `model`, `error_type` (the `ErrorKind` name, `incomplete`) |
//! | `tower_chat_request_duration_seconds` | histogram | `provider`, `model` |
//! | `tower_chat_time_to_first_chunk_seconds` | histogram | `provider`, `model` (streaming calls) |
//! | `tower_chat_tokens_total` | counter | `provider`, `model`, `type` (`input`, `output`) |
//! | `tower_chat_retries_total` | counter | `model` |
//! | `tower_chat_retry_budget_exhausted_total` | counter | `model` |
//! | `tower_chat_fallbacks_total` | counter | `model`, `from`, `to` |
//! | `tower_chat_breaker_transitions_total` | counter | `model`, `target`, `state` |
//! | `tower_chat_breaker_state` | gauge (1 for the current state) | `model`, `target`, `state` |
//!
//! `model` is the model the client asked for (a configured model name with `[upstreams]`). At most
//! [`MAX_SERIES`] distinct provider/model pairs are kept; further ones are counted under `model="other"`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use tower_chat_resilience::{BreakerHandle, BreakerState, ResilienceEvent};
use tower_chat_tracing::{CallRecord, Metrics};

/// The most distinct provider/model label pairs kept (client-chosen model names must not grow memory forever).
pub const MAX_SERIES: usize = 256;

/// Upper bounds of the latency histograms, in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Clone, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }
}

type Pair = (String, String);

#[derive(Default)]
struct Counters {
    requests: BTreeMap<(Pair, &'static str), u64>,
    errors: BTreeMap<(Pair, String), u64>,
    duration: BTreeMap<Pair, Histogram>,
    first_chunk: BTreeMap<Pair, Histogram>,
    tokens: BTreeMap<(Pair, &'static str), u64>,
    retries: BTreeMap<String, u64>,
    budget_exhausted: BTreeMap<String, u64>,
    fallbacks: BTreeMap<(String, String, String), u64>,
    transitions: BTreeMap<(String, String, &'static str), u64>,
}

impl Counters {
    /// The label pair for a call, folded into `other` once too many pairs exist.
    fn pair(&self, provider: &str, model: &str) -> Pair {
        let pair = (provider.to_owned(), model.to_owned());
        if self.duration.contains_key(&pair) || self.duration.len() < MAX_SERIES {
            pair
        } else {
            (provider.to_owned(), "other".to_owned())
        }
    }
}

#[derive(Default)]
struct Inner {
    counters: Mutex<Counters>,
    breakers: Mutex<Vec<(String, BreakerHandle)>>,
}

/// The gateway's Prometheus registry: a [`Metrics`] sink for the tracing layer and an observer for the
/// resilience layers. Clones share it.
#[derive(Clone, Default)]
pub struct PrometheusMetrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusMetrics").finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics for PrometheusMetrics {
    fn record(&self, call: &CallRecord<'_>) {
        let mut c = lock(&self.inner.counters);
        let pair = c.pair(call.provider, call.request_model.unwrap_or("unknown"));
        *c.requests
            .entry((pair.clone(), call.outcome.as_str()))
            .or_default() += 1;
        if let Some(error_type) = call.error_type {
            *c.errors
                .entry((pair.clone(), error_type.to_owned()))
                .or_default() += 1;
        }
        if let Some(usage) = &call.usage {
            *c.tokens.entry((pair.clone(), "input")).or_default() += usage.input_tokens;
            *c.tokens.entry((pair.clone(), "output")).or_default() += usage.output_tokens;
        }
        if let Some(ttfc) = call.time_to_first_chunk {
            c.first_chunk
                .entry(pair.clone())
                .or_default()
                .observe(ttfc.as_secs_f64());
        }
        c.duration
            .entry(pair)
            .or_default()
            .observe(call.duration.as_secs_f64());
    }
}

impl PrometheusMetrics {
    /// An empty registry.
    pub fn new() -> Self {
        PrometheusMetrics::default()
    }

    /// An observer for the resilience layers of one model.
    pub fn observer(&self, model: &str) -> impl Fn(&ResilienceEvent<'_>) + Send + Sync + 'static {
        let inner = self.inner.clone();
        let model = model.to_owned();
        move |event: &ResilienceEvent<'_>| {
            let mut c = lock(&inner.counters);
            match event {
                ResilienceEvent::Retry { .. } => *c.retries.entry(model.clone()).or_default() += 1,
                ResilienceEvent::BudgetExhausted { .. } => {
                    *c.budget_exhausted.entry(model.clone()).or_default() += 1
                }
                ResilienceEvent::Fallback { from, to, .. } => {
                    *c.fallbacks
                        .entry((model.clone(), (*from).to_owned(), (*to).to_owned()))
                        .or_default() += 1
                }
                ResilienceEvent::Breaker { target, state } => {
                    *c.transitions
                        .entry((model.clone(), (*target).to_owned(), state.as_str()))
                        .or_default() += 1
                }
                _ => {}
            }
        }
    }

    /// Report this breaker's state on every scrape.
    pub fn register_breaker(&self, model: &str, handle: BreakerHandle) {
        lock(&self.inner.breakers).push((model.to_owned(), handle));
    }

    /// Report these breakers (model, handle) instead of the registered ones: a reloaded `[upstreams]` brings
    /// its own targets.
    pub fn replace_breakers(&self, breakers: Vec<(String, BreakerHandle)>) {
        *lock(&self.inner.breakers) = breakers;
    }

    /// The registry in Prometheus text exposition format (0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let c = lock(&self.inner.counters);
        let pair = |(provider, model): &Pair| {
            format!(
                "provider=\"{}\",model=\"{}\"",
                escape(provider),
                escape(model)
            )
        };
        header(
            &mut out,
            "tower_chat_requests_total",
            "counter",
            "Chat calls by outcome.",
        );
        for ((p, outcome), n) in &c.requests {
            let _ = writeln!(
                out,
                "tower_chat_requests_total{{{},outcome=\"{outcome}\"}} {n}",
                pair(p)
            );
        }
        header(
            &mut out,
            "tower_chat_errors_total",
            "counter",
            "Failed chat calls by error type.",
        );
        for ((p, kind), n) in &c.errors {
            let _ = writeln!(
                out,
                "tower_chat_errors_total{{{},error_type=\"{}\"}} {n}",
                pair(p),
                escape(kind)
            );
        }
        for (name, help, map) in [
            (
                "tower_chat_request_duration_seconds",
                "From the call to the end of its stream.",
                &c.duration,
            ),
            (
                "tower_chat_time_to_first_chunk_seconds",
                "From the call to its first output event (streaming calls).",
                &c.first_chunk,
            ),
        ] {
            header(&mut out, name, "histogram", help);
            for (p, h) in map {
                let labels = pair(p);
                let mut cumulative = 0;
                for (bound, n) in BUCKETS.iter().zip(h.counts) {
                    cumulative += n;
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
                }
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
                let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
            }
        }
        header(
            &mut out,
            "tower_chat_tokens_total",
            "counter",
            "Tokens used, by direction.",
        );
        for ((p, kind), n) in &c.tokens {
            let _ = writeln!(
                out,
                "tower_chat_tokens_total{{{},type=\"{kind}\"}} {n}",
                pair(p)
            );
        }
        header(
            &mut out,
            "tower_chat_retries_total",
            "counter",
            "Retries made by the retry layer.",
        );
        for (model, n) in &c.retries {
            let _ = writeln!(
                out,
                "tower_chat_retries_total{{model=\"{}\"}} {n}",
                escape(model)
            );
        }
        header(
            &mut out,
            "tower_chat_retry_budget_exhausted_total",
            "counter",
            "Retries not made because the retry budget was spent.",
        );
        for (model, n) in &c.budget_exhausted {
            let _ = writeln!(
                out,
                "tower_chat_retry_budget_exhausted_total{{model=\"{}\"}} {n}",
                escape(model)
            );
        }
        header(
            &mut out,
            "tower_chat_fallbacks_total",
            "counter",
            "Moves from a failed target to the next.",
        );
        for ((model, from, to), n) in &c.fallbacks {
            let _ = writeln!(
                out,
                "tower_chat_fallbacks_total{{model=\"{}\",from=\"{}\",to=\"{}\"}} {n}",
                escape(model),
                escape(from),
                escape(to)
            );
        }
        header(
            &mut out,
            "tower_chat_breaker_transitions_total",
            "counter",
            "Circuit breaker state changes.",
        );
        for ((model, target, state), n) in &c.transitions {
            let _ = writeln!(
                out,
                "tower_chat_breaker_transitions_total{{model=\"{}\",target=\"{}\",state=\"{state}\"}} {n}",
                escape(model),
                escape(target)
            );
        }
        drop(c);
        header(
            &mut out,
            "tower_chat_breaker_state",
            "gauge",
            "Circuit breaker state per target: 1 for the current state.",
        );
        for (model, handle) in lock(&self.inner.breakers).iter() {
            let now = handle.state();
            for state in [
                BreakerState::Closed,
                BreakerState::HalfOpen,
                BreakerState::Open,
            ] {
                let _ = writeln!(
                    out,
                    "tower_chat_breaker_state{{model=\"{}\",target=\"{}\",state=\"{}\"}} {}",
                    escape(model),
                    escape(handle.name()),
                    state.as_str(),
                    u8::from(state == now)
                );
            }
        }
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `GET /metrics`.
pub(crate) fn metrics_route<S: Clone + Send + Sync + 'static>(
    metrics: PrometheusMetrics,
) -> axum::Router<S> {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let body = metrics.render();
            async move {
                (
                    [(
                        http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    body,
                )
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histograms_are_cumulative() {
        let mut h = Histogram::default();
        h.observe(0.003);
        h.observe(0.2);
        h.observe(500.0);
        assert_eq!(h.count, 3);
        assert_eq!(h.counts.iter().sum::<u64>(), 2, "500 s falls only in +Inf");
    }
}
