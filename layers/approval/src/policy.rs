//! Which calls need approval (the policy) and who may decide them (the approver rule).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_chat::{ApprovalDecision, CallerIdentity, ConversationId, ToolCall};
use tower_chat_function_invocation::{ApprovalPolicy, ApprovalVerdict, CompiledTool};

use crate::record::PendingApproval;

/// The policy's outcome for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run without asking (a tool's own [`requires_approval`](tower_chat_function_invocation::Tool::requires_approval)
    /// flag still applies: nothing outside the tool can waive it).
    Allow,
    /// Ask a human first.
    RequireApproval {
        /// Shown to the approver.
        reason: Option<String>,
    },
    /// Do not run; the model gets "not approved: {reason}".
    Deny {
        /// Given to the model.
        reason: String,
    },
}

impl Verdict {
    /// Ask a human, with a reason for the approver.
    pub fn require(reason: impl Into<String>) -> Self {
        Verdict::RequireApproval {
            reason: Some(reason.into()),
        }
    }

    /// Refuse, with a reason for the model.
    pub fn deny(reason: impl Into<String>) -> Self {
        Verdict::Deny {
            reason: reason.into(),
        }
    }
}

/// What the policy function sees about one call.
#[derive(Debug)]
pub struct PolicyInput<'a> {
    call: &'a ToolCall,
    tool: &'a CompiledTool,
    extensions: &'a http::Extensions,
    flag: Option<&'a Option<String>>,
}

static NO_ARGUMENTS: Value = Value::Null;

impl<'a> PolicyInput<'a> {
    /// The call (id, tool name, arguments).
    pub fn call(&self) -> &'a ToolCall {
        self.call
    }

    /// The tool's name.
    pub fn tool_name(&self) -> &'a str {
        &self.call.name
    }

    /// The tool (its spec, and its own `requires_approval` flag).
    pub fn tool(&self) -> &'a CompiledTool {
        self.tool
    }

    /// The parsed arguments. The tool loop asks only about calls whose arguments passed the tool's schema, so
    /// this is the JSON the tool will receive.
    pub fn arguments(&self) -> &'a Value {
        self.call.arguments.json().unwrap_or(&NO_ARGUMENTS)
    }

    /// The request's context ([`ConversationId`], [`CallerIdentity`], your own types).
    pub fn extensions(&self) -> &'a http::Extensions {
        self.extensions
    }

    /// The request's caller, if set.
    pub fn caller(&self) -> Option<&'a CallerIdentity> {
        self.extensions.get()
    }

    /// The request's conversation, if set.
    pub fn conversation(&self) -> Option<&'a ConversationId> {
        self.extensions.get()
    }

    /// Whether the layer flags this tool ([`ApprovalLayer::require_approval`](crate::ApprovalLayer::require_approval)).
    pub fn flagged(&self) -> bool {
        self.flag.is_some()
    }

    /// What the layer's flag says: `RequireApproval` (with the flag's reason) for a flagged tool, else `Allow`.
    /// A policy returns this for calls it has no opinion on.
    pub fn default_verdict(&self) -> Verdict {
        match self.flag {
            Some(reason) => Verdict::RequireApproval {
                reason: reason.clone(),
            },
            None => Verdict::Allow,
        }
    }
}

pub(crate) type PolicyFn = dyn Fn(&PolicyInput<'_>) -> Verdict + Send + Sync;

/// The per-tool flags and the policy function, turned into the tool loop's hook.
pub(crate) struct Rules {
    pub(crate) flags: HashMap<String, Option<String>>,
    pub(crate) policy: Option<Arc<PolicyFn>>,
}

impl Rules {
    pub(crate) fn verdict(
        &self,
        call: &ToolCall,
        tool: &CompiledTool,
        extensions: &http::Extensions,
    ) -> Verdict {
        let input = PolicyInput {
            call,
            tool,
            extensions,
            flag: self.flags.get(&call.name),
        };
        match &self.policy {
            Some(policy) => policy(&input),
            None => input.default_verdict(),
        }
    }

    pub(crate) fn into_loop_policy(self: Arc<Self>) -> ApprovalPolicy {
        ApprovalPolicy::new(move |call, tool, extensions| {
            match self.verdict(call, tool, extensions) {
                Verdict::Allow => ApprovalVerdict::Default,
                Verdict::RequireApproval { reason } => ApprovalVerdict::Require { reason },
                Verdict::Deny { reason } => ApprovalVerdict::Deny { reason },
            }
        })
    }
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut flagged: Vec<&str> = self.flags.keys().map(String::as_str).collect();
        flagged.sort_unstable();
        f.debug_struct("Rules")
            .field("flagged", &flagged)
            .field("policy", &self.policy.as_ref().map(|_| ".."))
            .finish()
    }
}

/// Both policies, strictest verdict first: a policy already in the request (from a layer further out) is kept.
pub(crate) fn compose(outer: ApprovalPolicy, ours: ApprovalPolicy) -> ApprovalPolicy {
    fn rank(v: &ApprovalVerdict) -> u8 {
        match v {
            ApprovalVerdict::Default => 0,
            ApprovalVerdict::Require { .. } => 1,
            ApprovalVerdict::Deny { .. } => 2,
        }
    }
    ApprovalPolicy::new(move |call, tool, extensions| {
        let a = outer.verdict(call, tool, extensions);
        let b = ours.verdict(call, tool, extensions);
        if rank(&b) > rank(&a) {
            b
        } else {
            a
        }
    })
}

/// Who made the decisions a request carries, when that is not the request's [`CallerIdentity`] (an operator
/// approving in a console while the conversation stays the user's). Put it in the request's extensions; the
/// approver rule and the audit log see it. Without it the caller is the approver.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ApproverIdentity(String);

impl ApproverIdentity {
    /// Wrap a string.
    pub fn new(value: impl Into<String>) -> Self {
        ApproverIdentity(value.into())
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ApproverIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the approver rule sees about one decision.
#[derive(Debug)]
pub struct ApproverInput<'a> {
    pub(crate) pending: &'a PendingApproval,
    pub(crate) decision: &'a ApprovalDecision,
    pub(crate) approver: Option<&'a str>,
    pub(crate) extensions: &'a http::Extensions,
}

impl<'a> ApproverInput<'a> {
    /// The approval decided on: the call, its reason, the conversation and caller it belongs to.
    pub fn pending(&self) -> &'a PendingApproval {
        self.pending
    }

    /// The decision.
    pub fn decision(&self) -> &'a ApprovalDecision {
        self.decision
    }

    /// Who decides: the request's [`ApproverIdentity`], else its [`CallerIdentity`].
    pub fn approver(&self) -> Option<&'a str> {
        self.approver
    }

    /// The resuming request's context.
    pub fn extensions(&self) -> &'a http::Extensions {
        self.extensions
    }
}

pub(crate) type ApproverRuleFn = dyn Fn(&ApproverInput<'_>) -> Result<(), String> + Send + Sync;
