//! AWS credentials for SigV4: [`AwsCredentials`] (an access key, its secret, a session token for temporary
//! credentials), the [`CredentialsProvider`] trait for credentials that refresh (an STS role, a vault), the
//! standard environment variables ([`EnvironmentCredentials`]), and the cache the signer reads them through.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::error::{ChatError, ErrorKind};

/// A future returned by [`CredentialsProvider::credentials`].
pub type CredentialsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<AwsCredentials, ChatError>> + Send + 'a>>;

/// A source of AWS credentials for the Bedrock leaf
/// ([`ChatLeafBuilder::credentials_provider`](crate::leaf::ChatLeafBuilder::credentials_provider)).
///
/// The leaf asks again only when the credentials it holds expire within five minutes (credentials without an
/// expiry are kept), and one call asks at a time while the others wait for its answer. A failure fails the call
/// before anything is sent; give it the kind that says what happened
/// ([`ErrorKind::Authentication`] for refused credentials).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_chat::bedrock::{AwsCredentials, CredentialsFuture, CredentialsProvider};
///
/// #[derive(Debug)]
/// struct FromVault;
///
/// impl CredentialsProvider for FromVault {
///     fn credentials(&self) -> CredentialsFuture<'_> {
///         Box::pin(async {
///             // Fetch temporary credentials here (an STS AssumeRole call, a secrets manager).
///             Ok(AwsCredentials::new("ASIAEXAMPLE", "secret", Some("session-token".into()))
///                 .expiring_at(SystemTime::now() + Duration::from_secs(3600)))
///         })
///     }
/// }
/// ```
pub trait CredentialsProvider: fmt::Debug + Send + Sync + 'static {
    /// Current credentials.
    fn credentials(&self) -> CredentialsFuture<'_>;
}

/// An AWS access key id, its secret access key and, for temporary credentials, a session token. Cheap to clone.
/// Its `Debug` output shows the key id only.
#[derive(Clone)]
pub struct AwsCredentials {
    pub(crate) inner: aws_credential_types::Credentials,
}

impl AwsCredentials {
    /// Long-term (`session_token: None`) or temporary credentials.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        AwsCredentials {
            inner: aws_credential_types::Credentials::new(
                access_key_id,
                secret_access_key,
                session_token,
                None,
                "tower-chat",
            ),
        }
    }

    /// The same credentials, expiring at `at` (the leaf asks its provider again before then).
    pub fn expiring_at(self, at: SystemTime) -> Self {
        let inner = &self.inner;
        AwsCredentials {
            inner: aws_credential_types::Credentials::new(
                inner.access_key_id(),
                inner.secret_access_key(),
                inner.session_token().map(str::to_owned),
                Some(at),
                "tower-chat",
            ),
        }
    }

    /// Credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and, if set, `AWS_SESSION_TOKEN`.
    pub fn from_env() -> Result<Self, ChatError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// The same, reading variables through `var` (tests give their own).
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, ChatError> {
        let non_empty = |name: &str| var(name).filter(|v| !v.is_empty());
        match (
            non_empty("AWS_ACCESS_KEY_ID"),
            non_empty("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(id), Some(secret)) => Ok(AwsCredentials::new(
                id,
                secret,
                non_empty("AWS_SESSION_TOKEN"),
            )),
            (Some(_), None) => Err(ChatError::new(
                ErrorKind::Authentication,
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not",
            )),
            _ => Err(ChatError::new(
                ErrorKind::Authentication,
                "no AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set",
            )),
        }
    }

    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        self.inner.access_key_id()
    }

    /// Whether there is a session token (temporary credentials).
    pub fn has_session_token(&self) -> bool {
        self.inner.session_token().is_some()
    }

    /// When the credentials expire, if they do.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.inner.expiry()
    }

    /// Whether the credentials are still good for `margin` from now.
    fn fresh_for(&self, margin: Duration) -> bool {
        match self.inner.expiry() {
            None => true,
            Some(at) => SystemTime::now()
                .checked_add(margin)
                .is_some_and(|later| later < at),
        }
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.inner.access_key_id())
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.inner.session_token().map(|_| "[redacted]"),
            )
            .field("expires_at", &self.inner.expiry())
            .finish()
    }
}

