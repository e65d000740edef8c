//! # tower-chat-resilience
//!
//! Layers that keep a tower-chat stack answering when providers do not: a stream-aware [`RetryLayer`], a
//! [`FallbackLayer`] over ordered targets (OpenAI-compatible and Anthropic mixed), a per-target
//! [`CircuitBreakerLayer`], and a [`Balance`] across deployments of one model.
//!
//! A streamed answer can be retried only while nothing has reached the caller. Every layer here therefore
//! decides at one moment: the **first content event** (text, reasoning, a tool call, a finish). A failure before
//! it — a 429, a 5xx, a refused connection, a stream cut after its metadata — is retried, or sent to the next
//! target, invisibly; a failure after it reaches the caller as its typed error, and no text is ever sent twice.
//!
//! ```
//! use std::time::Duration;
//! use tower::{Layer, ServiceExt};
//! use tower_chat::anthropic::AnthropicChat;
//! use tower_chat::openai::OpenAiChat;
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//! use tower_chat_resilience::{AnsweredBy, CircuitBreakerLayer, FallbackLayer, RetryLayer, Target};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tower_chat::ChatError> {
//! // The primary is down; the backup answers.
//! let down = ScriptedProvider::start(|_, _| Reply::json(503, json!({"error": {"message": "down"}}))).await;
//! let backup = ScriptedProvider::start(|_, _| Reply::openai_text("Hello from the backup")).await;
//!
//! let primary = OpenAiChat::builder().base_url(down.base_url()).model("gpt-4o").build()?;
//! let secondary = OpenAiChat::builder().base_url(backup.base_url()).model("gpt-4o-mini").build()?;
//! let breaker = CircuitBreakerLayer::new().consecutive_failures(3);
//!
//! let chat = RetryLayer::new()
//!     .max_attempts(2)
//!     .backoff(tower_chat_resilience::Backoff { base: Duration::from_millis(1), ..Default::default() })
//!     .layer(
//!         FallbackLayer::new()
//!             .target(Target::new("backup", breaker.clone().name("backup").layer(secondary)))
//!             .layer(breaker.name("primary").layer(primary)),
//!     );
//!
//! let answered = AnsweredBy::new();
//! let request = ChatRequest::new(vec![Message::user("hi")]).with_extension(answered.clone());
//! let response = chat.oneshot(request).await?.collect_response().await?;
//! assert_eq!(response.text(), "Hello from the backup");
//! assert_eq!(answered.get().unwrap().target, "backup");
//! # let _ = AnthropicChat::builder();
//! # Ok(()) }
//! ```
//!
//! ## Where each layer goes
//! ```text
//! FunctionInvocationLayer          the tool loop: each model round is one call below
//! └─ RetryLayer                    per model call, so a retry never re-runs a tool round
//!    └─ FallbackLayer              ordered targets, each behind its own breaker
//!       ├─ CircuitBreaker ─ OpenAiChat        (primary)
//!       ├─ CircuitBreaker ─ AnthropicChat     (fallback)
//!       └─ Balance ─ [deployment, deployment] (a model on several endpoints or keys)
//! ```
//!
//! - **Retry** ([`RetryLayer`]): transient failures only ([`is_transient`]); exponential backoff with full
//!   jitter; a provider's `Retry-After` / `retry-after-ms` honoured up to a cap (longer: fail at once so a fallback
//!   can act); an overall deadline; a retry budget (tower's `TpsBudget` by default) shared by every clone. Nested
//!   retry layers never multiply: the outermost one marks the request ([`RetryScope`]) and inner ones call once.
//!   Cancelling the request's [`CancellationToken`](tower_chat::CancellationToken) during a backoff ends the call
//!   at once with [`ErrorKind::Cancelled`](tower_chat::ErrorKind::Cancelled).
//! - **Fallback** ([`FallbackLayer`], [`Fallback`]): each target is called with its own model; the answering
//!   stream opens with a `ResponseMetadata` naming the model that answered (which persistence and tracing
//!   record), an [`AnsweredBy`] in the request is told the target and its [`ModelMetadata`](tower_chat::ModelMetadata),
//!   and when every target fails the error lists each attempt ([`AllTargetsFailed`]).
//! - **Circuit breaker** ([`CircuitBreakerLayer`]): opens on consecutive failures or a failure ratio in a
//!   sliding window, refuses calls at once while open ([`CircuitOpen`]), lets one probe through after a cool-down.
//!   [`Target::breaker`] gives a fallback target the same breaker, driven by the fallback itself (which already
//!   holds each stream until its first content event), so the breaker costs no stream wrapper per call.
//! - **Balance** ([`Balance`]): weighted power of two choices over peak-EWMA time to first event, a breaker per
//!   deployment, optional stickiness per conversation.
//! - Every wait and timestamp goes through a [`Clock`] ([`TokioClock`] by default, which follows
//!   `tokio::time::pause()` in tests); every retry, fallback and breaker transition is reported to an
//!   [`Observer`] (the gateway's `/metrics`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod balance;
mod boxed;
mod breaker;
mod breaker_state;
mod clock;
mod fallback;
mod first;
mod observe;
mod policy;
mod retry;
mod watch;

pub use balance::{Balance, BalanceBuilder, BalanceFuture, Deployment};
pub use boxed::BoxedChatFuture;
pub use breaker::{
    is_circuit_open, BreakerHandle, CircuitBreaker, CircuitBreakerLayer, CircuitOpen, FailureRatio,
    ResponseFuture as BreakerFuture,
};
pub use breaker_state::BreakerState;
pub use clock::{Clock, Sleep, TokioClock};
pub use fallback::{
    default_fallback_on, AllTargetsFailed, Answer, AnsweredBy, FailedAttempt, Fallback,
    FallbackFuture, FallbackLayer, Target,
};
pub use observe::{Observer, ResilienceEvent};
pub use policy::{is_transient, Backoff, Jitter};
pub use retry::{ResponseFuture as RetryFuture, Retry, RetryLayer, RetryScope};

/// The guide's page on this crate (`docs/src/library/resilience.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library/resilience.md")]
pub struct GuideDoctests;
