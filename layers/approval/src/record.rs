//! What the store keeps: pending approvals and audit records.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tower_chat::{CallerIdentity, ConversationId, ToolCall};

use crate::error::RefusalKind;

/// A tool call waiting for a human decision, as recorded before the stream reports it.
///
/// The record binds the approval id to everything a decision may later be checked against: the conversation,
/// the caller, and the exact call (id, tool name, arguments).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The unguessable, single-use id a decision must name.
    pub approval_id: String,
    /// The conversation the call belongs to.
    pub conversation_id: ConversationId,
    /// The caller whose request made the call.
    pub caller: Option<CallerIdentity>,
    /// The call waiting for the decision.
    pub call: ToolCall,
    /// Why approval is needed, for the approver.
    pub reason: Option<String>,
    /// When it was requested.
    pub created_at: SystemTime,
    /// When it stops being valid.
    pub expires_at: SystemTime,
    /// A decision recorded out of band ([`ApprovalStore::decide_pending`](crate::ApprovalStore::decide_pending)),
    /// waiting for the paused turn's client to resume with it; `None` while undecided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<PendingDecision>,
    /// What the approver reads beside the call: the user's request and the model's text before it.
    #[serde(default)]
    pub context: ApprovalContext,
}

/// What led to a call, kept with its pending approval so that an approver can judge it without the
/// conversation at hand: the last user message of the request and the model's text in the same answer before
/// the call. Each is at most [`ApprovalContext::MAX_BYTES`] (longer text is cut at a character boundary).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalContext {
    /// The text of the request's last user message, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_message: Option<String>,
    /// The answer text the model streamed before the call, when it streamed any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_text: Option<String>,
}

impl ApprovalContext {
    /// The most bytes kept of each text: enough to judge a call, a bound on what one approval row holds.
    pub const MAX_BYTES: usize = 64 * 1024;

    /// `text` cut to [`Self::MAX_BYTES`] at a character boundary; `None` when it is blank.
    pub fn kept(text: &str) -> Option<String> {
        if text.trim().is_empty() {
            return None;
        }
        let mut end = text.len().min(Self::MAX_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Some(text[..end].to_owned())
    }
}

/// A decision an approver made on a pending approval before any request carried it: an operator decides in a
/// console while the client waits, and the client's resume (in whichever process sharing the store it reaches)
/// picks it up. The approval stays pending — and single-use — until that resume takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDecision {
    /// Approved (`true`) or denied.
    pub approved: bool,
    /// The approver's reason.
    pub reason: Option<String>,
    /// Who decided (the identity the approver rule and the audit log will see).
    pub approver: String,
    /// When.
    pub decided_at: SystemTime,
}

/// What [`ApprovalStore::decide_pending`](crate::ApprovalStore::decide_pending) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecideOutcome {
    /// The decision was recorded on the pending approval.
    Recorded,
    /// The approval already carries a decision; the first one stands.
    AlreadyDecided,
    /// Nothing is pending under the id (unknown, taken, or expired).
    NotPending,
}

/// Where a page of [`ApprovalStore::list_pending`](crate::ApprovalStore::list_pending) starts: after the
/// approval expiring at `expires_at` with id `approval_id` (the order is expiry, then id).
///
/// Its text form (`Display` / `FromStr`, `{micros}.{id}`) is what an HTTP API hands out as an opaque cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCursor {
    /// Expiry of the last approval already seen.
    pub expires_at: SystemTime,
    /// Its id.
    pub approval_id: String,
}

impl PendingCursor {
    /// The cursor that continues after `pending`.
    pub fn after(pending: &PendingApproval) -> Self {
        PendingCursor {
            expires_at: pending.expires_at,
            approval_id: pending.approval_id.clone(),
        }
    }
}

impl fmt::Display for PendingCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", micros(self.expires_at), self.approval_id)
    }
}

/// A cursor text that no [`PendingCursor`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidCursor;

impl fmt::Display for InvalidCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a pending-approvals cursor")
    }
}

impl std::error::Error for InvalidCursor {}

impl FromStr for PendingCursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (micros, id) = s.split_once('.').ok_or(InvalidCursor)?;
        let micros: i64 = micros.parse().map_err(|_| InvalidCursor)?;
        if id.is_empty() {
            return Err(InvalidCursor);
        }
        Ok(PendingCursor {
            expires_at: from_micros(micros),
            approval_id: id.to_owned(),
        })
    }
}

/// Whole microseconds since the Unix epoch (negative before it), as the SQL stores keep times.
pub(crate) fn micros(time: SystemTime) -> i64 {
    match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// The inverse of [`micros`].
pub(crate) fn from_micros(micros: i64) -> SystemTime {
    let magnitude = std::time::Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        std::time::UNIX_EPOCH + magnitude
    } else {
        std::time::UNIX_EPOCH - magnitude
    }
}

/// The most approvals one [`ApprovalStore::list_pending`](crate::ApprovalStore::list_pending) call returns,
/// whatever limit it was asked for: a huge table is read a page at a time.
pub const MAX_PENDING_PAGE: usize = 500;

