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

/// One field a body gets beside its typed ones.
pub(crate) struct ExtraField<'a> {
    pub(crate) name: &'a String,
    pub(crate) value: &'a serde_json::Value,
    /// Carried from the client: an object meets one of ours of the same name key by key (Responses'
    /// `text.verbosity` beside the `text.format` the leaf wrote). A provider-specific field replaces ours.
    pub(crate) carried: bool,
}

/// The fields a body gets beside its typed ones, in the order they are set: the provider-specific `extra`
/// fields, then the fields carried from a client that spoke `format` (the upstream's own wire format; fields
/// carried from another format never reach the body). A later field of a name wins.
pub(crate) fn extra_fields(
    options: &crate::ChatOptions,
    format: crate::ApiFormat,
) -> Vec<ExtraField<'_>> {
    let carried = options
        .carried
        .as_ref()
        .filter(|carried| carried.format == format)
        .map(|carried| &carried.fields);
    let field = |carried: bool| {
        move |(name, value)| ExtraField {
            name,
            value,
            carried,
        }
    };
    options
        .extra
        .iter()
        .map(field(false))
        .chain(carried.into_iter().flatten().map(field(true)))
        .collect()
}

/// Provider-specific `extra` fields, none carried.
pub(crate) fn provider_fields(
    extra: &serde_json::Map<String, serde_json::Value>,
) -> impl Iterator<Item = ExtraField<'_>> {
    extra.iter().map(|(name, value)| ExtraField {
        name,
        value,
        carried: false,
    })
}

/// The body with `extra` set in it, without a duplicate key. A field the body already has keeps its place; the
/// others follow in their order (what the client sent comes out as it sent it).
pub(crate) fn merge_extra<'a>(
    body: &impl serde::Serialize,
    extra: impl IntoIterator<Item = ExtraField<'a>>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(body)?;
    if let serde_json::Value::Object(fields) = &mut value {
        for field in extra {
            set_field(fields, &field);
        }
    }
    serde_json::to_vec(&value)
}

/// Set one extra field in `fields` (see [`ExtraField::carried`]).
pub(crate) fn set_field(
    fields: &mut serde_json::Map<String, serde_json::Value>,
    field: &ExtraField<'_>,
) {
    match (fields.get_mut(field.name), field.value) {
        (Some(serde_json::Value::Object(ours)), serde_json::Value::Object(theirs))
            if field.carried =>
        {
            for (key, value) in theirs {
                ours.insert(key.clone(), value.clone());
            }
        }
        _ => {
            fields.insert(field.name.clone(), field.value.clone());
        }
    }
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

    #[test]
    fn a_carried_object_meets_ours_key_by_key_and_a_provider_object_replaces_it() {
        let typed = json!({"model": "m", "text": {"format": {"type": "text"}}});
        let mut options = ChatOptions::default();
        let mut carried = Carried::new(ApiFormat::Responses);
        carried
            .fields
            .insert("text".into(), json!({"verbosity": "low"}));
        options.carried = Some(carried);
        let body = merge_extra(&typed, extra_fields(&options, ApiFormat::Responses)).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value["text"],
            json!({"format": {"type": "text"}, "verbosity": "low"})
        );

        let mut options = ChatOptions::default();
        options
            .extra
            .insert("text".into(), json!({"verbosity": "high"}));
        let body = merge_extra(&typed, extra_fields(&options, ApiFormat::Responses)).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["text"], json!({"verbosity": "high"}));
    }
}
