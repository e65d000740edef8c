//! Why a decision was refused, as a typed error behind [`ErrorKind::Approval`].

use std::fmt;

use serde::{Deserialize, Serialize};
use tower_chat::{ChatError, ErrorKind};

/// Why one decision was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalKind {
    /// No pending approval has this id (forged, mistyped, or purged).
    Unknown,
    /// The id was already used: every id decides once.
    Replayed,
    /// The approval outlived its time to live.
    Expired,
    /// The approval belongs to another conversation (or the request names none).
    OtherConversation,
    /// The approval belongs to another caller.
    OtherCaller,
    /// The call is not waiting for a decision in this request's history (already answered, or gone).
    NotPending,
    /// The history shows a different tool name or arguments for the call than what was put to the approver.
    Tampered,
    /// The approver rule does not let this approver decide this call.
    ApproverRejected,
    /// The request carries more than one decision for the same approval id or the same call.
    Duplicate,
}

impl RefusalKind {
    /// A short human-readable description.
    pub fn describe(&self) -> &'static str {
        match self {
            RefusalKind::Unknown => "unknown approval id",
            RefusalKind::Replayed => "approval id already used",
            RefusalKind::Expired => "approval expired",
            RefusalKind::OtherConversation => "approval belongs to another conversation",
            RefusalKind::OtherCaller => "approval belongs to another caller",
            RefusalKind::NotPending => "the call is not awaiting a decision in this conversation",
            RefusalKind::Tampered => {
                "the call in the history differs from the one put to the approver"
            }
            RefusalKind::ApproverRejected => "the approver may not decide this call",
            RefusalKind::Duplicate => "more than one decision for the same approval or call",
        }
    }
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// One refused decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The approval id the decision named.
    pub approval_id: String,
    /// Why it was refused.
    pub kind: RefusalKind,
    /// Details (the approver rule's reason, what differs, …).
    pub detail: Option<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.approval_id, self.kind)?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        Ok(())
    }
}

/// The source of an [`ErrorKind::Approval`] error from the approval layer: every refused decision of the
/// request. When any decision is refused, none is applied and no tool runs.
///
/// ```
/// # use tower_chat::{ChatError, ErrorKind};
/// # use tower_chat_approval::{ApprovalRefused, RefusalKind};
/// fn refusal_kinds(error: &ChatError) -> Vec<RefusalKind> {
///     ApprovalRefused::of(error)
///         .map(|refused| refused.refusals().iter().map(|r| r.kind).collect())
///         .unwrap_or_default()
/// }
/// # assert!(refusal_kinds(&ChatError::new(ErrorKind::Other, "x")).is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalRefused {
    refusals: Vec<Refusal>,
}

impl ApprovalRefused {
    pub(crate) fn new(refusals: Vec<Refusal>) -> Self {
        ApprovalRefused { refusals }
    }

    /// The refused decisions.
    pub fn refusals(&self) -> &[Refusal] {
        &self.refusals
    }

    /// The refusals behind an error, if it is the approval layer's.
    pub fn of(error: &ChatError) -> Option<&ApprovalRefused> {
        std::error::Error::source(error)?.downcast_ref()
    }

    pub(crate) fn into_error(self) -> ChatError {
        let message = format!("approval decision refused: {self}");
        ChatError::new(ErrorKind::Approval, message).with_source(self)
    }
}

impl fmt::Display for ApprovalRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, refusal) in self.refusals.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{refusal}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ApprovalRefused {}
