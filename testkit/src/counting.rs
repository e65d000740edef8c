//! Run counters for tool bodies and callbacks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A run counter for a tool body or a callback.
pub fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// The value of a [`counter`].
pub fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}
