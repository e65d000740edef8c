//! [`Fallback`]: an ordered list of targets; a call that fails before its first content event moves on to the
//! next one.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ErrorKind, ModelInfo, ModelMetadata,
    TimeoutPhase,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::breaker::{target_name, Breaker, BreakerHandle, CircuitBreakerLayer};
use crate::first::{FirstContent, Peeked};
use crate::observe::{Observer, ResilienceEvent, SharedObserver};

/// One target of a [`Fallback`]: a name, a chat service (any provider, any stack), and the model it is called
/// with.
#[derive(Clone)]
pub struct Target {
    name: String,
    metadata: ModelMetadata,
    model: ModelChoice,
    service: Arc<dyn TargetService>,
    /// The target's own circuit breaker, driven by the fallback itself ([`Target::breaker`]).
    breaker: Option<Arc<Breaker>>,
}

/// Which model a request sent to a target names.
#[derive(Clone, Debug, PartialEq)]
enum ModelChoice {
    /// None: the target's service uses its own default model (no string is copied per call).
    ServiceDefault,
    /// The request's own.
    Request,
    /// This one.
    Fixed(String),
}

impl Target {
    /// A target named `name`. Its metadata comes from the service's [`ModelInfo`], and requests sent to it name
    /// the service's default model (so one request can go to an OpenAI model, then to an Anthropic one).
    pub fn new<S>(name: impl Into<String>, service: S) -> Self
    where
        S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
            + ModelInfo
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let metadata = service.model_metadata();
        Target {
            name: name.into(),
            model: match metadata.model_id {
                Some(_) => ModelChoice::ServiceDefault,
                None => ModelChoice::Request,
            },
            metadata,
            service: Arc::new(service),
            breaker: None,
        }
    }

    /// A target named after its service's provider and model (`openai/gpt-4o-mini`).
    pub fn from_service<S>(service: S) -> Self
    where
        S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
            + ModelInfo
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let name = target_name(&service.model_metadata());
        Target::new(name, service)
    }

    /// Send requests to this target with this model (`None`: the request's own).
    pub fn model(mut self, model: Option<String>) -> Self {
        self.model = match model {
            Some(model) => ModelChoice::Fixed(model),
            None => ModelChoice::Request,
        };
        self
    }

    /// Put a circuit breaker with `layer`'s settings in front of this target (named after the target unless the
    /// layer names it), driven by the fallback itself.
    ///
    /// It behaves as `layer.layer(service)` would — an open circuit skips the target at once, a probe after the
    /// cool-down, a call counts at its first content event — but costs less per call: the fallback already holds
    /// each stream until its first content event, so the breaker needs no stream wrapper of its own.
    pub fn breaker(mut self, layer: &CircuitBreakerLayer) -> Self {
        self.breaker = Some(layer.breaker(&self.name));
        self
    }

    /// The state of the target's breaker set with [`Target::breaker`], for health checks and metrics.
    pub fn breaker_handle(&self) -> Option<BreakerHandle> {
        self.breaker.clone().map(BreakerHandle::from_breaker)
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The target's metadata.
    pub fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("provider", &self.metadata.provider)
            .finish_non_exhaustive()
    }
}

/// A target's service, type-erased (one fallback mixes providers and stacks) so that a call costs one allocation:
/// the call's future owns its own clone of the service, polls it ready, then calls it. (As a `BoxChatService` it
/// cost two: the boxed clone, then the boxed response future.)
trait TargetService: Send + Sync {
    fn ready_and_call(&self, request: ChatRequest) -> TargetFuture;
}

type TargetFuture = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

impl<S> TargetService for S
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    fn ready_and_call(&self, request: ChatRequest) -> TargetFuture {
        Box::pin(ReadyThenCall {
            service: self.clone(),
            request: Some(request),
            future: None,
        })
    }
}

pin_project! {
    /// A clone of a target's service, polled ready, then called with the request (tower's `Oneshot`, in the box
    /// the call needs anyway).
    struct ReadyThenCall<S: Service<ChatRequest>> {
        service: S,
        request: Option<ChatRequest>,
        #[pin]
        future: Option<S::Future>,
    }
}

impl<S> Future for ReadyThenCall<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(future) = this.future.as_mut().as_pin_mut() {
            return future.poll(cx);
        }
        ready!(this.service.poll_ready(cx))?;
        let request = this.request.take().expect("called once");
        this.future.set(Some(this.service.call(request)));
        this.future.as_pin_mut().expect("set above").poll(cx)
    }
}