/// Fixed credentials are their own provider.
impl CredentialsProvider for AwsCredentials {
    fn credentials(&self) -> CredentialsFuture<'_> {
        let credentials = self.clone();
        Box::pin(async move { Ok(credentials) })
    }
}

/// Credentials from the standard environment variables, read when the leaf first needs them (see
/// [`AwsCredentials::from_env`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct EnvironmentCredentials;

impl CredentialsProvider for EnvironmentCredentials {
    fn credentials(&self) -> CredentialsFuture<'_> {
        Box::pin(async { AwsCredentials::from_env() })
    }
}

/// How long before their expiry credentials are replaced.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// The credentials the signer uses: asked of the provider when missing or about to expire, by one call at a time.
#[derive(Clone)]
pub(crate) struct CredentialsCache {
    provider: Arc<dyn CredentialsProvider>,
    current: Arc<tokio::sync::Mutex<Option<AwsCredentials>>>,
}

impl CredentialsCache {
    pub(crate) fn new(provider: Arc<dyn CredentialsProvider>) -> Self {
        CredentialsCache {
            provider,
            current: Arc::default(),
        }
    }

    /// Credentials good for at least the refresh margin.
    pub(crate) async fn get(&self) -> Result<AwsCredentials, ChatError> {
        // Held across the fetch: the calls that arrive meanwhile wait for this answer instead of asking too.
        let mut current = self.current.lock().await;
        if let Some(credentials) = current.as_ref().filter(|c| c.fresh_for(REFRESH_MARGIN)) {
            return Ok(credentials.clone());
        }
        let fresh = self.provider.credentials().await?;
        *current = Some(fresh.clone());
        Ok(fresh)
    }
}

impl fmt::Debug for CredentialsCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialsCache")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn environment_variables_make_credentials_and_their_absence_is_named() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let full = AwsCredentials::from_vars(vars(&[
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("AWS_SESSION_TOKEN", "token"),
        ]))
        .unwrap();
        assert_eq!(full.access_key_id(), "AKIDEXAMPLE");
        assert!(full.has_session_token());
        let shown = format!("{full:?}");
        assert!(
            !shown.contains("wJalrXUtnFEMI") && !shown.contains("token\""),
            "{shown}"
        );
        let half = AwsCredentials::from_vars(vars(&[("AWS_ACCESS_KEY_ID", "AKID")])).unwrap_err();
        assert_eq!(half.kind(), &ErrorKind::Authentication);
        assert!(half.message().contains("AWS_SECRET_ACCESS_KEY"));
        let none = AwsCredentials::from_vars(vars(&[])).unwrap_err();
        assert_eq!(none.kind(), &ErrorKind::Authentication);
    }

    #[derive(Debug, Default)]
    struct Counting {
        calls: AtomicUsize,
        lifetime: Option<Duration>,
    }

    impl CredentialsProvider for Counting {
        fn credentials(&self) -> CredentialsFuture<'_> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let credentials = AwsCredentials::new(format!("AKID{n}"), "secret", None);
            let credentials = match self.lifetime {
                Some(lifetime) => credentials.expiring_at(SystemTime::now() + lifetime),
                None => credentials,
            };
            Box::pin(async move { Ok(credentials) })
        }
    }

    #[tokio::test]
    async fn credentials_are_kept_until_they_are_about_to_expire() {
        let lasting = Arc::new(Counting::default());
        let cache = CredentialsCache::new(lasting.clone());
        for _ in 0..3 {
            assert_eq!(cache.get().await.unwrap().access_key_id(), "AKID0");
        }
        assert_eq!(lasting.calls.load(Ordering::SeqCst), 1);
        let short = Arc::new(Counting {
            lifetime: Some(Duration::from_secs(60)),
            ..Counting::default()
        });
        let cache = CredentialsCache::new(short.clone());
        assert_eq!(cache.get().await.unwrap().access_key_id(), "AKID0");
        // Within the five-minute margin from the start: asked again every time.
        assert_eq!(cache.get().await.unwrap().access_key_id(), "AKID1");
    }
}
