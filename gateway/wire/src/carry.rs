//! What a request carries past the typed model: the feature headers of its format, forwarded to an upstream of
//! the same format, and the [`DROPPED_HEADER`] naming what did not travel.
//!
//! Every format keeps the fields, blocks and items it does not model (see [`tower_chat::Carried`]); the leaf
//! sends them when its upstream speaks the client's format and leaves them out otherwise, naming each in the
//! request's [`DroppedFields`]. A route calls [`forward`] before the stack and [`name_dropped`] on the answer.

use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue};
use tower_chat::{ApiFormat, ChatRequest, DroppedFields, ForwardedHeaders};

use crate::format::{InboundRoute, DROPPED_HEADER};

/// The format a route's clients speak.
pub fn api_format(route: InboundRoute) -> ApiFormat {
    match route {
        InboundRoute::ChatCompletions => ApiFormat::ChatCompletions,
        InboundRoute::Messages => ApiFormat::Messages,
        InboundRoute::Responses => ApiFormat::Responses,
    }
}

/// The request headers that select features of a format's API: Anthropic's betas, OpenAI's.
fn feature_headers(format: ApiFormat) -> &'static [&'static str] {
    match format {
        ApiFormat::Messages => &["anthropic-beta"],
        ApiFormat::ChatCompletions | ApiFormat::Responses => &["openai-beta"],
    }
}

/// Puts in `request`'s extensions the feature headers of `headers` and, on Messages, the `beta=true` query
/// (Claude Code's), for an upstream of the route's format, and a [`DroppedFields`] holding `dropped` (what the
/// parser left out) for the leaf to add to. Returns the list, for [`name_dropped`].
pub fn forward(
    route: InboundRoute,
    headers: &HeaderMap,
    query: Option<&str>,
    dropped: &[String],
    request: &mut ChatRequest,
) -> DroppedFields {
    let format = api_format(route);
    let mut forwarded = ForwardedHeaders::new(format);
    for name in feature_headers(format) {
        for value in headers.get_all(*name) {
            forwarded = forwarded.header(HeaderName::from_static(name), value.clone());
        }
    }
    let beta = query.is_some_and(|q| q.split('&').any(|pair| pair == "beta=true"));
    if format == ApiFormat::Messages && beta {
        forwarded = forwarded.query("beta=true");
    }
    if !forwarded.is_empty() {
        request.extensions.insert(forwarded);
    }
    let list = DroppedFields::new();
    for name in dropped {
        tracing::debug!(dropped = %name, "left out of the request: the core has no place for it");
        list.record(name.as_str());
    }
    request.extensions.insert(list.clone());
    list
}

/// Sets [`DROPPED_HEADER`] on `response` when anything was left out: the names joined by commas (a name that
/// cannot be a header value is left out of the header, not the log).
pub fn name_dropped(dropped: &DroppedFields, response: &mut Response) {
    let names: Vec<String> = dropped
        .names()
        .into_iter()
        .filter(|name| HeaderValue::from_str(name).is_ok() && !name.contains(','))
        .collect();
    if names.is_empty() {
        return;
    }
    if let Ok(value) = HeaderValue::from_str(&names.join(",")) {
        response.headers_mut().insert(DROPPED_HEADER, value);
    }
}