/// One target that failed, and why.
#[derive(Debug)]
pub struct FailedAttempt {
    /// The target's name.
    pub target: String,
    /// Its error.
    pub error: ChatError,
}

/// The source of the error of a call every target failed: `error.source()` downcasts to it.
#[derive(Debug)]
pub struct AllTargetsFailed {
    attempts: Vec<FailedAttempt>,
}

impl AllTargetsFailed {
    /// Every attempt, in order.
    pub fn attempts(&self) -> &[FailedAttempt] {
        &self.attempts
    }
}

impl fmt::Display for AllTargetsFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "all {} targets failed", self.attempts.len())?;
        for (i, attempt) in self.attempts.iter().enumerate() {
            write!(
                f,
                "{} {}: {}",
                if i == 0 { ":" } else { ";" },
                attempt.target,
                attempt.error
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for AllTargetsFailed {}

/// Which target answered a call: put an empty one in the request's extensions, read it once the response future
/// resolved.
#[derive(Clone, Debug, Default)]
pub struct AnsweredBy(Arc<Mutex<Option<Answer>>>);

/// The target that answered a call, and the targets tried before it.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The target's name.
    pub target: String,
    /// Its metadata (provider, model, endpoint).
    pub metadata: ModelMetadata,
    /// The model the request was sent with.
    pub model: Option<String>,
    /// The names of the targets that failed before it.
    pub skipped: Vec<String>,
}

impl AnsweredBy {
    /// An empty slot.
    pub fn new() -> Self {
        AnsweredBy::default()
    }

    /// The answer, once a fallback filled it in.
    pub fn get(&self) -> Option<Answer> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, answer: Answer) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
    }
}

type FallbackPredicate = Arc<dyn Fn(&ChatError) -> bool + Send + Sync>;

/// Whether the next target is tried after this failure, by default: every failure except a cancellation, a spent
/// whole-call deadline, and a request refused as malformed (the next target would refuse it too). Content one
/// provider cannot take ([`ErrorKind::Unsupported`]) is tried on the next, which may take it.
pub fn default_fallback_on(error: &ChatError) -> bool {
    !matches!(
        error.kind(),
        ErrorKind::Cancelled | ErrorKind::Timeout(TimeoutPhase::Total) | ErrorKind::InvalidRequest
    )
}

#[derive(Clone)]
struct FallbackConfig {
    fallback_on: FallbackPredicate,
    observer: SharedObserver,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            fallback_on: Arc::new(default_fallback_on),
            observer: SharedObserver::default(),
        }
    }
}

/// Adds fallback targets after the service it wraps (which becomes the first target, named after its
/// provider and model).
#[derive(Clone, Default)]
pub struct FallbackLayer {
    targets: Vec<Target>,
    config: FallbackConfig,
}

impl FallbackLayer {
    /// A layer with no fallback targets yet.
    pub fn new() -> Self {
        FallbackLayer::default()
    }

    /// Try `target` after the ones before it.
    pub fn target(mut self, target: Target) -> Self {
        self.targets.push(target);
        self
    }

    /// Which failures move on to the next target (default: [`default_fallback_on`]).
    pub fn fallback_on(
        mut self,
        predicate: impl Fn(&ChatError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config.fallback_on = Arc::new(predicate);
        self
    }

    /// Where fallbacks are reported.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.config.observer = SharedObserver(Some(Arc::new(observer)));
        self
    }
}

impl fmt::Debug for FallbackLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackLayer")
            .field("targets", &self.targets)
            .field(
                "fallback_on",
                &std::any::type_name_of_val(&*self.config.fallback_on),
            )
            .field("observer", &self.config.observer)
            .finish()
    }
}

impl<S> Layer<S> for FallbackLayer
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + ModelInfo
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    type Service = Fallback;

    fn layer(&self, primary: S) -> Self::Service {
        let mut targets = vec![Target::from_service(primary)];
        targets.extend(self.targets.iter().cloned());
        Fallback {
            shared: Arc::new(FallbackShared {
                targets,
                config: self.config.clone(),
            }),
        }
    }
}

/// A chat service over ordered targets; see [`FallbackLayer`].
///
/// Each call goes to the first target; a failure before its first content event (for which
/// [`fallback_on`](FallbackLayer::fallback_on) says yes) sends the same request to the next target, with that
/// target's model. The stream that answers opens with a [`ChatEvent::ResponseMetadata`] naming the model that
/// answered (the provider's own when it sent one), and an [`AnsweredBy`] in the request's extensions is told the
/// target. When every target failed, the error is the last one's kind and status, its message lists every
/// attempt, and its source is [`AllTargetsFailed`].
#[derive(Clone)]
pub struct Fallback {
    /// One pointer: a fallback is cloned per call (by a retry layer around it, by boxing), and so is its future.
    shared: Arc<FallbackShared>,
}

