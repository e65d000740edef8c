//! One traced call: its span, what the stream has told so far, and the single place where a call ends.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

// Tokio's clock reads the standard one, except in a test that paused time: there calls are timed without waiting.
use tokio::time::Instant;

use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ErrorKind, FinishReason, ModelMetadata, ResponseBuilder,
    ResponseFormat, Usage,
};
use tracing::field::{display, Empty};
use tracing::{Level, Span};

use crate::content;
use crate::metrics::{CallRecord, Metrics, Outcome};

/// `gen_ai.operation.name` for every call this layer traces.
const OPERATION: &str = "chat";
/// `error.type` of a stream that ended without a finish event or an error, against the service contract.
const INCOMPLETE: &str = "incomplete";

/// What every call of one service shares: resolved once, when the layer wraps the service.
pub(crate) struct Shared<M> {
    provider: Cow<'static, str>,
    default_model: Option<String>,
    server_address: Option<String>,
    server_port: Option<u16>,
    record_content: bool,
    level: Level,
    metrics: M,
}

impl<M> Shared<M> {
    pub(crate) fn new(
        metadata: ModelMetadata,
        record_content: bool,
        level: Level,
        metrics: M,
    ) -> Self {
        let (server_address, server_port) = metadata
            .endpoint
            .as_deref()
            .map(server_of)
            .unwrap_or_default();
        Shared {
            provider: metadata.provider,
            default_model: metadata.model_id,
            server_address,
            server_port,
            record_content,
            level,
            metrics,
        }
    }
}

/// `server.address` and `server.port` of an endpoint URL. Only the host is kept: a URL's user-info part can hold
/// credentials, and its path or query can hold a key.
fn server_of(endpoint: &str) -> (Option<String>, Option<u16>) {
    let Ok(uri) = endpoint.parse::<http::Uri>() else {
        return (None, None);
    };
    let Some(host) = uri.host() else {
        return (None, None);
    };
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    });
    (Some(host.to_owned()), port)
}

/// `otel.name`: `chat {model}`, formatted only by a subscriber that records it (a call nobody listens to builds
/// no span and pays nothing).
struct SpanName<'a>(Option<&'a str>);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(model) => write!(f, "{OPERATION} {model}"),
            None => f.write_str(OPERATION),
        }
    }
}

/// A float option as it was written (`0.7`, not the `0.699999988` an `f32 as f64` cast gives).
fn exact(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// `gen_ai.output.type` of a requested response format.
fn output_type(format: &ResponseFormat) -> &'static str {
    match format {
        ResponseFormat::Text => "text",
        ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. } => "json",
    }
}

// The span's level is part of its static callsite metadata, so each level needs its own `span!` invocation.
macro_rules! chat_span {
    ($level:expr, $shared:expr, $model:expr, $request:expr) => {
        tracing::span!(
            $level,
            "chat",
            otel.name = %SpanName($model),
            otel.kind = %"client",
            otel.status_code = Empty,
            gen_ai.operation.name = %OPERATION,
            gen_ai.provider.name = %$shared.provider,
            gen_ai.request.model = $model.map(display),
            gen_ai.request.temperature = $request.options.temperature.map(exact),
            gen_ai.request.top_p = $request.options.top_p.map(exact),
            gen_ai.request.max_tokens = $request.options.max_output_tokens.map(u64::from),
            gen_ai.output.type = $request.options.response_format.as_ref().map(output_type).map(display),
            gen_ai.conversation.id = $request.conversation_id().map(|c| display(c.as_str())),
            server.address = $shared.server_address.as_deref().map(display),
            server.port = $shared.server_port,
            gen_ai.response.id = Empty,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.response.time_to_first_chunk = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            error.type = Empty,
            error.message = Empty,
            http.response.status_code = Empty,
            tower_chat.outcome = Empty,
            tower_chat.response_cache = Empty,
        )
    };
}

