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
//! | `tower_chat_upstream_stale_connections_total` | counter | `target` (`upstream` without `[upstreams]`) |
//!
//! `model` is the model the client asked for, when it may be a label value, else `other`:
//!
//! - with `[upstreams]`, only the configured model names are label values (a reload replaces them), so a
//!   client cannot add a series at all;
//! - with a single `--upstream`, any model may be asked for, so a name is a label value only while it is at most
//!   [`MAX_LABEL_BYTES`] of `[A-Za-z0-9._:/@+-]` and fewer than [`MAX_SERIES`] names are in use.
//!
//! A scrape is therefore bounded however many or however long the names clients send (the bound is measured
//! by the `a_scrape_is_bounded_whatever_the_model_names` test and stated in BENCHMARKS.md).
//!
//! By default `/metrics` is served on the gateway's own listener without a key, as Prometheus scrapes
//! expect. `--metrics-listen ADDR` serves it on another address instead (and the main listener answers 404),
//! `--metrics-key-env VAR` requires `Authorization: Bearer <the variable's value>` (Prometheus'
//! `authorization.credentials_file`).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::response::IntoResponse;
use tower_chat::transport::StaleConnections;
use tower_chat_resilience::{BreakerHandle, BreakerState, ResilienceEvent};
use tower_chat_tracing::{CallRecord, Metrics};

/// The most distinct provider/model label pairs kept (client-chosen model names must not grow memory forever).
pub const MAX_SERIES: usize = 256;

/// The longest model name used as a label value without `[upstreams]`; longer names count as `other`.
pub const MAX_LABEL_BYTES: usize = 128;

/// The label value of every model name that may not be one.
const OTHER: &str = "other";

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

/// Label values are shared by every map that keys on them.
type Label = Arc<str>;
type Pair = (Label, Label);

struct Counters {
    /// `Some`: only these model names are label values (`[upstreams]`).
    configured: Option<HashSet<Label>>,
    /// Without configured names: the names admitted so far.
    seen: HashSet<Label>,
    /// The providers' names (the leaves': a handful).
    providers: Vec<Label>,
    /// `other`, allocated once.
    other: Label,
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

impl Default for Counters {
    fn default() -> Self {
        Counters {
            configured: None,
            seen: HashSet::new(),
            providers: Vec::new(),
            other: Label::from(OTHER),
            requests: BTreeMap::new(),
            errors: BTreeMap::new(),
            duration: BTreeMap::new(),
            first_chunk: BTreeMap::new(),
            tokens: BTreeMap::new(),
            retries: BTreeMap::new(),
            budget_exhausted: BTreeMap::new(),
            fallbacks: BTreeMap::new(),
            transitions: BTreeMap::new(),
        }
    }
}

impl Counters {
    /// The label pair for a call: the model's name where it may be a label value, else `other`. Allocates only
    /// for a name or provider seen the first time.
    fn pair(&mut self, provider: &str, model: &str) -> Pair {
        let provider = match self.providers.iter().find(|p| &***p == provider) {
            Some(known) => known.clone(),
            None => {
                let label = Label::from(provider);
                self.providers.push(label.clone());
                label
            }
        };
        let model = match &self.configured {
            Some(names) => names.get(model).cloned(),
            None => self.first_seen(model),
        };
        (provider, model.unwrap_or_else(|| self.other.clone()))
    }

    /// Without configured names: a short, plain name, while fewer than [`MAX_SERIES`] names are in use.
    fn first_seen(&mut self, model: &str) -> Option<Label> {
        if let Some(known) = self.seen.get(model) {
            return Some(known.clone());
        }
        let plain = !model.is_empty()
            && model.len() <= MAX_LABEL_BYTES
            && model
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:/@+-".contains(&b));
        if !plain || model == OTHER || self.seen.len() >= MAX_SERIES - 1 {
            return None;
        }
        let label = Label::from(model);
        self.seen.insert(label.clone());
        Some(label)
    }
}

#[derive(Default)]
struct Inner {
    counters: Mutex<Counters>,
    breakers: Mutex<Vec<(String, BreakerHandle)>>,
    /// The leaves' counts of stale pooled connections (read at scrape time).
    stale: Mutex<Vec<(String, StaleConnections)>>,
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
        let pair = c.pair(call.provider, call.request_model.unwrap_or(OTHER));
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

