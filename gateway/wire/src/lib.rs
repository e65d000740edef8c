//! # tower-chat-wire
//!
//! The wire formats of the tower-chat gateway as axum routes over any chat service, to nest in an axum app of
//! your own beside its routes and middleware: OpenAI Chat Completions (`POST /v1/chat/completions`), Anthropic
//! Messages (`POST /v1/messages`) and OpenAI Responses (`POST /v1/responses`), each streaming (SSE) and not,
//! each answering errors in its own shape. Official OpenAI and Anthropic client libraries work against them
//! unmodified.
//!
//! ```no_run
//! use axum::routing::get;
//! use tower_chat::{ChatError, ChatRequest, ChatStream};
//! use tower_chat_wire::WireRouter;
//!
//! # async fn run<S>(stack: S) -> std::io::Result<()>
//! # where
//! #     S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + Sync + 'static,
//! #     S::Future: Send + 'static,
//! # {
//! // `stack`: any `Service<ChatRequest, Response = ChatStream, Error = ChatError>`, e.g. built with
//! // tower-chat-stack.
//! let app = axum::Router::new()
//!     .route("/health", get(|| async { "ok" }))
//!     .merge(WireRouter::new(stack).chat_completions());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! What it compiles: the core (`tower-chat`), axum without its default features (no `json`, `query`, `form`,
//! no server of its own: the app that nests the routes serves them), serde/serde_json, futures, http, bytes and
//! tower (and uuid for answer ids) — no SQLite, PostgreSQL, Redis, MCP or OTLP. The gateway (`tower-chat-gateway`)
//! serves these same routes ([`WireRouter::keeps_turns`]) over its stack, whose outermost layer resumes paused
//! turns and stored responses from what the routes put in the request's extensions ([`extensions`]).
//!
//! | module | |
//! | --- | --- |
//! | [`router`] | [`WireRouter`]: the routes over a chat service; the steps each route takes |
//! | [`extensions`] | what a route hands the service beside the request, and the service back for the answer's head |
//! | [`chat_completions`], [`anthropic_messages`], [`responses`] | one format each: its parser and encoder |
//! | [`format`](mod@format) | what every format is made of ([`WireFormat`](format::WireFormat), [`Encoder`](format::Encoder)) |
//! | [`respond`] | the stack's events folded into what the client sees, as one answer or SSE |
//! | [`error`] | [`ApiError`]: errors with their status, in each format's shape |
//! | [`limits`] | [`RequestLimits`]: what one request may hold |
//! | [`count_tokens`] | counting a request's input tokens without running it |
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations, unreachable_pub)]

pub mod anthropic_messages;
pub mod carry;
pub mod chat_completions;
pub mod count_tokens;
pub mod error;
pub mod extensions;
pub mod format;
pub mod limits;
mod parts;
pub mod respond;
pub mod responses;
pub mod router;
mod sealed_reasoning;
mod sse;

pub use error::ApiError;
pub use format::{ApprovalAnswer, ApprovalNotice, InboundRoute, UpstreamFormat};
pub use limits::RequestLimits;
pub use respond::ApprovalNotices;
pub use router::{WireRouter, DEFAULT_BODY_LIMIT};
