//! [`TracingLayer`]: the configuration, and where the provider name comes from.

use std::borrow::Cow;
use std::fmt;

use tower_chat::{ModelInfo, ModelMetadata};
use tower_layer::Layer;
use tracing::Level;

use crate::call::Shared;
use crate::metrics::{Metrics, NoMetrics};
use crate::service::Tracing;

/// Where the layer learns the provider (`gen_ai.provider.name`), the default model and the endpoint
/// (`server.address`) of the service it wraps. Read once, when the layer wraps the service.
pub trait MetadataSource<S> {
    /// The metadata of `inner`.
    fn metadata(&self, inner: &S) -> ModelMetadata;
}

/// Read the metadata from the inner service's [`ModelInfo`]: the default of [`TracingLayer::new`]. Every
/// tower-chat leaf and layer implements it.
#[derive(Clone, Copy, Debug, Default)]
pub struct FromModelInfo;

impl<S: ModelInfo> MetadataSource<S> for FromModelInfo {
    fn metadata(&self, inner: &S) -> ModelMetadata {
        inner.model_metadata()
    }
}

/// Fixed metadata, for an inner service that does not implement [`ModelInfo`] (or to override what it says);
/// set with [`TracingLayer::provider`] or [`TracingLayer::metadata`].
impl<S> MetadataSource<S> for ModelMetadata {
    fn metadata(&self, _inner: &S) -> ModelMetadata {
        self.clone()
    }
}

/// A [`Layer`] that traces every chat call with a span following the OpenTelemetry GenAI conventions and hands
/// each finished call to a [`Metrics`] sink. See the crate docs for the span's attributes.
///
/// ```
/// use tower_chat_tracing::TracingLayer;
/// use tracing::Level;
///
/// let layer = TracingLayer::new()
///     .level(Level::DEBUG)
///     // Off by default: message contents, tool arguments and results stay out of the telemetry.
///     .record_content(false);
/// ```
#[derive(Clone)]
pub struct TracingLayer<M = NoMetrics, P = FromModelInfo> {
    source: P,
    record_content: bool,
    level: Level,
    metrics: M,
}

impl TracingLayer {
    /// Spans at `INFO`, no content, no metrics sink, provider read from the inner service's [`ModelInfo`].
    pub fn new() -> Self {
        TracingLayer {
            source: FromModelInfo,
            record_content: false,
            level: Level::INFO,
            metrics: NoMetrics,
        }
    }
}

impl Default for TracingLayer {
    fn default() -> Self {
        TracingLayer::new()
    }
}

impl<M, P> TracingLayer<M, P> {
    /// Record message contents, tool call arguments, tool results and provider error messages on the span
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`, `error.message`). Off by default: they can hold
    /// personal data and secrets. Credentials are never recorded, whatever this says.
    pub fn record_content(mut self, enabled: bool) -> Self {
        self.record_content = enabled;
        self
    }

    /// The level of the call spans (default `INFO`).
    pub fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// Where finished calls are recorded: a [`Metrics`] implementation, or a closure taking a
    /// [`crate::CallRecord`].
    pub fn metrics<M2: Metrics>(self, metrics: M2) -> TracingLayer<M2, P> {
        TracingLayer {
            source: self.source,
            record_content: self.record_content,
            level: self.level,
            metrics,
        }
    }

    /// Name the provider (`gen_ai.provider.name`, e.g. `openai`) instead of reading it from the inner service,
    /// which then need not implement [`ModelInfo`].
    pub fn provider(self, name: impl Into<Cow<'static, str>>) -> TracingLayer<M, ModelMetadata> {
        self.metadata(ModelMetadata {
            provider: name.into(),
            model_id: None,
            endpoint: None,
            supports_tools: false,
            supports_parallel_tool_calls: false,
            supports_streaming_usage: false,
            context_window: None,
        })
    }

    /// Use this metadata (provider, default model, endpoint) instead of reading it from the inner service.
    pub fn metadata(self, metadata: ModelMetadata) -> TracingLayer<M, ModelMetadata> {
        TracingLayer {
            source: metadata,
            record_content: self.record_content,
            level: self.level,
            metrics: self.metrics,
        }
    }
}

impl<M, P: fmt::Debug> fmt::Debug for TracingLayer<M, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TracingLayer")
            .field("source", &self.source)
            .field("record_content", &self.record_content)
            .field("level", &self.level)
            .field("metrics", &std::any::type_name::<M>())
            .finish()
    }
}

impl<S, M, P> Layer<S> for TracingLayer<M, P>
where
    M: Metrics + Clone,
    P: MetadataSource<S>,
{
    type Service = Tracing<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        let shared = Shared::new(
            self.source.metadata(&inner),
            self.record_content,
            self.level,
            self.metrics.clone(),
        );
        Tracing::from_parts(inner, shared)
    }
}

impl<S: ModelInfo> Tracing<S> {
    /// Trace `inner` with the default settings ([`TracingLayer::new`]).
    pub fn new(inner: S) -> Self {
        TracingLayer::new().layer(inner)
    }
}
