//! [`CircuitBreakerLayer`]: stop calling a target that keeps failing, and try it again with a single probe.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;
use tower_chat::{ChatError, ChatRequest, ChatStream, ErrorKind, ModelInfo, ModelMetadata};
use tower_layer::Layer;
use tower_service::Service;

use crate::breaker_state::BreakerState;
use crate::clock::{Clock, SharedClock};
use crate::observe::{Observer, ResilienceEvent, SharedObserver};
use crate::policy::is_transient;
use crate::watch::{Verdict, WatchedCall};

/// The source of the error a call gets when a circuit is open: `error.source()` downcasts to it, or use
/// [`is_circuit_open`]. The error itself is an [`ErrorKind::Upstream`] (retryable, and a fallback moves on), or,
/// when rate limits opened the circuit, an [`ErrorKind::RateLimited`] whose `retry_after` is the rest of the
/// cool-down: the target is not broken, it asked to be left alone, and a client should hear that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CircuitOpen {
    target: String,
}

impl CircuitOpen {
    pub(crate) fn new(target: String) -> Self {
        CircuitOpen { target }
    }

    /// The target whose circuit is open.
    pub fn target(&self) -> &str {
        &self.target
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the circuit of `{}` is open", self.target)
    }
}

impl std::error::Error for CircuitOpen {}

/// Whether `error` is a call refused by an open circuit (the target was not called).
pub fn is_circuit_open(error: &ChatError) -> bool {
    std::error::Error::source(error).is_some_and(|s| s.is::<CircuitOpen>())
}

/// Whether a failure counts against a target's health: transient failures, refused credentials (a revoked key is
/// a dead deployment) and broken wire formats. A bad request or a cancellation says nothing about the target.
fn counts_as_failure(error: &ChatError) -> bool {
    !is_circuit_open(error)
        && (is_transient(error)
            || matches!(
                error.kind(),
                ErrorKind::Authentication | ErrorKind::Protocol
            ))
}

/// When a breaker opens, beyond consecutive failures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailureRatio {
    /// The share of failed calls (0.0–1.0) at or above which the circuit opens.
    pub ratio: f64,
    /// The fewest calls in the window before the ratio counts.
    pub min_calls: u32,
    /// The sliding window the ratio is computed over (in ten buckets).
    pub window: Duration,
}

#[derive(Clone)]
pub(crate) struct BreakerConfig {
    consecutive_failures: u32,
    failure_ratio: Option<FailureRatio>,
    open_for: Duration,
    pub(crate) clock: SharedClock,
    observer: SharedObserver,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            failure_ratio: None,
            open_for: Duration::from_secs(30),
            clock: SharedClock::default(),
            observer: SharedObserver::default(),
        }
    }
}

const BUCKETS: usize = 10;

/// Calls and failures over the last window, in ten buckets.
struct Window {
    epoch: Instant,
    bucket: Duration,
    current: u64,
    counts: [(u32, u32); BUCKETS],
}

impl Window {
    fn new(now: Instant, window: Duration) -> Self {
        Window {
            epoch: now,
            bucket: (window / BUCKETS as u32).max(Duration::from_millis(1)),
            current: 0,
            counts: [(0, 0); BUCKETS],
        }
    }

    fn advance(&mut self, now: Instant) {
        let index =
            (now.saturating_duration_since(self.epoch).as_nanos() / self.bucket.as_nanos()) as u64;
        let stale = index.saturating_sub(self.current).min(BUCKETS as u64);
        for step in 1..=stale {
            self.counts[((self.current + step) % BUCKETS as u64) as usize] = (0, 0);
        }
        self.current = self.current.max(index);
    }

    fn record(&mut self, now: Instant, failed: bool) -> (u32, u32) {
        self.advance(now);
        let slot = &mut self.counts[(self.current % BUCKETS as u64) as usize];
        slot.0 += 1;
        slot.1 += u32::from(failed);
        self.counts
            .iter()
            .fold((0, 0), |(calls, fails), (c, f)| (calls + c, fails + f))
    }

    fn clear(&mut self) {
        self.counts = [(0, 0); BUCKETS];
    }
}

enum Phase {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
}

struct Inner {
    phase: Phase,
    consecutive: u32,
    window: Option<Window>,
    /// The failure that last opened the circuit was the target's rate limit.
    opened_by_rate_limit: bool,
}

