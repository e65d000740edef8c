//! [`RetryLayer`]: call again what failed for a passing reason, but never once the caller has seen content.

use std::fmt;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tower::retry::budget::{Budget, TpsBudget};
use tower::ServiceExt;
use tower_chat::{
    ChatError, ChatRequest, ChatStream, ErrorKind, ModelInfo, ModelMetadata, TimeoutPhase,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::clock::{Clock, SharedClock};
use crate::first::FirstContent;
use crate::observe::{Observer, ResilienceEvent, SharedObserver};
use crate::policy::{is_transient, Backoff};
use crate::race::{cancelled, race, Either};

/// Marks a request as already inside a [`RetryLayer`]: a retry layer that finds it calls its inner service once
/// and leaves retrying to the outer one, so nested retry layers never multiply attempts. Insert it yourself to
/// turn retries off for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryScope;

/// A retry budget every clone of a layer's services draws from.
type SharedBudget = Arc<dyn Budget + Send + Sync>;

struct RetryConfig {
    max_attempts: u32,
    backoff: Backoff,
    retry_after_cap: Duration,
    deadline: Option<Duration>,
    budget: SharedBudget,
    clock: SharedClock,
    observer: SharedObserver,
}

impl Clone for RetryConfig {
    fn clone(&self) -> Self {
        RetryConfig {
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            retry_after_cap: self.retry_after_cap,
            deadline: self.deadline,
            budget: self.budget.clone(),
            clock: self.clock.clone(),
            observer: self.observer.clone(),
        }
    }
}

/// Retries a chat call that failed for a passing reason ([`is_transient`](crate::is_transient)) before its first
/// content event reached the caller.
///
/// | setting | default |
/// | --- | --- |
/// | [`max_attempts`](Self::max_attempts): calls per request, the first included | 3 |
/// | [`backoff`](Self::backoff): exponential, full jitter | 500 ms doubling to 30 s |
/// | [`retry_after_cap`](Self::retry_after_cap): the longest `Retry-After` honoured (longer: fail at once) | 60 s |
/// | [`deadline`](Self::deadline): the whole call until its first content event | none |
/// | [`budget`](Self::budget): retries allowed across every clone | tower's `TpsBudget`: 20 % of calls, at least 10/s |
/// | [`clock`](Self::clock) | [`TokioClock`](crate::TokioClock) |
///
/// The response future resolves once the first content event arrived (events before it are held and passed on
/// unchanged), so a 429, a 5xx or a stream cut before any text is retried invisibly. After that the stream is the
/// inner one: a later failure reaches the caller as its typed error, and nothing is sent twice.
#[derive(Clone)]
pub struct RetryLayer {
    config: Arc<RetryConfig>,
}

impl Default for RetryLayer {
    fn default() -> Self {
        RetryLayer {
            config: Arc::new(RetryConfig {
                max_attempts: 3,
                backoff: Backoff::default(),
                retry_after_cap: Duration::from_secs(60),
                deadline: None,
                budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
                clock: SharedClock::default(),
                observer: SharedObserver::default(),
            }),
        }
    }
}

impl RetryLayer {
    /// A layer with the defaults above.
    pub fn new() -> Self {
        RetryLayer::default()
    }

    fn config_mut(&mut self) -> &mut RetryConfig {
        Arc::make_mut(&mut self.config)
    }

    /// Calls per request, the first included (at least 1; 1 turns retrying off).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config_mut().max_attempts = attempts.max(1);
        self
    }

    /// The wait between attempts when the provider named none.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config_mut().backoff = backoff;
        self
    }

    /// The longest `Retry-After` / `retry-after-ms` honoured; a provider asking for longer fails the call at once
    /// (so a fallback can move on instead of waiting).
    pub fn retry_after_cap(mut self, cap: Duration) -> Self {
        self.config_mut().retry_after_cap = cap;
        self
    }

    /// An overall deadline per call, from the call to its first content event, attempts and waits included. A
    /// retry whose wait would end past it is not made; an attempt still running at it fails with
    /// [`TimeoutPhase::Total`].
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config_mut().deadline = Some(deadline);
        self
    }

    /// The retry budget (any `tower::retry::budget::Budget`), shared by every service this layer builds and
    /// every clone of them. A call deposits once; a retry withdraws once and is not made when the budget is empty.
    pub fn budget(mut self, budget: impl Budget + Send + Sync + 'static) -> Self {
        self.config_mut().budget = Arc::new(budget);
        self
    }

    /// The clock waits and the deadline are measured with.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.config_mut().clock = SharedClock(Arc::new(clock));
        self
    }

    /// Where retries are reported.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.config_mut().observer = SharedObserver(Some(Arc::new(observer)));
        self
    }
}

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("RetryLayer")
            .field("max_attempts", &c.max_attempts)
            .field("backoff", &c.backoff)
            .field("retry_after_cap", &c.retry_after_cap)
            .field("deadline", &c.deadline)
            .field("observer", &c.observer)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry {
            inner,
            config: self.config.clone(),
        }
    }
}

