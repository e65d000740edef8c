//! Where the layer reads the time: when it issues an approval id (its expiry) and when it checks a decision
//! against that expiry. Injectable, so expiry is tested by moving a clock instead of waiting for one.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The time source of an [`ApprovalLayer`](crate::ApprovalLayer) ([`ApprovalLayer::clock`](crate::ApprovalLayer::clock)).
///
/// Wall-clock time (`SystemTime`), not `Instant`: expiries are stored (in SQLite or PostgreSQL) and compared in
/// other processes.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock: the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to, for tests of expiry that do not wait: clones share one time.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_chat_approval::{ApprovalLayer, Clock, ManualClock};
///
/// let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
/// let layer = ApprovalLayer::new().ttl(Duration::from_secs(60)).clock(clock.clone());
/// # let _ = layer;
/// let issued = clock.now();
/// clock.advance(Duration::from_secs(61)); // every approval issued at `issued` has now expired
/// assert_eq!(clock.now(), issued + Duration::from_secs(61));
/// ```
#[derive(Clone)]
pub struct ManualClock(Arc<Mutex<SystemTime>>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: SystemTime) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }

    /// Set the clock to `at` (backwards too).
    pub fn set(&self, at: SystemTime) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = at;
    }
}

impl Default for ManualClock {
    /// A clock standing at the current wall-clock time.
    fn default() -> Self {
        ManualClock::new(SystemTime::now())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}
