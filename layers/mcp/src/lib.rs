//! # tower-chat-mcp
//!
//! [Model Context Protocol](https://modelcontextprotocol.io) servers as tool sources of the tower-chat tool loop
//! ([`FunctionInvocationLayer`](tower_chat_function_invocation::FunctionInvocationLayer)), with the official Rust
//! SDK, [`rmcp`].
//!
//! - [`McpServerConfig`]: a server started as a child process speaking MCP on stdio, or reached over streamable
//!   HTTP (with a bearer token read from an environment variable).
//! - [`McpTools::start`] connects to every server and lists its tools; a server's tools are listed again on
//!   `notifications/tools/list_changed`. A server that fails to start is reported (with the last lines of its
//!   stderr) in [`McpTools::status`] and retried with [backoff](Backoff); the others work meanwhile.
//! - [`McpLayer`], placed outside the tool loop, offers the tools on every request. MCP tools then go through
//!   everything a local tool does: arguments validated against the server's JSON Schema (compiled once per
//!   listing) before the server sees them, the loop's timeout (or the server's [own](McpServerConfig::timeout)),
//!   concurrency limit, `execute_tool` tracing spans, error results and the persistence of results.
//! - A listed tool whose schema does not compile (malformed, a remote `$ref`, a keyword the validator does not
//!   implement) is not offered, and not silently: it is a [`RejectedTool`] in [`McpTools::rejected_tools`], with
//!   the typed error, and a `tracing::warn!` naming the server, the tool and the reason.
//! - Cancellation: when the loop stops waiting for a call (timeout, dropped stream, cancelled request) the call's
//!   future is dropped and rmcp sends MCP's `notifications/cancelled` for it.
//! - Results: text blocks, structured content and `isError` map to the tool result (see below).
//! - Faults: a server that crashes mid-call gives the model an error result and is restarted with backoff; its
//!   tools stay offered meanwhile and their calls answer "not connected". An HTTP server that goes away mid-call
//!   gives an error result after three quick attempts to resume the stream (~1.4 s), and is used again once it
//!   is back. A server that never answers hits the tool timeout.
//! - Approvals: a [`ServerPolicy`] per server (a rule for all its tools, rules per tool, some reading MCP's
//!   `readOnlyHint`/`destructiveHint`) sets the tools' `requires_approval` flag, so the loop pauses their calls
//!   for a decision exactly like a local tool's. Any approval policy sees the annotations through
//!   [`CompiledTool::hints`](tower_chat_function_invocation::CompiledTool::hints).
//! - Per-request allow-lists: an [`McpAllowList`] in the request's extensions limits the servers and tools offered.
//!
//! `oneshot` drops the service (and the layer's [`McpTools`]) once it returns the stream; the tools the request
//! carries keep the servers up until the stream is done.
//!
//! ```
//! use std::time::Duration;
//! use futures_util::stream;
//! use serde_json::json;
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, FinishReason, Message, ToolCall};
//! use tower_chat_function_invocation::FunctionInvocationLayer;
//! use tower_chat_mcp::test_server::{serve_http, DemoServer};
//! use tower_chat_mcp::{McpLayer, McpServerConfig, McpTools};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), ChatError> {
//! // An MCP server on 127.0.0.1 (in a real deployment: `McpServerConfig::stdio("files", "mcp-server-files")`).
//! let server = serve_http(DemoServer::new("demo", false), None).await.unwrap();
//! let mcp = McpTools::start([McpServerConfig::http("demo", server.url())]).await?;
//! assert!(mcp.tools().get("add").is_some());
//!
//! // A stand-in model: it calls the MCP tool `add`, then answers with the result.
//! let model = service_fn(|request: ChatRequest| async move {
//!     let events = match request.messages.last() {
//!         Some(Message::Tool(result)) => vec![ChatEvent::text(result.content.to_string()), ChatEvent::finish(FinishReason::Stop)],
//!         _ => {
//!             let call = ToolCall::new("call-1", "add", json!({"a": 2, "b": 3}));
//!             vec![ChatEvent::ToolCallEnd { index: 0, call }, ChatEvent::finish(FinishReason::ToolCalls)]
//!         }
//!     };
//!     Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
//! });
//! let tool_loop = FunctionInvocationLayer::new().tool_timeout(Duration::from_secs(30));
//! let chat = McpLayer::new(mcp).layer(tool_loop.layer(model));
//! let response = chat.oneshot(ChatRequest::new(vec![Message::user("2 + 3?")])).await?.collect_response().await?;
//! assert_eq!(response.text(), r#"{"sum":5.0}"#);
//! # Ok(()) }
//! ```
//!
//! ## Tool names
//! See [`McpTools`]: a tool keeps its own name unless it collides with another server's tool or a
//! [reserved](McpTools::reserve_names) name, in which case it becomes `{server}__{tool}`.
//!
//! ## Results
//! Text blocks are joined with newlines; `structuredContent` is appended as compact JSON unless a text block
//! already holds the same JSON value (the spec asks servers to mirror it); images, audio and embedded resources
//! are parts of the result (the model sees the image; a Chat Completions upstream gets it in a user message after
//! the tool messages); `isError: true` makes the result an error result for the model. A protocol error (the
//! server answered the request with a JSON-RPC error, or the connection ended) is an error result too.
//!
//! ## Protocol
//! The client offers protocol version 2025-06-18 and follows unscoped `notifications/tools/list_changed`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod config;
mod hub;
mod layer;
mod policy;
mod rejected;
mod running;
mod server;
mod tool;

#[cfg(feature = "test-server")]
pub mod test_server;

pub use config::{Backoff, HttpConfig, McpServerConfig, McpTransport, StdioConfig};
pub use hub::McpTools;
pub use layer::{Mcp, McpLayer};
pub use policy::{Approval, McpAllowList, ServerPolicy};
pub use rejected::RejectedTool;
pub use server::McpServerStatus;

/// The MCP SDK, re-exported.
pub use rmcp;

/// The guide's page on this crate (`docs/src/library/mcp.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library/mcp.md")]
pub struct GuideDoctests;
