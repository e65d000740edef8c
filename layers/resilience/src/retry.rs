//! [`RetryLayer`]: call again what failed for a passing reason, but never once the caller has seen content.

use std::any::TypeId;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tower::retry::budget::{Budget, TpsBudget};
use tower_chat::{
    ChatError, ChatRequest, ChatStream, ErrorKind, ModelInfo, ModelMetadata, TimeoutPhase,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::clock::{Clock, SharedClock, Sleep};
use crate::first::FirstContent;
use crate::observe::{Observer, ResilienceEvent, SharedObserver};
use crate::policy::{is_transient, Backoff};

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
/// | [`budget`](Self::budget): retries allowed across every clone | as tower's `TpsBudget`: 20 % of calls over 10 s, at least 10/s |
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
    tower_chat::define_inner_service_accessors!();
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

impl<S> Service<ChatRequest> for Retry<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        // Marked and checked in one map operation: a request that already had the marker is unchanged by it.
        if self.config.max_attempts == 1 || request.extensions.insert(RetryScope).is_some() {
            // An outer retry layer owns the retries (or there are none to make): one call, as it is.
            return ResponseFuture::once(self.inner.call(request));
        }
        let config = self.config.clone();
        let deadline = config.deadline.map(|d| config.clock.now() + d);
        config.budget.deposit();
        // The service polled ready goes with this request; the one left behind must be polled again.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        // The first attempt takes a copy (a few reference counts: see `tower_chat::Shared`), the original is kept
        // for the next one.
        let future = inner.call(request.clone());
        let timer = deadline.map(|deadline| attempt_timer(&config, deadline));
        ResponseFuture {
            state: State::Calling { future },
            retry: Some(Retrying {
                inner,
                request: Some(request),
                config,
                attempt: 1,
                deadline,
                timer,
                peek: !resolves_at_first_content::<S>(),
            }),
        }
    }
}

/// Whether `S`'s response future already resolves only at its first content event (a failure before it is the
/// future's error), so a retry around it has nothing to hold back: a [`Fallback`](crate::Fallback) peeks each
/// target's stream itself. Checked by type (`TypeId` of a `'static` type, folded at compile time) because stable
/// Rust has no specialization; any other service is peeked, which is always correct, just one stream wrapper more.
fn resolves_at_first_content<S: 'static>() -> bool {
    TypeId::of::<S>() == TypeId::of::<crate::Fallback>()
}

/// The timer of one attempt: fires at the call's deadline.
fn attempt_timer(config: &RetryConfig, deadline: Instant) -> Sleep {
    config
        .clock
        .sleep(deadline.saturating_duration_since(config.clock.now()))
}

pin_project! {
    /// The response future of [`Retry`]: a state machine in the shape of tower's `retry::future`.
    ///
    /// ```text
    ///            ┌──────────────── next attempt ─────────────────┐
    ///            ▼                                                │
    /// call ─► Calling ──Ok(stream)──► Peeking ──first content──► answered
    ///            │                      │
    ///            └──────Err─────────────┴──► transient, attempts and budget left?
    ///                                          yes: Waiting (backoff) ─► Readying ─┘
    ///                                          no:  the error
    /// ```
    /// `Once` is the whole machine when an outer retry layer owns the retries.
    pub struct ResponseFuture<S>
    where
        S: Service<ChatRequest>,
    {
        #[pin]
        state: State<S::Future>,
        retry: Option<Retrying<S>>,
    }
}

