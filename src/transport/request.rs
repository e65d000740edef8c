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

/// The fields a body gets beside its typed ones, in the order they are set: the provider-specific `extra`
/// fields, then the fields carried from a client that spoke `format` (the upstream's own wire format; fields
/// carried from another format never reach the body). A later field of a name wins.
pub(crate) fn extra_fields(
    options: &crate::ChatOptions,
    format: crate::ApiFormat,
) -> Vec<(&String, &serde_json::Value)> {
    let carried = options
        .carried
        .as_ref()
        .filter(|carried| carried.format == format)
        .map(|carried| &carried.fields);
    options
        .extra
        .iter()
        .chain(carried.into_iter().flatten())
        .collect()
}

/// The body with `extra` set in it, each field winning over a typed field of its name without a duplicate key.
/// A field the body already has keeps its place; the others follow in their order (what the client sent comes
/// out as it sent it).
pub(crate) fn merge_extra<'a>(
    body: &impl serde::Serialize,
    extra: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(body)?;
    if let serde_json::Value::Object(fields) = &mut value {
        for (key, extra_value) in extra {
            fields.insert(key.clone(), extra_value.clone());
        }
    }
    serde_json::to_vec(&value)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::{extra_fields, merge_extra};
    use crate::{ApiFormat, Carried, ChatOptions};

    fn keys(body: &[u8]) -> Vec<String> {
        let value: Value = serde_json::from_slice(body).unwrap();
        value.as_object().unwrap().keys().cloned().collect()
    }

    fn options(format: ApiFormat) -> ChatOptions {
        let mut options = ChatOptions::default();
        options.extra.insert("top_k".into(), json!(3));
        let mut carried = Carried::new(format);
        for (name, value) in [
            ("context_management", json!({"edits": []})),
            ("max_tokens", json!(99)),
            ("alpha", json!(1)),
        ] {
            carried.fields.insert(name.into(), value);
        }
        options.carried = Some(carried);
        options
    }

    #[test]
    fn carried_fields_of_the_upstreams_format_are_set_in_the_extras_pass_in_the_clients_order() {
        let typed = json!({"model": "m", "max_tokens": 1024, "stream": true});
        let options = options(ApiFormat::Messages);
        let body = merge_extra(&typed, extra_fields(&options, ApiFormat::Messages)).unwrap();
        assert_eq!(
            keys(&body),
            [
                "model",
                "max_tokens",
                "stream",
                "top_k",
                "context_management",
                "alpha"
            ],
            "a typed field keeps its place; the rest follow as the client sent them"
        );
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["max_tokens"], 99, "the carried field wins");
    }

    #[test]
    fn fields_carried_from_another_format_never_reach_the_body() {
        let typed = json!({"model": "m"});
        let options = options(ApiFormat::ChatCompletions);
        let body = merge_extra(&typed, extra_fields(&options, ApiFormat::Messages)).unwrap();
        assert_eq!(keys(&body), ["model", "top_k"]);
    }
}
