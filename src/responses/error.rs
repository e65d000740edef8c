//! The Responses API's errors — `response.failed`, `error` events, error bodies — as typed [`ChatError`]s: a
//! caller tells rate limited from invalid request from a server failure by the kind, not the text.

use serde_json::Value;

use crate::error::{ChatError, ErrorKind};

/// A failed response's error (its `error` object).
pub(super) fn failure(error: Option<Value>) -> ChatError {
    match error {
        Some(error) if !error.is_null() => error_from(&error),
        _ => ChatError::new(ErrorKind::Upstream, "the response failed"),
    }
}

/// An error object: `{"code": …, "message": …}`, with an optional `type`.
pub(super) fn error_from(error: &Value) -> ChatError {
    let text = |key| error.get(key).and_then(Value::as_str);
    let message = text("message")
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    typed_error(text("code"), text("type"), message)
}

/// The kind a caller can act on, from the error's `code` (or `type`).
pub(super) fn typed_error(code: Option<&str>, kind: Option<&str>, message: String) -> ChatError {
    let kind = match code.or(kind).unwrap_or("") {
        "rate_limit_exceeded" | "rate_limit_error" => ErrorKind::RateLimited { retry_after: None },
        "invalid_api_key" | "authentication_error" | "permission_error" => {
            ErrorKind::Authentication
        }
        "invalid_prompt"
        | "invalid_request_error"
        | "context_length_exceeded"
        | "data_residency_mismatch"
        | "bio_policy"
        | "misalignment_policy_violation"
        | "empty_image_file"
        | "failed_to_download_image"
        | "unsupported_image_media_type" => ErrorKind::InvalidRequest,
        code if code.starts_with("invalid_image") || code.starts_with("image_") => {
            ErrorKind::InvalidRequest
        }
        // `server_error`, `vector_store_timeout`, and what this list does not know yet.
        _ => ErrorKind::Upstream,
    };
    ChatError::new(kind, message)
}

/// The message in an error body: `{"error":{"message":…}}`.
pub(crate) fn provider_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    match value.get("error")? {
        Value::String(message) => Some(message.clone()),
        error => error.get("message")?.as_str().map(str::to_owned),
    }
}
