//! [`Otlp`]: export the call spans and the GenAI metrics over OTLP/HTTP (protobuf), configured by the standard
//! OpenTelemetry environment variables (feature `otlp`).
//!
//! | variable | what |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | base URL of the collector, e.g. `http://127.0.0.1:4318`; `/v1/traces` and `/v1/metrics` are appended. Unset or empty: nothing is exported |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | one signal's full URL (enables that signal alone) |
//! | `OTEL_EXPORTER_OTLP_HEADERS` (and the per-signal `…_TRACES_HEADERS`, `…_METRICS_HEADERS`) | `key=value,…` sent with every export, e.g. an API key |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` | only `http/protobuf` (the default) is supported; anything else is refused |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT` | milliseconds per export request (default 10000) |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource (`service.name` defaults to the name given to [`Otlp::from_env`]) |
//! | `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER` | `none` turns that signal off |
//! | `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL` | the SDK's batch size and delay, the metric export interval (default 60 s) |
//!
//! Spans are batched on the SDK's own thread and metrics exported periodically by another; both hand their
//! requests to the tokio runtime that was current in [`Otlp::from_env`] (a hyper client with rustls and the
//! webpki roots, so `https://` collectors work). [`Otlp::shutdown`] exports what is still buffered: call it when
//! the program ends, outside the runtime's async context (it blocks) while the runtime still runs.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! use tracing_subscriber::util::SubscriberInitExt as _;
//! use tower_chat_tracing::{otlp::Otlp, TracingLayer};
//!
//! let runtime = tokio::runtime::Runtime::new()?;
//! let otlp = {
//!     let _entered = runtime.enter();
//!     Otlp::from_env("my-service")?
//! };
//! tracing_subscriber::registry()
//!     .with(otlp.as_ref().and_then(Otlp::tracing_layer))
//!     .init();
//! let layer = TracingLayer::new().metrics(otlp.as_ref().and_then(Otlp::metrics));
//! // … build the stack with `layer`, serve with `runtime.block_on(..)` …
//! if let Some(otlp) = &otlp {
//!     otlp.shutdown()?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{
    MetricExporter, Protocol, SpanExporter, WithExportConfig, WithHttpConfig,
};
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use opentelemetry_sdk::Resource;
use tower_chat::transport::{HttpTransport, Timeouts};
use tracing_opentelemetry::OpenTelemetryLayer;

use crate::otel::OpenTelemetryMetrics;

/// The meter and tracer name (the instrumentation scope) of everything this crate exports.
pub const SCOPE: &str = "tower-chat";

/// Why [`Otlp::from_env`] or [`Otlp::shutdown`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OtlpError {
    /// [`Otlp::from_env`] was called outside a tokio runtime: the exporters send through the current one.
    NoRuntime,
    /// An environment variable has a value this exporter cannot use (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, a
    /// timeout that is not a number, …).
    Config {
        /// The variable.
        variable: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The TLS setup of the HTTP client failed.
    Tls(tower_chat::ChatError),
    /// The OTLP exporter could not be built (an invalid endpoint URL, …).
    Build(opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting down a provider failed (the collector refused or was unreachable): what was
    /// buffered is lost.
    Shutdown(OTelSdkError),
}

impl fmt::Display for OtlpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OtlpError::NoRuntime => {
                f.write_str("OTLP export needs a tokio runtime: enter one first")
            }
            OtlpError::Config { variable, message } => write!(f, "{variable}: {message}"),
            OtlpError::Tls(e) => write!(f, "OTLP exporter TLS setup failed: {e}"),
            OtlpError::Build(e) => write!(f, "OTLP exporter: {e}"),
            OtlpError::Shutdown(e) => write!(f, "OTLP export at shutdown failed: {e}"),
        }
    }
}

impl std::error::Error for OtlpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OtlpError::Tls(e) => Some(e),
            OtlpError::Build(e) => Some(e),
            OtlpError::Shutdown(e) => Some(e),
            OtlpError::NoRuntime | OtlpError::Config { .. } => None,
        }
    }
}

