//! Which failures are worth another try, and how long to wait before it.

use std::time::Duration;

use tower_chat::{ChatError, ErrorKind, TimeoutPhase};

/// Whether calling again (later, or elsewhere) may succeed where this call failed: broken connections, first-byte
/// and idle timeouts, rate limits (429), server errors (5xx, Anthropic's 529), request timeouts (408) and
/// conflicts (409). Never a request the provider refused as it stands (400, 401, 403, 404, 413, 422), a
/// cancellation, or a whole-call deadline that ran out.
pub fn is_transient(error: &ChatError) -> bool {
    match error.kind() {
        ErrorKind::Timeout(TimeoutPhase::Total) => false,
        ErrorKind::RateLimited { .. }
        | ErrorKind::Upstream
        | ErrorKind::Timeout(_)
        | ErrorKind::Connection => true,
        _ => matches!(error.status().map(|s| s.as_u16()), Some(408 | 409)),
    }
}

/// How the wait before a retry is drawn from its exponential ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// "Full jitter": uniformly between zero and the ceiling (the default; spreads retries of many clients).
    Full,
    /// Exactly the ceiling: `base * 2^(attempt - 1)`, capped.
    None,
}

/// Exponential backoff: the ceiling of the wait after attempt `n` is `base * 2^(n-1)`, at most `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling after the first attempt (default 500 ms).
    pub base: Duration,
    /// The largest ceiling (default 30 s).
    pub max: Duration,
    /// How the wait is drawn (default [`Jitter::Full`]).
    pub jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// The wait after failed attempt `attempt` (1-based).
    pub fn wait(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(20);
        let ceiling = self.base.saturating_mul(factor).min(self.max);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Full => ceiling.mul_f64(fastrand::f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retried() {
        let status =
            |code: u16, kind: ErrorKind| ChatError::new(kind, "x").with_status(http_status(code));
        assert!(is_transient(&status(500, ErrorKind::Upstream)));
        assert!(is_transient(&status(
            429,
            ErrorKind::RateLimited { retry_after: None }
        )));
        assert!(is_transient(&status(409, ErrorKind::InvalidRequest)));
        assert!(!is_transient(&status(400, ErrorKind::InvalidRequest)));
        assert!(!is_transient(&status(401, ErrorKind::Authentication)));
        assert!(!is_transient(&ChatError::cancelled()));
        assert!(!is_transient(&ChatError::new(
            ErrorKind::Timeout(TimeoutPhase::Total),
            "deadline"
        )));
        assert!(is_transient(&ChatError::new(
            ErrorKind::Timeout(TimeoutPhase::FirstByte),
            "slow"
        )));
    }

    fn http_status(code: u16) -> http::StatusCode {
        http::StatusCode::from_u16(code).unwrap()
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_jitters_below_the_ceiling() {
        let exact = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
            jitter: Jitter::None,
        };
        assert_eq!(exact.wait(1), Duration::from_millis(100));
        assert_eq!(exact.wait(2), Duration::from_millis(200));
        assert_eq!(exact.wait(3), Duration::from_millis(350));
        assert_eq!(exact.wait(40), Duration::from_millis(350));
        let full = Backoff {
            jitter: Jitter::Full,
            ..exact
        };
        for _ in 0..100 {
            assert!(full.wait(2) <= Duration::from_millis(200));
        }
    }
}
