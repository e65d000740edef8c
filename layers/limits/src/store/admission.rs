//! Whether a store admitted a call, and why not ([`Rejection`], a rate-limited error).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower_chat::{ChatError, ErrorKind};

use super::ticket::{PlannedCounter, Ticket};
use crate::limits::{CounterKind, ScopeKey};

/// Whether a reservation was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Every counter had room; all were charged.
    Admitted,
    /// At least one counter had no room; nothing was charged.
    Rejected(Rejection),
}

/// Why a call was refused: the counter that had no room (the one whose window ends last, when several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Whose counter.
    pub scope: ScopeKey,
    /// Which counter.
    pub kind: CounterKind,
    /// Its limit.
    pub limit: u64,
    /// What the counter held when the call was refused (the spend so far, for a budget).
    pub used: u64,
    /// What the call needed of it (its estimate; one request or call in progress).
    pub needed: u64,
    /// How long until every full counter's window has ended
    /// ([`CONCURRENT_RETRY_AFTER`](super::CONCURRENT_RETRY_AFTER) when only calls in progress are full).
    pub retry_after: Duration,
    /// When the full counter's window ends (`None` for calls in progress, which free when other calls end).
    pub retry_at: Option<SystemTime>,
}

impl Rejection {
    /// The rejection for the full counters of `ticket` (`over`, not empty: each with what it held), seen from
    /// `now`.
    pub fn from_counters(ticket: &Ticket, over: &[(PlannedCounter, u64)], now: u64) -> Rejection {
        let (worst, used) = over
            .iter()
            .max_by_key(|(c, _)| c.retry_after(now))
            .copied()
            .unwrap_or(over[0]);
        Rejection::of(ticket, &worst, used, now)
    }

    /// The rejection for one full counter of `ticket`, which held `used`, seen from `now`.
    pub(crate) fn of(ticket: &Ticket, worst: &PlannedCounter, used: u64, now: u64) -> Rejection {
        Rejection {
            scope: ticket.scopes()[worst.scope].key.clone(),
            kind: worst.kind,
            limit: worst.limit,
            used,
            needed: worst.amount,
            retry_after: worst.retry_after(now),
            retry_at: worst
                .window
                .map(|w| UNIX_EPOCH + Duration::from_millis(w.end)),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is over its {} limit of {} ({} used so far",
            self.scope,
            self.kind,
            self.kind.amount(self.limit),
            self.kind.amount(self.used),
        )?;
        // A request or a call in progress needs one; a token or cost estimate is worth naming.
        match self.kind {
            CounterKind::Requests | CounterKind::Concurrent => f.write_str(")")?,
            kind => write!(f, ", this call needs {})", kind.amount(self.needed))?,
        }
        let wait = in_words(self.retry_after);
        match self.retry_at {
            Some(at) => write!(f, "; retry at {} (in {wait})", httpdate::fmt_http_date(at)),
            None => write!(f, "; retry in {wait}"),
        }
    }
}

/// A wait as a person reads it: `21 h 34 min`, `3 min 5 s`, `2 s`, rounded up to the second.
fn in_words(wait: Duration) -> String {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let (days, hours, minutes, seconds) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds} s"),
        (0, 0, _) => format!("{minutes} min {seconds} s"),
        (0, _, _) => format!("{hours} h {minutes} min"),
        _ => format!("{days} d {hours} h"),
    }
}

impl std::error::Error for Rejection {}

/// A rejection is a [`ErrorKind::RateLimited`] error carrying `retry_after`; the [`Rejection`] itself is its
/// source (downcast it for the scope and the counter).
impl From<Rejection> for ChatError {
    fn from(rejection: Rejection) -> Self {
        ChatError::new(
            ErrorKind::RateLimited {
                retry_after: Some(rejection.retry_after),
            },
            rejection.to_string(),
        )
        .with_source(rejection)
    }
}
