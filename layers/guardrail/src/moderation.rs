//! An external moderation service in the OpenAI moderation format (`POST {base}/moderations`), as a
//! [`TextCheck`]: each flagged category becomes a finding (`hate`, `violence`, …).
//!
//! The call goes through the leaf's own pooled client ([`HttpTransport`]: HTTP/1.1 and HTTP/2, rustls) under a
//! deadline of its own ([`Moderation::timeout`], default 5 s) that covers connecting, the answer and its body.
//! A failure (a timeout, an error status, an answer that is not the format) fails the call with a typed error —
//! a policy that cannot be checked does not let the text through.
//!
//! ```
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{GuardrailStage, ChatError};
//! use tower_chat_guardrail::{Moderation, TextCheck};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ChatError> {
//! let server = ScriptedProvider::start(|_request, _index| {
//!     Reply::json(200, serde_json::json!({"results": [{"flagged": true, "categories": {"violence": true, "hate": false}}]}))
//! })
//! .await;
//! let moderation = Moderation::new(&server.base_url())?.api_key("test-key");
//! let findings = moderation.check("a violent text".into(), GuardrailStage::Output).await?;
//! assert_eq!(findings[0].detail.as_deref(), Some("violence"));
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;
use serde_json::json;
use tower_chat::transport::{HttpTransport, Secret, Timeouts};
use tower_chat::{ChatError, ErrorKind, GuardrailStage, TimeoutPhase};

use crate::check::{Check, CheckFuture, Finding, TextCheck};

/// The most bytes of a moderation answer read.
const ANSWER_LIMIT: usize = 1 << 20;

/// A client of a moderation service in the OpenAI format. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct Moderation {
    transport: HttpTransport,
    url: http::Uri,
    api_key: Option<Secret>,
    model: Option<String>,
    timeout: Duration,
}

impl fmt::Debug for Moderation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Moderation")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Moderation {
    /// A client of the service at `base_url` (`https://api.openai.com/v1`; `/moderations` is appended).
    pub fn new(base_url: &str) -> Result<Self, ChatError> {
        let url = format!("{}/moderations", base_url.trim_end_matches('/'))
            .parse::<http::Uri>()
            .map_err(|e| {
                ChatError::new(
                    ErrorKind::InvalidRequest,
                    format!("the moderation URL {base_url:?} is not a URL: {e}"),
                )
            })?;
        let timeout = Duration::from_secs(5);
        let transport = HttpTransport::new(
            Timeouts {
                connect: Some(timeout),
                first_byte: Some(timeout),
                idle: Some(timeout),
            },
            false,
        )?;
        Ok(Moderation {
            transport,
            url,
            api_key: None,
            model: None,
            timeout,
        })
    }

    /// The bearer token.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(Secret::new(key));
        self
    }

    /// The moderation model (`omni-moderation-latest`); the service's default when unset.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The deadline of one moderation call, from connecting to the whole answer (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn moderate(&self, text: String) -> Result<Vec<Finding>, ChatError> {
        let mut body = json!({ "input": text });
        if let Some(model) = &self.model {
            body["model"] = json!(model);
        }
        let mut request = http::Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(key) = &self.api_key {
            request = request.header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", key.expose()),
            );
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| {
                ChatError::new(
                    ErrorKind::InvalidRequest,
                    "the moderation request is malformed",
                )
                .with_source(e)
            })?;
        let exchange = async {
            let response = self.transport.send_unchecked(request).await?;
            let status = response.status();
            let body = Limited::new(response.into_body(), ANSWER_LIMIT)
                .collect()
                .await
                .map_err(|e| {
                    ChatError::new(ErrorKind::Connection, "the moderation answer broke off")
                        .with_source(e)
                })?
                .to_bytes();
            Ok::<_, ChatError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                ChatError::new(
                    ErrorKind::Timeout(TimeoutPhase::Total),
                    format!(
                        "the moderation service did not answer within {:?}",
                        self.timeout
                    ),
                )
            })??;
        if !status.is_success() {
            let kind = match status.as_u16() {
                401 | 403 => ErrorKind::Authentication,
                429 => ErrorKind::RateLimited { retry_after: None },
                _ => ErrorKind::Upstream,
            };
            return Err(
                ChatError::new(kind, format!("the moderation service answered {status}"))
                    .with_status(status),
            );
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
            ChatError::protocol("a moderation answer that is not the format", &body)
        })?;
        let mut findings = Vec::new();
        for result in answer.results.iter().filter(|r| r.flagged) {
            let before = findings.len();
            let mut categories: Vec<&String> = result
                .categories
                .iter()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .map(|(name, _)| name)
                .collect();
            categories.sort();
            findings.extend(
                categories
                    .into_iter()
                    .map(|name| Finding::whole(name.as_str())),
            );
            if findings.len() == before {
                findings.push(Finding::whole("flagged"));
            }
        }
        Ok(findings)
    }
}

#[derive(Deserialize)]
struct Answer {
    results: Vec<ModerationResult>,
}

#[derive(Deserialize)]
struct ModerationResult {
    flagged: bool,
    /// Category names to whether they were flagged (some services send `null` for a category they skip).
    #[serde(default)]
    categories: serde_json::Map<String, serde_json::Value>,
}

impl TextCheck for Moderation {
    fn check(&self, text: String, _stage: GuardrailStage) -> CheckFuture {
        let this = self.clone();
        Box::pin(async move { this.moderate(text).await })
    }
}

impl Check {
    /// An external moderation service (`moderation`): blocks flagged requests and answers by default.
    pub fn moderation(service: Moderation) -> Self {
        Check::custom("moderation", service)
    }
}
