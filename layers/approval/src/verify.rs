//! The incoming side: decisions are checked against the store, taken (single use), audited, and only then
//! handed to the tool loop under the call ids it knows.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use tower_chat::{
    ApprovalDecision, ApprovalDecisions, CallerIdentity, ChatError, ChatRequest, Message, ToolCall,
};

use crate::error::{ApprovalRefused, Refusal, RefusalKind};
use crate::policy::{ApproverIdentity, ApproverInput};
use crate::record::{AuditOutcome, AuditRecord, PendingApproval};
use crate::shared::Shared;
use crate::store::ApprovalStore;
use crate::stream::is_well_formed;

/// The most characters of a refused id kept in errors and the audit log: a forged id may be of any size.
const QUOTED_ID_LIMIT: usize = 64;

fn quoted_id(id: &str) -> String {
    match id.char_indices().nth(QUOTED_ID_LIMIT) {
        Some((end, _)) => format!("{}…", &id[..end]),
        None => id.to_owned(),
    }
}

/// The calls the tool loop would resume: the last assistant message's calls that have no tool message, provided
/// only tool messages follow it (the same rule the loop applies).
fn pending_calls(messages: &[Message]) -> HashMap<&str, &ToolCall> {
    let Some(at) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
    else {
        return HashMap::new();
    };
    let Message::Assistant(assistant) = &messages[at] else {
        return HashMap::new();
    };
    let mut answered = HashSet::new();
    for message in &messages[at + 1..] {
        match message {
            Message::Tool(tool) => {
                answered.insert(tool.call_id.as_str());
            }
            _ => return HashMap::new(),
        }
    }
    let mut pending = HashMap::new();
    for call in &assistant.tool_calls {
        if !answered.contains(call.id.as_str()) {
            // A repeated call id would let one decision cover two calls; the loop sees the first, so do we.
            pending.entry(call.id.as_str()).or_insert(call);
        }
    }
    pending
}

struct Context<'a> {
    shared: &'a Shared,
    request: &'a ChatRequest,
    approver: Option<&'a str>,
    now: SystemTime,
    pending: HashMap<&'a str, &'a ToolCall>,
}

impl Context<'_> {
    fn refusal(
        &self,
        decision: &ApprovalDecision,
        kind: RefusalKind,
        detail: Option<String>,
    ) -> Refusal {
        Refusal {
            approval_id: quoted_id(&decision.approval_id),
            kind,
            detail,
        }
    }

    /// Check one decision without changing anything.
    async fn check(
        &self,
        decision: &ApprovalDecision,
    ) -> Result<Result<PendingApproval, (Refusal, Option<ToolCall>)>, ChatError> {
        let store = &self.shared.store;
        let refuse = |kind, detail, call: Option<&ToolCall>| {
            Ok(Err((self.refusal(decision, kind, detail), call.cloned())))
        };
        if !is_well_formed(&decision.approval_id) {
            return refuse(RefusalKind::Unknown, None, None);
        }
        let Some(approval) = store.get_pending(&decision.approval_id).await? else {
            // Taken ids leave the pending table; the audit log tells a replay from a forgery.
            let replayed = match self.request.conversation_id() {
                Some(conversation) => store
                    .audit_log(conversation)
                    .await?
                    .iter()
                    .any(|r| r.approval_id == decision.approval_id && r.outcome.is_applied()),
                None => false,
            };
            let kind = if replayed {
                RefusalKind::Replayed
            } else {
                RefusalKind::Unknown
            };
            return refuse(kind, None, None);
        };
        let call = Some(&approval.call);
        if approval.is_expired(self.now) {
            return refuse(RefusalKind::Expired, None, call);
        }
        if self.request.conversation_id() != Some(&approval.conversation_id) {
            return refuse(RefusalKind::OtherConversation, None, call);
        }
        if self.request.caller() != approval.caller.as_ref() {
            return refuse(RefusalKind::OtherCaller, None, call);
        }
        let Some(current) = self.pending.get(approval.call.id.as_str()) else {
            return refuse(RefusalKind::NotPending, None, call);
        };
        if current.name != approval.call.name {
            let detail = format!(
                "tool `{}` was approved, the history calls `{}`",
                approval.call.name, current.name
            );
            return refuse(RefusalKind::Tampered, Some(detail), call);
        }
        if current.arguments != approval.call.arguments {
            let detail = "the arguments differ".to_owned();
            return refuse(RefusalKind::Tampered, Some(detail), call);
        }
        if let Some(rule) = &self.shared.approver_rule {
            let input = ApproverInput {
                pending: &approval,
                decision,
                approver: self.approver,
                extensions: &self.request.extensions,
            };
            if let Err(reason) = rule(&input) {
                return refuse(RefusalKind::ApproverRejected, Some(reason), call);
            }
        }
        Ok(Ok(approval))
    }

    fn audit(
        &self,
        approval_id: &str,
        call: Option<ToolCall>,
        outcome: AuditOutcome,
        reason: Option<String>,
    ) -> AuditRecord {
        AuditRecord {
            approval_id: approval_id.to_owned(),
            conversation_id: self.request.conversation_id().cloned(),
            caller: self.request.caller().cloned(),
            approver: self.approver.map(str::to_owned),
            call,
            outcome,
            reason,
            decided_at: self.now,
        }
    }

    /// Audit the refusals and turn them into the request's error.
    async fn refuse(&self, refusals: Vec<(Refusal, Option<ToolCall>)>) -> ChatError {
        // One warning per request, not per decision: a request listing thousands of forged ids must not
        // become thousands of log lines.
        if let Some((first, _)) = refusals.first() {
            tracing::warn!(
                conversation = ?self.request.conversation_id().map(|c| c.as_str()),
                kind = ?first.kind,
                refused = refusals.len(),
                "approval decisions refused"
            );
        }
        for (refusal, call) in &refusals {
            let record = self.audit(
                &refusal.approval_id,
                call.clone(),
                AuditOutcome::Refused(refusal.kind),
                refusal.detail.clone(),
            );
            if let Err(error) = self.shared.store.insert_audit(&record).await {
                return error;
            }
        }
        ApprovalRefused::new(refusals.into_iter().map(|(r, _)| r).collect()).into_error()
    }
}

