//! How a call ended, in the words the call log and the timeline share: a refusal that never reached a provider
//! is not an upstream error, and an answer a content policy cut short is neither an error nor a cancellation.

use std::time::SystemTime;

use tower_chat_approval::AuditRecord;
use tower_chat_persistence::CallOutcome;

use crate::operator::Listed;

/// A call's outcome as the pages show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The `data-status` of its row: the stored status, or `refused` for a call refused before sending.
    pub(crate) status: &'static str,
    /// The outcome in words.
    pub(crate) text: String,
    /// Whether it is an error (shown as one, counted in the error charts).
    pub(crate) is_error: bool,
    /// Who answered: the upstream, or nobody (refused before sending).
    pub(crate) answered_by: &'static str,
}

/// The outcome of a call that ended `outcome`; `refused_before_sending` when a layer refused it before it
/// reached any provider (the record keeps its size instead of its request).
pub(crate) fn shown(outcome: &CallOutcome, refused_before_sending: bool) -> Shown {
    let status = outcome.as_str();
    match outcome {
        CallOutcome::Failed { error } if refused_before_sending => {
            let by = match error.kind.as_str() {
                "policy_blocked" => "refused by guardrail, not sent",
                "rate_limited" => "refused by limits, not sent",
                _ => "refused before sending",
            };
            Shown {
                status: "refused",
                text: format!("{by}: {}", error.message),
                is_error: false,
                answered_by: "nobody (not sent)",
            }
        }
        CallOutcome::Blocked => Shown {
            status,
            text: "blocked by guardrail (the rest of the answer was withheld)".into(),
            is_error: false,
            answered_by: "upstream",
        },
        _ => match outcome.error() {
            Some(error) => Shown {
                status,
                text: format!("Error: {status} ({}: {})", error.kind, error.message),
                is_error: true,
                answered_by: "upstream",
            },
            None => Shown {
                status,
                text: status.replace('_', " "),
                is_error: matches!(outcome, CallOutcome::Failed { .. }),
                answered_by: "upstream",
            },
        },
    }
}

/// Where the approval a call paused on stands, as far as the console knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Approval {
    /// It still waits for an operator.
    Pending,
    /// It was decided: the decision in words (`approved by alice: looks safe`).
    Decided(String),
}

/// The outcome of a call whose turn paused for `approval`: not "completed", as nothing was answered yet.
pub(crate) fn paused(approval: &Approval) -> Shown {
    let (status, text) = match approval {
        Approval::Pending => ("awaiting_approval", "awaiting approval".to_owned()),
        Approval::Decided(decision) => (
            "approval_decided",
            format!("paused for approval, {decision}"),
        ),
    };
    Shown {
        status,
        text,
        is_error: false,
        answered_by: "upstream",
    }
}

/// A decision of the audit log in words: its outcome, who took it and why.
pub(crate) fn decision_text(record: &AuditRecord) -> String {
    decided_text(
        record.outcome.as_str(),
        record.approver.as_deref(),
        record.reason.as_deref(),
    )
}

/// `denied by alice: not now`: an outcome, who took it (when known) and why (when given).
pub(crate) fn decided_text(outcome: &str, approver: Option<&str>, reason: Option<&str>) -> String {
    let mut text = outcome.replace('_', " ");
    if let Some(approver) = approver {
        text.push_str(" by ");
        text.push_str(approver);
    }
    if let Some(reason) = reason.filter(|r| !r.trim().is_empty()) {
        text.push_str(": ");
        text.push_str(reason);
    }
    text
}

/// A model call that ended asking for tools ([`tower_chat_persistence::CallSummary::asked_for_tools`]) and
/// when its conversation's next call started, if one did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AskedForTools {
    pub(crate) started_at: SystemTime,
    pub(crate) ended_at: SystemTime,
    pub(crate) next_started: Option<SystemTime>,
}

/// Whether the approval layer held the turn after `call` and where that stands, from its conversation's listed
/// approvals (`listed`) and applied decisions (`audit`): the approval
/// layer sits outside the recorded rounds, so a hold is one paused or decided between the call and the next.
/// `None` when nothing was (its tools ran without a decision).
pub(crate) fn held(
    call: AskedForTools,
    listed: &[&Listed],
    audit: &[&AuditRecord],
) -> Option<Approval> {
    let before_next = |at: SystemTime| call.next_started.is_none_or(|next| at < next);
    let listed: Vec<&Listed> = listed
        .iter()
        .copied()
        .filter(|l| l.paused.paused_at >= call.started_at && before_next(l.paused.paused_at))
        .collect();
    if listed.iter().any(|l| l.decision.is_none()) {
        return Some(Approval::Pending);
    }
    let decisions: Vec<String> = audit
        .iter()
        .filter(|r| {
            r.outcome.is_applied() && r.decided_at >= call.ended_at && before_next(r.decided_at)
        })
        .map(|r| decision_text(r))
        .collect();
    if !decisions.is_empty() {
        return Some(Approval::Decided(decisions.join("; ")));
    }
    // Decided, its client not resumed yet: the decision is in the listing, not yet in the audit.
    let decisions: Vec<String> = listed
        .iter()
        .filter_map(|l| {
            let d = l.decision.as_ref()?;
            Some(decided_text(
                l.status,
                Some(&d.approver),
                d.reason.as_deref(),
            ))
        })
        .collect();
    (!decisions.is_empty()).then(|| Approval::Decided(decisions.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat_persistence::RecordedError;

    fn failed(kind: &str) -> CallOutcome {
        CallOutcome::Failed {
            error: RecordedError {
                kind: kind.into(),
                message: "why".into(),
            },
        }
    }

    #[test]
    fn refusals_are_not_upstream_errors_and_blocks_are_not_cancellations() {
        let limits = shown(&failed("rate_limited"), true);
        assert_eq!(limits.text, "refused by limits, not sent: why");
        assert_eq!(
            (limits.status, limits.is_error, limits.answered_by),
            ("refused", false, "nobody (not sent)")
        );
        assert_eq!(
            shown(&failed("policy_blocked"), true).text,
            "refused by guardrail, not sent: why"
        );
        // The same kind from a provider is its error.
        let upstream = shown(&failed("rate_limited"), false);
        assert_eq!(
            (
                upstream.text.as_str(),
                upstream.is_error,
                upstream.answered_by
            ),
            ("Error: failed (rate_limited: why)", true, "upstream")
        );
        let blocked = shown(&CallOutcome::Blocked, false);
        assert_eq!((blocked.status, blocked.is_error), ("blocked", false));
        assert!(blocked.text.starts_with("blocked by guardrail"));
    }

    #[test]
    fn a_paused_call_reads_as_its_approval_stands() {
        let pending = paused(&Approval::Pending);
        assert_eq!(
            (pending.status, pending.text.as_str(), pending.is_error),
            ("awaiting_approval", "awaiting approval", false)
        );
        let decided = paused(&Approval::Decided("denied by alice".into()));
        assert_eq!(decided.text, "paused for approval, denied by alice");
    }
}
