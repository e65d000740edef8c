//! [`GuardrailLayer`]: the policy, configured as a layer.

use std::sync::Arc;

use tower_layer::Layer;

use crate::check::Check;
use crate::policy::{Policy, DEFAULT_BLOCK_MESSAGE};
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
            policy: Arc::new(Policy::new(Vec::new(), DEFAULT_BLOCK_MESSAGE.into())),
        }
    }

    /// Add a check; checks listed first win ties (two matches at the same offset).
    pub fn check(self, check: Check) -> Self {
        let mut checks = self.policy.checks.clone();
        checks.push(check);
        GuardrailLayer {
            policy: Arc::new(Policy::new(checks, self.policy.block_message.clone())),
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
        GuardrailLayer {
            policy: Arc::new(Policy::new(self.policy.checks.clone(), message.into())),
        }
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