#[derive(Clone)]
struct FallbackShared {
    targets: Vec<Target>,
    config: FallbackConfig,
}

impl Fallback {
    /// A service over these targets, tried in order (at least one).
    pub fn new(targets: Vec<Target>) -> Self {
        assert!(!targets.is_empty(), "a fallback needs at least one target");
        Fallback {
            shared: Arc::new(FallbackShared {
                targets,
                config: FallbackConfig::default(),
            }),
        }
    }

    /// Which failures move on to the next target (default: [`default_fallback_on`]).
    pub fn fallback_on(
        mut self,
        predicate: impl Fn(&ChatError) -> bool + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.shared).config.fallback_on = Arc::new(predicate);
        self
    }

    /// Where fallbacks are reported.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        Arc::make_mut(&mut self.shared).config.observer = SharedObserver(Some(Arc::new(observer)));
        self
    }

    /// The targets, in order.
    pub fn targets(&self) -> &[Target] {
        &self.shared.targets
    }
}

impl fmt::Debug for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("targets", &self.shared.targets)
            .finish_non_exhaustive()
    }
}

impl ModelInfo for Fallback {
    /// The first target's metadata (the one that answers when all is well); [`AnsweredBy`] tells per call.
    fn model_metadata(&self) -> ModelMetadata {
        self.shared.targets[0].metadata.clone()
    }
}

impl Service<ChatRequest> for Fallback {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = FallbackFuture;

    /// Always ready: each target is polled ready in turn when the call reaches it.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let mut future = FallbackFuture {
            shared: self.shared.clone(),
            answered_by: request.extensions.get::<AnsweredBy>().cloned(),
            request: Some(request),
            index: 0,
            sent_model: None,
            failed: Vec::new(),
            admitted: None,
            state: Step::Done,
        };
        future.start_target();
        future
    }
}

/// The response future of [`Fallback`]: each target in turn, polled ready, called, its stream held up to the
/// first content event.
///
/// ```text
///            ┌──────── failed, the next target ─────────┐
///            ▼                                           │
/// call ─► Calling (ready, call) ──Ok(stream)──► Peeking ──first content──► answered
///            │                                   │
///            └──────────────Err──────────────────┴──► the next target, or every attempt's error
/// ```
pub struct FallbackFuture {
    shared: Arc<FallbackShared>,
    answered_by: Option<AnsweredBy>,
    /// The request for the targets after this one; the last target takes it.
    request: Option<ChatRequest>,
    /// The target being tried.
    index: usize,
    /// The model the current target was sent, when the request named one.
    sent_model: Option<String>,
    failed: Vec<FailedAttempt>,
    /// The current target's leave to call through its breaker; told the outcome once.
    /// `Some(probe)`: the breaker let it through (as its half-open probe, or not) and is owed its outcome.
    admitted: Option<bool>,
    state: Step,
}

enum Step {
    /// The current target's breaker refused the call.
    Refused {
        /// Boxed: this rare state would otherwise make every fallback future (moved and boxed per call) 40 bytes
        /// larger.
        error: Option<Box<ChatError>>,
    },
    /// The target's service being polled ready, then its response future.
    Calling {
        future: TargetFuture,
    },
    Peeking {
        peek: FirstContent,
    },
    Done,
}

impl fmt::Debug for FallbackFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackFuture")
            .field(
                "target",
                &self.shared.targets.get(self.index).map(|t| &t.name),
            )
            .finish_non_exhaustive()
    }
}

impl FallbackFuture {
    /// Move on to target `self.index`: through its breaker, if it has one, then poll its service ready.
    fn start_target(&mut self) {
        let target = &self.shared.targets[self.index];
        if let Some(breaker) = &target.breaker {
            match breaker.admit() {
                Ok(probe) => self.admitted = Some(probe),
                Err(error) => {
                    self.state = Step::Refused {
                        error: Some(Box::new(error)),
                    };
                    return;
                }
            }
        }
        let request = self.target_request();
        let future = self.shared.targets[self.index]
            .service
            .ready_and_call(request);
        self.state = Step::Calling { future };
    }

