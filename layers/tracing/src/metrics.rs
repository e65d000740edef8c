//! The metrics a call produces, and the [`Metrics`] sink that records them.
//!
//! The layer measures every call once, when it ends, and hands a [`CallRecord`] to its [`Metrics`] sink. The
//! default sink, [`NoMetrics`], records nothing (the span already carries every figure); a closure
//! `Fn(&CallRecord)` is a sink, and with the `opentelemetry` feature `OpenTelemetryMetrics` records the
//! OpenTelemetry GenAI client histograms. `Option<M>` is a sink that may be off, `(A, B)` hands every call to both.

use std::fmt;
use std::time::Duration;

use tower_chat::Usage;

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The stream ended after a [`tower_chat::ChatEvent::Finish`] (or was dropped after one).
    Completed,
    /// The service or the stream returned an error, or the stream ended without a finish event.
    Failed,
    /// The call was dropped before it finished, or failed with [`tower_chat::ErrorKind::Cancelled`].
    Cancelled,
}

impl Outcome {
    /// The value of the span's `tower_chat.outcome` attribute: `completed`, `failed` or `cancelled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The measurements and attributes of one finished call, as the GenAI metric conventions name them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallRecord<'a> {
    /// `gen_ai.operation.name`: always `chat`.
    pub operation: &'static str,
    /// `gen_ai.provider.name`.
    pub provider: &'a str,
    /// `gen_ai.request.model`, when known (the request's model, or the service's default model).
    pub request_model: Option<&'a str>,
    /// `gen_ai.response.model`, when the provider reported it.
    pub response_model: Option<&'a str>,
    /// `server.address`, from the service's endpoint.
    pub server_address: Option<&'a str>,
    /// `server.port`, from the service's endpoint.
    pub server_port: Option<u16>,
    /// How the call ended.
    pub outcome: Outcome,
    /// `error.type`: the [`tower_chat::ErrorKind`] name for failures, `cancelled` for cancellations, `incomplete`
    /// for a stream that ended without a finish event; `None` for a completed call.
    pub error_type: Option<&'a str>,
    /// `gen_ai.client.operation.duration`: from the service call to the end of the stream (or the finish event, when
    /// the stream was dropped after it).
    pub duration: Duration,
    /// `gen_ai.client.operation.time_to_first_chunk`: from the service call to the first event carrying model
    /// output (text, reasoning or a tool call). `None` for non-streaming requests (`options.stream == false`), as
    /// the convention asks, and for calls that produced no output.
    pub time_to_first_chunk: Option<Duration>,
    /// The tokens used (the sum of every usage event); `None` when the stream reported none.
    pub usage: Option<Usage>,
}

/// A sink for [`CallRecord`]s. Called once per call, from the task that ended it, so it must be quick; it is also
/// called from `Drop` when a call is dropped, so it must not panic.
pub trait Metrics: Send + Sync + 'static {
    /// Record one finished call.
    fn record(&self, call: &CallRecord<'_>);
}

/// Records nothing: the default, for when the span's attributes are enough.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {
    fn record(&self, _call: &CallRecord<'_>) {}
}

impl<F> Metrics for F
where
    F: Fn(&CallRecord<'_>) + Send + Sync + 'static,
{
    fn record(&self, call: &CallRecord<'_>) {
        self(call)
    }
}

/// An optional sink: `None` records nothing (e.g. `Otlp::metrics()` when OTLP export is off), at no cost.
impl<M: Metrics> Metrics for Option<M> {
    fn record(&self, call: &CallRecord<'_>) {
        if let Some(metrics) = self {
            metrics.record(call);
        }
    }
}

/// Two sinks, each given every call (a Prometheus registry and the OpenTelemetry histograms, say).
impl<A: Metrics, B: Metrics> Metrics for (A, B) {
    fn record(&self, call: &CallRecord<'_>) {
        self.0.record(call);
        self.1.record(call);
    }
}
