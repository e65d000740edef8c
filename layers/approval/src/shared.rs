//! What every service and stream of one [`ApprovalLayer`](crate::ApprovalLayer) shares, built by the layer.

use std::sync::Arc;
use std::time::Duration;

use tower_chat_function_invocation::ApprovalPolicy;

use crate::clock::Clock;
use crate::policy::ApproverRuleFn;
use crate::store::ApprovalStore;

/// What every service and stream of one layer shares.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn ApprovalStore>,
    pub(crate) ttl: Duration,
    /// Read when an id is issued (its expiry) and when a decision is checked against it.
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) approver_rule: Option<Arc<ApproverRuleFn>>,
    /// The rules as the tool loop's hook, built once per service so a request only clones an `Arc`.
    pub(crate) policy: ApprovalPolicy,
}
