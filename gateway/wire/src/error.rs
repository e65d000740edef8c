//! Errors as the formats answer them: OpenAI's shape `{"error": {"message", "type", "code"}}` with a fitting HTTP
//! status, mapped from [`tower_chat::ErrorKind`] ([`ApiError::from_chat`]), and Anthropic's shape for the
//! Messages route ([`anthropic_body`]).

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};
use tower_chat::{ChatError, ErrorKind};

/// The longest error message sent.
pub const MAX_ERROR_MESSAGE: usize = 4096;

/// `text` cut to at most `max` bytes on a character boundary, `…` marking the cut.
fn truncate(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

/// The `Retry-After` of a 429 or 503 whose cause named no wait (an upstream 429 without the header): one
/// second, the same as the limits layer's wait for a concurrency slot.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// An error as every format answers it (each in its own shape: [`WireFormat::error_response`](crate::format::WireFormat::error_response)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// OpenAI's `type` (`invalid_request_error`, `authentication_error`, …).
    pub kind: &'static str,
    /// A stable machine-readable `code`.
    pub code: &'static str,
    /// What went wrong, for a human.
    pub message: String,
    /// For 429 and 503: how long the client should wait (sent as `Retry-After`).
    pub retry_after: Option<Duration>,
}

impl ApiError {
    /// An error of any status; `kind` is OpenAI's `type`, `code` the stable machine-readable code.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: String,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            message,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or breaks the schema.
    pub fn invalid_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            code,
            message.into(),
        )
    }

    /// 500: the gateway itself failed (a bug, not the request nor an upstream).
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message.into(),
        )
    }

    /// 401: the gateway key is missing or wrong.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            message.into(),
        )
    }

    /// 403: the request is refused whatever its key (a `Host` or a browser origin the gateway does not serve).
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            code,
            message.into(),
        )
    }

    /// 415: the body is not declared as JSON.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "unsupported_media_type",
            message.into(),
        )
    }

    /// 413: the body is over the limit.
    pub fn too_large(limit: usize) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("the request body is larger than the server's limit of {limit} bytes"),
        )
    }

    /// 404: a named object (a stored response, …) does not exist, or is not the caller's.
    pub fn not_found_error(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            code,
            message.into(),
        )
    }

    /// 503: the gateway is at a limit (requests in flight); sent with `Retry-After`.
    pub fn overloaded(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "overloaded",
            message.into(),
        )
    }

    /// 503 for a request the server could not finish before shutting down (the gateway's drain time,
    /// `--shutdown-timeout`, ran out); sent with `Retry-After`, and as a stream's error event once the stream has
    /// started.
    pub fn shutting_down() -> Self {
        ApiError {
            retry_after: Some(DEFAULT_RETRY_AFTER),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "shutting_down",
                "the server is shutting down and could not finish this response; retry the request"
                    .into(),
            )
        }
    }

    /// The error of a chat call, with the status for its kind: the client's mistakes (an invalid request, a
    /// guardrail's refusal, content the upstream cannot take) are 400s, the upstream's failures 502 (its 429 a
    /// 429, its time-outs 504), each 429 and 503 with a `Retry-After`. A service that answers with an error of
    /// its own puts the [`ApiError`] as the chat error's source ([`ChatError::with_source`]): it is answered as
    /// it is.
    pub fn from_chat(error: &ChatError) -> Self {
        if let Some(own) =
            std::error::Error::source(error).and_then(|s| s.downcast_ref::<ApiError>())
        {
            return own.clone();
        }
        let message = error.to_string();
        let (status, kind, code) = match error.kind() {
            ErrorKind::InvalidRequest => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_request",
            ),
            // A guardrail refused the request: the client's content, as a provider's content filter would say.
            ErrorKind::PolicyBlocked { .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "content_filter",
            ),
            // Content the upstream cannot take (an audio part for the Messages API): the client can change it.
            ErrorKind::Unsupported => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "unsupported_content",
            ),
            // The gateway's own upstream credentials failed: nothing the client can fix, so a gateway error.
            ErrorKind::Authentication => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                "upstream_authentication_failed",
            ),
            ErrorKind::RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "rate_limit_exceeded",
            ),
            ErrorKind::Upstream => (StatusCode::BAD_GATEWAY, "upstream_error", "upstream_failed"),
            ErrorKind::Connection => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                "upstream_unreachable",
            ),
            ErrorKind::Protocol => (
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                "upstream_protocol_error",
            ),
            ErrorKind::Timeout(_) => (
                StatusCode::GATEWAY_TIMEOUT,
                "timeout_error",
                "upstream_timeout",
            ),
            ErrorKind::Approval => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_approval",
            ),
            ErrorKind::Tool => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "tool_failed",
            ),
            ErrorKind::Store => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "store_failed",
            ),
            ErrorKind::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "server_error", "cancelled"),
            _ => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal_error",
            ),
        };
        // Every 429 and 503 tells the client when to come back: an upstream that gave no Retry-After (or a
        // layer that could not say) gets the default wait rather than none, so clients back off instead of
        // retrying at once.
        let retry_after = match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                Some(error.retry_after().unwrap_or(DEFAULT_RETRY_AFTER))
            }
            _ => error.retry_after(),
        };
        ApiError {
            retry_after,
            ..ApiError::new(status, kind, code, message)
        }
    }

    /// The JSON body (also the payload of an SSE error chunk). The message is cut at
    /// [`MAX_ERROR_MESSAGE`] bytes, so no request can make the gateway answer (or store) a huge error.
    pub fn body(&self) -> Value {
        let message = truncate(&self.message, MAX_ERROR_MESSAGE);
        json!({"error": {"message": message, "type": self.kind, "code": self.code, "param": null}})
    }
}

