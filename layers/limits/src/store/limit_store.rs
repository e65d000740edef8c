//! The [`LimitStore`] trait every store implements, its replies and its error.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tower_chat::{ChatError, ErrorKind};

use super::admission::Admission;
use super::demand::Demand;
use super::ticket::Ticket;
use super::usage::CounterUsage;
use crate::limits::{Scope, ScopeKey};

/// The answer of a store: at once (an in-process store) or after I/O (a networked one). The layer takes the
/// ready path without allocating a future.
pub enum StoreReply<T> {
    /// The result is known.
    Ready(Result<T, LimitStoreError>),
    /// The result arrives later.
    Pending(BoxFuture<'static, Result<T, LimitStoreError>>),
}

impl<T> StoreReply<T> {
    /// Wait for the result.
    pub async fn wait(self) -> Result<T, LimitStoreError> {
        match self {
            StoreReply::Ready(result) => result,
            StoreReply::Pending(future) => future.await,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for StoreReply<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreReply::Ready(result) => f.debug_tuple("Ready").field(result).finish(),
            StoreReply::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// Where counters live.
///
/// `reserve` must be atomic over all of a ticket's counters: either every counter has room and all are charged,
/// or none is charged. `settle` adds each counter's [`Demand::settle_delta`] to the window the ticket was
/// charged in (a window that has ended meanwhile is left alone) and never lets a counter go below zero.
pub trait LimitStore: fmt::Debug + Send + Sync + 'static {
    /// This store's handle on the counters of `scope`, taken once when the layer first sees the scope and kept
    /// with it (for as long as the layer keeps the caller's plan): every ticket counted in the scope carries it
    /// ([`Ticket::resolved`]), so `reserve` and `settle` reach the counters without finding them by key. A
    /// store that keeps counters in memory must keep them in place while a handle on them lives. `None` (the
    /// default): the store finds counters by key.
    fn resolve(&self, scope: &ScopeKey) -> Option<Arc<dyn Any + Send + Sync>> {
        let _ = scope;
        None
    }

    /// Check every counter of `ticket` and charge its reservation if all have room.
    fn reserve(&self, ticket: &Ticket) -> StoreReply<Admission>;

    /// Replace `ticket`'s reservation by `actual` and release its slot among calls in progress. A call admitted
    /// unchecked after its reservation failed ([`crate::StoreFailure::FailOpen`]) is settled too, with a ticket
    /// that reserved nothing: a store must then free only a slot that call itself holds (the Redis store
    /// removes the call's own member, which is there only if the failed reservation was in fact applied).
    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()>;

    /// The counters of `scope` as of `now` (milliseconds since the epoch).
    fn usage(&self, scope: &Scope, now: u64) -> StoreReply<Vec<CounterUsage>>;
}

/// A store could not be reached or answered nonsense.
#[derive(Debug)]
pub struct LimitStoreError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl LimitStoreError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        LimitStoreError {
            message: message.into(),
            source: None,
        }
    }

    /// An error with a message and its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LimitStoreError {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

impl fmt::Display for LimitStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LimitStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<LimitStoreError> for ChatError {
    fn from(error: LimitStoreError) -> Self {
        ChatError::new(ErrorKind::Store, format!("limits store: {error}")).with_source(error)
    }
}