/// One target's breaker, shared by every clone of its service.
pub(crate) struct Breaker {
    name: String,
    config: BreakerConfig,
    inner: Mutex<Inner>,
    /// Whether the circuit is closed with no failure counted and no window to record in (as `inner` was when
    /// last unlocked): then a call is let through, and a success settled, without taking the lock. Written only
    /// with the lock held.
    clear: AtomicBool,
}

impl Breaker {
    pub(crate) fn new(name: String, config: BreakerConfig) -> Arc<Self> {
        let window = config
            .failure_ratio
            .map(|r| Window::new(config.clock.now(), r.window));
        Arc::new(Breaker {
            name,
            config,
            clear: AtomicBool::new(window.is_none()),
            inner: Mutex::new(Inner {
                phase: Phase::Closed,
                consecutive: 0,
                window,
                opened_by_rate_limit: false,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent counters behind: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn state(&self) -> BreakerState {
        match self.lock().phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { until } if self.config.clock.now() >= until => BreakerState::HalfOpen,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Whether a call would be let through now (without taking a probe slot).
    pub(crate) fn available(&self) -> bool {
        match self.lock().phase {
            Phase::Closed => true,
            Phase::Open { until } => self.config.clock.now() >= until,
            Phase::HalfOpen { probing } => !probing,
        }
    }

    pub(crate) fn acquire(self: &Arc<Self>) -> Result<Permit, ChatError> {
        let probe = self.admit()?;
        Ok(Permit {
            breaker: self.clone(),
            probe,
            settled: false,
        })
    }

    /// Whether a call may go through now, and whether it is the probe of a half-open circuit; the caller then
    /// owes exactly one [`settle`](Self::settle) with that flag (a [`Permit`] does it, or a fallback that holds
    /// its breakers anyway and need not clone one per call).
    pub(crate) fn admit(&self) -> Result<bool, ChatError> {
        if self.clear.load(Ordering::Acquire) {
            // Closed: what the locked path below does, without the lock.
            return Ok(false);
        }
        let mut inner = self.lock();
        let now = self.config.clock.now();
        let (probe, transition) = match inner.phase {
            Phase::Closed => (false, None),
            Phase::Open { until } if now >= until => {
                inner.phase = Phase::HalfOpen { probing: true };
                (true, Some(BreakerState::HalfOpen))
            }
            Phase::HalfOpen { probing: false } => {
                inner.phase = Phase::HalfOpen { probing: true };
                (true, None)
            }
            Phase::Open { until } => {
                let rate_limited = inner.opened_by_rate_limit;
                drop(inner);
                return Err(self.open_error(rate_limited.then(|| until - now)));
            }
            Phase::HalfOpen { probing: true } => {
                let rate_limited = inner.opened_by_rate_limit;
                drop(inner);
                return Err(self.open_error(rate_limited.then_some(Duration::ZERO)));
            }
        };
        drop(inner);
        self.emit(transition);
        Ok(probe)
    }

    /// The error of a call the open circuit refused; `rate_limited`: rate limits opened it, and this is how much of
    /// the cool-down is left (zero while a probe is out).
    fn open_error(&self, rate_limited: Option<Duration>) -> ChatError {
        let error = match rate_limited {
            Some(left) => ChatError::new(
                ErrorKind::RateLimited {
                    // A whole second at least: `Retry-After` counts in seconds, and 0 would invite a retry at once.
                    retry_after: Some(left.max(Duration::from_secs(1))),
                },
                format!(
                    "`{}` is rate limited: its circuit is open until the cool-down is over, so it was not called",
                    self.name
                ),
            ),
            None => ChatError::new(
                ErrorKind::Upstream,
                format!(
                    "`{}` is failing: its circuit is open, so it was not called",
                    self.name
                ),
            ),
        };
        error.with_source(CircuitOpen {
            target: self.name.clone(),
        })
    }

    /// The outcome of a call [`admit`](Self::admit)ted with `probe`; `None`: dropped before it said anything.
    pub(crate) fn settle(&self, probe: bool, outcome: Option<Result<(), &ChatError>>) {
        let rate_limited = matches!(outcome, Some(Err(error)) if matches!(error.kind(), ErrorKind::RateLimited { .. }));
        let failed = match outcome {
            None => {
                // The call was dropped before it said anything: free the probe slot, count nothing.
                let mut inner = self.lock();
                if probe {
                    if let Phase::HalfOpen { probing } = &mut inner.phase {
                        *probing = false;
                    }
                }
                return;
            }
            // Closed with nothing counted: a success would change nothing (the locked path below sets the count
            // of failures in a row to the 0 it already is).
            Some(Ok(())) if self.clear.load(Ordering::Acquire) => return,
            Some(Ok(())) => false,
            Some(Err(error)) if counts_as_failure(error) => true,
            // Not the target's fault: a probe that met it proves nothing either way.
            Some(Err(_)) => return self.settle(probe, None),
        };
        // Read only when needed: a success on a closed circuit without a window (the usual call) needs no time.
        let now = || self.config.clock.now();
        let mut inner = self.lock();
        let transition = match (&inner.phase, probe, failed) {
            (Phase::HalfOpen { .. }, true, false) => {
                inner.phase = Phase::Closed;
                inner.consecutive = 0;
                if let Some(window) = &mut inner.window {
                    window.clear();
                }
                Some(BreakerState::Closed)
            }
            (Phase::HalfOpen { .. }, true, true) => {
                inner.phase = Phase::Open {
                    until: now() + self.config.open_for,
                };
                inner.opened_by_rate_limit = rate_limited;
                Some(BreakerState::Open)
            }
            (Phase::Closed, _, _) => {
                inner.consecutive = if failed { inner.consecutive + 1 } else { 0 };
                let ratio_tripped = match (&mut inner.window, self.config.failure_ratio) {
                    (Some(window), Some(limit)) => {
                        let (calls, fails) = window.record(now(), failed);
                        failed
                            && calls >= limit.min_calls
                            && f64::from(fails) >= limit.ratio * f64::from(calls)
                    }
                    _ => false,
                };
                if failed
                    && (inner.consecutive >= self.config.consecutive_failures || ratio_tripped)
                {
                    inner.phase = Phase::Open {
                        until: now() + self.config.open_for,
                    };
                    inner.opened_by_rate_limit = rate_limited;
                    Some(BreakerState::Open)
                } else {
                    None
                }
            }
            // A call that started before the circuit opened (or a stale probe) changes nothing.
            _ => None,
        };
        self.clear.store(
            matches!(inner.phase, Phase::Closed)
                && inner.consecutive == 0
                && inner.window.is_none(),
            Ordering::Release,
        );
        drop(inner);
        self.emit(transition);
    }

    fn emit(&self, transition: Option<BreakerState>) {
        if let Some(state) = transition {
            self.config.observer.emit(ResilienceEvent::Breaker {
                target: &self.name,
                state,
            });
        }
    }
}

/// Leave to call through a breaker; told the call's outcome once (dropping it unsettled counts nothing).
pub(crate) struct Permit {
    breaker: Arc<Breaker>,
    probe: bool,
    settled: bool,
}

impl Verdict for Permit {
    fn settle(mut self, outcome: Result<(), &ChatError>) {
        self.settled = true;
        self.breaker.settle(self.probe, Some(outcome));
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.settled {
            self.breaker.settle(self.probe, None);
        }
    }
}

/// A read-only view of one breaker's state, for health checks and metrics.
#[derive(Clone)]
pub struct BreakerHandle(Arc<Breaker>);

impl BreakerHandle {
    pub(crate) fn from_breaker(breaker: Arc<Breaker>) -> Self {
        BreakerHandle(breaker)
    }

    /// The target's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The state now (an open circuit whose cool-down is over reads as half-open).
    pub fn state(&self) -> BreakerState {
        self.0.state()
    }
}

impl fmt::Debug for BreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerHandle")
            .field("name", &self.0.name)
            .field("state", &self.state())
            .finish()
    }
}

/// Puts a circuit breaker in front of a target.
///
/// | setting | default |
/// | --- | --- |
/// | [`consecutive_failures`](Self::consecutive_failures): failures in a row that open the circuit | 5 |
/// | [`failure_ratio`](Self::failure_ratio): a failure share over a sliding window that opens it | off |
/// | [`open_for`](Self::open_for): how long it stays open before a probe | 30 s |
/// | [`name`](Self::name): the target's name in errors and events | the provider/model from [`ModelInfo`], or `target` |
///
/// A call counts as failed when it fails before its first content event for a reason that is the target's:
/// a transient failure ([`is_transient`](crate::is_transient)), refused credentials, or a broken wire format. It
/// counts as a success at its first content event. Each service this layer builds has its own breaker, shared by
/// its clones.
#[derive(Clone, Default)]
pub struct CircuitBreakerLayer {
    config: BreakerConfig,
    name: Option<String>,
}

impl CircuitBreakerLayer {
    /// A layer with the defaults above.
    pub fn new() -> Self {
        CircuitBreakerLayer::default()
    }

    /// Failures in a row that open the circuit (at least 1).
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.config.consecutive_failures = failures.max(1);
        self
    }

    /// Also open the circuit when at least `ratio` of the calls in the last `window` failed, once the window holds
    /// `min_calls` calls.
    pub fn failure_ratio(mut self, ratio: f64, min_calls: u32, window: Duration) -> Self {
        self.config.failure_ratio = Some(FailureRatio {
            ratio: ratio.clamp(0.0, 1.0),
            min_calls: min_calls.max(1),
            window,
        });
        self
    }

    /// How long an opened circuit refuses calls before it lets a probe through.
    pub fn open_for(mut self, cool_down: Duration) -> Self {
        self.config.open_for = cool_down;
        self
    }

    /// The target's name in errors and events.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The clock cool-downs and windows are measured with.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.config.clock = SharedClock(Arc::new(clock));
        self
    }

    /// Where state changes are reported.
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.config.observer = SharedObserver(Some(Arc::new(observer)));
        self
    }

    pub(crate) fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// A breaker with this layer's settings, named as the layer says or else `default_name`.
    pub(crate) fn breaker(&self, default_name: &str) -> Arc<Breaker> {
        let name = self.name.clone().unwrap_or_else(|| default_name.to_owned());
        Breaker::new(name, self.config.clone())
    }
}

impl fmt::Debug for CircuitBreakerLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("name", &self.name)
            .field("consecutive_failures", &self.config.consecutive_failures)
            .field("failure_ratio", &self.config.failure_ratio)
            .field("open_for", &self.config.open_for)
            .field("observer", &self.config.observer)
            .finish()
    }
}

