//! The one error type of every tower-chat service and stream.
//!
//! A [`ChatError`] carries an [`ErrorKind`] that callers match on (never parse the message), an optional
//! HTTP status, the provider's own message where there was one, and an optional source error.

use std::fmt;
use std::time::Duration;

/// A boxed error, as tower middleware uses.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Which deadline ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeoutPhase {
    /// Establishing the TCP/TLS connection.
    Connect,
    /// Waiting for the response status and headers (for a non-streaming call: the whole body).
    FirstByte,
    /// Waiting for the next chunk of a streaming body.
    Idle,
    /// A whole-call deadline set by a caller or a layer.
    Total,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::FirstByte => "first byte",
            TimeoutPhase::Idle => "idle",
            TimeoutPhase::Total => "total",
        })
    }
}

/// What went wrong, in a form a caller can `match` on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request was refused as malformed or unsupported (HTTP 400/404/413/422, or rejected before sending).
    InvalidRequest,
    /// The request holds content the provider cannot take (an audio part for the Messages API, a file by URL for
    /// Chat Completions): refused before anything was sent, naming the part and the provider. Another provider
    /// may take the same request.
    Unsupported,
    /// The credentials were missing, wrong or insufficient (HTTP 401/403).
    Authentication,
    /// The provider asked us to slow down (HTTP 429).
    RateLimited {
        /// How long the provider asked us to wait, from `Retry-After` / `retry-after-ms`.
        retry_after: Option<Duration>,
    },
    /// The provider failed (HTTP 5xx, Anthropic's 529 "overloaded", or an error event inside the stream).
    Upstream,
    /// A deadline ran out.
    Timeout(TimeoutPhase),
    /// The provider could not be reached, or the connection broke (refused, reset, closed mid-stream).
    Connection,
    /// The provider sent something that is not the wire format it promised.
    Protocol,
    /// The caller cancelled the call (dropped it or cancelled through the request's [`crate::CancellationToken`]).
    Cancelled,
    /// A tool failed in a way the tool loop's error policy turned into a call failure.
    Tool,
    /// An approval decision was refused (unknown, replayed, expired, tampered, or not allowed for this caller).
    Approval,
    /// A store (persistence, approvals) failed.
    Store,
    /// A content policy refused the request (a guardrail check whose action is to block): the same content is
    /// refused again. Names the check.
    PolicyBlocked {
        /// The name of the check that blocked, as the policy names it (`secrets`, `personal_data`, …).
        check: String,
    },
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// A short stable name, suitable as a metric label or the OpenTelemetry `error.type` attribute.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Authentication => "authentication",
            ErrorKind::RateLimited { .. } => "rate_limited",
            ErrorKind::Upstream => "upstream",
            ErrorKind::Timeout(_) => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Tool => "tool",
            ErrorKind::Approval => "approval",
            ErrorKind::Store => "store",
            ErrorKind::PolicyBlocked { .. } => "policy_blocked",
            ErrorKind::Other => "other",
        }
    }
}

/// The error of every tower-chat service and event stream.
pub struct ChatError {
    kind: ErrorKind,
    message: String,
    status: Option<http::StatusCode>,
    source: Option<BoxError>,
    /// A layer refused the call before it was sent to any provider ([`ChatError::refused_before_sending`]).
    unsent: bool,
}

/// The most bytes of a malformed payload quoted in a protocol error's message.
const QUOTE_LIMIT: usize = 256;

