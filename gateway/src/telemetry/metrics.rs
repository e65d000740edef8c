//! `GET /metrics`: the OpenMetrics text format, written by `prometheus-client`, fed by the tracing layer's metrics
//! sink (one [`CallRecord`] per call) and the resilience layers' observer (retries, fallbacks, breaker
//! transitions). Breaker states and stale connections are read at scrape time by a `Collector`. Nothing else
//! counts calls. Own code remains for what the library leaves to its user: which model names may become label
//! values (a family keeps every label set it is given) and escaping label values (it writes them as given).
//!
//! | series | type | labels |
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
//! | `tower_chat_guardrail_verdicts_total` | counter | `check`, `action` (`block`, `redact`, `flag`), `stage` (`request`, `tool_call`, `tool_result`, `output`) |
//!
//! `model` is the model the client asked for, when it may be a label value, else `other`:
//!
//! - with `[upstreams]`, only the configured model names are label values (a reload replaces them), so a
//!   client cannot add a series at all;
//! - with a single `--upstream`, any model may be asked for, so a name is a label value only while it is at most
//!   [`MAX_LABEL_BYTES`] of `[A-Za-z0-9._:/@+-]` and fewer than [`MAX_SERIES`] names are in use.
//!
//! `check` is a check name of the `[guardrail]` policies (fixed at start-up), else `other`.
//!
//! A scrape is therefore bounded however many or however long the names clients send (the bound is measured
//! by the `a_scrape_is_bounded_whatever_the_model_names` test and stated in BENCHMARKS.md).
//!
//! By default `/metrics` is served on the gateway's own listener without a key, as Prometheus scrapes
//! expect. `--metrics-listen ADDR` serves it on another address instead (and the main listener answers 404),
//! `--metrics-key-env VAR` requires `Authorization: Bearer <the variable's value>` (Prometheus'
//! `authorization.credentials_file`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tower_chat::transport::StaleConnections;
use tower_chat_resilience::{BreakerHandle, BreakerState, ResilienceEvent};
use tower_chat_tracing::{CallRecord, Metrics};

pub use super::metrics_key::MetricsKey;

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

/// A label value, escaped as the text format wants it when encoded (`prometheus-client` writes label values
/// as given). Shared by every series that carries it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Label(Arc<str>);

/// Lets the sets of names be searched by `&str` (a label hashes as its text).
impl std::borrow::Borrow<str> for Label {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Label {
    fn new(value: &str) -> Self {
        Label(Arc::from(value))
    }
}

impl EncodeLabelValue for Label {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        use std::fmt::Write as _;
        let mut rest = &*self.0;
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: Label,
    model: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    provider: Label,
    model: Label,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    provider: Label,
    model: Label,
    error_type: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: Label,
    model: Label,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    model: Label,
    from: Label,
    to: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabels {
    model: Label,
    target: Label,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    check: Label,
    action: &'static str,
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: Label,
}

type Histograms = Family<CallLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Which model names may be label values: the part `prometheus-client` leaves to its user, since a family keeps
/// every label set it is given.
struct ModelLabelPolicy {
    /// `Some`: only these model names are label values (`[upstreams]`).
    configured: Option<HashSet<Label>>,
    /// Without configured names: the names admitted so far.
    seen: HashSet<Label>,
    /// The providers' names (the leaves': a handful).
    providers: Vec<Label>,
    /// `other`, allocated once.
    other: Label,
}

impl Default for ModelLabelPolicy {
    fn default() -> Self {
        ModelLabelPolicy {
            configured: None,
            seen: HashSet::new(),
            providers: Vec::new(),
            other: Label::new(OTHER),
        }
    }
}

impl ModelLabelPolicy {
    /// The labels of a call: the model's name where it may be a label value, else `other`. Allocates only for a
    /// name or provider seen the first time.
    fn labels(&mut self, provider: &str, model: &str) -> CallLabels {
        let provider = match self.providers.iter().find(|p| &*p.0 == provider) {
            Some(known) => known.clone(),
            None => {
                let label = Label::new(provider);
                self.providers.push(label.clone());
                label
            }
        };
        let model = match &self.configured {
            Some(names) => names.get(model).cloned(),
            None => self.first_seen(model),
        };
        CallLabels {
            provider,
            model: model.unwrap_or_else(|| self.other.clone()),
        }
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
        let label = Label::new(model);
        self.seen.insert(label.clone());
        Some(label)
    }
}

/// The series the gateway counts, each a `prometheus-client` family registered once.
#[derive(Clone)]
struct Series {
    requests: Family<OutcomeLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Histograms,
    first_chunk: Histograms,
    tokens: Family<TokenLabels, Counter>,
    retries: Family<ModelLabels, Counter>,
    budget_exhausted: Family<ModelLabels, Counter>,
    fallbacks: Family<FallbackLabels, Counter>,
    transitions: Family<BreakerLabels, Counter>,
    verdicts: Family<VerdictLabels, Counter>,
}

impl Series {
    fn new() -> Self {
        Series {
            requests: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            first_chunk: Family::new_with_constructor(latency_histogram),
            tokens: Family::default(),
            retries: Family::default(),
            budget_exhausted: Family::default(),
            fallbacks: Family::default(),
            transitions: Family::default(),
            verdicts: Family::default(),
        }
    }