/// The OTLP/HTTP exporters of the spans and the metrics, built from the standard environment variables (see the
/// [module docs](self)). Hand [`Otlp::tracing_layer`] to your `tracing` subscriber and [`Otlp::metrics`] to
/// [`crate::TracingLayer::metrics`]; call [`Otlp::shutdown`] before the program exits.
pub struct Otlp {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

impl fmt::Debug for Otlp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Otlp")
            .field("traces", &self.traces.is_some())
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

/// A variable's value, `None` when unset or blank.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether a signal is exported: an endpoint for it (its own or the common one), and its `OTEL_*_EXPORTER` is
/// not `none`.
fn enabled(signal_endpoint: &str, exporter: &str) -> bool {
    let endpoint = var(signal_endpoint).or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    endpoint.is_some() && var(exporter).as_deref() != Some("none")
}

impl Otlp {
    /// The exporters the environment asks for, or `None` when it names no OTLP endpoint (export off). Must be
    /// called inside a tokio runtime (`runtime.enter()`), which then carries every export request.
    /// `default_service_name` is the `service.name` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
    /// names one.
    pub fn from_env(default_service_name: &str) -> Result<Option<Otlp>, OtlpError> {
        let traces = enabled("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER");
        let metrics = enabled(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_METRICS_EXPORTER",
        );
        if !traces && !metrics {
            return Ok(None);
        }
        if let Some(protocol) = var("OTEL_EXPORTER_OTLP_PROTOCOL") {
            if protocol != "http/protobuf" {
                return Err(OtlpError::Config {
                    variable: "OTEL_EXPORTER_OTLP_PROTOCOL",
                    message: format!("`{protocol}` is not supported: only `http/protobuf`"),
                });
            }
        }
        let timeout = match var("OTEL_EXPORTER_OTLP_TIMEOUT") {
            None => Duration::from_secs(10),
            Some(ms) => ms
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis)
                .ok_or_else(|| OtlpError::Config {
                    variable: "OTEL_EXPORTER_OTLP_TIMEOUT",
                    message: format!("`{ms}` is not a positive number of milliseconds"),
                })?,
        };
        let client = RuntimeClient::new(timeout)?;
        let resource = resource(default_service_name);
        let traces = if traces {
            let exporter = SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_http_client(client.clone())
                .build()
                .map_err(OtlpError::Build)?;
            Some(
                SdkTracerProvider::builder()
                    .with_resource(resource.clone())
                    .with_batch_exporter(exporter)
                    .build(),
            )
        } else {
            None
        };
        let metrics = if metrics {
            let exporter = MetricExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_http_client(client)
                .build()
                .map_err(OtlpError::Build)?;
            Some(
                SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_reader(PeriodicReader::builder(exporter).build())
                    .build(),
            )
        } else {
            None
        };
        Ok(Some(Otlp { traces, metrics }))
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans for the exporter (`tracing-opentelemetry`:
    /// it reads `otel.name`, `otel.kind` and `otel.status_code`); `None` when traces are not exported. Spans
    /// keep their parents, so a tool loop's `execute_tool` spans are children of the `chat` span. Busy / idle
    /// time is not tracked and the OpenTelemetry context is not attached on every enter (both cost per streamed
    /// event); build your own layer from [`Otlp::tracer_provider`] for either.
    pub fn tracing_layer<S>(&self) -> Option<OpenTelemetryLayer<S, Tracer>>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        let tracer = self.traces.as_ref()?.tracer(SCOPE);
        Some(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                // The call span is entered on every poll, so once per streamed event: timing each enter and exit
                // (`busy_ns` / `idle_ns`, not GenAI attributes) and attaching the OpenTelemetry context to the
                // thread each time (for OpenTelemetry-native code below, which tower-chat has none of) cost
                // ~7x the rest of the per-event work (BENCHMARKS.md).
                .with_tracked_inactivity(false)
                .with_context_activation(false),
        )
    }

    /// The GenAI client histograms on the exporting meter provider, for [`crate::TracingLayer::metrics`];
    /// `None` when metrics are not exported.
    pub fn metrics(&self) -> Option<OpenTelemetryMetrics> {
        use opentelemetry::metrics::MeterProvider as _;
        Some(OpenTelemetryMetrics::new(
            &self.metrics.as_ref()?.meter(SCOPE),
        ))
    }

    /// The tracer provider, when traces are exported (to set as the global provider, or to add processors).
    pub fn tracer_provider(&self) -> Option<&SdkTracerProvider> {
        self.traces.as_ref()
    }

    /// The meter provider, when metrics are exported (for instruments of your own).
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.metrics.as_ref()
    }

    /// Export everything still buffered (the last spans, the metrics since the last period) and stop both
    /// exporters. Blocks until done or the export timeout passed: call it outside async code, while the runtime
    /// given to [`Otlp::from_env`] still runs. Both providers are shut down even when the first fails; the first
    /// failure is returned.
    pub fn shutdown(&self) -> Result<(), OtlpError> {
        let traces = self.traces.as_ref().map(SdkTracerProvider::shutdown);
        let metrics = self.metrics.as_ref().map(SdkMeterProvider::shutdown);
        for result in [traces, metrics].into_iter().flatten() {
            result.map_err(OtlpError::Shutdown)?;
        }
        Ok(())
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own attributes), with
/// `default_service_name` when neither variable names the service.
fn resource(default_service_name: &str) -> Resource {
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.split('=').next().map(str::trim) == Some("service.name"))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder
            .with_attribute(KeyValue::new(
                "service.name",
                default_service_name.to_owned(),
            ))
            .build()
    }
}

/// The most bytes of a collector's answer that are read (it only carries a partial-success note).
const RESPONSE_LIMIT: usize = 64 * 1024;

/// An OTLP HTTP client over hyper on a tokio runtime. The SDK calls it from its own threads with a plain
/// executor, where hyper's I/O and timers do not work: each request runs as a task on the runtime captured at
/// construction, and the caller only waits for the task's result.
#[derive(Clone)]
struct RuntimeClient {
    transport: HttpTransport,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl fmt::Debug for RuntimeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RuntimeClient {
    fn new(timeout: Duration) -> Result<Self, OtlpError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| OtlpError::NoRuntime)?;
        // The leaves' pooled client (rustls with the webpki roots); `timeout` bounds the connect here and the
        // whole exchange in `send_bytes`.
        let timeouts = Timeouts {
            connect: Some(timeout),
            first_byte: None,
            idle: None,
        };
        let transport = HttpTransport::new(timeouts, false).map_err(OtlpError::Tls)?;
        Ok(RuntimeClient {
            transport,
            runtime,
            timeout,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (transport, timeout) = (self.transport.clone(), self.timeout);
        let exchange = async move {
            let response = transport.send_unchecked(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, RESPONSE_LIMIT)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        let task = self.runtime.spawn(async move {
            match tokio::time::timeout(timeout, exchange).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer from the collector within {timeout:?}").into()),
            }
        });
        task.await?
    }
}
