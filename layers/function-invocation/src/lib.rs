//! # tower-chat-function-invocation
//!
//! [`FunctionInvocationLayer`] turns any tower-chat service into one that runs tools until the model is done:
//! it forwards text as it streams, runs the model's tool calls (concurrently, results in the model's order),
//! sends the results back, and calls the model again — all inside one continuous event stream.
//!
//! ```
//! use futures_util::stream;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, FinishReason, Message, ToolCall};
//! use tower_chat_function_invocation::{tool_fn, FunctionInvocationLayer, ToolContext};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Weather {
//!     /// The city.
//!     city: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ChatError> {
//! let weather = tool_fn("weather", "Current weather in a city", |w: Weather, _ctx: ToolContext| async move {
//!     Ok::<_, String>(format!("12°C and windy in {}", w.city))
//! });
//!
//! // A stand-in for a real model: first it calls the tool, then it answers with the result.
//! let model = service_fn(|request: ChatRequest| async move {
//!     let answered = matches!(request.messages.last(), Some(Message::Tool(_)));
//!     let events = if answered {
//!         vec![ChatEvent::text("It is 12°C."), ChatEvent::finish(FinishReason::Stop)]
//!     } else {
//!         let call = ToolCall::new("call-1", "weather", json!({"city": "Oslo"}));
//!         vec![ChatEvent::ToolCallEnd { index: 0, call }, ChatEvent::finish(FinishReason::ToolCalls)]
//!     };
//!     let stream: ChatStream = Box::pin(stream::iter(events.into_iter().map(Ok)));
//!     Ok::<_, ChatError>(stream)
//! });
//!
//! // The schema is compiled here: an invalid one is an error now, not at the first call.
//! let chat = FunctionInvocationLayer::new().tool(weather)?.layer(model);
//! let request = ChatRequest::new(vec![Message::user("Weather in Oslo?")]);
//! let response = chat.oneshot(request).await?.collect_response().await?;
//! assert_eq!(response.text(), "It is 12°C.");
//! assert_eq!(response.messages.len(), 3); // assistant (call), tool result, assistant (answer)
//! # Ok(()) }
//! ```
//!
//! ## Tools
//! - [`tool_fn`]: a typed async function; its argument type derives the JSON Schema (`schemars`) and is
//!   deserialized with serde. [`tool_json`]: a hand-written schema and a JSON body. Or implement [`Tool`].
//! - [`CompiledTool`]: a tool with its schema compiled once into a [`schema::Schema`] (the crate's own
//!   validator; see [`schema`] for the vocabulary it checks, and why `format` is not asserted). Arguments are
//!   validated before the body runs; invalid JSON or schema violations become an error result listing what is
//!   wrong, and the body does not run.
//! - Tools on the layer are offered on every request; [`RequestTools`] in the request's extensions adds tools for
//!   one request and names tools from the layer's [`registry`](FunctionInvocationLayer::registry) (an unknown name
//!   fails the call before any model call). On a name clash the later tool wins, except that a tool requiring
//!   approval is never replaced by one that does not. Specs in `ChatOptions::tools` without an implementation are
//!   client-side tools.
//!
//! ## The loop
//! - Text, reasoning, tool-call and metadata events pass through as they arrive. Intermediate `tool_calls`
//!   finishes are hidden, usage is summed into one [`Usage`](tower_chat::ChatEvent::Usage) event before the final
//!   finish, and each call's result is a [`ToolResult`](tower_chat::ChatEvent::ToolResult) event, so
//!   `collect_response()` yields the full history: assistant message with calls, tool messages in call order,
//!   next assistant message, ….
//! - Every model call after the first waits for the inner service's `poll_ready`.
//! - Final finish reasons: the model's own (`stop`, `length`, …), `max_rounds` at a limit, `awaiting_approval`,
//!   and `tool_calls` only when the caller must act (client-side tools, or unknown tools with
//!   [`UnknownToolPolicy::HandBack`]); calls of the same round that could run have run, and their results are in
//!   the stream.
//! - Failures (error, panic, timeout, invalid arguments, unknown tool) become error results for the model; an
//!   [`ErrorPolicy`] may end the stream instead, and after
//!   [`max_consecutive_failures`](FunctionInvocationLayer::max_consecutive_failures) rounds in a row with a
//!   failure the stream ends with an [`ErrorKind::Tool`](tower_chat::ErrorKind::Tool) error.
//! - Return-direct: when every call of a round is [return-direct](Tool::return_direct) and succeeds, the stream
//!   ends with `stop` after their results, without calling the model again.
//! - Cancellation: dropping the stream, or cancelling the request's
//!   [`CancellationToken`](tower_chat::CancellationToken), drops running tool bodies (and cancels the token in
//!   their [`ToolContext`]); no further model call is made. A cancelled request's stream ends with an
//!   [`ErrorKind::Cancelled`](tower_chat::ErrorKind::Cancelled) error.
//! - Every tool body runs in an `execute_tool {name}` tracing span, a child of the span current when the stream
//!   is polled, with `gen_ai.tool.name`, `gen_ai.tool.call.id` and, on failure, `error.type`. Arguments and
//!   results are never recorded.
//!
//! ## Approvals
//! A call of a tool that [requires approval](Tool::requires_approval), or that an [`ApprovalPolicy`] marks,
//! never runs without a decision, even with no approval layer in the stack. The loop emits a
//! [`ChatEvent::ApprovalRequest`](tower_chat::ChatEvent::ApprovalRequest) per gated call (its `id` is the call
//! id), runs the round's other calls at once, and ends with `awaiting_approval`. To resume, send the conversation
//! (with the collected response appended) again with [`ApprovalDecisions`](tower_chat::ApprovalDecisions) in the
//! extensions: the loop finds the last assistant message's calls that have no tool message, runs approved ones,
//! answers denied ones with "not approved: {reason}", asks again for gated calls without a decision, and goes on
//! calling the model. Decisions for any other id are ignored. A gated call whose arguments are invalid is
//! answered with the validation error at once rather than put to a human.
//!
//! An approval layer placed outside this one adds policy and verification by putting an [`ApprovalPolicy`] in
//! the request's extensions (it can require approval or deny, never waive a tool's own flag) and by deciding
//! which `ApprovalDecisions` reach this loop (for example after checking its own signed approval ids).
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod config;
mod execute;
mod into_tool;
mod layer;
mod placement;
mod policy;
pub mod schema;
mod service;
mod stream;
mod tool;
mod toolset;

pub use into_tool::IntoTool;
pub use layer::FunctionInvocationLayer;
pub use placement::{InsideToolLoop, ToolLoopPresence};
pub use policy::{
    ApprovalPolicy, ApprovalVerdict, ErrorDetail, ErrorPolicy, ToolFailure, ToolFailureKind,
    UnknownToolPolicy,
};
pub use service::{FunctionInvocation, ResponseFuture};
pub use tool::{
    tool_fn, tool_json, CompiledTool, FnTool, Tool, ToolContext, ToolError, ToolHints, ToolOutput,
};
pub use toolset::{RequestTools, ToolResolver, ToolSet};

/// Re-exported so typed tools can derive `JsonSchema` without a direct dependency.
pub use schemars;

/// The guide's page on this crate (`docs/src/library/tool-loop.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library/tool-loop.md")]
pub struct GuideDoctests;