    fn register(&self, registry: &mut Registry) {
        let series = self.clone();
        registry.register(
            "tower_chat_requests",
            "Chat calls by outcome",
            series.requests,
        );
        registry.register(
            "tower_chat_errors",
            "Failed chat calls by error type",
            series.errors,
        );
        registry.register_with_unit(
            "tower_chat_request_duration",
            "From the call to the end of its stream",
            Unit::Seconds,
            series.duration,
        );
        registry.register_with_unit(
            "tower_chat_time_to_first_chunk",
            "From the call to its first output event (streaming calls)",
            Unit::Seconds,
            series.first_chunk,
        );
        registry.register(
            "tower_chat_tokens",
            "Tokens used, by direction",
            series.tokens,
        );
        registry.register(
            "tower_chat_retries",
            "Retries made by the retry layer",
            series.retries,
        );
        registry.register(
            "tower_chat_retry_budget_exhausted",
            "Retries not made because the retry budget was spent",
            series.budget_exhausted,
        );
        registry.register(
            "tower_chat_fallbacks",
            "Moves from a failed target to the next",
            series.fallbacks,
        );
        registry.register(
            "tower_chat_breaker_transitions",
            "Circuit breaker state changes",
            series.transitions,
        );
        registry.register(
            "tower_chat_guardrail_verdicts",
            "Content policy verdicts by check, action and stage",
            series.verdicts,
        );
    }
}

/// What is read at scrape time rather than counted: the breakers' states and the leaves' stale connections.
#[derive(Default)]
struct Sampled {
    breakers: Mutex<Vec<(String, BreakerHandle)>>,
    /// The leaves' counts of stale pooled connections.
    stale: Mutex<Vec<(String, StaleConnections)>>,
}

impl std::fmt::Debug for Sampled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampled").finish_non_exhaustive()
    }
}

impl Collector for Sampled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let breakers = lock(&self.breakers);
        let mut family = encoder.encode_descriptor(
            "tower_chat_breaker_state",
            "Circuit breaker state per target: 1 for the current state",
            None,
            MetricType::Gauge,
        )?;
        for (model, handle) in breakers.iter() {
            let now = handle.state();
            for state in [
                BreakerState::Closed,
                BreakerState::HalfOpen,
                BreakerState::Open,
            ] {
                let labels = BreakerLabels {
                    model: Label::new(model),
                    target: Label::new(handle.name()),
                    state: state.as_str(),
                };
                ConstGauge::new(i64::from(state == now)).encode(family.encode_family(&labels)?)?;
            }
        }
        drop(breakers);
        let stale = lock(&self.stale);
        let mut family = encoder.encode_descriptor(
            "tower_chat_upstream_stale_connections",
            "Pooled upstream connections found closed before a request was written to them \
             (the request went on a new connection)",
            None,
            MetricType::Counter,
        )?;
        for (target, count) in stale.iter() {
            let labels = TargetLabels {
                target: Label::new(target),
            };
            ConstCounter::new(count.get()).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

struct Inner {
    policy: Mutex<ModelLabelPolicy>,
    /// The guardrail check names that may be label values (the configured policies'), and `other`.
    guardrail_checks: Mutex<(HashSet<Label>, Label)>,
    series: Series,
    sampled: Arc<Sampled>,
    registry: Registry,
}

impl Default for Inner {
    fn default() -> Self {
        let series = Series::new();
        let sampled = Arc::new(Sampled::default());
        let mut registry = Registry::default();
        series.register(&mut registry);
        registry.register_collector(Box::new(sampled.clone()));
        Inner {
            policy: Mutex::default(),
            guardrail_checks: Mutex::new((HashSet::new(), Label::new(OTHER))),
            series,
            sampled,
            registry,
        }
    }
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
        let labels =
            lock(&self.inner.policy).labels(call.provider, call.request_model.unwrap_or(OTHER));
        let series = &self.inner.series;
        series
            .requests
            .get_or_create(&OutcomeLabels {
                provider: labels.provider.clone(),
                model: labels.model.clone(),
                outcome: call.outcome.as_str(),
            })
            .inc();
        if let Some(error_type) = call.error_type {
            series
                .errors
                .get_or_create(&ErrorLabels {
                    provider: labels.provider.clone(),
                    model: labels.model.clone(),
                    error_type: Label::new(error_type),
                })
                .inc();
        }
        if let Some(usage) = &call.usage {
            for (kind, tokens) in [
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
            ] {
                series
                    .tokens
                    .get_or_create(&TokenLabels {
                        provider: labels.provider.clone(),
                        model: labels.model.clone(),
                        r#type: kind,
                    })
                    .inc_by(tokens);
            }
        }
        if let Some(ttfc) = call.time_to_first_chunk {
            series
                .first_chunk
                .get_or_create(&labels)
                .observe(ttfc.as_secs_f64());
        }
        series
            .duration
            .get_or_create(&labels)
            .observe(call.duration.as_secs_f64());
    }
}

