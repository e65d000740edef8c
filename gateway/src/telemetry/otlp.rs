//! Logging and OpenTelemetry export of the gateway program: the `tracing` subscriber (log lines filtered by
//! `RUST_LOG`) and, when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or a per-signal endpoint) is set, OTLP/HTTP
//! export of the stack's spans (`chat {model}` per client request, `execute_tool {name}` inside it) and of the
//! GenAI client metrics (`gen_ai.client.operation.duration`, `gen_ai.client.token.usage`, …), flushed at
//! shutdown. See `tower_chat_tracing::otlp` for every variable it reads (cargo feature `otlp`, on by default).
//!
//! Export is independent of `RUST_LOG`: the exporter takes spans at `INFO` and above whatever the log level.
//! Message contents travel only with `--record-content` (or
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

use crate::config::Config;

/// The `service.name` of the gateway's telemetry unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` says
/// otherwise.
pub const SERVICE_NAME: &str = "tower-chat-gateway";

/// What [`install`] set up, to be shut down when the program ends.
#[derive(Debug)]
pub struct Telemetry {
    #[cfg(feature = "otlp")]
    otlp: Option<tower_chat_tracing::otlp::Otlp>,
}

impl Telemetry {
    /// Export what is still buffered (the last spans, the metrics since the last period). Blocks: call it
    /// outside async code, while the runtime [`install`] ran in still runs.
    pub fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(otlp) = self.otlp {
            match otlp.shutdown() {
                Ok(()) => tracing::info!("OpenTelemetry export flushed"),
                Err(error) => tracing::error!(%error, "OpenTelemetry export at shutdown failed"),
            }
        }
    }
}

/// Install the global `tracing` subscriber (log lines to stdout, coloured only on a terminal, filtered by `RUST_LOG`, default `info`) and,
/// when the environment names an OTLP endpoint, the OTLP exporters; their metrics are set on
/// `config.otel_metrics` so the stack's tracing layer records into them. Call it inside the tokio runtime
/// (`runtime.enter()`): the exporters send through it.
pub fn install(config: &mut Config) -> Result<Telemetry, crate::GatewayError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(colours_wanted())
        .with_filter(filter);
    #[cfg(feature = "otlp")]
    {
        let otlp = tower_chat_tracing::otlp::Otlp::from_env(SERVICE_NAME)
            .map_err(|e| crate::GatewayError::Config(format!("OpenTelemetry export: {e}")))?;
        // The exporter's own crates log through `tracing` too: exporting their spans would feed itself.
        let exported = tracing_subscriber::filter::Targets::new()
            .with_default(tracing::Level::INFO)
            .with_target("opentelemetry", tracing::level_filters::LevelFilter::OFF)
            .with_target(
                "opentelemetry_sdk",
                tracing::level_filters::LevelFilter::OFF,
            )
            .with_target(
                "opentelemetry_otlp",
                tracing::level_filters::LevelFilter::OFF,
            )
            .with_target("hyper", tracing::level_filters::LevelFilter::OFF)
            .with_target("hyper_util", tracing::level_filters::LevelFilter::OFF);
        let spans = otlp
            .as_ref()
            .and_then(|otlp| otlp.tracing_layer())
            .map(|layer| layer.with_filter(exported));
        tracing_subscriber::registry().with(log).with(spans).init();
        if let Some(otlp) = &otlp {
            config.otel_metrics = otlp.metrics();
            tracing::info!(
                traces = otlp.tracer_provider().is_some(),
                metrics = otlp.meter_provider().is_some(),
                record_content = config.record_content,
                "OpenTelemetry export over OTLP/HTTP"
            );
        }
        Ok(Telemetry { otlp })
    }
    #[cfg(not(feature = "otlp"))]
    {
        tracing_subscriber::registry().with(log).init();
        let _ = config;
        if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
            tracing::warn!(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set, but this gateway was built without the `otlp` feature"
            );
        }
        Ok(Telemetry {})
    }
}

/// Colour codes only for a person watching: log lines go to stdout, and a file or pipe (`> gateway.log`, a
/// journal, a test) gets plain text. `NO_COLOR` (any non-empty value) turns them off on a terminal too.
fn colours_wanted() -> bool {
    use std::io::IsTerminal as _;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
