//! Pending approvals as operators see them ([`Listed`]): pages of them from the approval store or this process,
//! and their JSON for `GET /v1/approvals` and the console.

use std::time::SystemTime;

use serde_json::json;
use tower_chat::{CallerIdentity, ConversationId, ToolArguments};
use tower_chat_approval::{PendingApproval, PendingCursor};

use crate::error::ApiError;
use tower_chat_wire::format::ApprovalNotice;

use super::decisions::*;

/// Seconds since the Unix epoch.
pub(crate) fn unix(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One pending approval as operators see it: the paused call, and whether an operator already decided it (the
/// client has not resumed yet).
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub(crate) paused: crate::turn::pending::PausedApproval,
    /// `pending`, `approved` or `denied`.
    pub(crate) status: &'static str,
    /// Who decided, when and why, once decided.
    pub(crate) decision: Option<ListedDecision>,
}

/// An operator's decision on a listed approval, while its client has not resumed.
#[derive(Debug, Clone)]
pub(crate) struct ListedDecision {
    pub(crate) approver: String,
    pub(crate) reason: Option<String>,
    pub(crate) decided_at: SystemTime,
}

/// The most pending approvals one `GET /v1/approvals` (or console inbox) answer lists.
pub(crate) const MAX_LIST: usize = 200;

/// One page of pending approvals, oldest first.
#[derive(Debug)]
pub(crate) struct ListedPage {
    pub(crate) listed: Vec<Listed>,
    /// Where the next page starts, when there is one.
    pub(crate) next: Option<PendingCursor>,
}

fn status(approved: bool) -> &'static str {
    if approved {
        "approved"
    } else {
        "denied"
    }
}

/// What waits for a decision (unexpired), oldest first, at most `limit` (≤ [`MAX_LIST`]) after `after`: from the
/// approval layer's store when the gateway has one — every process on the database, and turns paused before a
/// restart — else the turns paused in this process.
pub(crate) async fn pending_page(
    state: &OperatorState,
    after: Option<&PendingCursor>,
    limit: usize,
) -> Result<ListedPage, ApiError> {
    let limit = limit.clamp(1, MAX_LIST);
    let now = SystemTime::now();
    let Some(store) = &state.approval_store else {
        // One time to live for every turn paused here: expiry order is pause order.
        let ttl = state.decisions.ttl;
        let mut listed: Vec<Listed> = pending_list(state)
            .into_iter()
            .filter(|l| {
                after.is_none_or(|c| {
                    (l.paused.paused_at + ttl, l.paused.notice.id.as_str())
                        > (c.expires_at, c.approval_id.as_str())
                })
            })
            .take(limit + 1)
            .collect();
        let next = (listed.len() > limit).then(|| {
            listed.truncate(limit);
            let last = &listed[limit - 1].paused;
            PendingCursor {
                expires_at: last.paused_at + ttl,
                approval_id: last.notice.id.clone(),
            }
        });
        return Ok(ListedPage { listed, next });
    };
    // One more than asked for tells whether another page follows.
    let mut page = store
        .list_pending(now, after, limit + 1)
        .await
        .map_err(|e| crate::error::from_chat(&e))?;
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        PendingCursor::after(&page[limit - 1])
    });
    let listed = page
        .into_iter()
        .map(|p| stored_listed(state, p, now))
        .collect();
    Ok(ListedPage { listed, next })
}

/// The status of approval `id` and its decision, as this process's operators decided it.
fn local_decision(
    state: &OperatorState,
    id: &str,
    caller: Option<&CallerIdentity>,
) -> (&'static str, Option<ListedDecision>) {
    match state.decisions.get(id, caller) {
        Some(d) => (
            status(d.approved),
            Some(ListedDecision {
                approver: d.approver,
                reason: d.reason,
                decided_at: d.decided_at,
            }),
        ),
        None => ("pending", None),
    }
}

/// A pending approval of the store as operators see it at `now`: decided in the store, or by this process.
fn stored_listed(state: &OperatorState, p: PendingApproval, now: SystemTime) -> Listed {
    let (status, decision) = match &p.decision {
        Some(d) => (
            status(d.approved),
            Some(ListedDecision {
                approver: d.approver.clone(),
                reason: d.reason.clone(),
                decided_at: d.decided_at,
            }),
        ),
        None => local_decision(state, &p.approval_id, p.caller.as_ref()),
    };
    Listed {
        status,
        decision,
        paused: crate::turn::pending::PausedApproval {
            notice: ApprovalNotice {
                tool: p.call.name.clone(),
                arguments: match &p.call.arguments {
                    ToolArguments::Json(value) => value.clone(),
                    ToolArguments::Invalid { raw, .. } => raw.clone().into(),
                },
                reason: p.reason,
                id: p.approval_id,
            },
            caller: p.caller,
            conversation: p.conversation_id,
            paused_at: p.created_at,
            expires_in: p.expires_at.duration_since(now).unwrap_or_default(),
            context: p.context,
        },
    }
}

/// The pages read at most for one conversation's pending approvals ([`pending_in_conversation`]): 10 × 200 waiting
/// approvals across every conversation before the oldest are not shown on a timeline.
const MAX_CONVERSATION_PAGES: usize = 10;

/// What waits for a decision in `conversation`, oldest first: from the approval store when the gateway has one
/// (every process on the database), else this process's paused turns. Reads the store's pages in order, at most
/// [`MAX_CONVERSATION_PAGES`] of them.
pub(crate) async fn pending_in_conversation(
    state: &OperatorState,
    conversation: &ConversationId,
) -> Result<Vec<Listed>, ApiError> {
    let mut found = Vec::new();
    let mut after = None;
    for _ in 0..MAX_CONVERSATION_PAGES {
        let page = pending_page(state, after.as_ref(), MAX_LIST).await?;
        found.extend(
            page.listed
                .into_iter()
                .filter(|l| &l.paused.conversation == conversation),
        );
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(found)
}

/// The approval `id` as listed, when it is pending (decided or not) and unexpired: from the approval store when
/// the gateway has one, else this process's paused turns.
pub(crate) async fn find_listed(state: &OperatorState, id: &str) -> Option<Listed> {
    if state.approval_store.is_some() {
        let p = stored_pending(state, id).await?;
        return Some(stored_listed(state, p, SystemTime::now()));
    }
    pending_list(state)
        .into_iter()
        .find(|l| l.paused.notice.id == id)
}

/// The turns paused in this process (unexpired), oldest first, with this process's decisions.
pub(crate) fn pending_list(state: &OperatorState) -> Vec<Listed> {
    state
        .pending
        .list()
        .into_iter()
        .map(|paused| {
            let (status, decision) =
                local_decision(state, &paused.notice.id, paused.caller.as_ref());
            Listed {
                paused,
                status,
                decision,
            }
        })
        .collect()
}

/// One listed approval as JSON (`GET /v1/approvals` and the console's inbox poll).
pub(crate) fn listed_json(listed: &Listed) -> serde_json::Value {
    let p = &listed.paused;
    json!({
        "id": p.notice.id,
        "tool": p.notice.tool,
        "arguments": p.notice.arguments,
        "reason": p.notice.reason,
        "caller": p.caller.as_ref().map(|c| c.as_str()),
        "conversation": p.conversation.as_str(),
        "paused_at": unix(p.paused_at),
        "expires_in": p.expires_in.as_secs(),
        "status": listed.status,
        "context": {
            "user_message": p.context.user_message,
            "model_text": p.context.model_text,
        },
    })
}
