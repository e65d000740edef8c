//! [`CounterUsage`]: one counter's state, for a usage report.

use serde::Serialize;

use crate::limits::CounterKind;
use crate::window::Window;

/// One counter's state, for a usage report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CounterUsage {
    /// Which counter.
    pub kind: CounterKind,
    /// Used in the current window (tokens, requests, nano-dollars, calls in progress).
    pub used: u64,
    /// The limit.
    pub limit: u64,
    /// `limit - used`, or zero.
    pub remaining: u64,
    /// When the current window ends, in milliseconds since the epoch (`None` for calls in progress).
    pub resets_at_ms: Option<u64>,
}

impl CounterUsage {
    pub(crate) fn new(kind: CounterKind, used: u64, limit: u64, window: Option<Window>) -> Self {
        CounterUsage {
            kind,
            used,
            limit,
            remaining: limit.saturating_sub(used),
            resets_at_ms: window.map(|w| w.end),
        }
    }
}
