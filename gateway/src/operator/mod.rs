//! Operator decisions: people other than the client approve or deny a paused call.
//!
//! With `--operator-keys-file PATH` (same format as `--api-keys-file`, keys distinct from every client key):
//!
//! | route | key | what |
//! |---|---|---|
//! | `POST /v1/approvals/{id}/decision` | operator | `{"approved": true, "reason": "…"}`: decide a pending approval (once; 409 afterwards) |
//! | `GET /v1/approvals?limit=N&after=CURSOR` | operator | the unexpired pending approvals of every gateway process on the database (the approval layer's store), soonest to expire (with one `--approval-ttl`: oldest) first, a page of at most 200 at a time |
//! | `GET /v1/approvals/{id}?wait=SECS` | client (the paused turn's caller) | the decision so far: `pending`, `approved` or `denied`; waits up to `wait` seconds (at most 60) for one |
//!
//! A caller may have `--max-polls-per-key` (default 16) polls with a `wait` waiting at once (callers without a
//! gateway key count as one caller); one more is refused at once with `429 too_many_polls` and `Retry-After`,
//! rather than answered `pending` without waiting, which would invite a client to poll again at once. Polls
//! without `wait` answer at once and are not counted.
//!
//! The waiting client then resends its conversation as it has it (ending with the approval notice) **without**
//! `tower_chat.approvals`: the gateway finds the notice's approval ids, takes the operators' decisions and
//! resumes the turn with the operator as the approver (`ApproverIdentity("operator:NAME")`), so the approval
//! layer's audit log names the operator. A resend before every id is decided gets `409 approval_pending`.
//!
//! Failed operator-key checks share the console's failed-login limit (`login_throttle.rs`), counted by the key
//! presented and the client address (behind a reverse proxy, the one `--trusted-proxy-header` reports): over
//! it, `429 too_many_failed_logins` with `Retry-After`, before the key is looked at. A request without a key,
//! or with a client key, is answered 401 without counting.
//!
//! While operator keys are configured, the approver rule lets only operators approve: a client's own
//! `"approved": true` is refused (`approver_rejected`); a client may still deny its own call.
//!
//! Decisions are kept with the pending approval in the approval layer's store
//! ([`ApprovalStore::decide_pending`](tower_chat_approval::ApprovalStore::decide_pending)), so every process on
//! the database sees them: an operator may decide in one replica, the client wait in a second and resend to a
//! third; a restart loses nothing. A gateway without a store (built around a stack of its own) keeps decisions
//! in its memory, for the turns paused in it.

mod api;
pub(crate) mod console;
mod decisions;
mod listing;
pub(crate) mod login_throttle;

pub(crate) use api::*;
pub(crate) use decisions::*;
pub use decisions::{MAX_WAIT, OPERATOR_PREFIX};
pub(crate) use listing::*;
