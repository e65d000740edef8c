//! # tower-chat-approval
//!
//! [`ApprovalLayer`] makes the tool loop's human-in-the-loop pause safe to expose to real users across
//! processes. Place it **outside** a [`FunctionInvocationLayer`](tower_chat_function_invocation::FunctionInvocationLayer):
//!
//! - **Policy**: per-tool flags ([`ApprovalLayer::require_approval`]) and a [policy function](ApprovalLayer::policy)
//!   of the tool, the parsed arguments and the request's context decide per call: [`Verdict::Allow`],
//!   [`Verdict::RequireApproval`] (with a reason shown to the approver) or [`Verdict::Deny`] (with a reason given
//!   to the model as "not approved: {reason}").
//! - **Issuing**: each [`ApprovalRequest`](tower_chat::ApprovalRequest) the loop emits is recorded in an
//!   [`ApprovalStore`] as a [`PendingApproval`] — conversation, caller, call id, tool name, arguments, reason,
//!   expiry — *before* the caller sees it, under a fresh unguessable id (`apr_` + 122 random bits) that replaces the
//!   call id in the event.
//! - **Verifying**: a request carrying [`ApprovalDecisions`](tower_chat::ApprovalDecisions) has every decision
//!   checked before anything runs. A decision is refused when its id is unknown, already used, expired, issued in
//!   another conversation or to another caller, when the call is no longer pending in the history, when the
//!   history now shows a different tool name or arguments than what was approved, or when the
//!   [approver rule](ApprovalLayer::approver_rule) rejects the approver. Any refusal fails the call with an
//!   [`ErrorKind::Approval`](tower_chat::ErrorKind::Approval) error whose source is [`ApprovalRefused`] (one
//!   [`Refusal`] per refused decision); no decision is applied and no tool runs.
//! - **Single use**: verified approvals are taken from the store atomically (of concurrent requests, one wins),
//!   and only then handed to the loop, translated to the call ids it expects. Decisions the request carried for
//!   raw call ids never reach the loop.
//! - **Audit**: every decision — approved, denied or refused — is an [`AuditRecord`] (who, when, what, outcome).
//! - **Stores**: [`MemoryApprovalStore`] (default); with the `sqlite` or `postgres` feature
//!   `SqliteApprovalStore` / `PostgresApprovalStore`, this crate's tables in the database a `PersistenceLayer`
//!   writes to, so a pause in one replica resumes in another, or after a restart.
//!
//! ```
//! use futures_util::stream;
//! use serde_json::{json, Value};
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_chat::{
//!     ApprovalDecision, ApprovalDecisions, CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream,
//!     ChatStreamExt, ConversationId, FinishReason, Message, ToolCall,
//! };
//! use tower_chat_approval::{ApprovalLayer, ApproverIdentity, Verdict};
//! use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ChatError> {
//! let write_file = tool_json("write_file", "Write a file", json!({"type": "object"}), |args: Value, _ctx| async move {
//!     Ok::<_, String>(format!("wrote {}", args["path"]))
//! });
//!
//! let approvals = ApprovalLayer::new()
//!     // Writes outside ./workspace need approval; admins never ask; guests may not write at all.
//!     .policy(|input| {
//!         if input.tool_name() != "write_file" {
//!             return input.default_verdict();
//!         }
//!         match input.caller().map(|c| c.as_str()) {
//!             Some("admin") => Verdict::Allow,
//!             Some("guest") | None => Verdict::deny("guests cannot write files"),
//!             Some(_) => match input.arguments()["path"].as_str() {
//!                 Some(path) if path.starts_with("./workspace/") => Verdict::Allow,
//!                 _ => Verdict::require("writes outside ./workspace"),
//!             },
//!         }
//!     })
//!     // Only operators decide.
//!     .approver_rule(|input| match input.approver() {
//!         Some(who) if who.starts_with("operator:") => Ok(()),
//!         _ => Err("only operators may decide".into()),
//!     });
//!
//! // A stand-in model: it writes /etc/motd, then reports the tool's answer.
//! let model = service_fn(|request: ChatRequest| async move {
//!     let events = match request.messages.last() {
//!         Some(Message::Tool(result)) => vec![ChatEvent::text(result.content.to_string()), ChatEvent::finish(FinishReason::Stop)],
//!         _ => {
//!             let call = ToolCall::new("call-1", "write_file", json!({"path": "/etc/motd"}));
//!             vec![ChatEvent::ToolCallEnd { index: 0, call }, ChatEvent::finish(FinishReason::ToolCalls)]
//!         }
//!     };
//!     Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
//! });
//! let chat = approvals.layer(FunctionInvocationLayer::new().tool(write_file)?.layer(model));
//!
//! // 1. The call pauses: the stream reports an approval request (stored first) and ends `awaiting_approval`.
//! let mut history = vec![Message::user("Update the motd")];
//! let request = ChatRequest::new(history.clone())
//!     .with_extension(ConversationId::new("conv-7"))
//!     .with_extension(CallerIdentity::new("alice"));
//! let paused = chat.clone().oneshot(request).await?.collect_response().await?;
//! assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
//! let approval = &paused.approval_requests[0];
//! assert!(approval.id.starts_with("apr_"));
//! assert_eq!(approval.reason.as_deref(), Some("writes outside ./workspace"));
//!
//! // 2. An operator approves; the same conversation resumes (in any replica sharing the store).
//! history.extend(paused.messages);
//! let resume = ChatRequest::new(history.clone())
//!     .with_extension(ConversationId::new("conv-7"))
//!     .with_extension(CallerIdentity::new("alice"))
//!     .with_extension(ApproverIdentity::new("operator:bob"))
//!     .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve(approval.id.clone())]));
//! let done = chat.clone().oneshot(resume).await?.collect_response().await?;
//! assert_eq!(done.text(), "wrote \"/etc/motd\"");
//!
//! // 3. The id was single-use: replaying it is refused before anything runs.
//! let replay = ChatRequest::new(history)
//!     .with_extension(ConversationId::new("conv-7"))
//!     .with_extension(CallerIdentity::new("alice"))
//!     .with_extension(ApproverIdentity::new("operator:bob"))
//!     .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve(approval.id.clone())]));
//! let error = chat.oneshot(replay).await.err().expect("refused");
//! assert_eq!(error.kind(), &tower_chat::ErrorKind::Approval);
//! # Ok(()) }
//! ```
//!
//! ## Binding and identities
//! Approvals are bound to the request's [`ConversationId`](tower_chat::ConversationId) (required: a call that
//! needs approval in a request without one ends the stream with an
//! [`ErrorKind::InvalidRequest`](tower_chat::ErrorKind::InvalidRequest) error) and its
//! [`CallerIdentity`](tower_chat::CallerIdentity): the resuming request must carry the same. Who decided is the
//! request's [`ApproverIdentity`] when set (an operator deciding on a user's conversation), else its caller; the
//! approver rule and the audit log see it.
//!
//! ## Stable ids, re-asking, expiry
//! An approval id names one call for its time to live ([`ApprovalLayer::ttl`], 24 hours by default). If the loop
//! asks again about a call that got no decision, a new id is issued; any unused id for that call still works
//! once, and after the call was decided every other id for it is refused (the call is no longer pending).
//! Expired approvals stay in the store, refused, until [`ApprovalStore::purge_expired`] removes them.
//!
//! ## Cargo features
//! - `sqlite`: `SqliteApprovalStore`, in the file of the persistence crate's `SqliteStore` (survives restarts;
//!   see the `durable_resume` example).
//! - `postgres`: `PostgresApprovalStore`, in the pool of its `PostgresStore` (replicas share pending approvals;
//!   of concurrent uses of one id in any number of processes, one wins).
//!
//! The approval tables belong to this crate (the persistence crate only lends its connection and migration
//! runner), so the two can share one database file or pool.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod clock;
mod error;
mod layer;
mod placement;
mod policy;
mod record;
mod service;
mod shared;
mod store;
mod stream;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod tables;
mod verify;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ApprovalRefused, Refusal, RefusalKind};
pub use layer::ApprovalLayer;
pub use placement::ApprovalMisplaced;
pub use policy::{ApproverIdentity, ApproverInput, PolicyInput, Verdict};
pub use record::{
    ApprovalContext, AuditOutcome, AuditRecord, DecideOutcome, InvalidCursor, PendingApproval,
    PendingCursor, PendingDecision, UnknownOutcome, MAX_PENDING_PAGE,
};
pub use service::{Approval, ResponseFuture};
pub use store::{ApprovalStore, MemoryApprovalStore, StoreFuture};
pub use stream::ApprovalStream;
#[cfg(feature = "postgres")]
pub use tables::PostgresApprovalStore;
#[cfg(feature = "sqlite")]
pub use tables::SqliteApprovalStore;

/// The guide's page on this crate (`docs/src/library/approvals.md`), compiled as doctests so every snippet a reader copies
/// builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/src/library/approvals.md")]
pub struct GuideDoctests;
