//! [`Guardrail`]: the service that judges a request before its inner service sees it, and wraps the answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower_chat::{
    CallScreens, ChatError, ChatRequest, ChatStream, GuardedCall, GuardrailAudit, ModelInfo,
    ModelMetadata,
};
use tower_service::Service;

use crate::policy::Policy;
use crate::request::check_request;
use crate::screen::PolicyScreens;
use crate::stream::OutputGuard;

/// A chat service under a content policy (built by [`GuardrailLayer`](crate::GuardrailLayer)).
#[derive(Clone, Debug)]
pub struct Guardrail<S> {
    inner: S,
    policy: Arc<Policy>,
}

impl<S> Guardrail<S> {
    /// Wrap `inner` with a layer's policy.
    pub(crate) fn with_policy(inner: S, policy: Arc<Policy>) -> Self {
        Guardrail { inner, policy }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, taken.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: ModelInfo> ModelInfo for Guardrail<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

/// The future of [`Guardrail::call`]: the request's checks, then the inner call.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

impl<S> Service<ChatRequest> for Guardrail<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        // The service that was polled ready goes with the call; a clone stays for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let policy = self.policy.clone();
        Box::pin(async move {
            let mut request = request;
            let audit = match request.extensions.get::<GuardrailAudit>() {
                Some(audit) => audit.clone(),
                None => {
                    let audit = GuardrailAudit::new();
                    request.extensions.insert(audit.clone());
                    audit
                }
            };
            let before = audit.verdicts().len();
            let mut request = check_request(&policy, request).await?;
            // A recorder inside keeps the request's verdicts and what this policy lets through of the answer,
            // since it sees the answer before the guard below does.
            let request_verdicts = audit.verdicts().split_off(before);
            let checked = request.messages.len();
            let screens = PolicyScreens::of(&policy);
            request.extensions.insert(
                GuardedCall::new(
                    request_verdicts,
                    screens
                        .clone()
                        .map(|screens| screens as Arc<dyn CallScreens>),
                )
                .checked_messages(checked),
            );
            let audit = Some(audit);
            let stream = inner.call(request).await?;
            let policy_watches_output = !policy.output.is_empty()
                || !policy.tool_call.is_empty()
                || !policy.tool_result.is_empty();
            Ok(if policy_watches_output {
                OutputGuard::new(stream, policy, audit, screens).into_stream()
            } else {
                stream
            })
        })
    }
}
