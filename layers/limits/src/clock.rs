//! Where the layer reads the time: [`SystemClock`] by default, a [`ManualClock`] in tests.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time. Windows (per minute, per day, per calendar month) are computed from it, so a
/// test can move time instead of waiting.
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        to_millis(SystemTime::now())
    }
}

/// A clock that moves only when told to; clones share one time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    millis: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: SystemTime) -> Self {
        ManualClock {
            millis: Arc::new(AtomicU64::new(to_millis(at))),
        }
    }

    /// Move the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }

    /// Set the clock.
    pub fn set(&self, at: SystemTime) {
        self.millis.store(to_millis(at), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }
}

/// Milliseconds since the epoch (zero before it).
pub(crate) fn to_millis(at: SystemTime) -> u64 {
    // Whole seconds and the milliseconds of the rest, as u64 (saturating): the same value as
    // `as_millis()` capped at `u64::MAX`, without its 128-bit arithmetic.
    at.duration_since(UNIX_EPOCH)
        .map(|d| {
            d.as_secs()
                .saturating_mul(1000)
                .saturating_add(u64::from(d.subsec_millis()))
        })
        .unwrap_or(0)
}
