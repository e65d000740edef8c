//! [`OpenTelemetryMetrics`]: the GenAI client histograms, recorded through the OpenTelemetry metrics API.

use std::fmt;

use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::KeyValue;

use crate::metrics::{CallRecord, Metrics};

/// `gen_ai.client.operation.duration` (seconds).
pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// `gen_ai.client.operation.time_to_first_chunk` (seconds).
pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// `gen_ai.client.token.usage` (tokens, with `gen_ai.token.type` = `input` / `output`).
pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";

/// The bucket boundaries the conventions advise for the duration histograms, in seconds.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// The bucket boundaries the conventions advise for token counts: powers of 4 from 1 to 4^13.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// Records the OpenTelemetry GenAI client metrics (feature `opentelemetry`):
///
/// | metric | unit | when |
/// |---|---|---|
/// | `gen_ai.client.operation.duration` | `s` | every call, with `error.type` unless it completed |
/// | `gen_ai.client.operation.time_to_first_chunk` | `s` | streaming calls that produced output |
/// | `gen_ai.client.token.usage` | `{token}` | calls that reported usage, once per `gen_ai.token.type` |
///
/// Every point carries `gen_ai.operation.name`, `gen_ai.provider.name` and, when known, `gen_ai.request.model`,
/// `gen_ai.response.model`, `server.address` and `server.port`.
///
/// ```
/// use tower_chat_tracing::{OpenTelemetryMetrics, TracingLayer};
///
/// let meter = opentelemetry::global::meter("my-app");
/// let layer = TracingLayer::new().metrics(OpenTelemetryMetrics::new(&meter));
/// ```
#[derive(Clone)]
pub struct OpenTelemetryMetrics {
    duration: Histogram<f64>,
    time_to_first_chunk: Histogram<f64>,
    token_usage: Histogram<u64>,
}

impl OpenTelemetryMetrics {
    /// Create the three histograms on `meter`.
    pub fn new(meter: &Meter) -> Self {
        OpenTelemetryMetrics {
            duration: meter
                .f64_histogram(OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration.")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            time_to_first_chunk: meter
                .f64_histogram(TIME_TO_FIRST_CHUNK)
                .with_unit("s")
                .with_description("Time to receive the first chunk of a streaming response.")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            token_usage: meter
                .u64_histogram(TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
        }
    }

    /// The histograms on the global meter provider's `tower-chat` meter.
    pub fn global() -> Self {
        OpenTelemetryMetrics::new(&opentelemetry::global::meter("tower-chat"))
    }
}

impl fmt::Debug for OpenTelemetryMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenTelemetryMetrics")
            .finish_non_exhaustive()
    }
}

impl Metrics for OpenTelemetryMetrics {
    fn record(&self, call: &CallRecord<'_>) {
        let mut attributes = Vec::with_capacity(8);
        attributes.push(KeyValue::new("gen_ai.operation.name", call.operation));
        attributes.push(KeyValue::new(
            "gen_ai.provider.name",
            call.provider.to_owned(),
        ));
        if let Some(model) = call.request_model {
            attributes.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
        }
        if let Some(model) = call.response_model {
            attributes.push(KeyValue::new("gen_ai.response.model", model.to_owned()));
        }
        if let Some(address) = call.server_address {
            attributes.push(KeyValue::new("server.address", address.to_owned()));
        }
        if let Some(port) = call.server_port {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }

        if let Some(ttfc) = call.time_to_first_chunk {
            self.time_to_first_chunk
                .record(ttfc.as_secs_f64(), &attributes);
        }
        if let Some(usage) = call.usage {
            let base = attributes.len();
            attributes.push(KeyValue::new("gen_ai.token.type", "input"));
            self.token_usage.record(usage.input_tokens, &attributes);
            attributes[base] = KeyValue::new("gen_ai.token.type", "output");
            self.token_usage.record(usage.output_tokens, &attributes);
            attributes.truncate(base);
        }
        if let Some(error_type) = call.error_type {
            attributes.push(KeyValue::new("error.type", error_type.to_owned()));
        }
        self.duration
            .record(call.duration.as_secs_f64(), &attributes);
    }
}
