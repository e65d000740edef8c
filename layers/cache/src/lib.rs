//! # tower-chat-cache
//!
//! A [`CacheLayer`] answers a chat call that was already answered from a cache instead of the model: exact
//! match on everything that shapes the answer ([`CacheKey`]), per caller by default ([`CacheScope`]), in this
//! process ([`MemoryCacheStore`], bounded by bytes) or, with the `redis` feature, in Redis shared by replicas
//! (`RedisCacheStore`, entries compressed). Identical calls that arrive while the first is in flight follow
//! its stream live instead of calling the model again.
//!
//! ```
//! use std::time::Duration;
//! use tower::{Layer, ServiceExt};
//! use tower_chat::test_server::{scripted_stream, Delivery};
//! use tower_chat::{
//!     BoxChatService, CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStreamExt, FinishReason, Message,
//!     ModelMetadata, Usage,
//! };
//! use tower_chat_cache::{CacheLayer, CacheOutcome, CacheStatus, MemoryCacheStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ChatError> {
//! // Any chat service: here one that answers "Hi!" and reports its usage.
//! let model = tower::service_fn(|_req: ChatRequest| async {
//!     let usage = Usage { input_tokens: 12, output_tokens: 3, ..Usage::default() };
//!     let events = vec![ChatEvent::text("Hi!"), ChatEvent::Usage { usage }, ChatEvent::finish(FinishReason::Stop)];
//!     Ok::<_, ChatError>(scripted_stream(Delivery::OneByOne, events.into_iter().map(Ok).collect()))
//! });
//! let model = BoxChatService::with_metadata(model, ModelMetadata::new("openai").model("gpt-4o-mini"));
//!
//! // The default: 64 MiB in this process, an hour per answer, per caller. Customised: a smaller store, a
//! // shorter life for one model.
//! let cache = CacheLayer::new()
//!     .store(MemoryCacheStore::new(16 << 20))
//!     .model_ttl("gpt-4o-mini", Duration::from_secs(600));
//! let chat = cache.layer(model);
//!
//! let ask = |outcome: &CacheOutcome| {
//!     ChatRequest::new(vec![Message::user("Hello")])
//!         .with_extension(CallerIdentity::new("alice"))
//!         .with_extension(outcome.clone())
//! };
//! let first = CacheOutcome::new();
//! let answer = chat.clone().oneshot(ask(&first)).await?.collect_response().await?;
//! assert_eq!((first.get(), answer.text()), (Some(CacheStatus::Miss), "Hi!"));
//!
//! // The same question again: replayed, its usage marked so that budgets charge nothing.
//! let second = CacheOutcome::new();
//! let again = chat.clone().oneshot(ask(&second).stream(false)).await?.collect_response().await?;
//! assert_eq!((second.get(), again.text()), (Some(CacheStatus::Hit), "Hi!"));
//! assert!(again.usage.from_response_cache);
//! assert_eq!(cache.stats().hits, 1);
//! # Ok(()) }
//! ```
//!
//! ## What is cached
//! An answer is stored as its event sequence once its stream ended with a finish event: never a failed or
//! cancelled call, a filtered or refused answer (a content-filter finish), or one waiting for approvals. A hit
//! replays the events one by one for a streamed request, or merged into whole parts (one text, each tool call's
//! arguments in one piece) for a non-streamed one, whichever way the answer was first produced. Its
//! [`tower_chat::ChatEvent::Usage`] reports carry the original token counts marked
//! [`tower_chat::Usage::from_response_cache`]: [`tower_chat::ModelPrice::cost`] is zero for them, the limits layer
//! charges no tokens for them, persistence records the call at zero cost, and the tracing layer marks its span.
//!
//! ## Control
//! - **Opt-in**: nothing is cached unless the layer is in the stack. [`CacheLayer::ttl`] and
//!   [`CacheLayer::model_ttl`] set how long answers live, per model; a zero time to live turns caching off.
//! - **Per request**: [`CacheControl::NoCache`] (refresh: call the model, store the new answer) and
//!   [`CacheControl::NoStore`] (bypass) as request extensions, what a gateway sets from `Cache-Control`.
//! - **Outcome**: a [`CacheOutcome`] in the request's extensions receives the [`CacheStatus`] before the service
//!   future resolves ([`CacheStatus::header_value`] is `x-cache`'s `hit` / `miss` / `bypass`);
//!   [`CacheLayer::stats`] counts them.
//!
//! ## Identical calls in flight
//! The first caller of a key starts the upstream call in a task of its own; identical calls join it and read its
//! events from the start, live. A joining caller waits at most [`CacheLayer::follow_timeout`] for the call to be
//! accepted, then calls the model itself; once the call was accepted it follows it to the end (the leaf's own
//! idle timeout bounds a stalled stream). A caller that leaves (drops its stream, or cancels it with its
//! [`tower_chat::CancellationToken`]) ends only its own stream; the upstream call stops when every caller has
//! left. An upstream refusal is every joined caller's error.
//!
//! ## Stores
//! A store that fails or takes longer than [`CacheLayer::store_timeout`] is a miss (or a lost write), logged and
//! counted in [`CacheStatsSnapshot::store_errors`]; it never fails the call.
//!
//! ## Placement
//! Inside a [tool loop](https://docs.rs/tower-chat-function-invocation) the layer caches model calls: a replayed
//! round that calls tools still has its tools run by the loop, and the next round (with the tools' results) is
//! its own key. Outside the tool loop it caches whole turns, tool results included, and no tool runs on a hit.
//! Place it inside persistence and tracing (so a hit is recorded and traced as one) and inside the limits layer
//! (the call is still counted as a request; its replayed usage charges no tokens).
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod answer;
mod config;
mod control;
mod flight;
mod key;
mod layer;
mod service;
mod stats;
pub mod store;

pub use answer::CachedAnswer;
pub use control::{CacheControl, CacheOutcome, CacheStatus, CacheTtl};
pub use key::{CacheKey, CacheScope, EXTRA_FIELDS_NOT_IN_KEY};
pub use layer::CacheLayer;
pub use service::Cached;
pub use stats::CacheStatsSnapshot;
pub use store::{CacheStore, CacheStoreError, MemoryCacheStore};
#[cfg(feature = "redis")]
pub use store::{RedisCacheStore, RedisCacheStoreBuilder};
