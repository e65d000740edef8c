//! # tower-chat-tracing
//!
//! A [`tower_layer::Layer`] that makes every chat call observable with [`tracing`] spans named and attributed as
//! the [OpenTelemetry GenAI semantic conventions](https://opentelemetry.io/docs/specs/semconv/gen-ai/) say, and
//! records the GenAI client metrics through a [`Metrics`] sink (OpenTelemetry histograms with the
//! `opentelemetry` feature).
//!
//! ```
//! use futures_util::stream;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_chat::{ChatEvent, ChatRequest, ChatStream, ChatStreamExt, FinishReason, Message};
//! use tower_chat_tracing::TracingLayer;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower_chat::ChatError> {
//! // A stand-in for a leaf service such as `tower_chat::openai::OpenAiChat`.
//! let leaf = service_fn(|_request: ChatRequest| async {
//!     let events = vec![Ok(ChatEvent::text("Hello!")), Ok(ChatEvent::finish(FinishReason::Stop))];
//!     Ok::<ChatStream, tower_chat::ChatError>(Box::pin(stream::iter(events)))
//! });
//! let service = ServiceBuilder::new()
//!     // Leaf services tell their provider through `ModelInfo`; this one is named by hand.
//!     .layer(TracingLayer::new().provider("openai"))
//!     .service(leaf);
//!
//! let request = ChatRequest::new(vec![Message::user("Say hello")]).model("gpt-4o-mini");
//! let response = service.oneshot(request).await?.collect_response().await?;
//! assert_eq!(response.text(), "Hello!");
//! # Ok(()) }
//! ```
//!
//! ## The call span
//! One span per call, named `chat` with `otel.name = "chat {model}"` (what `tracing-opentelemetry` exports as the
//! span name) and `otel.kind = "client"`. It is created in `Service::call`, entered whenever the response future
//! or the stream is polled, and closed when the call ends: at the end of the stream, at the first error, or when
//! the future or the stream is dropped. `tower_chat.outcome` says which:
//!
//! | `tower_chat.outcome` | when | `error.type` |
//! |---|---|---|
//! | `completed` | the stream ended after a finish event (or was dropped right after one) | — |
//! | `failed` | the service future failed, an `Err` item arrived, or the stream ended without a finish event | the [`tower_chat::ErrorKind`] name, or `incomplete` |
//! | `cancelled` | the future or the stream was dropped before the end, or the error was [`tower_chat::ErrorKind::Cancelled`] | `cancelled` |
//!
//! Attributes, recorded when known: `gen_ai.operation.name` (`chat`), `gen_ai.provider.name`,
//! `gen_ai.request.model`, `gen_ai.request.temperature`, `gen_ai.request.top_p`, `gen_ai.request.max_tokens`,
//! `gen_ai.output.type` (`text` / `json`, from the response format), `gen_ai.conversation.id` (from a
//! [`tower_chat::ConversationId`]), `server.address`, `server.port`, `gen_ai.response.id`, `gen_ai.response.model`,
//! `gen_ai.response.finish_reasons` (e.g. `["stop"]`), `gen_ai.response.time_to_first_chunk` (seconds),
//! `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`,
//! `gen_ai.usage.cache_creation.input_tokens` (sums of the stream's usage increments), `tower_chat.response_cache`
//! (`hit` when every usage increment was replayed by a response cache), `error.type`, `otel.status_code = "ERROR"` and `http.response.status_code` on
//! failure. A failure also emits an `ERROR` event `chat call failed` in the span.
//!
//! The provider, default model and endpoint come from the inner service's [`tower_chat::ModelInfo`], read once
//! when the layer wraps it; for a service without it, name the provider with [`TracingLayer::provider`] (or give
//! whole [`tower_chat::ModelMetadata`] with [`TracingLayer::metadata`]).
//!
//! ## Sensitive data
//! Message contents, tool call arguments, tool results and provider error messages (which can quote either) are
//! recorded only with [`TracingLayer::record_content`]`(true)`, as `gen_ai.input.messages`,
//! `gen_ai.output.messages` (the conventions' JSON `parts` shape) and `error.message`. Credentials are never
//! recorded: the layer never reads headers or extensions other than [`tower_chat::ConversationId`], and
//! `server.address` keeps only the endpoint's host.
//!
//! ## Tool execution spans, and where to put the layer
//! The tool loop creates an `execute_tool {name}` span (`gen_ai.tool.name`, `gen_ai.tool.call.id`) around each
//! tool it runs. It runs tools while its stream is polled, and this layer polls the stream inside the call span,
//! so tool spans nest under whichever call span is current:
//!
//! ```text
//! // Outside the tool loop: one span per user turn, tool spans inside it.
//! ServiceBuilder::new()
//!     .layer(TracingLayer::new())      // chat gpt-4o            (the whole turn: usage summed over rounds,
//!     .layer(ToolLoopLayer::new(..))   // ├─ execute_tool weather    finish_reasons of every round)
//!     .service(leaf);                  // └─ execute_tool clock
//!
//! // Inside the tool loop: one span per model round, tool spans beside them.
//! ServiceBuilder::new()
//!     .layer(ToolLoopLayer::new(..))   // <your request span>
//!     .layer(TracingLayer::new())      // ├─ chat gpt-4o          (round 1: finish_reasons ["tool_calls"])
//!     .service(leaf);                  // ├─ execute_tool weather
//!                                      // └─ chat gpt-4o          (round 2: finish_reasons ["stop"])
//! ```
//!
//! Both at once work too (a turn span with round spans and tool spans inside).
//!
//! ## Metrics
//! Each call ends with one [`CallRecord`] handed to the layer's [`Metrics`] sink ([`TracingLayer::metrics`]):
//! duration, time to first chunk (streaming requests only, as the conventions ask), token usage, and the
//! attributes the GenAI metrics carry. The default sink, [`NoMetrics`], records nothing; any
//! `Fn(&CallRecord)` closure is a sink; with the `opentelemetry` feature, `OpenTelemetryMetrics` records
//! `gen_ai.client.operation.duration`, `gen_ai.client.operation.time_to_first_chunk` and
//! `gen_ai.client.token.usage`. Metrics are recorded whether or not the span is enabled.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod call;
mod content;
mod layer;
mod metrics;
#[cfg(feature = "opentelemetry")]
mod otel;
#[cfg(feature = "otlp")]
pub mod otlp;
mod service;
mod stream;

pub use layer::{FromModelInfo, MetadataSource, TracingLayer};
pub use metrics::{CallRecord, Metrics, NoMetrics, Outcome};
#[cfg(feature = "opentelemetry")]
pub use otel::{OpenTelemetryMetrics, OPERATION_DURATION, TIME_TO_FIRST_CHUNK, TOKEN_USAGE};
pub use service::{ResponseFuture, Tracing};

/// The guide's page on this crate (`docs/src/library/tracing.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library/tracing.md")]
pub struct GuideDoctests;
