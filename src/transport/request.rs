//! Request building checked at build time (the endpoint URL, extra headers) and the encoding helpers every
//! provider's wire format shares (the model to send, provider-specific extra fields).

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Uri};

use crate::error::{ChatError, ErrorKind};

/// `base` joined with `path`, validated once at build time.
pub(crate) fn endpoint(base: &str, path: &str) -> Result<Uri, ChatError> {
    let url = format!("{}/{path}", base.trim_end_matches('/'));
    let uri: Uri = url.parse().map_err(|e| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            format!("invalid base URL {base:?}"),
        )
        .with_source(e)
    })?;
    match uri.scheme_str() {
        Some("http") | Some("https") if uri.host().is_some() => Ok(uri),
        _ => Err(ChatError::new(
            ErrorKind::InvalidRequest,
            format!("base URL {base:?} must be an absolute http:// or https:// URL"),
        )),
    }
}

pub(crate) fn parse_headers(headers: &[(String, String)]) -> Result<HeaderMap, ChatError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str()).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("invalid header name {name:?}"),
            )
            .with_source(e)
        })?;
        let value = HeaderValue::try_from(value.as_str()).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("invalid value for header {name}"),
            )
            .with_source(e)
        })?;
        map.append(name, value);
    }
    Ok(map)
}

/// The request's model, or the leaf's default.
pub(crate) fn resolve_model<'a>(
    options: &'a crate::ChatOptions,
    default_model: Option<&'a str>,
) -> Result<&'a str, ChatError> {
    options.model.as_deref().or(default_model).ok_or_else(|| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            "no model: set ChatOptions::model or the leaf's default model",
        )
    })
}

/// A request body that does not serialise (a JSON value that cannot be written, such as a non-finite float).
pub(crate) fn cannot_serialize(error: serde_json::Error) -> crate::ChatError {
    crate::ChatError::new(
        crate::ErrorKind::InvalidRequest,
        "the request could not be serialized",
    )
    .with_source(error)
}

/// `body` as JSON, into a buffer sized for the media of `messages` up front: a request carrying megabytes of
/// base64 would otherwise grow its buffer by doubling, to up to twice its size.
pub(crate) fn to_body(
    body: &impl serde::Serialize,
    messages: &[crate::Message],
) -> Result<Vec<u8>, serde_json::Error> {
    let media: usize = messages
        .iter()
        .map(|message| message.media_bytes().div_ceil(3) * 4)
        .sum();
    let mut out = Vec::with_capacity(media + 4096);
    serde_json::to_writer(&mut out, body)?;
    Ok(out)
}

/// Provider-specific fields win over ours, without duplicate keys in the body.
pub(crate) fn merge_extra(
    body: &impl serde::Serialize,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(body)?;
    if let serde_json::Value::Object(fields) = &mut value {
        for (key, extra_value) in extra {
            fields.insert(key.clone(), extra_value.clone());
        }
    }
    serde_json::to_vec(&value)
}
