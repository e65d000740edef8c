//! # tower-chat-persistence
//!
//! A [`PersistenceLayer`] records every chat call that passes through it — request, streamed response, usage,
//! timestamps and outcome — in a [`Store`]: [`SqliteStore`] (embedded default: one file, WAL mode) or
//! [`PostgresStore`] (several gateway replicas sharing one database through a connection pool). Both apply
//! their migrations on open and share one schema.
//!
//! ```
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_chat::{ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ConversationId, FinishReason, Message};
//! use tower_chat_persistence::{Persistence, PersistenceLayer, SqliteStore, Store};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let store = SqliteStore::open(dir.path().join("chat.db")).await?;
//! let layer = PersistenceLayer::new(store.clone()); // options: `.prices(..)`, `.fail_open()`, …
//!
//! // Any chat service: here one that always answers "Hello!".
//! let model = service_fn(|_req: ChatRequest| async {
//!     let events = vec![Ok(ChatEvent::text("Hello!")), Ok(ChatEvent::finish(FinishReason::Stop))];
//!     Ok::<ChatStream, tower_chat::ChatError>(Box::pin(futures_util::stream::iter(events)))
//! });
//! // `layer.layer(leaf)` records the provider the leaf reports (`ModelInfo`); this stand-in has none, so it is
//! // wrapped directly and its records carry no provider.
//! let chat = Persistence::new(model, layer);
//!
//! let conversation = ConversationId::new("conv-1");
//! let request = ChatRequest::new(vec![Message::user("Hi")]).with_extension(conversation.clone());
//! let response = chat.oneshot(request).await?.collect_response().await?;
//! assert_eq!(response.text(), "Hello!");
//!
//! // Fail-closed (the default): a call that finished has been stored. Continue from the store:
//! let history = store.load_conversation(&conversation).await?;
//! assert_eq!(history, vec![Message::user("Hi"), Message::assistant("Hello!")]);
//! # Ok(()) }
//! ```
//!
//! ## How records are written
//! Per event the layer does no I/O: its stream folds each event into a [`tower_chat::ResponseBuilder`] and
//! passes it on. When the stream ends, fails or is dropped, the record goes to a background writer through a
//! bounded buffer, and the writer stores records in batches (one transaction each). The [`FailurePolicy`]
//! decides what the caller sees when that fails:
//! - [`FailurePolicy::FailClosed`] (default): the final `Finish` event is held until the record is stored;
//!   if storing fails the stream yields an [`tower_chat::ErrorKind::Store`] error instead of `Finish`. A full
//!   buffer delays the end of finishing calls (never events in flight). When the call fails anyway (an error
//!   item, a failed service call) or the caller dropped the stream, there is nobody to report to: the record
//!   is handed over without waiting, and a store failure is logged and counted.
//! - [`FailurePolicy::FailOpen`]: calls never wait for the store; a full buffer or a failed write drops the
//!   record, counted in [`PersistenceStats`] and logged at `error` level (rate-limited).
//!
//! [`PersistenceLayer::flush`] waits until every record handed over so far is written; call it before shutting
//! the runtime down. What a committed record survives (a killed process; a power loss only with
//! [`Durability::PowerLoss`]) is in the guide's storage page (`docs/src/storage.md`, "Durability").
//!
//! ## How records are stored
//! Message-level: each message of a conversation is stored once, as a content-addressed node of its chain, and a
//! record refers to the last node of its history and stores only what it produced (usage, finish reason,
//! timestamps, outcome, …). A client that resends its whole history (a stateless Chat Completions client, with
//! or without a conversation id) maps onto the nodes already stored, so storage grows linearly with a
//! conversation. The store remembers recently written chains, so only new messages are serialised; after a
//! minute without records ([`RELEASE_CACHES_AFTER`]) it forgets them, handing the memory back.
//!
//! Binary parts (images, audio, files as bytes) are stored once, by the SHA-256 of their bytes, in their own
//! table (raw bytes, in the transaction of the messages that refer to them); a message's JSON keeps a reference
//! where the base64 would be. Every read returns the parts with their bytes; a blob is only readable through a
//! record that holds it. Messages stored before (base64 in their JSON) read as before.
//!
//! ## What is recorded
//! See [`CallRecord`]: call id, conversation id (from the request's [`tower_chat::ConversationId`], generated
//! and inserted into the request when absent), caller, round index within the turn, start / first-token / end
//! timestamps, provider and model, the messages and options sent (tools offered included), the response
//! (text, reasoning, tool calls, tool results a tool loop ran, usage, finish reason) and the [`CallOutcome`]:
//! completed, failed, cancelled or interrupted, with the partial output (and, opt-in, `in_flight` while a call
//! runs, so that a process killed mid-stream leaves a trace of what it was serving). A call an inner layer refused
//! before sending it ([`tower_chat::ChatError::is_refused_before_sending`]) is recorded without its request, by its
//! size ([`RecordedRequest::omitted`]); a call without a usage report records the estimate an inner layer charged
//! ([`tower_chat::EstimatedUsage`], [`CallRecord::usage_estimated`]). Secrets are never stored:
//! credentials live in the leaf service, request extensions are not recorded, and credential-like `extra`
//! options are redacted ([`redact_options`]).
//!
//! ## Placement
//! Inside a tool loop the layer records each model round trip (round index 0, 1, …); outside it records whole
//! turns, tool results included. Both can be stacked.
//!
//! ## Other crates' tables
//! [`Migration`]s added through [`SqliteStoreBuilder::migration`] / [`PostgresStoreBuilder::migration`] are
//! applied with the crate's own; [`SqliteStore::with_connection`] and [`PostgresStore::pool`] give access to
//! the same database; [`SqliteStore::apply_migrations`] / [`PostgresStore::apply_migrations`] add tables to a
//! store already open. This is how the approval crate keeps its pending approvals and audit log next to the
//! call records (one file or one pool for both); this crate knows nothing about approvals.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]
// Without a database feature only the trait and the layer remain; the column helpers go unused.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

