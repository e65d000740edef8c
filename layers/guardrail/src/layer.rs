//! [`GuardrailLayer`]: the policy, configured as a layer.

use std::sync::Arc;

use tower_layer::Layer;

use crate::check::Check;
use crate::policy::{Policy, DEFAULT_BLOCK_MESSAGE, DEFAULT_MAX_CANDIDATES};
use crate::service::Guardrail;

/// Checks requests, tool calls, tool results and answers against a policy of [`Check`]s (see the
/// [crate docs](crate)). Cheap to clone: the policy is shared.
#[derive(Clone, Debug)]
pub struct GuardrailLayer {
    pub(crate) policy: Arc<Policy>,
}

impl Default for GuardrailLayer {
    fn default() -> Self {
        GuardrailLayer::new()
    }
}

impl GuardrailLayer {
    /// A layer with no checks yet: it lets everything through until checks are added.
    pub fn new() -> Self {
        GuardrailLayer {
            policy: Arc::new(Policy::new(
                Vec::new(),
                DEFAULT_BLOCK_MESSAGE.into(),
                DEFAULT_MAX_CANDIDATES,
            )),
        }
    }

    /// Add a check; checks listed first win ties (two matches at the same offset).
    pub fn check(self, check: Check) -> Self {
        let mut checks = self.policy.checks.clone();
        checks.push(check);
        self.rebuilt(
            checks,
            self.policy.block_message.clone(),
            self.policy.max_candidates,
        )
    }

    fn rebuilt(&self, checks: Vec<Check>, block_message: Arc<str>, max_candidates: usize) -> Self {
        GuardrailLayer {
            policy: Arc::new(Policy::new(checks, block_message, max_candidates)),
        }
    }

    /// Add several checks.
    pub fn checks(self, checks: impl IntoIterator<Item = Check>) -> Self {
        checks.into_iter().fold(self, GuardrailLayer::check)
    }

    /// The text that ends a blocked answer, before its `content_filter` finish; `{check}` is replaced by the
    /// blocking check's name. Default: `[The rest of this answer was withheld by the content policy (check
    /// `{check}`).]`.
    pub fn block_message(self, message: &str) -> Self {
        self.rebuilt(
            self.policy.checks.clone(),
            message.into(),
            self.policy.max_candidates,
        )
    }

    /// How many candidate matches (a pattern's match that a validator then examines: an IBAN shape for mod-97,
    /// a card number for Luhn, any match of a plain pattern) each pattern check may examine per stage of one
    /// request, or of one answer. Past it the check blocks whatever its action — a request is refused with a
    /// [`PolicyBlocked`](tower_chat::ErrorKind::PolicyBlocked) error naming `max_candidates`, an answer ends
    /// where the check's search stood — so a body built of near-misses costs a bounded amount of work and is
    /// never let through unexamined. Default: 100,000.
    pub fn max_candidates(self, max_candidates: usize) -> Self {
        self.rebuilt(
            self.policy.checks.clone(),
            self.policy.block_message.clone(),
            max_candidates,
        )
    }

    /// The checks, in order.
    pub fn policy_checks(&self) -> &[Check] {
        &self.policy.checks
    }
}

impl<S> Layer<S> for GuardrailLayer {
    type Service = Guardrail<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guardrail::new(inner, self.clone())
    }
}

impl<S> Guardrail<S> {
    /// Wrap `inner` with the layer's policy.
    pub fn new(inner: S, layer: GuardrailLayer) -> Self {
        Guardrail::with_policy(inner, layer.policy)
    }
}