/// The same error in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`, with the type
/// Anthropic uses for the status (`invalid_request_error`, `authentication_error`, `not_found_error`,
/// `request_too_large`, `rate_limit_error`, `timeout_error`, `overloaded_error`, `api_error`). The gateway's
/// own `code` rides along in `error.code`.
pub fn anthropic_body(error: &ApiError) -> Value {
    json!({"type": "error", "error": {
        "type": anthropic_type(error.status),
        "message": error.message,
        "code": error.code,
    }})
}

fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An error response with Anthropic's body (status and `Retry-After` as for every format).
pub fn anthropic_response(error: ApiError) -> Response {
    let body = anthropic_body(&error);
    let mut response = error.into_response();
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    response = Response::from_parts(parts, axum::body::Body::from(body.to_string()));
    response
}

/// A JSON response (axum's `json` feature is not worth its extra dependencies for this).
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    // `to_vec` writes straight into the buffer; `to_string` goes through `fmt::Display`'s escaping adapter.
    json_bytes_response(
        status,
        serde_json::to_vec(body).expect("a JSON value serialises"),
    )
}

/// A response whose body is JSON already serialised.
pub fn json_bytes_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// This error as a chat service returns it: its [`ErrorKind`] for the layers it passes, itself as the
    /// source, so that [`ApiError::from_chat`] answers with it unchanged.
    pub fn into_chat(self) -> ChatError {
        let kind = if self.status.is_client_error() {
            ErrorKind::InvalidRequest
        } else {
            ErrorKind::Other
        };
        ChatError::new(kind, self.message.clone())
            .with_status(self.status)
            .with_source(self)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = json_response(self.status, &self.body());
        if let Some(wait) = self.retry_after {
            // Whole seconds, rounded up: a client waiting less than asked would be refused again.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::TimeoutPhase;

    #[test]
    fn chat_errors_map_to_their_statuses() {
        let cases = [
            (ErrorKind::InvalidRequest, 400),
            (ErrorKind::RateLimited { retry_after: None }, 429),
            (ErrorKind::Upstream, 502),
            (ErrorKind::Connection, 502),
            (ErrorKind::Authentication, 502),
            (ErrorKind::Timeout(TimeoutPhase::FirstByte), 504),
            (
                ErrorKind::PolicyBlocked {
                    check: "secrets".into(),
                },
                400,
            ),
        ];
        for (kind, status) in cases {
            let error = ApiError::from_chat(&ChatError::new(kind.clone(), "x"));
            assert_eq!(error.status.as_u16(), status, "{kind:?}");
        }
        let blocked = ApiError::from_chat(&ChatError::new(
            ErrorKind::PolicyBlocked {
                check: "secrets".into(),
            },
            "x",
        ));
        assert_eq!(blocked.code, "content_filter");
    }

    #[test]
    fn error_messages_are_bounded() {
        let short = ApiError::invalid_request("x", "é".repeat(MAX_ERROR_MESSAGE / 2));
        assert_eq!(
            short.body()["error"]["message"].as_str().unwrap(),
            short.message
        );
        let long = ApiError::invalid_request("x", "é".repeat(MAX_ERROR_MESSAGE));
        let sent = long.body()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            sent.len() <= MAX_ERROR_MESSAGE && sent.ends_with('…'),
            "{}",
            sent.len()
        );
        assert!(sent.len() > MAX_ERROR_MESSAGE - 8);
    }

    #[test]
    fn every_429_and_503_carries_a_retry_after() {
        for kind in [
            ErrorKind::RateLimited { retry_after: None },
            ErrorKind::Cancelled,
        ] {
            let error = ApiError::from_chat(&ChatError::new(kind.clone(), "x"));
            assert_eq!(error.retry_after, Some(DEFAULT_RETRY_AFTER), "{kind:?}");
            let response = error.into_response();
            assert_eq!(response.headers()[header::RETRY_AFTER], "1", "{kind:?}");
        }
        let other = ApiError::from_chat(&ChatError::new(ErrorKind::Upstream, "x"));
        assert_eq!(other.retry_after, None);
    }

    #[test]
    fn retry_after_is_rounded_up_to_whole_seconds() {
        let error = ApiError::from_chat(&ChatError::new(
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_millis(1500)),
            },
            "slow down",
        ));
        let response = error.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }
}
