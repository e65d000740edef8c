//! # tower-chat-limits
//!
//! A [`LimitsLayer`] enforces rate limits and budgets per caller (and, optionally, per caller and model):
//! requests, input tokens and output tokens per window, cost per UTC day and per UTC calendar month, and calls in
//! progress. Counters live in a [`LimitStore`]: [`MemoryStore`] (the default, one process) or, with the `redis`
//! feature, [`RedisStore`] (several replicas sharing one cap).
//!
//! ```
//! use futures_util::stream;
//! use std::time::Duration;
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_chat::{
//!     BoxChatService, CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, Cost,
//!     ErrorKind, FinishReason, Message, ModelMetadata, ModelPrice, PriceTable, Usage,
//! };
//! use tower_chat_limits::{CounterKind, LimitPolicy, Limits, LimitsLayer, WindowLimit};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ChatError> {
//! // Any chat service: here one that answers "Hi!" and reports its usage, described as a leaf whose default
//! // model is gpt-4o-mini (a real leaf, `OpenAiChat` or `AnthropicChat`, describes itself).
//! let answer = service_fn(|_req: ChatRequest| async {
//!     let usage = Usage { input_tokens: 12, output_tokens: 3, ..Usage::default() };
//!     let events = vec![ChatEvent::text("Hi!"), ChatEvent::Usage { usage }, ChatEvent::finish(FinishReason::Stop)];
//!     Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
//! });
//! let model = BoxChatService::with_metadata(answer, ModelMetadata::new("openai").model("gpt-4o-mini"));
//!
//! // Every caller: 2 calls per minute and $5 a day; prices per million tokens.
//! let policy = LimitPolicy::new(
//!     Limits::none().requests(WindowLimit::per_minute(2)).cost_per_day(Cost::from_usd(5.0)),
//! );
//! let prices = PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million_usd(0.15, 0.6));
//! // Requests that name no model are priced as the leaf's default model, read from `ModelInfo`.
//! let limits = LimitsLayer::new(policy).prices(prices);
//! let chat = limits.layer(model);
//!
//! let call = || {
//!     ChatRequest::new(vec![Message::user("Hello")])
//!         .with_extension(CallerIdentity::new("alice"))
//! };
//! for _ in 0..2 {
//!     chat.clone().oneshot(call()).await?.collect_response().await?;
//! }
//! // The third call in the same minute is refused before the model is called.
//! let refused = chat.clone().oneshot(call()).await.err().unwrap();
//! assert!(matches!(refused.kind(), ErrorKind::RateLimited { retry_after: Some(_) }));
//!
//! // Spend is settled with the reported usage: 2 × (12 × $0.15 + 3 × $0.60) / 1M.
//! let usage = limits.usage("alice").await?;
//! assert_eq!(usage.counter(CounterKind::CostPerDay).unwrap().used, 2 * 3_600);
//! # Ok(()) }
//! ```
//!
//! ## How a call is counted
//! 1. **Reserve.** Before the inner service is called, the layer estimates the call — the prompt's characters
//!    divided by [`LimitsLayer::chars_per_token`], the request's `max_output_tokens` (or
//!    [`LimitsLayer::default_max_output_tokens`]), and their cost from the [`tower_chat::PriceTable`]
//!    (when a scope of the call has a cost budget; a cost moves no other counter, so otherwise it is zero) —
//!    and asks the store to charge every counter of the call's scopes at once. If any counter lacks room, none
//!    is charged and the call fails with [`tower_chat::ErrorKind::RateLimited`] and a `retry_after` (the end of
//!    the fullest window; [`CONCURRENT_RETRY_AFTER`], one second, when only calls in progress are full) before
//!    anything is sent upstream. The [`Rejection`] is the error's source.
//! 2. **Settle.** When the response stream ends, fails or is dropped, the reservation is replaced by what the
//!    call used: the sum of its [`tower_chat::ChatEvent::Usage`] events (streamed or not), priced with the
//!    table. A call cancelled before the provider's usage report is charged the estimated prompt and the output
//!    characters it was seen to produce; a call the provider refused (the service call failed) is charged
//!    nothing but keeps its request count. A call in progress frees its concurrency slot then. An estimated charge
//!    is also left in the request's [`tower_chat::EstimatedUsage`], when a layer outside (persistence) put one
//!    there, so the call's record carries what was charged.
//!
//! Refusals (over a limit, an estimate over a limit on its own, an unpriced model under a cost budget, a failed
//! store when fail-closed) are marked [`tower_chat::ChatError::refused_before_sending`]: nothing reached the
//! provider, and a recording layer keeps a small record of them.
//!
//! Usage is settled into the windows the call was admitted in. Placed inside a
//! [tool loop](https://docs.rs/tower-chat-function-invocation) the layer counts every model round (each one is
//! checked and settled on its own); placed outside it, a whole turn is one call whose usage is the sum of its
//! rounds.
//!
//! ## Windows and clocks
//! Request and token windows are fixed and aligned to the Unix epoch (a one-minute window starts on the
//! minute); cost windows are the UTC calendar day and month. Time comes from a [`Clock`]; tests use a
//! [`ManualClock`].
//!
//! ## Stores and failures
//! With [`StoreFailure::FailClosed`] (the default) a store failure refuses the call with
//! [`tower_chat::ErrorKind::Store`]; with [`StoreFailure::FailOpen`] the call is admitted unchecked, logged and
//! counted in [`LimitStats::admitted_unchecked`], and charged its real usage when it ends. A call dropped while
//! the store is deciding is settled as one that sent nothing once the store answers.
//!
//! ## Teams and a live policy
//! [`LimitPolicy::team`] gives a team limits of its own and [`LimitPolicy::member`] puts a caller in it: each
//! member's call is counted in its own scopes and in the team's (one set of counters for all members, apart
//! from any caller's of the same name), reserved together (if the team lacks room nothing is charged and the
//! refusal names the team) and settled together. [`LimitsLayer::set_policy`] replaces the policy for every call
//! that starts afterwards, on every clone of the layer and every service built from it; calls already admitted
//! settle into the scopes they were admitted with.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod clock;
mod estimate;
mod layer;
mod limits;
mod media;
mod plan;
mod service;
mod shared;
pub mod store;
mod stream;
mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use estimate::estimate_input_tokens;
pub use layer::{LimitsLayer, ScopeUsage, UsageReport};
pub use limits::{CounterKind, LimitPolicy, Limits, Scope, ScopeKey, WindowLimit, ANONYMOUS};
pub use service::{Limited, ResponseFuture};
pub use shared::{LimitStats, StoreFailure};
pub use store::{
    Admission, CounterUsage, Demand, LimitStore, LimitStoreError, MemoryStore, Rejection,
    StoreReply, Ticket, CONCURRENT_RETRY_AFTER,
};
#[cfg(feature = "redis")]
pub use store::{RedisStore, RedisStoreBuilder};
pub use stream::LimitedStream;
pub use window::Window;

/// The guide's page on this crate (`docs/src/library/limits.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library/limits.md")]
pub struct GuideDoctests;
