//! Where the approvals stand that paused the call log's calls: each call that ended asking for tools is matched
//! with the approval its turn paused on ([`super::outcome::held`]), and the calls whose approval still waits are
//! listed for the log's "awaiting approval" filter (no stored status: the approval store says it).

use std::collections::HashMap;

use tower_chat::ConversationId;
use tower_chat_persistence::{CallLogEntry, CallLogPosition, CallLogQuery, Store};

use super::outcome::{Approval, AskedForTools};
use super::state::ConsoleState;

/// Where the approvals stand that held the turns of the page's calls that ended asking for tools, by call id
/// ([`super::outcome::held`]); the next call of a conversation is looked for on the page only.
pub(super) async fn paused_approvals(
    state: &ConsoleState,
    entries: &[CallLogEntry],
) -> HashMap<String, Approval> {
    let mut found = HashMap::new();
    let asked: Vec<&CallLogEntry> = entries
        .iter()
        .filter(|e| e.summary.asked_for_tools)
        .collect();
    if asked.is_empty() {
        return found;
    }
    // One read of what waits (at most a page of it) serves every row.
    let listed: Vec<crate::operator::Listed> =
        crate::operator::pending_page(&state.operators, None, crate::operator::MAX_LIST)
            .await
            .map(|page| page.listed)
            .unwrap_or_default();
    let mut audits: HashMap<&ConversationId, Vec<tower_chat_approval::AuditRecord>> =
        HashMap::new();
    for entry in asked {
        let call = &entry.summary;
        let conversation = &call.conversation_id;
        if !audits.contains_key(conversation) {
            let audit = match &state.operators.approval_store {
                Some(store) => store.audit_log(conversation).await.unwrap_or_default(),
                None => Vec::new(),
            };
            audits.insert(conversation, audit);
        }
        let next_started = entries
            .iter()
            .map(|e| &e.summary)
            .filter(|e| &e.conversation_id == conversation && e.started_at > call.started_at)
            .map(|e| e.started_at)
            .min();
        let waiting: Vec<&crate::operator::Listed> = listed
            .iter()
            .filter(|l| &l.paused.conversation == conversation)
            .collect();
        let audit: Vec<&tower_chat_approval::AuditRecord> =
            audits.get(conversation).into_iter().flatten().collect();
        let asked = AskedForTools {
            started_at: call.started_at,
            ended_at: call.ended_at,
            next_started,
        };
        if let Some(approval) = super::outcome::held(asked, &waiting, &audit) {
            found.insert(call.call_id.as_str().to_owned(), approval);
        }
    }
    found
}

/// The calls whose turn waits for an operator's decision now, newest first, with `query`'s caller and model:
/// the recorded calls of every conversation with a pending approval (at most the listed page of them), kept
/// where the approval the call paused on still waits ([`super::outcome::held`]).
pub(super) async fn awaiting_approval(
    state: &ConsoleState,
    records: &dyn Store,
    query: &CallLogQuery,
    limit: u32,
) -> Result<Vec<CallLogEntry>, String> {
    let listed = crate::operator::pending_page(&state.operators, None, crate::operator::MAX_LIST)
        .await
        .map_err(|e| format!("Reading the pending approvals failed: {}", e.message))?
        .listed;
    let conversations: std::collections::BTreeSet<&str> = listed
        .iter()
        .filter(|l| l.status == "pending")
        .map(|l| l.paused.conversation.as_str())
        .collect();
    let mut entries = Vec::new();
    for conversation in conversations {
        let page = records
            .call_log(&CallLogQuery {
                search: Some(conversation.to_owned()),
                position: CallLogPosition::Latest,
                limit: Some(limit),
                ..query.clone()
            })
            .await
            .map_err(|e| format!("Reading the call log failed: {e}"))?;
        entries.extend(
            page.entries
                .into_iter()
                .filter(|e| e.summary.conversation_id.as_str() == conversation),
        );
    }
    let approvals = paused_approvals(state, &entries).await;
    entries.retain(|e| approvals.get(e.summary.call_id.as_str()) == Some(&Approval::Pending));
    entries.sort_by(|a, b| {
        (b.summary.started_at, b.summary.call_id.as_str())
            .cmp(&(a.summary.started_at, a.summary.call_id.as_str()))
    });
    Ok(entries)
}
