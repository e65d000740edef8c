use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::policy::{ApproverInput, ApproverRuleFn, PolicyFn, PolicyInput, Rules, Verdict};
use crate::service::Approval;
use crate::shared::Shared;
use crate::store::{ApprovalStore, MemoryApprovalStore};

/// Human-in-the-loop approval for a tool loop, placed outside a
/// [`FunctionInvocationLayer`](tower_chat_function_invocation::FunctionInvocationLayer).
///
/// | setting | default |
/// | --- | --- |
/// | [`store`](Self::store): where pending approvals and the audit log live | [`MemoryApprovalStore`] |
/// | [`require_approval`](Self::require_approval): per-tool flags | none |
/// | [`policy`](Self::policy): a function of tool, arguments and request context | the flags |
/// | [`approver_rule`](Self::approver_rule): who may decide what | anyone the request binds to |
/// | [`ttl`](Self::ttl): how long an approval id stays valid | 24 hours |
/// | [`clock`](Self::clock): the time that ids expire by | [`SystemClock`] |
#[derive(Clone)]
pub struct ApprovalLayer {
    store: Arc<dyn ApprovalStore>,
    rules: Arc<Rules>,
    approver_rule: Option<Arc<ApproverRuleFn>>,
    ttl: Duration,
    clock: Arc<dyn Clock>,
}

impl Default for ApprovalLayer {
    fn default() -> Self {
        ApprovalLayer::new()
    }
}

impl ApprovalLayer {
    /// A layer with an in-memory store, no flags and no policy (only tools' own flags gate calls).
    pub fn new() -> Self {
        ApprovalLayer {
            store: Arc::new(MemoryApprovalStore::new()),
            rules: Arc::new(Rules {
                flags: HashMap::new(),
                policy: None,
            }),
            approver_rule: None,
            ttl: Duration::from_secs(24 * 60 * 60),
            clock: Arc::new(SystemClock),
        }
    }

    /// Keep pending approvals and the audit log in this store (share one store between replicas to resume a
    /// pause anywhere).
    pub fn store(mut self, store: impl ApprovalStore) -> Self {
        self.store = Arc::new(store);
        self
    }

    /// The store, to read the audit log or purge expired approvals.
    pub fn approval_store(&self) -> &Arc<dyn ApprovalStore> {
        &self.store
    }

    fn rules_mut(&mut self) -> &mut Rules {
        // Rules are not Clone (they hold a function); copy on write by hand.
        if Arc::get_mut(&mut self.rules).is_none() {
            self.rules = Arc::new(Rules {
                flags: self.rules.flags.clone(),
                policy: self.rules.policy.clone(),
            });
        }
        Arc::get_mut(&mut self.rules).expect("just made unique")
    }

    /// Flag a tool: its calls need approval (unless the [`policy`](Self::policy) says otherwise).
    pub fn require_approval(mut self, tool: impl Into<String>) -> Self {
        self.rules_mut().flags.insert(tool.into(), None);
        self
    }

    /// Flag a tool, with the reason shown to the approver.
    pub fn require_approval_because(
        mut self,
        tool: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        self.rules_mut()
            .flags
            .insert(tool.into(), Some(reason.into()));
        self
    }

    /// Decide per call: allow, require approval (with a reason for the approver) or deny (with a reason for the
    /// model). The function sees the tool, the parsed arguments, the request's context and the layer's flag
    /// ([`PolicyInput::default_verdict`]); it replaces the flags' verdict. It cannot waive a tool's own
    /// `requires_approval`.
    pub fn policy(
        mut self,
        policy: impl Fn(&PolicyInput<'_>) -> Verdict + Send + Sync + 'static,
    ) -> Self {
        let policy: Arc<PolicyFn> = Arc::new(policy);
        self.rules_mut().policy = Some(policy);
        self
    }

    /// Decide who may decide what: `Err(reason)` refuses the decision (and with it the whole request). Runs after
    /// every other check passed.
    pub fn approver_rule(
        mut self,
        rule: impl Fn(&ApproverInput<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.approver_rule = Some(Arc::new(rule));
        self
    }

    /// How long an approval id stays valid after it was issued.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The time source for issuing ids and checking their expiry (default [`SystemClock`]; a
    /// [`ManualClock`](crate::ManualClock) in tests, so expiry needs no waiting).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }
}

impl fmt::Debug for ApprovalLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalLayer")
            .field("rules", &self.rules)
            .field("approver_rule", &self.approver_rule.as_ref().map(|_| ".."))
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for ApprovalLayer {
    type Service = Approval<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let shared = Shared {
            store: self.store.clone(),
            ttl: self.ttl,
            clock: self.clock.clone(),
            approver_rule: self.approver_rule.clone(),
            policy: self.rules.clone().into_loop_policy(),
        };
        Approval::new(inner, Arc::new(shared))
    }
}