/// The life of one call, from `Service::call` to the end of its stream. It moves from the response future into
/// the stream; whichever holds it when the call ends calls [`CallState::end`], and its `Drop` ends a call that
/// nobody ended (the future or the stream was dropped), so every call is recorded exactly once.
pub(crate) struct CallState<M: Metrics> {
    shared: Arc<Shared<M>>,
    span: Span,
    request_model: Option<String>,
    streaming: bool,
    start: Instant,
    first_chunk: Option<Duration>,
    /// When the finish event arrived, if nothing but usage followed it; a stream dropped then completed at that
    /// moment.
    finished_at: Option<Instant>,
    finish_reasons: Vec<FinishReason>,
    usage: Option<Usage>,
    response_id: Option<String>,
    response_model: Option<String>,
    /// Folds the output for `gen_ai.output.messages`; `None` unless content is recorded.
    output: Option<ResponseBuilder>,
    ended: bool,
}

impl<M: Metrics> CallState<M> {
    pub(crate) fn new(shared: Arc<Shared<M>>, request: &ChatRequest) -> Self {
        let start = Instant::now();
        let request_model = request
            .options
            .model
            .clone()
            .or_else(|| shared.default_model.clone());
        let model = request_model.as_deref();
        let span = match shared.level {
            Level::ERROR => chat_span!(Level::ERROR, shared, model, request),
            Level::WARN => chat_span!(Level::WARN, shared, model, request),
            Level::INFO => chat_span!(Level::INFO, shared, model, request),
            Level::DEBUG => chat_span!(Level::DEBUG, shared, model, request),
            Level::TRACE => chat_span!(Level::TRACE, shared, model, request),
        };
        // Content is the expensive and the sensitive part: built only when asked for and when someone listens.
        let record_content = shared.record_content && !span.is_disabled();
        if record_content {
            span.record(
                "gen_ai.input.messages",
                content::input_messages(&request.messages),
            );
        }
        CallState {
            request_model,
            streaming: request.options.stream,
            start,
            first_chunk: None,
            finished_at: None,
            finish_reasons: Vec::new(),
            usage: None,
            response_id: None,
            response_model: None,
            output: record_content.then(ResponseBuilder::new),
            ended: false,
            span,
            shared,
        }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Take note of one event of the stream.
    pub(crate) fn observe(&mut self, event: &ChatEvent) {
        match event {
            ChatEvent::TextDelta { .. }
            | ChatEvent::ReasoningDelta { .. }
            | ChatEvent::ToolCallStart { .. }
            | ChatEvent::ToolCallDelta { .. }
            | ChatEvent::ToolCallEnd { .. }
                if self.first_chunk.is_none() =>
            {
                self.first_chunk = Some(self.start.elapsed());
            }
            ChatEvent::ResponseMetadata { id, model } => {
                if id.is_some() {
                    self.response_id.clone_from(id);
                }
                if model.is_some() {
                    self.response_model.clone_from(model);
                }
            }
            ChatEvent::Usage { usage } => self.usage.get_or_insert_with(Usage::default).add(usage),
            ChatEvent::Finish { reason } => {
                self.finish_reasons.push(reason.clone());
                self.finished_at = Some(Instant::now());
            }
            _ => {}
        }
        // Output after a finish (the next round of a tool loop) means the call is not over yet.
        if !matches!(
            event,
            ChatEvent::Finish { .. } | ChatEvent::Usage { .. } | ChatEvent::ResponseMetadata { .. }
        ) {
            self.finished_at = None;
        }
        if let Some(output) = &mut self.output {
            output.push(event);
        }
    }

    /// The service or the stream failed.
    pub(crate) fn fail(&mut self, error: &ChatError) {
        let outcome = match error.kind() {
            ErrorKind::Cancelled => Outcome::Cancelled,
            _ => Outcome::Failed,
        };
        self.end(
            outcome,
            Some(error.kind().as_str()),
            Some(error),
            Instant::now(),
        );
    }

    /// The stream ended. Without a finish event that breaks the service contract, so it is not a success.
    pub(crate) fn end_of_stream(&mut self) {
        if self.finish_reasons.is_empty() {
            self.end(Outcome::Failed, Some(INCOMPLETE), None, Instant::now());
        } else {
            self.end(Outcome::Completed, None, None, Instant::now());
        }
    }

    fn end(
        &mut self,
        outcome: Outcome,
        error_type: Option<&str>,
        error: Option<&ChatError>,
        at: Instant,
    ) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let duration = at.saturating_duration_since(self.start);
        let time_to_first_chunk = self.first_chunk.filter(|_| self.streaming);
        if !self.span.is_disabled() {
            self.record_on_span(outcome, error_type, error, time_to_first_chunk);
        }
        self.shared.metrics.record(&CallRecord {
            operation: OPERATION,
            provider: &self.shared.provider,
            request_model: self.request_model.as_deref(),
            response_model: self.response_model.as_deref(),
            server_address: self.shared.server_address.as_deref(),
            server_port: self.shared.server_port,
            outcome,
            error_type,
            duration,
            time_to_first_chunk,
            usage: self.usage,
        });
    }

