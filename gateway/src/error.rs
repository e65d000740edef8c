//! The gateway's errors: the wire formats' [`ApiError`] (OpenAI's shape, Anthropic's on `/v1/messages`) with the
//! gateway's own mapping of a structured-output failure, its own refusals (unknown routes, per-key caps), and
//! every error answer's `x-request-id` as `request_id` ([`with_request_id`]).

use axum::response::{IntoResponse, Response};
use http::{header, HeaderName, StatusCode};
use serde_json::Value;
use tower_chat::{ChatError, ErrorKind};
use tower_chat_structured_output::StructuredError;

pub(crate) use tower_chat_wire::error::json_response;
pub use tower_chat_wire::error::{ApiError, DEFAULT_RETRY_AFTER, MAX_ERROR_MESSAGE};
use tower_chat_wire::{
    anthropic_messages::AnthropicMessages, count_tokens::CountsTokens, format::WireFormat,
};

/// The request id header, as clients and load balancers name it.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client `x-request-id` taken as it is (what a call record keeps, too); a longer one is replaced.
pub(crate) const MAX_REQUEST_ID: usize = 200;

/// A refusal by a middleware, in the shape the route's clients parse.
pub(crate) fn refusal(path: &str, error: ApiError) -> Response {
    if path == "/v1/messages" || path == AnthropicMessages::COUNT_ROUTE {
        AnthropicMessages::error_response(error)
    } else {
        error.into_response()
    }
}

/// The error of a chat call as the gateway answers it: [`ApiError::from_chat`], except that an answer that broke
/// the requested schema after every repair (`[structured]`) is a 502 `answer_schema_mismatch`.
pub(crate) fn from_chat(error: &ChatError) -> ApiError {
    if matches!(error.kind(), ErrorKind::Protocol)
        && matches!(
            StructuredError::from_chat(error),
            Some(StructuredError::Invalid { .. })
        )
    {
        return ApiError {
            status: StatusCode::BAD_GATEWAY,
            kind: "upstream_error",
            code: "answer_schema_mismatch",
            ..ApiError::from_chat(error)
        };
    }
    // A model no `[upstreams]` name, alias or pattern reaches: a 404, as the providers answer an unknown model.
    if matches!(error.kind(), ErrorKind::InvalidRequest)
        && error.status() == Some(StatusCode::NOT_FOUND)
    {
        return ApiError::not_found_error("model_not_found", error.message());
    }
    ApiError::from_chat(error)
}

/// 429: this caller has `limit` requests in flight already; sent with `Retry-After`.
pub(crate) fn too_many_in_flight(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "too_many_in_flight",
        format!("this key has {limit} requests in flight, its limit; retry when one has finished"),
    )
}

/// 429: this caller has `limit` approval long-polls waiting already (`--max-polls-per-key`); sent with
/// `Retry-After`.
pub(crate) fn too_many_polls(limit: usize) -> ApiError {
    ApiError {
        retry_after: Some(DEFAULT_RETRY_AFTER),
        ..ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "too_many_polls",
            format!("this key has {limit} approval polls waiting, its limit; retry when one has answered"),
        )
    }
}

/// 404 for unknown routes.
pub(crate) fn unknown_route(path: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "unknown_url",
        format!(
            "no route for {path}; the gateway serves POST /v1/chat/completions, POST /v1/messages, \
             POST /v1/responses and GET /healthz"
        ),
    )
}

/// The largest error body [`with_request_id`] rewrites (error messages are cut at [`MAX_ERROR_MESSAGE`]).
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// `response` with its request's `x-request-id` (already on the response) in its body as `request_id`, when it
/// is a JSON error: every error the gateway answers, whoever wrote it (a handler, a guard, authentication, a
/// rejection, the fallback), names the id a client quotes and the logs and call records carry. Answers that
/// are not errors, not JSON, or of unknown length pass untouched; so does a stream's error event, which comes
/// after a `200`.
pub(crate) async fn with_request_id(response: Response) -> Response {
    use http_body::Body as _;
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let small = response
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n <= MAX_ERROR_BODY);
    let id = match response.headers().get(X_REQUEST_ID) {
        Some(id) if json && small && (status.is_client_error() || status.is_server_error()) => {
            match id.to_str() {
                Ok(id) => id.to_owned(),
                Err(_) => return response,
            }
        }
        _ => return response,
    };
    let (mut parts, body) = response.into_parts();
    // Whole in memory already (the exact size is known and small): this cannot wait or fail midway.
    let bytes = match axum::body::to_bytes(body, MAX_ERROR_BODY as usize).await {
        Ok(bytes) => bytes,
        Err(_) => return Response::from_parts(parts, axum::body::Body::empty()),
    };
    let mut value = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(object)) => object,
        _ => return Response::from_parts(parts, axum::body::Body::from(bytes)),
    };
    value.insert("request_id".to_owned(), Value::String(id));
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::to_vec(&value).expect("a JSON object serialises");
    Response::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_that_breaks_its_schema_is_a_bad_gateway() {
        let invalid = StructuredError::Invalid {
            raw: "{}".into(),
            violations: vec!["$.x: missing".into()],
            attempts: 2,
        }
        .into_chat();
        let error = from_chat(&invalid);
        assert_eq!(
            (error.status, error.code),
            (StatusCode::BAD_GATEWAY, "answer_schema_mismatch")
        );
        let plain = from_chat(&ChatError::new(ErrorKind::Protocol, "x"));
        assert_eq!(plain.code, "upstream_protocol_error");
    }
}
