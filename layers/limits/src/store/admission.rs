//! Whether a store admitted a call, and why not ([`Rejection`], a rate-limited error).

use std::fmt;
use std::time::Duration;

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
    /// How long until every full counter's window has ended
    /// ([`CONCURRENT_RETRY_AFTER`](super::CONCURRENT_RETRY_AFTER) when only calls in progress are full).
    pub retry_after: Duration,
}

impl Rejection {
    /// The rejection for the full counters of `ticket` (`over`, not empty), seen from `now`.
    pub fn from_counters(ticket: &Ticket, over: &[PlannedCounter], now: u64) -> Rejection {
        let worst = over
            .iter()
            .max_by_key(|c| c.retry_after(now))
            .copied()
            .unwrap_or(over[0]);
        Rejection::of(ticket, &worst, now)
    }

    /// The rejection for one full counter of `ticket`, seen from `now`.
    pub(crate) fn of(ticket: &Ticket, worst: &PlannedCounter, now: u64) -> Rejection {
        Rejection {
            scope: ticket.scopes()[worst.scope].key.clone(),
            kind: worst.kind,
            limit: worst.limit,
            retry_after: worst.retry_after(now),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "caller {}", self.scope.caller)?;
        if let Some(model) = &self.scope.model {
            write!(f, " (model {model})")?;
        }
        write!(f, " is over its {} limit ({})", self.kind, self.limit)?;
        write!(f, "; retry after {:.3}s", self.retry_after.as_secs_f64())
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