    /// Only these model names are label values from now on (`[upstreams]`' models; a reload calls it again).
    /// Series already counted under other names stay.
    pub fn label_models<I, S>(&self, names: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        lock(&self.inner.counters).configured =
            Some(names.into_iter().map(|n| Label::from(n.as_ref())).collect());
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

    /// Report these leaves' counts of pooled connections found closed by the upstream before a request was
    /// written to them (each such request went on a new connection), by target name; replaces the earlier ones.
    pub fn replace_upstream_connections(&self, stale: Vec<(String, StaleConnections)>) {
        *lock(&self.inner.stale) = stale;
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
        header(
            &mut out,
            "tower_chat_upstream_stale_connections_total",
            "counter",
            "Pooled upstream connections found closed before a request was written to them \
             (the request went on a new connection).",
        );
        for (target, stale) in lock(&self.inner.stale).iter() {
            let _ = writeln!(
                out,
                "tower_chat_upstream_stale_connections_total{{target=\"{}\"}} {}",
                escape(target),
                stale.get()
            );
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

/// The key `/metrics` requires (`--metrics-key-env`): only its digest is kept.
#[derive(Clone)]
pub struct MetricsKey {
    digest: [u8; 32],
}

impl std::fmt::Debug for MetricsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsKey(..)")
    }
}

impl MetricsKey {
    /// The key held by the environment variable `var`. Unset, empty, or not a printable header value: an error
    /// naming the variable, so a gateway meant to protect its metrics never starts with them open.
    pub fn from_env(var: &str) -> Result<Self, String> {
        let key = std::env::var(var).unwrap_or_default();
        let key = key.trim();
        if key.is_empty() {
            return Err(format!(
                "--metrics-key-env {var}: the variable is unset or empty; set it to the key Prometheus sends"
            ));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "--metrics-key-env {var}: the key must be visible ASCII without spaces"
            ));
        }
        Ok(MetricsKey::new(key))
    }

    /// A key given directly.
    pub fn new(key: &str) -> Self {
        MetricsKey {
            digest: crate::auth::digest(key),
        }
    }

    fn admits(&self, headers: &http::HeaderMap) -> bool {
        use subtle::ConstantTimeEq;
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            });
        token.is_some_and(|token| bool::from(crate::auth::digest(token.trim()).ct_eq(&self.digest)))
    }
}

