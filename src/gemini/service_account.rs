//! Vertex AI's bearer tokens from a Google service account (feature `gcp-adc`): the service-account JSON of
//! Application Default Credentials (the file `GOOGLE_APPLICATION_CREDENTIALS` names, or one given by path), a
//! JWT signed RS256 with its private key, exchanged at its `token_uri` for an access token. The leaf keeps the token
//! until shortly before it expires (see [`TokenProvider`]).
//!
//! Written here rather than taken from `gcp_auth`: version 0.12.7 would add 41 crates to the core's tree
//! (`chrono`, `url` with `idna` and the ICU tables, `thiserror`, `rustls-native-certs`, …) and a client and
//! token cache of its own beside the leaf's. What is needed is one signature ([`ring`], already in the tree
//! through rustls), one PEM decode (rustls' `pki_types`) and one form POST over the leaf's own
//! [`HttpTransport`].
//!
//! In production, `ServiceAccount::from_env()?` reads the file `GOOGLE_APPLICATION_CREDENTIALS` names and
//! `.vertex(project, location)` points the leaf at Vertex AI; here scripted servers stand in for Google's token
//! endpoint and for Vertex AI:
//!
//! ```
//! use tower::ServiceExt;
//! use tower_chat::gemini::{GeminiChat, ServiceAccount};
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
//! let google = ScriptedProvider::start(|_, _| {
//!     Reply::json(200, serde_json::json!({"access_token": "ya29.scripted", "expires_in": 3599}))
//! })
//! .await;
//! let vertex = ScriptedProvider::start(|_, _| Reply::gemini_text("Hello from Vertex AI")).await;
//! # let private_key = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/service_account_test_key.pem")).unwrap();
//! let key_file = serde_json::json!({
//!     "type": "service_account",
//!     "client_email": "caller@my-project.iam.gserviceaccount.com",
//!     "private_key": private_key,
//!     "token_uri": format!("http://{}/token", google.addr()),
//! });
//! let leaf = GeminiChat::builder()
//!     .base_url(format!("http://{}/v1/projects/my-project/locations/us-central1/publishers/google", vertex.addr()))
//!     .model("gemini-2.5-flash")
//!     .token_provider(ServiceAccount::from_json(key_file.to_string().as_bytes())?)
//!     .build()?;
//! let reply = leaf.oneshot(ChatRequest::new(vec![Message::user("Hi")])).await?.collect_response().await?;
//! assert_eq!(reply.text(), "Hello from Vertex AI");
//! assert_eq!(vertex.requests()[0].headers["authorization"], "Bearer ya29.scripted");
//! # Ok(()) }
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Full};
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivatePkcs8KeyDer;
use serde::Deserialize;

use crate::error::{ChatError, ErrorKind};
use crate::leaf::{AccessToken, TokenFuture, TokenProvider};
use crate::transport::{HttpTransport, Timeouts};

/// The scope Vertex AI's API takes.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The environment variable Application Default Credentials read the service-account file's path from.
pub const CREDENTIALS_ENV: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// How long an assertion is valid (Google accepts at most an hour).
const ASSERTION_LIFETIME: Duration = Duration::from_secs(3600);

/// The most of a token endpoint's answer that is read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// A [`TokenProvider`] for Vertex AI from a Google service account's JSON key. Its `Debug` output shows the
/// account's e-mail and token URI, never the key or a token.
#[derive(Clone)]
pub struct ServiceAccount {
    inner: Arc<Inner>,
}

struct Inner {
    client_email: String,
    key_id: Option<String>,
    key: RsaKeyPair,
    token_uri: Uri,
    scope: String,
    transport: HttpTransport,
}

/// The fields of the service-account JSON that are used.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    private_key_id: Option<String>,
    token_uri: String,
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

/// The token endpoint's refusal (OAuth 2.0's error body).
#[derive(Deserialize)]
struct TokenRefusal {
    error: String,
    error_description: Option<String>,
}

fn credentials_error(message: impl Into<String>) -> ChatError {
    ChatError::new(ErrorKind::Authentication, message)
}

