//! What a [`FunctionInvocationLayer`](crate::FunctionInvocationLayer) is configured with, held by every service
//! and stream it builds.

use std::sync::Arc;
use std::time::Duration;

use crate::policy::{ApprovalPolicy, ErrorDetail, ErrorPolicy, UnknownToolPolicy};
use crate::toolset::{Resolved, SharedResolver, ToolSet};

/// The tool loop's configuration, shared by every service and stream of one layer.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) tools: ToolSet,
    /// The layer's tools alone, resolved once for requests that bring no tools of their own.
    pub(crate) base: Arc<Resolved>,
    pub(crate) registry: Option<SharedResolver>,
    pub(crate) max_rounds: usize,
    pub(crate) max_tool_calls: Option<usize>,
    pub(crate) final_round_without_tools: bool,
    pub(crate) max_concurrency: Option<usize>,
    pub(crate) tool_timeout: Option<Duration>,
    pub(crate) max_consecutive_failures: usize,
    pub(crate) error_detail: ErrorDetail,
    pub(crate) error_policy: Option<ErrorPolicy>,
    pub(crate) unknown_tool: UnknownToolPolicy,
    pub(crate) approval_policy: Option<ApprovalPolicy>,
}
