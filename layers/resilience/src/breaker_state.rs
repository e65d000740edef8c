//! [`BreakerState`]: where a circuit breaker stands, as its handle and its observer see it.

/// The state of a circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail at once with a [`CircuitOpen`](crate::CircuitOpen) error, until the cool-down is over.
    Open,
    /// The cool-down is over: one probe call goes through, the others fail at once; the probe's outcome closes or
    /// reopens the circuit.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}
