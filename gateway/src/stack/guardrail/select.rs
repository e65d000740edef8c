//! The compiled policies ([`Policies`]) and [`Guardrails`]: the service that applies to each request the first
//! policy matching its caller, route and model, and counts the verdicts into the gateway's metrics.
//!
//! The policies were compiled once ([`Policies`]); per request the service only compares names and wraps
//! the inner service it polled ready in the chosen policy's `Guardrail` (two `Arc` clones, no compilation).
//! Verdicts are read from a `GuardrailAudit` of its own in the request (nested into one a front end put there,
//! which still receives them) and counted when the answer finishes, fails or is dropped, so a verdict is in
//! `/metrics` before the client reads the end of the answer it decided.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use tower::{Layer, Service};
use tower_chat::{
    CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ErrorKind, GuardrailAudit,
};
use tower_chat_guardrail::{Guardrail, GuardrailLayer};
use tower_chat_persistence::PersistenceLayer;

use crate::telemetry::metrics::PrometheusMetrics;
use crate::turn::rounds::name_round;
use tower_chat_wire::format::InboundRoute;

/// A compiled policy and whom it applies to.
#[derive(Clone, Debug)]
pub(crate) struct Selector {
    pub(super) callers: Option<HashSet<String>>,
    pub(super) routes: Option<Vec<InboundRoute>>,
    pub(super) models: Option<HashSet<String>>,
    pub(crate) layer: GuardrailLayer,
}

impl Selector {
    pub(crate) fn matches(
        &self,
        caller: Option<&str>,
        route: Option<InboundRoute>,
        model: Option<&str>,
    ) -> bool {
        let caller_ok = self
            .callers
            .as_ref()
            .is_none_or(|callers| caller.is_some_and(|c| callers.contains(c)));
        let route_ok = self
            .routes
            .as_ref()
            .is_none_or(|routes| route.is_some_and(|r| routes.contains(&r)));
        let model_ok = self
            .models
            .as_ref()
            .is_none_or(|models| model.is_some_and(|m| models.contains(m)));
        caller_ok && route_ok && model_ok
    }
}

/// Every policy of the table, compiled, in order.
#[derive(Clone, Debug)]
pub struct Policies {
    pub(crate) selectors: Vec<Selector>,
}

impl Policies {
    /// How many policies there are.
    pub fn len(&self) -> usize {
        self.selectors.len()
    }

    /// Whether there are none (nothing is checked).
    pub fn is_empty(&self) -> bool {
        self.selectors.is_empty()
    }

    /// The names of every check of every policy: the values the verdict counter's `check` label may take.
    pub fn check_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .selectors
            .iter()
            .flat_map(|s| s.layer.policy_checks().iter().map(|c| c.name().to_owned()))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Builds [`Guardrails`] around a service.
#[derive(Clone, Debug)]
pub struct GuardrailsLayer {
    policies: Arc<Policies>,
    metrics: PrometheusMetrics,
    refusals: Option<PersistenceLayer>,
}

impl GuardrailsLayer {
    /// The compiled `policies`, their verdicts counted into `metrics` (whose `check` label admits their checks'
    /// names).
    pub fn new(policies: Policies, metrics: PrometheusMetrics) -> Self {
        metrics.admit_guardrail_checks(policies.check_names());
        GuardrailsLayer {
            policies: Arc::new(policies),
            metrics,
            refusals: None,
        }
    }

    /// Record each request a policy refuses into `persistence` (a refused call with its verdicts, its size
    /// instead of its text): the records of the calls that went on are made inside, by the layer itself.
    pub fn record_refusals(mut self, persistence: Option<PersistenceLayer>) -> Self {
        self.refusals = persistence;
        self
    }
}

impl<S> Layer<S> for GuardrailsLayer {
    type Service = Guardrails<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guardrails {
            inner,
            policies: self.policies.clone(),
            metrics: self.metrics.clone(),
            refusals: self.refusals.clone(),
        }
    }
}

/// A chat service under the policy each request falls under (see the [module docs](super)).
#[derive(Clone, Debug)]
pub struct Guardrails<S> {
    inner: S,
    policies: Arc<Policies>,
    metrics: PrometheusMetrics,
    refusals: Option<PersistenceLayer>,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

impl<S> Service<ChatRequest> for Guardrails<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        let chosen = {
            let caller = request
                .extensions
                .get::<CallerIdentity>()
                .map(CallerIdentity::as_str);
            let route = request.extensions.get::<InboundRoute>().copied();
            let model = request.options.model.as_deref();
            self.policies
                .selectors
                .iter()
                .find(|s| s.matches(caller, route, model))
                .map(|s| s.layer.clone())
        };
        let Some(layer) = chosen else {
            return Box::pin(self.inner.call(request));
        };
        let audit = match request.extensions.get::<GuardrailAudit>() {
            Some(outer) => GuardrailAudit::nested(outer.clone()),
            None => GuardrailAudit::new(),
        };
        request.extensions.insert(audit.clone());
        // Kept to record a refusal: the guardrail refuses before any recorder inside sees the request.
        let refusal = self
            .refusals
            .clone()
            .map(|persistence| (persistence, request.clone()));
        // The service polled ready goes into the guardrail, which calls it at once (its own readiness is the
        // inner service's); a clone stays for the next request.
        let clone = self.inner.clone();
        let mut guarded = Guardrail::new(std::mem::replace(&mut self.inner, clone), layer);
        let call = guarded.call(request);
        let mut tally = Tally {
            audit,
            counted: 0,
            metrics: self.metrics.clone(),
        };
        Box::pin(async move {
            match call.await {
                Ok(stream) => Ok(Box::pin(Counted {
                    inner: stream,
                    tally,
                }) as ChatStream),
                Err(error) => {
                    tally.catch_up();
                    if let Some((persistence, request)) = refusal {
                        if matches!(error.kind(), ErrorKind::PolicyBlocked { .. }) {
                            persistence.record_refused(name_round(request), &error);
                        }
                    }
                    Err(error)
                }
            }
        })
    }
}

/// The verdicts of one request not counted yet.
struct Tally {
    audit: GuardrailAudit,
    counted: usize,
    metrics: PrometheusMetrics,
}

impl Tally {
    fn catch_up(&mut self) {
        let verdicts = self.audit.verdicts();
        for verdict in verdicts.iter().skip(self.counted) {
            self.metrics
                .guardrail_verdict(&verdict.check, verdict.action, verdict.stage);
        }
        self.counted = verdicts.len();
    }
}

impl Drop for Tally {
    /// An answer the client dropped halfway still counts what was decided.
    fn drop(&mut self) {
        self.catch_up();
    }
}

/// The guarded answer, counting verdicts at each finish, at an error and at its end.
struct Counted {
    inner: ChatStream,
    tally: Tally,
}

impl Stream for Counted {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.inner.as_mut().poll_next(cx));
        if matches!(
            &item,
            None | Some(Err(_)) | Some(Ok(ChatEvent::Finish { .. }))
        ) {
            self.tally.catch_up();
        }
        Poll::Ready(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}