impl PendingApproval {
    /// Whether the approval is past its time to live at `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        now >= self.expires_at
    }
}

/// What became of one decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum AuditOutcome {
    /// The call was approved and handed to the tool loop.
    Approved,
    /// The call was denied; the model is told why.
    Denied,
    /// The decision was refused and nothing ran.
    Refused(RefusalKind),
}

impl AuditOutcome {
    /// Every outcome, each with its own stored name.
    pub(crate) const ALL: [AuditOutcome; 11] = [
        AuditOutcome::Approved,
        AuditOutcome::Denied,
        AuditOutcome::Refused(RefusalKind::Unknown),
        AuditOutcome::Refused(RefusalKind::Replayed),
        AuditOutcome::Refused(RefusalKind::Expired),
        AuditOutcome::Refused(RefusalKind::OtherConversation),
        AuditOutcome::Refused(RefusalKind::OtherCaller),
        AuditOutcome::Refused(RefusalKind::NotPending),
        AuditOutcome::Refused(RefusalKind::Tampered),
        AuditOutcome::Refused(RefusalKind::ApproverRejected),
        AuditOutcome::Refused(RefusalKind::Duplicate),
    ];

    /// A short stable name (`approved`, `denied`, `refused_replayed`, …), as stores keep it.
    pub fn as_str(&self) -> &'static str {
        match self {
            AuditOutcome::Approved => "approved",
            AuditOutcome::Denied => "denied",
            AuditOutcome::Refused(kind) => match kind {
                RefusalKind::Unknown => "refused_unknown",
                RefusalKind::Replayed => "refused_replayed",
                RefusalKind::Expired => "refused_expired",
                RefusalKind::OtherConversation => "refused_other_conversation",
                RefusalKind::OtherCaller => "refused_other_caller",
                RefusalKind::NotPending => "refused_not_pending",
                RefusalKind::Tampered => "refused_tampered",
                RefusalKind::ApproverRejected => "refused_approver",
                RefusalKind::Duplicate => "refused_duplicate",
            },
        }
    }

    /// Whether the decision was applied (approved or denied), as opposed to refused.
    pub fn is_applied(&self) -> bool {
        !matches!(self, AuditOutcome::Refused(_))
    }
}

impl fmt::Display for AuditOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An outcome name no version of this crate writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownOutcome(pub String);

impl fmt::Display for UnknownOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown approval audit outcome `{}`", self.0)
    }
}

impl std::error::Error for UnknownOutcome {}

impl FromStr for AuditOutcome {
    type Err = UnknownOutcome;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AuditOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| UnknownOutcome(s.to_owned()))
    }
}

impl From<AuditOutcome> for String {
    fn from(outcome: AuditOutcome) -> String {
        outcome.as_str().to_owned()
    }
}

impl TryFrom<String> for AuditOutcome {
    type Error = UnknownOutcome;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

/// One decision, applied or refused: who, when, what, outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The approval id the decision named.
    pub approval_id: String,
    /// The conversation of the request that carried the decision.
    pub conversation_id: Option<ConversationId>,
    /// The caller of the request that carried the decision.
    pub caller: Option<CallerIdentity>,
    /// Who decided: the request's [`ApproverIdentity`](crate::ApproverIdentity), else its caller.
    pub approver: Option<String>,
    /// The call decided on, when the id was known.
    pub call: Option<ToolCall>,
    /// Approved, denied, or refused (and why).
    pub outcome: AuditOutcome,
    /// The decision's reason, or the refusal's detail.
    pub reason: Option<String>,
    /// When.
    pub decided_at: SystemTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_names_round_trip_and_are_distinct() {
        let all = AuditOutcome::ALL;
        let names: std::collections::HashSet<&str> = all.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), all.len());
        for outcome in all {
            assert_eq!(outcome.as_str().parse::<AuditOutcome>(), Ok(outcome));
            let json = serde_json::to_string(&outcome).unwrap();
            assert_eq!(
                serde_json::from_str::<AuditOutcome>(&json).unwrap(),
                outcome
            );
        }
        assert!("refused_bogus".parse::<AuditOutcome>().is_err());
    }

    #[test]
    fn context_text_is_cut_at_a_character_boundary_and_blank_text_is_none() {
        assert_eq!(ApprovalContext::kept("  \n "), None);
        assert_eq!(ApprovalContext::kept("hi").as_deref(), Some("hi"));
        let long = "é".repeat(ApprovalContext::MAX_BYTES);
        let kept = ApprovalContext::kept(&long).unwrap();
        assert_eq!(kept.len(), ApprovalContext::MAX_BYTES);
        assert!(kept.chars().all(|c| c == 'é'));
        let odd = format!("a{long}");
        assert_eq!(
            ApprovalContext::kept(&odd).unwrap().len(),
            ApprovalContext::MAX_BYTES - 1
        );
    }
}