/// `GET /metrics`, open, or for callers presenting `key`.
pub(crate) fn metrics_route<S: Clone + Send + Sync + 'static>(
    metrics: PrometheusMetrics,
    key: Option<MetricsKey>,
) -> axum::Router<S> {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: http::HeaderMap| {
            let admitted = key.as_ref().is_none_or(|key| key.admits(&headers));
            let body = admitted.then(|| metrics.render());
            async move {
                match body {
                    Some(body) => (
                        [(
                            http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        body,
                    )
                        .into_response(),
                    None => {
                        let mut response = crate::error::ApiError::unauthorized(
                            "/metrics needs `Authorization: Bearer <key>` with the key of --metrics-key-env",
                        )
                        .into_response();
                        response.headers_mut().insert(
                            http::header::WWW_AUTHENTICATE,
                            http::HeaderValue::from_static("Bearer"),
                        );
                        response
                    }
                }
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
    fn only_plain_short_names_become_label_values() {
        let mut c = Counters::default();
        let model = |c: &mut Counters, name: &str| c.pair("openai", name).1.to_string();
        assert_eq!(model(&mut c, "gpt-4o-mini"), "gpt-4o-mini");
        assert_eq!(
            model(&mut c, "org/model:tag@v1.5+x"),
            "org/model:tag@v1.5+x"
        );
        for refused in [
            "",
            "other",
            "with space",
            "quote\"",
            "line\nbreak",
            "é",
            &"m".repeat(MAX_LABEL_BYTES + 1),
        ] {
            assert_eq!(model(&mut c, refused), OTHER, "{refused:?}");
        }
        assert_eq!(
            model(&mut c, &"m".repeat(MAX_LABEL_BYTES)).len(),
            MAX_LABEL_BYTES
        );
        c.configured = Some([Label::from("smart")].into_iter().collect());
        assert_eq!(model(&mut c, "smart"), "smart");
        assert_eq!(model(&mut c, "gpt-4o-mini"), OTHER, "configured names only");
    }

    /// Every series a name can have, recorded by the tracing layer as the gateway's stack does: a completed
    /// streamed call (both histograms, tokens) and a failed call of each error kind.
    async fn record_every_series(metrics: &PrometheusMetrics, provider: &'static str, model: &str) {
        use tower::{Layer, ServiceExt};
        use tower_chat::{
            ChatError, ChatEvent, ChatRequest, ChatStreamExt, ErrorKind, FinishReason,
        };
        let failures = [
            ErrorKind::InvalidRequest,
            ErrorKind::Authentication,
            ErrorKind::Upstream,
            ErrorKind::Connection,
            ErrorKind::Protocol,
            ErrorKind::Cancelled,
            ErrorKind::Tool,
            ErrorKind::Other,
        ];
        for failure in std::iter::once(None).chain(failures.into_iter().map(Some)) {
            let service = tower::service_fn(move |_: ChatRequest| {
                let failure = failure.clone();
                async move {
                    match failure {
                        Some(kind) => Err(ChatError::new(kind, "scripted")),
                        None => Ok(tower_chat::test_server::scripted_stream(
                            tower_chat::test_server::Delivery::AllAtOnce,
                            vec![
                                Ok(ChatEvent::TextDelta { text: "hi".into() }),
                                Ok(ChatEvent::Usage {
                                    usage: tower_chat::Usage {
                                        input_tokens: 3,
                                        output_tokens: 4,
                                        ..Default::default()
                                    },
                                }),
                                Ok(ChatEvent::Finish {
                                    reason: FinishReason::Stop,
                                }),
                            ],
                        )),
                    }
                }
            });
            let stack = tower_chat_tracing::TracingLayer::new()
                .provider(provider)
                .metrics(metrics.clone())
                .layer(service);
            let mut request = ChatRequest::new(vec![tower_chat::Message::user("hi")]).model(model);
            request.options.stream = true;
            if let Ok(stream) = stack.oneshot(request).await {
                let _ = stream.collect_response().await;
            }
        }
    }

    #[tokio::test]
    async fn a_scrape_is_bounded_whatever_the_model_names() {
        let metrics = PrometheusMetrics::new();
        // The worst a client can do without `[upstreams]`: huge names first, then the longest admitted names,
        // every series of each, on two providers; then more names, which must all land in `other`.
        for i in 0..8 {
            record_every_series(&metrics, "openai", &format!("{i}{}", "m".repeat(100_000))).await;
        }
        for i in 0..MAX_SERIES {
            let name = format!("{i:0>width$}", width = MAX_LABEL_BYTES);
            for provider in ["openai", "anthropic"] {
                record_every_series(&metrics, provider, &name).await;
            }
        }
        let scrape = metrics.render();
        let (full, series) = (scrape.len(), scrape.lines().count());
        for i in 0..64 {
            record_every_series(&metrics, "openai", &format!("late-{i}")).await;
        }
        // No new series: only the `other` series' values grow (a count or a duration sum may gain a digit).
        let scrape = metrics.render();
        assert_eq!(
            scrape.lines().count(),
            series,
            "new series after the label cap"
        );
        let after = scrape.len();
        assert!(after <= full + 1024, "{full} -> {after} bytes");
        // The bound stated in BENCHMARKS.md.
        println!("a full scrape: {full} bytes");
        assert!(full < 6 << 20, "{full} bytes");
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