impl PrometheusMetrics {
    /// An empty registry.
    pub fn new() -> Self {
        PrometheusMetrics::default()
    }

    /// The guardrail check names the verdict counter's `check` label may take (others count as `other`).
    pub fn admit_guardrail_checks(&self, names: impl IntoIterator<Item = String>) {
        let mut admitted = lock(&self.inner.guardrail_checks);
        admitted
            .0
            .extend(names.into_iter().map(|name| Label::new(&name)));
    }

    /// Count one content policy verdict.
    pub fn guardrail_verdict(
        &self,
        check: &str,
        action: tower_chat::GuardrailAction,
        stage: tower_chat::GuardrailStage,
    ) {
        let check = {
            let admitted = lock(&self.inner.guardrail_checks);
            admitted.0.get(check).unwrap_or(&admitted.1).clone()
        };
        self.inner
            .series
            .verdicts
            .get_or_create(&VerdictLabels {
                check,
                action: action.as_str(),
                stage: stage.as_str(),
            })
            .inc();
    }

    /// An observer for the resilience layers of one model.
    pub fn observer(&self, model: &str) -> impl Fn(&ResilienceEvent<'_>) + Send + Sync + 'static {
        let series = self.inner.series.clone();
        let model = Label::new(model);
        move |event: &ResilienceEvent<'_>| {
            let labels = ModelLabels {
                model: model.clone(),
            };
            match event {
                ResilienceEvent::Retry { .. } => {
                    series.retries.get_or_create(&labels).inc();
                }
                ResilienceEvent::BudgetExhausted { .. } => {
                    series.budget_exhausted.get_or_create(&labels).inc();
                }
                ResilienceEvent::Fallback { from, to, .. } => {
                    series
                        .fallbacks
                        .get_or_create(&FallbackLabels {
                            model: labels.model,
                            from: Label::new(from),
                            to: Label::new(to),
                        })
                        .inc();
                }
                ResilienceEvent::Breaker { target, state } => {
                    series
                        .transitions
                        .get_or_create(&BreakerLabels {
                            model: labels.model,
                            target: Label::new(target),
                            state: state.as_str(),
                        })
                        .inc();
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
        lock(&self.inner.policy).configured =
            Some(names.into_iter().map(|n| Label::new(n.as_ref())).collect());
    }

    /// Report this breaker's state on every scrape.
    pub fn register_breaker(&self, model: &str, handle: BreakerHandle) {
        lock(&self.inner.sampled.breakers).push((model.to_owned(), handle));
    }

    /// Report these breakers (model, handle) instead of the registered ones: a reloaded `[upstreams]` brings
    /// its own targets.
    pub fn replace_breakers(&self, breakers: Vec<(String, BreakerHandle)>) {
        *lock(&self.inner.sampled.breakers) = breakers;
    }

    /// Report these leaves' counts of pooled connections found closed by the upstream before a request was
    /// written to them (each such request went on a new connection), by target name; replaces the earlier ones.
    pub fn replace_upstream_connections(&self, stale: Vec<(String, StaleConnections)>) {
        *lock(&self.inner.sampled.stale) = stale;
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a `String` cannot fail, and every label value is escaped by `Label`.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}

#[cfg(test)]
mod tests;
