//! Warnings a client can trigger at will are rate-limited: at most a burst per window is logged, the rest are
//! counted and the count is reported with the next warning that gets through.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A fixed-window limiter for one kind of warning.
#[derive(Debug)]
pub(crate) struct WarnLimit {
    window: Duration,
    burst: u32,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl WarnLimit {
    /// At most `burst` warnings per `window`.
    pub(crate) const fn new(window: Duration, burst: u32) -> Self {
        WarnLimit {
            window,
            burst,
            state: Mutex::new(Window {
                start: None,
                logged: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(n)` when a warning may be logged now (`n` warnings were suppressed since the last one logged),
    /// `None` when it must be dropped.
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state
            .start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window)
        {
            state.start = Some(now);
            state.logged = 0;
        }
        if state.logged >= self.burst {
            state.suppressed += 1;
            return None;
        }
        state.logged += 1;
        Some(std::mem::take(&mut state.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_window_then_the_suppressed_count() {
        let limit = WarnLimit::new(Duration::from_secs(1), 3);
        let t0 = Instant::now();
        let admitted = (0..50_000).filter(|_| limit.admit(t0).is_some()).count();
        assert_eq!(admitted, 3);
        assert_eq!(limit.admit(t0 + Duration::from_millis(999)), None);
        assert_eq!(limit.admit(t0 + Duration::from_secs(1)), Some(49_998));
        assert_eq!(limit.admit(t0 + Duration::from_secs(1)), Some(0));
    }
}