impl ChatError {
    /// An error of `kind` with a human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ChatError {
            kind,
            message: message.into(),
            status: None,
            source: None,
            unsent: false,
        }
    }

    /// A protocol error that quotes the offending payload, truncated so a huge payload cannot flood logs.
    pub fn protocol(what: impl fmt::Display, offending: &[u8]) -> Self {
        let shown = &offending[..offending.len().min(QUOTE_LIMIT)];
        let ellipsis = if offending.len() > QUOTE_LIMIT {
            "…"
        } else {
            ""
        };
        ChatError::new(
            ErrorKind::Protocol,
            format!(
                "{what}: {:?}{ellipsis} ({} bytes)",
                String::from_utf8_lossy(shown),
                offending.len()
            ),
        )
    }

    /// Content `provider` cannot take, refused before sending ([`ErrorKind::Unsupported`]).
    pub fn unsupported(provider: &str, what: impl fmt::Display) -> Self {
        ChatError::new(
            ErrorKind::Unsupported,
            format!("{provider} cannot take {what}"),
        )
        .refused_before_sending()
    }

    /// The provider closed a streamed answer before `what` (its end marker, or the finish).
    pub(crate) fn ended_before(what: &str) -> Self {
        ChatError::new(
            ErrorKind::Connection,
            format!("the provider closed the stream before {what}"),
        )
    }

    /// The call was cancelled.
    pub fn cancelled() -> Self {
        ChatError::new(ErrorKind::Cancelled, "the call was cancelled")
    }

    /// Attach the HTTP status the provider answered with.
    pub fn with_status(mut self, status: http::StatusCode) -> Self {
        self.status = Some(status);
        self
    }

    /// Attach the underlying cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Mark the error as a refusal before the request was sent anywhere: a layer (a rate limit, a budget, a
    /// request over a limit) refused the call without calling the provider. A recording layer keeps a small
    /// record of such a call — caller, model, reason, sizes — rather than its request, so that refusals cannot
    /// grow a database by their bodies.
    pub fn refused_before_sending(mut self) -> Self {
        self.unsent = true;
        self
    }

    /// Whether a layer refused the call before it was sent to any provider
    /// ([`ChatError::refused_before_sending`]). `false` says nothing: the request may or may not have left.
    pub fn is_refused_before_sending(&self) -> bool {
        self.unsent
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The message: the provider's own text where it sent one.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status of the provider's answer, when the error came from one.
    pub fn status(&self) -> Option<http::StatusCode> {
        self.status
    }

    /// How long to wait before retrying, for [`ErrorKind::RateLimited`].
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::RateLimited { retry_after } => retry_after,
            _ => None,
        }
    }

    /// Whether retrying the same request later may succeed (rate limits, 5xx, timeouts, broken connections).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::RateLimited { .. }
                | ErrorKind::Upstream
                | ErrorKind::Timeout(_)
                | ErrorKind::Connection
        )
    }

    /// Turn any boxed error into a `ChatError`: a boxed `ChatError` is unboxed as it is, tower's
    /// `timeout::error::Elapsed` (recognised by its message) becomes a total timeout, anything else `Other`.
    pub fn from_boxed(error: BoxError) -> Self {
        match error.downcast::<ChatError>() {
            Ok(chat) => *chat,
            Err(other) => {
                let text = other.to_string();
                let kind = if text == "request timed out" {
                    ErrorKind::Timeout(TimeoutPhase::Total)
                } else {
                    ErrorKind::Other
                };
                ChatError::new(kind, text).with_source(other)
            }
        }
    }
}

impl From<BoxError> for ChatError {
    fn from(error: BoxError) -> Self {
        ChatError::from_boxed(error)
    }
}

impl fmt::Debug for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ChatError");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(status) = self.status {
            d.field("status", &status);
        }
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        if self.unsent {
            d.field("refused_before_sending", &true);
        }
        d.finish()
    }
}

impl fmt::Display for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Timeout(phase) => write!(f, "{phase} timeout")?,
            kind => f.write_str(kind.as_str())?,
        }
        if let Some(status) = self.status {
            write!(f, " (HTTP {})", status.as_u16())?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ChatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_error_truncates_the_quoted_payload() {
        let payload = vec![b'x'; 10_000];
        let err = ChatError::protocol("malformed event", &payload);
        assert_eq!(err.kind(), &ErrorKind::Protocol);
        assert!(err.message().len() < 400, "{}", err.message().len());
        assert!(err.message().contains("10000 bytes"));
    }

    #[test]
    fn boxed_chat_errors_keep_their_kind() {
        let boxed: BoxError = Box::new(ChatError::new(
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(3)),
            },
            "slow down",
        ));
        let err = ChatError::from(boxed);
        assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
        assert!(err.is_retryable());
    }

    #[test]
    fn display_names_kind_status_and_message() {
        let err =
            ChatError::new(ErrorKind::Upstream, "boom").with_status(http::StatusCode::BAD_GATEWAY);
        assert_eq!(err.to_string(), "upstream (HTTP 502): boom");
        let err = ChatError::new(ErrorKind::Timeout(TimeoutPhase::Idle), "no data for 5s");
        assert_eq!(err.to_string(), "idle timeout: no data for 5s");
    }
}
