//! Per-request control ([`CacheControl`]) and the outcome a caller reads back ([`CacheOutcome`]).

use std::fmt;
use std::sync::{Arc, OnceLock};

/// A request's own cache directive, set as a request extension (a gateway maps HTTP `Cache-Control` to it).
///
/// ```
/// use tower_chat::{ChatRequest, Message};
/// use tower_chat_cache::CacheControl;
///
/// let fresh = ChatRequest::new(vec![Message::user("Hi")]).with_extension(CacheControl::NoCache);
/// assert_eq!(fresh.extensions.get::<CacheControl>(), Some(&CacheControl::NoCache));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheControl {
    /// Refresh (`Cache-Control: no-cache`): do not answer from the store; call the model and store its answer.
    NoCache,
    /// Bypass (`Cache-Control: no-store`): neither read nor write the cache, nor join a call in flight.
    NoStore,
}

/// How long this request's answer is kept, in place of the layer's time to live for its model: what a gateway
/// sets per route. Zero bypasses the cache for the request, as a zero model TTL does.
///
/// ```
/// use std::time::Duration;
/// use tower_chat::{ChatRequest, Message};
/// use tower_chat_cache::CacheTtl;
///
/// let short = ChatRequest::new(vec![Message::user("Hi")]).with_extension(CacheTtl(Duration::from_secs(60)));
/// assert_eq!(short.extensions.get::<CacheTtl>(), Some(&CacheTtl(Duration::from_secs(60))));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheTtl(pub std::time::Duration);

/// How the cache served one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Replayed from the store; the model was not called.
    Hit,
    /// Followed an identical call already in flight; the model was not called again.
    Joined,
    /// The model was called (the answer was stored if it could be).
    Miss,
    /// The cache was not used: [`CacheControl::NoStore`], or a model whose time to live is zero.
    Bypass,
}

impl CacheStatus {
    /// The stable name: `hit`, `joined`, `miss`, `bypass`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Joined => "joined",
            CacheStatus::Miss => "miss",
            CacheStatus::Bypass => "bypass",
        }
    }

    /// The value of an `x-cache` response header: `hit` (also for a joined call, which paid nothing),
    /// `miss` or `bypass`.
    pub fn header_value(self) -> &'static str {
        match self {
            CacheStatus::Hit | CacheStatus::Joined => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Bypass => "bypass",
        }
    }

    /// Whether no model was called for this call.
    pub fn is_hit(self) -> bool {
        matches!(self, CacheStatus::Hit | CacheStatus::Joined)
    }
}

impl fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the cache leaves its [`CacheStatus`] for the caller: put one in the request's extensions, call, and
/// read it once the service future resolved (before the first event), e.g. to send an `x-cache` header. Clones
/// share one slot.
///
/// ```
/// use tower_chat::{ChatRequest, Message};
/// use tower_chat_cache::{CacheOutcome, CacheStatus};
///
/// let outcome = CacheOutcome::new();
/// let request = ChatRequest::new(vec![Message::user("Hi")]).with_extension(outcome.clone());
/// // In the cache layer:
/// request.extensions.get::<CacheOutcome>().unwrap().set(CacheStatus::Miss);
/// assert_eq!(outcome.get(), Some(CacheStatus::Miss));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CacheOutcome(Arc<OnceLock<CacheStatus>>);

impl CacheOutcome {
    /// An empty slot.
    pub fn new() -> Self {
        CacheOutcome::default()
    }

    /// Leave the status (the first one set stays).
    pub fn set(&self, status: CacheStatus) {
        let _ = self.0.set(status);
    }

    /// The status, once the cache decided.
    pub fn get(&self) -> Option<CacheStatus> {
        self.0.get().copied()
    }
}