impl ServiceAccount {
    /// The service account in this JSON key file's content.
    pub fn from_json(json: &[u8]) -> Result<Self, ChatError> {
        let file: KeyFile = serde_json::from_slice(json).map_err(|e| {
            credentials_error(format!("not a service-account key file: {e}")).with_source(e)
        })?;
        if file.kind != "service_account" {
            return Err(credentials_error(format!(
                "the credentials are of type `{}`; only `service_account` keys are read",
                file.kind
            )));
        }
        let der = PrivatePkcs8KeyDer::from_pem_slice(file.private_key.as_bytes()).map_err(|e| {
            credentials_error(format!(
                "the private key of {} is not a PKCS#8 PEM key",
                file.client_email
            ))
            .with_source(e)
        })?;
        let key = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).map_err(|e| {
            credentials_error(format!(
                "the private key of {} is not a usable RSA key ({e})",
                file.client_email
            ))
        })?;
        let token_uri: Uri = file
            .token_uri
            .parse()
            .ok()
            .filter(|uri: &Uri| uri.host().is_some())
            .ok_or_else(|| {
                credentials_error(format!(
                    "the token_uri {:?} of {} is not a URL",
                    file.token_uri, file.client_email
                ))
            })?;
        Ok(ServiceAccount {
            inner: Arc::new(Inner {
                client_email: file.client_email,
                key_id: file.private_key_id,
                key,
                token_uri,
                scope: CLOUD_PLATFORM_SCOPE.to_owned(),
                transport: HttpTransport::new(Timeouts::default(), false)?,
            }),
        })
    }

    /// The service account in the key file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ChatError> {
        let path = path.as_ref();
        let json = std::fs::read(path).map_err(|e| {
            credentials_error(format!(
                "cannot read the service-account key file {}: {e}",
                path.display()
            ))
            .with_source(e)
        })?;
        Self::from_json(&json)
    }

    /// The service account in the file `GOOGLE_APPLICATION_CREDENTIALS` names (Application Default
    /// Credentials).
    pub fn from_env() -> Result<Self, ChatError> {
        Self::from_env_var(CREDENTIALS_ENV)
    }

    /// The service account in the file the environment variable `name` names. The variable's value is never
    /// repeated in an error: set by mistake to the key file's content, it is the private key itself. A value
    /// holding JSON is refused as such (the variable names a file, as `GOOGLE_APPLICATION_CREDENTIALS` does).
    pub fn from_env_var(name: &str) -> Result<Self, ChatError> {
        let path = match std::env::var_os(name) {
            Some(path) if !path.is_empty() => path,
            _ => {
                return Err(credentials_error(format!(
                    "{name} is not set: it names the service-account key file"
                )))
            }
        };
        if path.to_string_lossy().trim_start().starts_with('{') {
            return Err(credentials_error(format!(
                "{name} holds JSON, expected the path of the service-account key file: write the key to a file \
                 and set {name} to that file's path (the value is not shown: it holds the private key)"
            )));
        }
        let json = std::fs::read(&path).map_err(|e| {
            // The io error's own text names no path.
            credentials_error(format!(
                "the service-account key file {name} names cannot be read: {e}"
            ))
            .with_source(e)
        })?;
        Self::from_json(&json)
    }

    /// Ask for this OAuth scope instead of [`CLOUD_PLATFORM_SCOPE`].
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.scope = scope.into();
        }
        self
    }

    /// The account's e-mail (the JWT's issuer).
    pub fn client_email(&self) -> &str {
        &self.inner.client_email
    }

    /// The signed JWT assertion for a token request issued at `now` (seconds since the epoch).
    fn assertion(&self, now: u64) -> Result<String, ChatError> {
        let inner = &self.inner;
        let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        if let Some(id) = &inner.key_id {
            header["kid"] = serde_json::json!(id);
        }
        let claims = serde_json::json!({
            "iss": inner.client_email,
            "scope": inner.scope,
            "aud": inner.token_uri.to_string(),
            "iat": now,
            "exp": now + ASSERTION_LIFETIME.as_secs(),
        });
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut signature = vec![0; inner.key.public().modulus_len()];
        inner
            .key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signed.as_bytes(),
                &mut signature,
            )
            .map_err(|_| credentials_error("signing the token request failed"))?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    async fn exchange(&self) -> Result<AccessToken, ChatError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let assertion = self.assertion(now)?;
        // The assertion is base64url with dots: nothing in it needs form-encoding.
        let form = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let request = http::Request::post(self.inner.token_uri.clone())
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| credentials_error("invalid token request").with_source(e))?;
        let response = self.inner.transport.send_unchecked(request).await?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), MAX_TOKEN_RESPONSE)
            .collect()
            .await
            .map_err(|e| {
                ChatError::new(
                    ErrorKind::Connection,
                    format!("the token endpoint's answer broke off: {e}"),
                )
            })?
            .to_bytes();
        if !status.is_success() {
            let reason = serde_json::from_slice::<TokenRefusal>(&body)
                .map(|r| match r.error_description {
                    Some(description) => format!("{}: {description}", r.error),
                    None => r.error,
                })
                .unwrap_or_else(|_| format!("HTTP {status}"));
            let kind = if status.is_server_error() {
                ErrorKind::Upstream
            } else {
                ErrorKind::Authentication
            };
            return Err(ChatError::new(
                kind,
                format!(
                    "the token endpoint refused the service account {} ({reason})",
                    self.inner.client_email
                ),
            )
            .with_status(status));
        }
        // The body is not quoted in the error: it may hold a token.
        let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|e| {
            ChatError::new(
                ErrorKind::Protocol,
                format!("the token endpoint's answer holds no access token: {e}"),
            )
        })?;
        Ok(AccessToken::new(
            answer.access_token,
            answer.expires_in.map(Duration::from_secs),
        ))
    }
}

impl TokenProvider for ServiceAccount {
    fn fetch_token(&self) -> TokenFuture<'_> {
        Box::pin(self.exchange())
    }
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.inner.client_email)
            .field("token_uri", &self.inner.token_uri)
            .field("scope", &self.inner.scope)
            .finish_non_exhaustive()
    }
}