/// What a retrying call keeps between attempts.
struct Retrying<S> {
    /// The service, polled ready before each new attempt.
    inner: S,
    /// The request to send again; the last attempt takes it.
    request: Option<ChatRequest>,
    config: Arc<RetryConfig>,
    /// The attempt in flight (1-based).
    attempt: u32,
    deadline: Option<Instant>,
    /// Fires at `deadline` while an attempt runs.
    timer: Option<Sleep>,
    /// Whether the stream must be held until its first content event (not when the inner service already does).
    peek: bool,
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        /// The one call of a request an outer retry layer owns.
        Once { #[pin] future: F },
        /// An attempt's response future.
        Calling { #[pin] future: F },
        /// An attempt's stream, polled up to its first content event.
        Peeking { peek: FirstContent },
        /// The backoff before the next attempt.
        Waiting { sleep: Sleep, cancelled: Option<Cancelled> },
        /// Waiting for the service to be ready for the next attempt.
        Readying { cancelled: Option<Cancelled> },
        /// Resolved.
        Done,
    }
}

/// Resolves when the request's cancellation token is cancelled; only built once a backoff starts.
type Cancelled = Pin<Box<WaitForCancellationFutureOwned>>;

impl<S: Service<ChatRequest>> ResponseFuture<S> {
    fn once(future: S::Future) -> Self {
        ResponseFuture {
            state: State::Once { future },
            retry: None,
        }
    }
}

impl<S: Service<ChatRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("attempt", &self.retry.as_ref().map(|r| r.attempt))
            .finish_non_exhaustive()
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let retry = match this.state.as_mut().project() {
                StateProj::Once { future } => return future.poll(cx),
                StateProj::Done => panic!("retry ResponseFuture polled after completion"),
                _ => this
                    .retry
                    .as_mut()
                    .expect("a retrying state has its retry data"),
            };
            let error = match this.state.as_mut().project() {
                StateProj::Calling { future } => match future.poll(cx) {
                    Poll::Ready(Ok(stream)) if retry.peek => {
                        this.state.set(State::Peeking {
                            peek: FirstContent::new(stream),
                        });
                        continue;
                    }
                    Poll::Ready(Ok(stream)) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(stream));
                    }
                    Poll::Ready(Err(error)) => error,
                    Poll::Pending => match retry.deadline_passed(cx) {
                        Some(error) => error,
                        None => return Poll::Pending,
                    },
                },
                StateProj::Peeking { peek } => match peek.poll_peek(cx) {
                    Poll::Ready(Ok(peeked)) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(peeked.into_stream()));
                    }
                    Poll::Ready(Err(error)) => error,
                    Poll::Pending => match retry.deadline_passed(cx) {
                        Some(error) => error,
                        None => return Poll::Pending,
                    },
                },
                StateProj::Waiting { sleep, cancelled } => {
                    if sleep.as_mut().poll(cx).is_pending() {
                        if poll_cancelled(cancelled, cx) {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(ChatError::cancelled()));
                        }
                        return Poll::Pending;
                    }
                    let cancelled = cancelled.take();
                    this.state.set(State::Readying { cancelled });
                    continue;
                }
                StateProj::Readying { cancelled } => {
                    match retry.inner.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(error)) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(error));
                        }
                        Poll::Pending => {
                            if poll_cancelled(cancelled, cx) {
                                this.state.set(State::Done);
                                return Poll::Ready(Err(ChatError::cancelled()));
                            }
                            return Poll::Pending;
                        }
                    }
                    let future = retry.next_attempt();
                    this.state.set(State::Calling { future });
                    continue;
                }
                StateProj::Once { .. } | StateProj::Done => unreachable!("handled above"),
            };
            match retry.after_failure(error) {
                Ok(waiting) => this.state.set(waiting),
                Err(error) => {
                    this.state.set(State::Done);
                    return Poll::Ready(Err(error));
                }
            }
        }
    }
}

fn poll_cancelled(cancelled: &mut Option<Cancelled>, cx: &mut Context<'_>) -> bool {
    cancelled
        .as_mut()
        .is_some_and(|c| c.as_mut().poll(cx).is_ready())
}

impl<S> Retrying<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    /// The error of an attempt still running when the deadline passed.
    fn deadline_passed(&mut self, cx: &mut Context<'_>) -> Option<ChatError> {
        let timer = self.timer.as_mut()?;
        timer.as_mut().poll(cx).is_ready().then(|| {
            ChatError::new(
                ErrorKind::Timeout(TimeoutPhase::Total),
                "the retry deadline ran out before the first content event",
            )
        })
    }

    /// After a failed attempt: the backoff before the next one, or the error to give up with.
    fn after_failure<F>(&mut self, error: ChatError) -> Result<State<F>, ChatError> {
        let config = &*self.config;
        if self.attempt >= config.max_attempts || !is_transient(&error) {
            return Err(error);
        }
        let wait = match error.retry_after() {
            Some(asked) if asked > config.retry_after_cap => return Err(error),
            Some(asked) => asked,
            None => config.backoff.wait(self.attempt),
        };
        if self
            .deadline
            .is_some_and(|deadline| config.clock.now() + wait >= deadline)
        {
            return Err(error);
        }
        if !config.budget.withdraw() {
            config
                .observer
                .emit(ResilienceEvent::BudgetExhausted { error: &error });
            return Err(error);
        }
        config.observer.emit(ResilienceEvent::Retry {
            attempt: self.attempt,
            wait,
            error: &error,
        });
        let cancelled = self
            .request
            .as_ref()
            .and_then(|r| r.cancellation())
            .map(|token| Box::pin(token.clone().cancelled_owned()));
        Ok(State::Waiting {
            sleep: config.clock.sleep(wait),
            cancelled,
        })
    }

    /// Call the (ready) service again: the last attempt takes the request itself, earlier ones a copy.
    fn next_attempt(&mut self) -> S::Future {
        self.attempt += 1;
        let request = if self.attempt >= self.config.max_attempts {
            self.request.take()
        } else {
            self.request.clone()
        }
        .expect("the request is kept until the last attempt");
        self.timer = self
            .deadline
            .map(|deadline| attempt_timer(&self.config, deadline));
        self.inner.call(request)
    }
}
