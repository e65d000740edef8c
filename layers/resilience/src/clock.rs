//! Time, injected: every wait and every timestamp of the resilience layers goes through a [`Clock`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A sleep, boxed.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where the layers read the time and how they wait. The default, [`TokioClock`], follows Tokio's clock, so a test
/// under `tokio::time::pause()` runs every backoff and every breaker cool-down instantly and deterministically.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
    /// A future that resolves after `duration`.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// Tokio's clock (`tokio::time::Instant`, `tokio::time::sleep`): paused and advanced along with it in tests.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A shared clock, as layers keep it.
#[derive(Clone)]
pub(crate) struct SharedClock(pub(crate) Arc<dyn Clock>);

impl Default for SharedClock {
    fn default() -> Self {
        SharedClock(Arc::new(TokioClock))
    }
}

impl fmt::Debug for SharedClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

impl std::ops::Deref for SharedClock {
    type Target = dyn Clock;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