    /// Tell the current target's breaker how its call went (once; `None`: dropped before it said anything).
    fn settle(&mut self, outcome: Option<Result<(), &ChatError>>) {
        if let Some(probe) = self.admitted.take() {
            let breaker = self.shared.targets[self.index].breaker.as_ref();
            breaker
                .expect("admitted by the target's breaker")
                .settle(probe, outcome);
        }
    }

    /// The request for target `self.index`, with that target's model.
    fn target_request(&mut self) -> ChatRequest {
        let target = &self.shared.targets[self.index];
        let last = self.index + 1 == self.shared.targets.len();
        let mut request = if last {
            self.request.take()
        } else {
            self.request.clone()
        }
        .expect("the request is kept until the last target");
        // Options are shared with the kept request (copy on write): written only when they change.
        match &target.model {
            ModelChoice::ServiceDefault if request.options.model.is_some() => {
                request.options.model = None;
            }
            ModelChoice::Fixed(model) if request.options.model.as_deref() != Some(model) => {
                request.options.model = Some(model.clone());
            }
            _ => {}
        }
        // The model this target answers with, when the request leaves it to the service.
        self.sent_model = match &target.model {
            ModelChoice::ServiceDefault => None,
            _ => request.options.model.clone(),
        };
        request
    }

    /// The current target failed: the next one, or the error of the whole call.
    fn on_failure(&mut self, error: ChatError) -> Option<ChatError> {
        let target = &self.shared.targets[self.index];
        if !(self.shared.config.fallback_on)(&error) {
            return Some(error);
        }
        let next = self.shared.targets.get(self.index + 1);
        if let Some(next) = next {
            self.shared.config.observer.emit(ResilienceEvent::Fallback {
                from: &target.name,
                to: &next.name,
                error: &error,
            });
        }
        self.failed.push(FailedAttempt {
            target: target.name.clone(),
            error,
        });
        if next.is_none() {
            return Some(all_failed(std::mem::take(&mut self.failed)));
        }
        self.index += 1;
        self.start_target();
        None
    }

    /// The current target answered: name the model in the stream and in [`AnsweredBy`].
    fn answered(&mut self, mut peeked: Peeked) -> ChatStream {
        let target = &self.shared.targets[self.index];
        let model = || {
            self.sent_model
                .clone()
                .or_else(|| target.metadata.model_id.clone())
        };
        let named = peeked
            .head()
            .any(|e| matches!(e, ChatEvent::ResponseMetadata { model: Some(_), .. }));
        if !named {
            if let Some(model) = model() {
                peeked.head().push_front(ChatEvent::ResponseMetadata {
                    id: None,
                    model: Some(model),
                });
            }
        }
        if let Some(slot) = &self.answered_by {
            slot.set(Answer {
                target: target.name.clone(),
                metadata: target.metadata.clone(),
                model: model(),
                skipped: self.failed.iter().map(|f| f.target.clone()).collect(),
            });
        }
        peeked.into_stream()
    }
}

impl Drop for FallbackFuture {
    /// A call dropped while a target runs frees its breaker's probe slot, counting nothing (as a dropped `Permit`).
    fn drop(&mut self) {
        self.settle(None);
    }
}

impl Future for FallbackFuture {
    type Output = Result<ChatStream, ChatError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            let error = match &mut this.state {
                Step::Refused { error } => *error.take().expect("refused once"),
                Step::Calling { future } => match ready!(future.as_mut().poll(cx)) {
                    Ok(stream) => {
                        this.state = Step::Peeking {
                            peek: FirstContent::new(stream),
                        };
                        continue;
                    }
                    Err(error) => error,
                },
                Step::Peeking { peek } => match ready!(peek.poll_peek(cx)) {
                    Ok(peeked) => {
                        this.state = Step::Done;
                        this.settle(Some(Ok(())));
                        return Poll::Ready(Ok(this.answered(peeked)));
                    }
                    Err(error) => error,
                },
                Step::Done => panic!("FallbackFuture polled after completion"),
            };
            this.state = Step::Done;
            this.settle(Some(Err(&error)));
            if let Some(error) = this.on_failure(error) {
                return Poll::Ready(Err(error));
            }
        }
    }
}

fn all_failed(attempts: Vec<FailedAttempt>) -> ChatError {
    let last = &attempts.last().expect("at least one target").error;
    let kind = last.kind().clone();
    let status = last.status();
    let failure = AllTargetsFailed { attempts };
    let mut error = ChatError::new(kind, failure.to_string());
    if let Some(status) = status {
        error = error.with_status(status);
    }
    error.with_source(failure)
}
