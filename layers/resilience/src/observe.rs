//! What the layers report as they work: retries, fallbacks, breaker transitions. A metrics exporter (the
//! gateway's `/metrics`) implements [`Observer`]; the layers keep no counters of their own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_chat::ChatError;

use crate::breaker_state::BreakerState;

/// One thing a resilience layer did.
#[derive(Debug)]
#[non_exhaustive]
pub enum ResilienceEvent<'a> {
    /// A retry layer will call again after `wait`.
    Retry {
        /// The attempt that failed (1 for the first call).
        attempt: u32,
        /// How long it waits before the next attempt.
        wait: Duration,
        /// Why the attempt failed.
        error: &'a ChatError,
    },
    /// A retry layer gave up retrying a retryable failure because its budget was spent.
    BudgetExhausted {
        /// Why the last attempt failed.
        error: &'a ChatError,
    },
    /// A fallback layer moves on from target `from` to target `to`.
    Fallback {
        /// The target that failed.
        from: &'a str,
        /// The next target.
        to: &'a str,
        /// Why `from` failed.
        error: &'a ChatError,
    },
    /// A target's circuit breaker changed state.
    Breaker {
        /// The target.
        target: &'a str,
        /// The new state.
        state: BreakerState,
    },
}

/// Receives [`ResilienceEvent`]s. Called inline, from the task doing the work: keep it quick and never panic.
pub trait Observer: Send + Sync + 'static {
    /// One event.
    fn event(&self, event: &ResilienceEvent<'_>);
}

impl<F> Observer for F
where
    F: Fn(&ResilienceEvent<'_>) + Send + Sync + 'static,
{
    fn event(&self, event: &ResilienceEvent<'_>) {
        self(event)
    }
}

/// An optional shared observer, as layers keep it.
#[derive(Clone, Default)]
pub(crate) struct SharedObserver(pub(crate) Option<Arc<dyn Observer>>);

impl SharedObserver {
    pub(crate) fn emit(&self, event: ResilienceEvent<'_>) {
        if let Some(observer) = &self.0 {
            observer.event(&event);
        }
    }
}

impl fmt::Debug for SharedObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(Observer)"
        } else {
            "None"
        })
    }
}
