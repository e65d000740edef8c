//! Failures mapped to typed errors: an HTTP status (with its `Retry-After` and the provider's message), a client
//! error (connect timeout vs connection failure), a body that broke off.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::deadline::with_timeout;
use super::sent::{Redactor, SentCredentials};
use crate::error::{ChatError, ErrorKind, TimeoutPhase};

/// The most bytes of an error response body read to find the provider's message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How a provider's error response is read (its [`ProviderWire`](crate::leaf::ProviderWire) functions).
#[derive(Clone, Copy)]
pub(super) struct ErrorReaders {
    /// The provider's message in the body.
    pub(super) message: fn(&[u8]) -> Option<String>,
    /// The provider's typed detail, from the headers and the body.
    pub(super) detail: fn(&HeaderMap, &[u8]) -> Option<crate::error::BoxError>,
    /// The wait the body asks for, where the headers name none (Gemini's `RetryInfo`).
    pub(super) retry_after: fn(&[u8]) -> Option<Duration>,
}

/// A failure status as a typed error carrying the provider's message (read from at most 64 KiB of the body
/// within the `idle` deadline), with every credential the request carried (`sent`) redacted, the provider's
/// typed detail (read from the redacted body) as its source, and the wait the headers (or else the body) ask for.
pub(super) async fn error_from_response(
    response: http::Response<Incoming>,
    idle: Option<Duration>,
    sent: &SentCredentials,
    readers: ErrorReaders,
) -> ChatError {
    let status = response.status();
    let header_wait = retry_after(response.headers());
    let headers = response.headers().clone();
    let body = with_timeout(
        idle,
        TimeoutPhase::Idle,
        Limited::new(response.into_body(), ERROR_BODY_LIMIT).collect(),
    )
    .await
    .ok()
    .and_then(|r| r.ok())
    .map(|c| c.to_bytes())
    .unwrap_or_default();
    let redactor = sent.redactor();
    let body = redacted_body(body, &redactor);
    let retry_after = header_wait.or_else(|| (readers.retry_after)(&body));
    let message = (readers.message)(&body).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
        // JSON without a message we know of says nothing more than the status does.
        if text.trim().is_empty() || serde_json::from_slice::<serde_json::Value>(&body).is_ok() {
            status.canonical_reason().unwrap_or("no message").to_owned()
        } else {
            text
        }
    });
    let message = redactor.redact(message);
    let error = ChatError::new(status_kind(status, retry_after), message).with_status(status);
    match (readers.detail)(&headers, &body) {
        Some(detail) => error.with_source(detail),
        None => error,
    }
}

/// An error body with every credential in it redacted, before anything reads it: a JSON body string by string
/// (a credential may be written with JSON escapes, which parsing undoes), any other as text.
fn redacted_body(body: bytes::Bytes, sent: &Redactor) -> bytes::Bytes {
    fn strings(value: &mut serde_json::Value, sent: &Redactor) {
        match value {
            serde_json::Value::String(text) => *text = sent.redact(std::mem::take(text)),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strings(v, sent)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| strings(v, sent)),
            _ => {}
        }
    }
    if sent.is_empty() || body.is_empty() {
        return body;
    }
    if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&body) {
        strings(&mut value, sent);
        return serde_json::to_vec(&value).map_or(body, bytes::Bytes::from);
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    bytes::Bytes::from(sent.redact(text))
}

pub(super) fn client_error(error: hyper_util::client::legacy::Error) -> ChatError {
    let timed_out = {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        let mut found = false;
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                found |= io.kind() == std::io::ErrorKind::TimedOut;
            }
            source = e.source();
        }
        found
    };
    if error.is_connect() && timed_out {
        return ChatError::new(
            ErrorKind::Timeout(TimeoutPhase::Connect),
            "connecting to the provider timed out",
        )
        .with_source(error);
    }
    let what = if error.is_connect() {
        "could not connect to the provider"
    } else {
        "the connection to the provider failed"
    };
    ChatError::new(ErrorKind::Connection, what).with_source(error)
}

pub(super) fn body_error(error: hyper::Error) -> ChatError {
    ChatError::new(
        ErrorKind::Connection,
        "the provider closed the connection mid-response",
    )
    .with_source(error)
}

fn status_kind(status: StatusCode, retry_after: Option<Duration>) -> ErrorKind {
    match status.as_u16() {
        401 | 403 => ErrorKind::Authentication,
        429 => ErrorKind::RateLimited { retry_after },
        408 => ErrorKind::Timeout(TimeoutPhase::FirstByte),
        // Failed dependency: the provider's model failed behind it (Bedrock's ModelErrorException).
        424 => ErrorKind::Upstream,
        400..=499 => ErrorKind::InvalidRequest,
        _ => ErrorKind::Upstream,
    }
}

/// `retry-after-ms` (OpenAI) wins over `Retry-After` (seconds or an HTTP date).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(
        date.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(
            status_kind(StatusCode::UNAUTHORIZED, None),
            ErrorKind::Authentication
        );
        assert_eq!(
            status_kind(StatusCode::BAD_REQUEST, None),
            ErrorKind::InvalidRequest
        );
        assert_eq!(
            status_kind(StatusCode::from_u16(529).unwrap(), None),
            ErrorKind::Upstream
        );
        assert_eq!(
            status_kind(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(2))),
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(2))
            }
        );
    }

    #[test]
    fn retry_after_reads_ms_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
        let mut headers = HeaderMap::new();
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        headers.insert(
            "retry-after",
            HeaderValue::try_from(httpdate::fmt_http_date(later)).unwrap(),
        );
        let wait = retry_after(&headers).unwrap();
        assert!(
            wait > Duration::from_secs(100) && wait <= Duration::from_secs(120),
            "{wait:?}"
        );
    }
}