/// A name for a target: `provider/model`, or the provider alone.
pub(crate) fn target_name(metadata: &ModelMetadata) -> String {
    match &metadata.model_id {
        Some(model) => format!("{}/{model}", metadata.provider),
        None => metadata.provider.to_string(),
    }
}

impl<S: ModelInfo> Layer<S> for CircuitBreakerLayer {
    type Service = CircuitBreaker<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| target_name(&inner.model_metadata()));
        CircuitBreaker {
            inner,
            breaker: Breaker::new(name, self.config.clone()),
        }
    }
}

/// A chat service behind a circuit breaker; see [`CircuitBreakerLayer`].
#[derive(Clone)]
pub struct CircuitBreaker<S> {
    inner: S,
    breaker: Arc<Breaker>,
}

impl<S> CircuitBreaker<S> {
    /// The breaker's state, readable after the service moved into a stack.
    pub fn handle(&self) -> BreakerHandle {
        BreakerHandle(self.breaker.clone())
    }

    tower_chat::define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for CircuitBreaker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", &self.inner)
            .field("state", &self.breaker.state())
            .finish()
    }
}

impl<S: ModelInfo> ModelInfo for CircuitBreaker<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S> Service<ChatRequest> for CircuitBreaker<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        match self.breaker.acquire() {
            Ok(permit) => ResponseFuture {
                kind: Kind::Calling {
                    call: WatchedCall::new(self.inner.call(request), permit),
                },
            },
            Err(error) => ResponseFuture {
                kind: Kind::Refused { error: Some(error) },
            },
        }
    }
}

pin_project! {
    /// The response future of [`CircuitBreaker`].
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Refused { error: Option<ChatError> },
        Calling { #[pin] call: WatchedCall<F, Permit> },
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ChatStream, ChatError>>,
{
    type Output = Result<ChatStream, ChatError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Refused { error } => Poll::Ready(Err(error
                .take()
                .expect("ResponseFuture polled after completion"))),
            KindProj::Calling { call } => call.poll(cx),
        }
    }
}
