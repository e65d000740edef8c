//! Policies: how failures are reported and when they end the stream, what happens to unknown tools, and which
//! calls need approval.

use std::fmt;
use std::sync::Arc;

use tower_chat::{ChatError, ToolCall};

use crate::tool::CompiledTool;

/// How much of a tool failure the model sees.
///
/// Argument problems (invalid JSON, schema violations, [`ToolError::invalid_arguments`](crate::ToolError::invalid_arguments))
/// are always reported in full, since the model needs them to correct its call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorDetail {
    /// The tool's error message, or the panic message (the default).
    #[default]
    Full,
    /// Only that the tool failed, panicked or timed out: nothing of the error's text reaches the model.
    Brief,
}

/// What went wrong with one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolFailureKind {
    /// The arguments were not JSON, broke the schema, or the body rejected them.
    InvalidArguments,
    /// The body returned an error.
    Failed,
    /// The body panicked.
    Panicked,
    /// The body ran past its time limit.
    TimedOut,
    /// The model called a tool that does not exist.
    UnknownTool,
}

impl ToolFailureKind {
    /// A short stable name (used as the `error.type` of the `execute_tool` span).
    pub fn as_str(&self) -> &'static str {
        match self {
            ToolFailureKind::InvalidArguments => "invalid_arguments",
            ToolFailureKind::Failed => "failed",
            ToolFailureKind::Panicked => "panicked",
            ToolFailureKind::TimedOut => "timed_out",
            ToolFailureKind::UnknownTool => "unknown_tool",
        }
    }
}

/// One failed call, as the [`ErrorPolicy`] sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolFailure {
    /// The call.
    pub call: ToolCall,
    /// What went wrong.
    pub kind: ToolFailureKind,
    /// The full detail (regardless of [`ErrorDetail`]).
    pub message: String,
}

type ErrorPolicyFn = dyn Fn(&ToolFailure) -> Option<ChatError> + Send + Sync;

/// Decides whether a tool failure ends the stream (Spring AI's `ToolExecutionExceptionProcessor`). Without one,
/// every failure becomes an error result for the model and the loop goes on.
///
/// ```
/// use tower_chat::{ChatError, ErrorKind};
/// use tower_chat_function_invocation::{ErrorPolicy, ToolFailureKind};
///
/// // Panics are bugs: stop instead of letting the model work around them.
/// let policy = ErrorPolicy::new(|failure| {
///     (failure.kind == ToolFailureKind::Panicked)
///         .then(|| ChatError::new(ErrorKind::Tool, failure.message.clone()))
/// });
/// # let _ = policy;
/// ```
#[derive(Clone)]
pub struct ErrorPolicy(Arc<ErrorPolicyFn>);

impl ErrorPolicy {
    /// A policy from a function: `Some(error)` ends the stream with that error.
    pub fn new(policy: impl Fn(&ToolFailure) -> Option<ChatError> + Send + Sync + 'static) -> Self {
        ErrorPolicy(Arc::new(policy))
    }

    pub(crate) fn decide(&self, failure: &ToolFailure) -> Option<ChatError> {
        (self.0)(failure)
    }
}

impl fmt::Debug for ErrorPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ErrorPolicy(..)")
    }
}

/// What to do when the model calls a tool that is neither executable nor declared client-side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownToolPolicy {
    /// Tell the model the tool does not exist (and which do), and go on (the default).
    #[default]
    ErrorResult,
    /// End the stream with [`tower_chat::FinishReason::ToolCalls`] and leave the call to the caller.
    HandBack,
}

/// A policy's opinion on one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// No opinion: the call needs approval exactly when its tool requires it.
    Default,
    /// The call needs a human decision, whatever the tool says.
    Require {
        /// Shown to the approver in [`tower_chat::ApprovalRequest::reason`].
        reason: Option<String>,
    },
    /// The call must not run; the model gets a "not approved: {reason}" result.
    Deny {
        /// Why.
        reason: String,
    },
}

type ApprovalPolicyFn =
    dyn Fn(&ToolCall, &CompiledTool, &http::Extensions) -> ApprovalVerdict + Send + Sync;

/// Decides per call whether it needs approval or is denied outright — the hook an approval layer uses.
///
/// A policy is consulted for every call of an executable tool, from two places: the layer's
/// ([`FunctionInvocationLayer::approval_policy`](crate::FunctionInvocationLayer::approval_policy)) and the request's
/// (an `ApprovalPolicy` in [`tower_chat::ChatRequest::extensions`], which is how an approval layer placed outside
/// this one adds rules per request). The strictest verdict wins: `Deny` over `Require` over the tool's own flag.
/// A policy can only tighten: nothing turns off a tool's [`requires_approval`](crate::Tool::requires_approval).
///
/// Decisions ([`tower_chat::ApprovalDecisions`]) are honoured only for calls that are pending in the request's
/// history (the last assistant message's calls without a tool message), and a policy's `Deny` still wins over an
/// approval, so a layer outside may verify decisions and rewrite or drop them before they reach this loop.
///
/// ```
/// use tower::ServiceBuilder;
/// use tower_chat::ChatRequest;
/// use tower_chat_function_invocation::{ApprovalPolicy, ApprovalVerdict, FunctionInvocationLayer};
///
/// // An outer layer: guests may not run `delete_file` at all, everyone else needs approval for it.
/// let guard = ServiceBuilder::new().map_request(|mut request: ChatRequest| {
///     let guest = request.caller().is_some_and(|c| c.as_str() == "guest");
///     request.extensions.insert(ApprovalPolicy::new(move |call, _tool, _extensions| {
///         match (call.name.as_str(), guest) {
///             ("delete_file", true) => ApprovalVerdict::Deny { reason: "guests cannot delete".into() },
///             ("delete_file", false) => ApprovalVerdict::Require { reason: Some("destructive".into()) },
///             _ => ApprovalVerdict::Default,
///         }
///     }));
///     request
/// });
/// let stack = guard.layer(FunctionInvocationLayer::new());
/// # let _ = stack;
/// ```
#[derive(Clone)]
pub struct ApprovalPolicy(Arc<ApprovalPolicyFn>);

impl ApprovalPolicy {
    /// A policy from a function of the call, the tool and the request's extensions.
    pub fn new(
        policy: impl Fn(&ToolCall, &CompiledTool, &http::Extensions) -> ApprovalVerdict
            + Send
            + Sync
            + 'static,
    ) -> Self {
        ApprovalPolicy(Arc::new(policy))
    }

    /// This policy's verdict on one call (what the loop asks; an outer policy wrapping this one may ask too).
    pub fn verdict(
        &self,
        call: &ToolCall,
        tool: &CompiledTool,
        extensions: &http::Extensions,
    ) -> ApprovalVerdict {
        (self.0)(call, tool, extensions)
    }
}

impl fmt::Debug for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApprovalPolicy(..)")
    }
}

/// The strictest of two verdicts.
pub(crate) fn stricter(a: ApprovalVerdict, b: ApprovalVerdict) -> ApprovalVerdict {
    fn rank(v: &ApprovalVerdict) -> u8 {
        match v {
            ApprovalVerdict::Default => 0,
            ApprovalVerdict::Require { .. } => 1,
            ApprovalVerdict::Deny { .. } => 2,
        }
    }
    if rank(&b) > rank(&a) {
        b
    } else {
        a
    }
}
