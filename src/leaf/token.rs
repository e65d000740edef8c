//! Credentials that are not a static key: a [`TokenProvider`] hands out short-lived bearer tokens (Azure Entra
//! ID, Google Cloud OAuth for Vertex AI), and the leaf keeps the current one in a [`TokenCache`] until shortly
//! before it expires, refreshed by one caller at a time.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::ChatError;
use crate::transport::Secret;

/// A future returned by [`TokenProvider::fetch_token`].
pub type TokenFuture<'a> =
    Pin<Box<dyn Future<Output = Result<AccessToken, ChatError>> + Send + 'a>>;

/// A source of bearer tokens for a leaf ([`ChatLeafBuilder::token_provider`](super::ChatLeafBuilder::token_provider)).
///
/// The leaf asks for a token only when it has none or the one it has expires within the refresh margin, and only
/// one call asks at a time: the others wait for its answer. A failure is returned as the call's error, so give it
/// the kind that tells the caller what happened ([`ErrorKind::Authentication`](crate::ErrorKind::Authentication)
/// for refused credentials, [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the token endpoint could
/// not be reached).
///
/// ```
/// use std::time::Duration;
/// use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
///
/// #[derive(Debug)]
/// struct FromEnvironment;
///
/// impl TokenProvider for FromEnvironment {
///     fn fetch_token(&self) -> TokenFuture<'_> {
///         Box::pin(async {
///             let token = std::env::var("AZURE_ACCESS_TOKEN").unwrap_or_default();
///             Ok(AccessToken::new(token, Some(Duration::from_secs(3600))))
///         })
///     }
/// }
/// ```
pub trait TokenProvider: fmt::Debug + Send + Sync + 'static {
    /// A fresh token.
    fn fetch_token(&self) -> TokenFuture<'_>;
}

/// A bearer token and when it expires. Its `Debug` output never shows the token.
#[derive(Clone)]
pub struct AccessToken {
    secret: Secret,
    expires_at: Option<Instant>,
}

impl AccessToken {
    /// A token valid for `expires_in` from now (`None`: until the provider refuses it).
    pub fn new(token: impl Into<String>, expires_in: Option<Duration>) -> Self {
        AccessToken {
            secret: Secret::new(token),
            expires_at: expires_in.and_then(|d| Instant::now().checked_add(d)),
        }
    }

    /// The token.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// When the token expires, if known.
    pub fn expires_at(&self) -> Option<Instant> {
        self.expires_at
    }

    /// Whether the token is still good for `margin` from now.
    fn fresh_for(&self, margin: Duration) -> bool {
        match self.expires_at {
            None => true,
            Some(at) => Instant::now()
                .checked_add(margin)
                .is_some_and(|later| later < at),
        }
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// How long before its expiry a token is replaced, unless configured: long enough for a request sent with it to
/// arrive before it lapses.
pub(crate) const DEFAULT_REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// The current token of a leaf (shared by its clones).
pub(crate) struct TokenCache {
    provider: Arc<dyn TokenProvider>,
    margin: Duration,
    /// Held across a fetch: whoever finds the token stale fetches, everyone else waits for that one answer.
    current: tokio::sync::Mutex<Option<AccessToken>>,
}

impl TokenCache {
    pub(crate) fn new(provider: Arc<dyn TokenProvider>, margin: Duration) -> Self {
        TokenCache {
            provider,
            margin,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// A token good for at least the refresh margin, fetched when the cached one is missing or about to expire.
    pub(crate) async fn token(&self) -> Result<Secret, ChatError> {
        let mut current = self.current.lock().await;
        if let Some(token) = current.as_ref().filter(|t| t.fresh_for(self.margin)) {
            return Ok(token.secret.clone());
        }
        let token = self.provider.fetch_token().await?;
        let secret = token.secret.clone();
        *current = Some(token);
        Ok(secret)
    }
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("provider", &self.provider)
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Hands out `token-N` valid for `lifetime`, counting fetches; waits for `gate` when one is given.
    #[derive(Debug)]
    struct Counting {
        fetches: AtomicUsize,
        lifetime: Option<Duration>,
        gate: Option<Arc<tokio::sync::Notify>>,
    }

    impl TokenProvider for Counting {
        fn fetch_token(&self) -> TokenFuture<'_> {
            Box::pin(async move {
                if let Some(gate) = &self.gate {
                    gate.notified().await;
                }
                let n = self.fetches.fetch_add(1, Ordering::SeqCst);
                Ok(AccessToken::new(format!("token-{n}"), self.lifetime))
            })
        }
    }

    fn counting(lifetime: Option<Duration>) -> Arc<Counting> {
        Arc::new(Counting {
            fetches: AtomicUsize::new(0),
            lifetime,
            gate: None,
        })
    }

    #[tokio::test]
    async fn a_token_is_kept_until_the_margin_before_its_expiry() {
        let provider = counting(Some(Duration::from_secs(3600)));
        let cache = TokenCache::new(provider.clone(), DEFAULT_REFRESH_MARGIN);
        for _ in 0..3 {
            assert_eq!(cache.token().await.unwrap().expose(), "token-0");
        }
        assert_eq!(provider.fetches.load(Ordering::SeqCst), 1);

        // A token that lapses within the margin is replaced on every call.
        let provider = counting(Some(Duration::from_secs(30)));
        let cache = TokenCache::new(provider.clone(), DEFAULT_REFRESH_MARGIN);
        assert_eq!(cache.token().await.unwrap().expose(), "token-0");
        assert_eq!(cache.token().await.unwrap().expose(), "token-1");
        assert_eq!(provider.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let provider = Arc::new(Counting {
            fetches: AtomicUsize::new(0),
            lifetime: None,
            gate: Some(gate.clone()),
        });
        let cache = Arc::new(TokenCache::new(provider.clone(), DEFAULT_REFRESH_MARGIN));
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.token().await.unwrap().expose().to_owned() })
            })
            .collect();
        // Let every caller queue on the lock, then release the one fetch.
        tokio::task::yield_now().await;
        gate.notify_one();
        for caller in callers {
            assert_eq!(caller.await.unwrap(), "token-0");
        }
        assert_eq!(provider.fetches.load(Ordering::SeqCst), 1);
    }

    #[derive(Debug)]
    struct Refusing;

    impl TokenProvider for Refusing {
        fn fetch_token(&self) -> TokenFuture<'_> {
            Box::pin(async {
                Err(ChatError::new(
                    ErrorKind::Authentication,
                    "the identity endpoint refused the client secret",
                ))
            })
        }
    }

    #[tokio::test]
    async fn a_failing_provider_is_the_callers_typed_error_and_nothing_is_cached() {
        let cache = TokenCache::new(Arc::new(Refusing), DEFAULT_REFRESH_MARGIN);
        for _ in 0..2 {
            let err = cache.token().await.unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::Authentication);
        }
        assert!(cache.current.lock().await.is_none());
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let token = AccessToken::new("eyJ-very-secret", None);
        let debug = format!("{token:?}");
        assert!(!debug.contains("eyJ-very-secret"), "{debug}");
    }
}
