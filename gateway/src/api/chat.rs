//! The chat endpoints: one route per wire format (Chat Completions, Messages, Responses); everything but parsing
//! and encoding is shared, and each request's turn is handled in [`crate::turn`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::HeaderMap;
use tower_chat::CallerIdentity;
use tower_chat_wire::format::WireFormat;

use crate::api::state::AppState;
use crate::edge::in_flight::{self, BodyTimeout};
use crate::error::ApiError;
use crate::telemetry::warning_throttle::WarnLimit;
use crate::turn::handle;

/// One route per wire format; everything but parsing and encoding is shared.
pub(crate) async fn endpoint<F: WireFormat>(
    State(state): State<Arc<AppState>>,
    caller: Option<Extension<CallerIdentity>>,
    uri: http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if matches!(&body, Err(rejection) if BodyTimeout::caused(rejection)) {
        return in_flight::body_timeout_response();
    }
    let drain_over = state.turns.drain_over.clone();
    let handled = tokio::select! {
        biased;
        handled = handle::<F>(&state.turns, caller.map(|Extension(c)| c), headers, uri.query(), body) => handled,
        () = drain_over.cancelled() => Err(ApiError::shutting_down()),
    };
    match handled {
        Ok(response) => response,
        Err(error) => {
            if error.status.is_server_error() {
                static FAILED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 10);
                if let Some(suppressed) = FAILED.admit(std::time::Instant::now()) {
                    tracing::warn!(status = %error.status, message = %error.message, suppressed, "request failed");
                }
            }
            F::error_response(error)
        }
    }
}