/// Put back approvals taken for a request that then failed, so the decisions can be sent again.
async fn restore(store: &dyn ApprovalStore, taken: &[PendingApproval]) {
    for approval in taken {
        if let Err(error) = store.insert_pending(approval).await {
            tracing::error!(%error, "could not restore a taken approval; it must be requested again");
        }
    }
}

/// Verify every decision of a request; all or nothing. Returns the decisions for the tool loop (keyed by call
/// id), after the approvals were taken from the store and audited.
pub(crate) async fn verify(
    shared: &Shared,
    request: &ChatRequest,
    decisions: ApprovalDecisions,
) -> Result<ApprovalDecisions, ChatError> {
    let approver = request
        .extensions
        .get::<ApproverIdentity>()
        .map(ApproverIdentity::as_str)
        .or_else(|| request.caller().map(CallerIdentity::as_str));
    let context = Context {
        shared,
        request,
        approver,
        now: shared.clock.now(),
        pending: pending_calls(&request.messages),
    };

    let mut refusals = Vec::new();
    let mut accepted: Vec<(ApprovalDecision, PendingApproval)> = Vec::new();
    let mut ids = HashSet::new();
    for decision in decisions.0 {
        if !ids.insert(decision.approval_id.clone()) {
            let refusal = context.refusal(&decision, RefusalKind::Duplicate, None);
            refusals.push((refusal, None));
            continue;
        }
        match context.check(&decision).await? {
            Ok(approval) => accepted.push((decision, approval)),
            Err(refusal) => refusals.push(refusal),
        }
    }
    // Two ids issued for the same call (it was asked about twice) must not both decide it.
    let mut calls = HashSet::new();
    accepted.retain(|(decision, approval)| {
        if calls.insert(approval.call.id.clone()) {
            return true;
        }
        let detail = format!(
            "call `{}` was already decided in this request",
            approval.call.id
        );
        let refusal = context.refusal(decision, RefusalKind::Duplicate, Some(detail));
        refusals.push((refusal, Some(approval.call.clone())));
        false
    });
    if !refusals.is_empty() {
        return Err(context.refuse(refusals).await);
    }

    let store = &*shared.store;
    let mut taken = Vec::with_capacity(accepted.len());
    for (decision, checked) in &accepted {
        match store.take_pending(&decision.approval_id).await {
            Ok(Some(approval)) if approval == *checked => taken.push(approval),
            Ok(other) => {
                // A concurrent request took it between our check and our take.
                if let Some(approval) = other {
                    taken.push(approval);
                }
                restore(store, &taken).await;
                let refusal = context.refusal(decision, RefusalKind::Replayed, None);
                return Err(context
                    .refuse(vec![(refusal, Some(checked.call.clone()))])
                    .await);
            }
            Err(error) => {
                restore(store, &taken).await;
                return Err(error);
            }
        }
    }

    let mut verified = Vec::with_capacity(accepted.len());
    for (decision, approval) in accepted {
        let outcome = if decision.approved {
            AuditOutcome::Approved
        } else {
            AuditOutcome::Denied
        };
        let record = context.audit(
            &decision.approval_id,
            Some(approval.call.clone()),
            outcome,
            decision.reason.clone(),
        );
        // No audit record, no decision: the tool must not run on an unrecorded approval.
        if let Err(error) = store.insert_audit(&record).await {
            restore(store, &taken).await;
            return Err(error);
        }
        verified.push(ApprovalDecision {
            approval_id: approval.call.id,
            approved: decision.approved,
            reason: decision.reason,
        });
    }
    Ok(ApprovalDecisions(verified))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tower_chat::{AssistantMessage, ToolMessage};

    fn assistant(calls: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: Vec::new(),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall::new(*id, "t", json!({})))
                .collect(),
            provider_parts: Vec::new(),
        })
    }

    fn ids(messages: &[Message]) -> Vec<&str> {
        let mut ids: Vec<&str> = pending_calls(messages).into_keys().collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn pending_calls_are_the_last_assistant_messages_unanswered_calls() {
        let answered = Message::Tool(ToolMessage::success("a", "t", "ok"));
        assert_eq!(
            ids(&[Message::user("x"), assistant(&["a", "b"])]),
            ["a", "b"]
        );
        assert_eq!(ids(&[assistant(&["a", "b"]), answered.clone()]), ["b"]);
        assert!(ids(&[assistant(&["a"]), answered.clone()]).is_empty());
        // Anything but tool messages after it: nothing is pending (the loop would not resume either).
        assert!(ids(&[assistant(&["a"]), Message::user("more")]).is_empty());
        assert!(ids(&[assistant(&["a"]), assistant(&[])]).is_empty());
        assert!(ids(&[]).is_empty());
    }

    #[test]
    fn quoted_ids_are_bounded() {
        assert_eq!(quoted_id("apr_1"), "apr_1");
        let long = "é".repeat(1000);
        assert_eq!(quoted_id(&long).chars().count(), QUOTED_ID_LIMIT + 1);
        assert!(is_well_formed(&crate::stream::new_approval_id()));
        assert!(!is_well_formed("apr_zz"));
        assert!(!is_well_formed("call_1"));
    }
}
