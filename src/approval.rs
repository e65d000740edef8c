//! The pause/resume protocol for tool calls that need a human decision.
//!
//! A tool loop that meets a call needing approval does not run it: it emits a
//! [`crate::ChatEvent::ApprovalRequest`] and ends with [`crate::FinishReason::AwaitingApproval`]. The caller
//! resumes by sending the same conversation again with [`ApprovalDecisions`] in the request's extensions.

use serde::{Deserialize, Serialize};

use crate::message::ToolCall;

/// A tool call that waits for a human decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The id a decision must name. Without an approval layer this is the call id; the approval layer issues
    /// its own unguessable, single-use ids.
    pub id: String,
    /// The call waiting for the decision (id, tool name, arguments).
    pub call: ToolCall,
    /// Why approval is needed, for the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A human's decision on one [`ApprovalRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The [`ApprovalRequest::id`] this answers.
    pub approval_id: String,
    /// Approve, or deny.
    pub approved: bool,
    /// Why (a denial's reason is given to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// Approve a request.
    pub fn approve(approval_id: impl Into<String>) -> Self {
        ApprovalDecision {
            approval_id: approval_id.into(),
            approved: true,
            reason: None,
        }
    }

    /// Deny a request, with a reason for the model.
    pub fn deny(approval_id: impl Into<String>, reason: impl Into<String>) -> Self {
        ApprovalDecision {
            approval_id: approval_id.into(),
            approved: false,
            reason: Some(reason.into()),
        }
    }
}

/// The decisions a resuming request carries, in its extensions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ApprovalDecisions(pub Vec<ApprovalDecision>);

impl ApprovalDecisions {
    /// The decision for an approval id, if any.
    pub fn get(&self, approval_id: &str) -> Option<&ApprovalDecision> {
        self.0.iter().find(|d| d.approval_id == approval_id)
    }
}
