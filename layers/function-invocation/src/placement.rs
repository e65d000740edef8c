//! Markers that let layers which must wrap the tool loop (the approval layer) check where they were placed, so a
//! misplaced layer fails its first call with a typed error instead of being silently ignored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// In the extensions of every request the tool loop sends to the service it wraps. A layer that must sit
/// outside the loop and finds it was placed inside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsideToolLoop;

/// Put into a request by a layer that needs a tool loop below it; the loop marks it when it takes the request,
/// so the layer can tell that a loop (and with it the approval policy the layer inserted) is in place.
#[derive(Clone, Debug, Default)]
pub struct ToolLoopPresence(Arc<AtomicBool>);

impl ToolLoopPresence {
    /// An unmarked presence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a tool loop has taken a request carrying this (or a clone of it).
    pub fn is_marked(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn mark(&self) {
        self.0.store(true, Ordering::Release);
    }
}
