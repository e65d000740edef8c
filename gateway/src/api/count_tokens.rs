//! `POST /v1/messages/count_tokens` and `POST /v1/responses/input_tokens`: a request's input tokens, without
//! running it (see [`tower_chat_wire::count_tokens`]). The body is read, parsed and checked as a turn's. With a
//! single Anthropic `--upstream`, or an `[upstreams]` model whose first target is Anthropic's API, a Messages
//! count is that upstream's own (the body sent on as it came, with the target's model, to its
//! `messages/count_tokens`) and says `"estimated": false`; otherwise, or when the upstream fails to answer, it is
//! the limits layer's estimate ([`tower_chat_limits::estimate_input_tokens`], four characters a token) and says
//! `"estimated": true`. Nothing is recorded.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::Value;
use tower_chat::anthropic::AnthropicChat;
use tower_chat_wire::anthropic_messages::AnthropicMessages;
use tower_chat_wire::count_tokens::{counted_request, CountsTokens, TokenCount};
use tower_chat_wire::router::read_body;

use crate::api::state::AppState;

/// The characters a token is estimated at, as the limits layer reserves by default.
const CHARS_PER_TOKEN: u32 = 4;

/// The counting route of format `F`.
pub(crate) async fn count<F: CountsTokens>(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let turns = &state.turns;
    let counted = read_body(body, turns.body_limit, &turns.limits)
        .and_then(|body| counted_request::<F>(&body, &turns.parse).map(|request| (body, request)));
    let (body, request) = match counted {
        Ok(counted) => counted,
        Err(error) => return F::error_response(error),
    };
    let counter = match (&turns.anthropic_counter, &turns.router) {
        _ if F::COUNT_ROUTE != AnthropicMessages::COUNT_ROUTE => None,
        (Some(leaf), _) => Some((leaf.clone(), None)),
        (None, Some(router)) => {
            router.anthropic_counter(request.options.model.as_deref().unwrap_or_default())
        }
        (None, None) => None,
    };
    let upstream = match counter {
        Some((leaf, model)) => upstream_count(&leaf, &body, model.as_deref()).await,
        None => None,
    };
    let count = upstream.unwrap_or_else(|| TokenCount {
        input_tokens: tower_chat_limits::estimate_input_tokens(&request, CHARS_PER_TOKEN),
        estimated: true,
    });
    crate::error::json_response(StatusCode::OK, &F::count_answer(count))
}

/// The Anthropic upstream's own count of a Messages count body, asked for `model` instead of the client's when
/// given (`None`, logged, when it cannot give one).
async fn upstream_count(
    leaf: &AnthropicChat,
    body: &Bytes,
    model: Option<&str>,
) -> Option<TokenCount> {
    let body = match model {
        // A routed model: the target's own id, the rest of the body as it came.
        Some(model) => {
            let mut value: serde_json::Map<String, Value> = serde_json::from_slice(body).ok()?;
            value.insert("model".into(), Value::from(model));
            serde_json::to_vec(&value).ok()?
        }
        None => body.to_vec(),
    };
    let answer = leaf
        .fetch(Method::POST, "messages/count_tokens", Some(body))
        .await
        .map_err(|e| e.to_string())
        .and_then(|answer| {
            serde_json::from_slice::<Value>(&answer)
                .ok()
                .and_then(|count| count["input_tokens"].as_u64())
                .ok_or_else(|| "the answer has no input_tokens".to_owned())
        });
    match answer {
        Ok(input_tokens) => Some(TokenCount {
            input_tokens,
            estimated: false,
        }),
        Err(error) => {
            tracing::warn!(%error, "count_tokens: the upstream's count failed; answering an estimate");
            None
        }
    }
}
