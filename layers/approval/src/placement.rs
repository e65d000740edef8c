//! An approval layer that does not wrap a tool loop gates nothing: such a stack fails its first call with an
//! [`ApprovalMisplaced`] error (behind [`ErrorKind::Approval`]) that names the fix, instead of running tools
//! unapproved.

use std::fmt;

use tower_chat::{ChatError, ErrorKind};

/// Where the [`ApprovalLayer`](crate::ApprovalLayer) was wrongly placed; the source of the
/// [`ErrorKind::Approval`] error a misplaced layer's first call fails with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalMisplaced {
    /// Inside a `FunctionInvocationLayer`: it would see each model round, never the loop's tool calls.
    InsideToolLoop,
    /// Over a stack with no `FunctionInvocationLayer` under it: no loop applies its policy.
    NoToolLoop,
}

const FIX: &str = "place the ApprovalLayer outside (above) the FunctionInvocationLayer, e.g. \
     ServiceBuilder::new().layer(ApprovalLayer::new()).layer(FunctionInvocationLayer::new()).service(leaf)";

impl fmt::Display for ApprovalMisplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApprovalMisplaced::InsideToolLoop => {
                write!(f, "the ApprovalLayer is inside the tool loop: {FIX}")
            }
            ApprovalMisplaced::NoToolLoop => write!(
                f,
                "no FunctionInvocationLayer runs under the ApprovalLayer, so nothing is gated: {FIX}"
            ),
        }
    }
}

impl std::error::Error for ApprovalMisplaced {}

impl From<ApprovalMisplaced> for ChatError {
    fn from(misplaced: ApprovalMisplaced) -> Self {
        ChatError::new(ErrorKind::Approval, misplaced.to_string()).with_source(misplaced)
    }
}