mod call_log;
mod config;
mod draft;
mod layer;
mod record;
mod recorder;
mod screening;
mod service;
mod spend;
pub mod store;
mod stream;
mod usage;

pub use call_log::{
    check_search, search_words, CallLogCursor, CallLogEntry, CallLogPage, CallLogPosition,
    CallLogQuery, CallStatus, InvalidCursor, MalformedSearch, UnknownCallStatus,
    FIRST_MESSAGE_CHARS, MAX_INDEXED_BYTES, MAX_INDEXED_WORD_CHARS, MAX_SEARCH_CHARS,
    MAX_SEARCH_WORDS,
};
pub use layer::PersistenceLayer;
pub use record::{
    is_secret_name, redact_options, CallId, CallOutcome, CallQuery, CallRecord, CallSummary,
    CallerTeam, ConversationQuery, ConversationSummary, RecordedError, RecordedRequest, RequestId,
    RequestSize, RequestedCallId, Spend, SpendQuery, REDACTED,
};
pub use recorder::{FailurePolicy, PersistenceStats, RELEASE_CACHES_AFTER};
pub use service::{Persistence, ResponseFuture};
pub use spend::{SpendRollupQuery, SpendRow, UtcDay};
#[cfg(feature = "postgres")]
pub use store::postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "sqlite")]
pub use store::sqlite::{Checkpoint, Durability, SqliteStore, SqliteStoreBuilder};
pub use store::{
    Migration, Purged, Retention, RetentionTooShort, Store, StoreError, StoreErrorKind,
};
pub use stream::RecordingStream;
pub use usage::{LatencyPercentiles, UsageAggregate, UsageQuery};

/// The guide's page on this crate (`docs/src/storage.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/storage.md")]
pub struct GuideDoctests;
