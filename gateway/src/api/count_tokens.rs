//! `POST /v1/messages/count_tokens` and `POST /v1/responses/input_tokens`: a request's input tokens, without
//! running it (see [`tower_chat_wire::count_tokens`]). The body is read, parsed and checked as a turn's, then
//! counted by the limits layer's estimate ([`tower_chat_limits::estimate_input_tokens`], four characters a
//! token), and the answer says `"estimated": true`. Nothing reaches an upstream and nothing is recorded.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
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
        .and_then(|body| counted_request::<F>(&body, &turns.parse));
    match counted {
        Ok(request) => {
            let count = TokenCount {
                input_tokens: tower_chat_limits::estimate_input_tokens(&request, CHARS_PER_TOKEN),
                estimated: true,
            };
            crate::error::json_response(StatusCode::OK, &F::count_answer(count))
        }
        Err(error) => F::error_response(error),
    }
}