/// A chat service that retries transient failures; see [`RetryLayer`].
#[derive(Clone)]
pub struct Retry<S> {
    inner: S,
    config: Arc<RetryConfig>,
}

impl<S> Retry<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwrap the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Retry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("max_attempts", &self.config.max_attempts)
            .finish_non_exhaustive()
    }
}

impl<S: ModelInfo> ModelInfo for Retry<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

/// The response future of [`Retry`].
pub type ResponseFuture = crate::boxed::BoxedChatFuture;

impl<S> Service<ChatRequest> for Retry<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        if self.config.max_attempts == 1 || request.extensions.get::<RetryScope>().is_some() {
            // An outer retry layer owns the retries (or there are none to make): one call, as it is.
            return ResponseFuture::new(self.inner.call(request));
        }
        // The service polled ready goes with this request; the one left behind must be polled again.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(retry_loop(inner, request, self.config.clone()))
    }
}

/// How one attempt ended.
enum Attempt {
    Answered(ChatStream),
    Failed(ChatError),
}

async fn retry_loop<S>(
    mut inner: S,
    mut request: ChatRequest,
    config: Arc<RetryConfig>,
) -> Result<ChatStream, ChatError>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Send,
    S::Future: Send,
{
    let clock = &config.clock;
    let deadline = config.deadline.map(|d| clock.now() + d);
    let cancel = request.cancellation().cloned();
    request.extensions.insert(RetryScope);
    config.budget.deposit();
    let mut attempt = 1u32;
    loop {
        let last = attempt >= config.max_attempts;
        // The last attempt takes the request itself; earlier ones a copy, kept for the next.
        let this = if last {
            std::mem::take(&mut request)
        } else {
            request.clone()
        };
        let error = match run_attempt(&mut inner, this, deadline, clock).await {
            Attempt::Answered(stream) => return Ok(stream),
            Attempt::Failed(error) => error,
        };
        if last || !is_transient(&error) {
            return Err(error);
        }
        let wait = match error.retry_after() {
            Some(asked) if asked > config.retry_after_cap => return Err(error),
            Some(asked) => asked,
            None => config.backoff.wait(attempt),
        };
        if deadline.is_some_and(|deadline| clock.now() + wait >= deadline) {
            return Err(error);
        }
        if !config.budget.withdraw() {
            config
                .observer
                .emit(ResilienceEvent::BudgetExhausted { error: &error });
            return Err(error);
        }
        config.observer.emit(ResilienceEvent::Retry {
            attempt,
            wait,
            error: &error,
        });
        drop(error);
        if let Either::Right(()) = race(clock.sleep(wait), cancelled(cancel.clone())).await {
            return Err(ChatError::cancelled());
        }
        attempt += 1;
        let ready = race(inner.ready(), cancelled(cancel.clone())).await;
        match ready {
            Either::Left(Ok(_)) => {}
            Either::Left(Err(error)) => return Err(error),
            Either::Right(()) => return Err(ChatError::cancelled()),
        }
    }
}

/// One call of the inner service, up to its first content event, bounded by the deadline.
async fn run_attempt<S>(
    inner: &mut S,
    request: ChatRequest,
    deadline: Option<Instant>,
    clock: &SharedClock,
) -> Attempt
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let future = inner.call(request);
    let attempt = async move {
        let stream = future.await?;
        let mut peek = FirstContent::new(stream);
        poll_fn(|cx| peek.poll_peek(cx)).await
    };
    let result = match deadline {
        None => attempt.await,
        Some(deadline) => {
            let left = deadline.saturating_duration_since(clock.now());
            match race(attempt, clock.sleep(left)).await {
                Either::Left(result) => result,
                Either::Right(()) => Err(ChatError::new(
                    ErrorKind::Timeout(TimeoutPhase::Total),
                    "the retry deadline ran out before the first content event",
                )),
            }
        }
    };
    match result {
        Ok(peeked) => Attempt::Answered(peeked.into_stream()),
        Err(error) => Attempt::Failed(error),
    }
}