    fn record_on_span(
        &mut self,
        outcome: Outcome,
        error_type: Option<&str>,
        error: Option<&ChatError>,
        time_to_first_chunk: Option<Duration>,
    ) {
        let span = &self.span;
        span.record("tower_chat.outcome", display(outcome.as_str()));
        if let Some(id) = &self.response_id {
            span.record("gen_ai.response.id", display(id));
        }
        if let Some(model) = &self.response_model {
            span.record("gen_ai.response.model", display(model));
        }
        if !self.finish_reasons.is_empty() {
            let reasons: Vec<&str> = self
                .finish_reasons
                .iter()
                .map(FinishReason::as_str)
                .collect();
            span.record(
                "gen_ai.response.finish_reasons",
                tracing::field::debug(&reasons),
            );
        }
        if let Some(ttfc) = time_to_first_chunk {
            span.record("gen_ai.response.time_to_first_chunk", ttfc.as_secs_f64());
        }
        if let Some(usage) = &self.usage {
            span.record("gen_ai.usage.input_tokens", usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", usage.output_tokens);
            if let Some(cached) = usage.cached_input_tokens {
                span.record("gen_ai.usage.cache_read.input_tokens", cached);
            }
            if let Some(written) = usage.cache_write_input_tokens {
                span.record("gen_ai.usage.cache_creation.input_tokens", written);
            }
            // Every token of the call was replayed by a response cache: no provider was called for it.
            if usage.from_response_cache {
                span.record("tower_chat.response_cache", display("hit"));
            }
        }
        if let Some(error_type) = error_type {
            span.record("error.type", display(error_type));
        }
        if outcome == Outcome::Failed {
            span.record("otel.status_code", display("ERROR"));
        }
        if let Some(status) = error.and_then(ChatError::status) {
            span.record("http.response.status_code", status.as_u16());
        }
        if let Some(output) = self.output.take() {
            let response = output.finish();
            span.record(
                "gen_ai.output.messages",
                content::output_messages(&response.messages, self.finish_reasons.last()),
            );
            // A provider's error text can quote the request or the output, so it counts as content.
            if let Some(error) = error {
                span.record("error.message", error.message());
            }
        }
        if outcome == Outcome::Failed {
            tracing::event!(
                parent: span,
                Level::ERROR,
                error.type = error_type,
                "chat call failed"
            );
        }
    }
}

impl<M: Metrics> Drop for CallState<M> {
    fn drop(&mut self) {
        // Nobody ended the call: the future or the stream was dropped. After a finish event that is a consumer
        // that stopped reading once it had everything, so the call completed when the finish arrived.
        match self.finished_at {
            Some(at) => self.end(Outcome::Completed, None, None, at),
            None => self.end(
                Outcome::Cancelled,
                Some(ErrorKind::Cancelled.as_str()),
                None,
                Instant::now(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_keeps_the_host_and_port_only() {
        assert_eq!(
            server_of("https://user:sk-secret@api.example.com/v1?key=sk-secret"),
            (Some("api.example.com".into()), Some(443))
        );
        assert_eq!(
            server_of("http://localhost:8080/v1"),
            (Some("localhost".into()), Some(8080))
        );
        assert_eq!(server_of("not a url"), (None, None));
    }

    #[test]
    fn floats_are_recorded_as_written() {
        assert_eq!(exact(0.7), 0.7);
        assert_eq!(exact(1.0), 1.0);
    }
}
