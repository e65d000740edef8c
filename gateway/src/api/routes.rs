//! The routes and the middleware between them: which path goes to which handler, behind which checks
//! (host and origin guard, authentication, in-flight caps), and the edge middleware around them all
//! ([`crate::edge::middleware`]). The console and the JSON lists (`/v1/models`, `/v1/usage`, `/v1/approvals`) are
//! compressed (gzip, when the client accepts it); the chat endpoints are not: their answers are streams or
//! small, and an event stream must reach the client event by event.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::StatusCode;
use tower_chat::CallerIdentity;
use tower_chat_limits::LimitsLayer;
use tower_http::compression::CompressionLayer;

use crate::api::state::{AppState, Observability};
use crate::edge::browser_guard::{AllowedHosts, ApiGuard};
use crate::edge::in_flight::GuardedBody;
use crate::error::{json_response, refusal, ApiError};
use tower_chat_wire::{
    anthropic_messages::AnthropicMessages, count_tokens::CountsTokens, responses::Responses,
};
/// The axum application: the routes, their checks and the access log. [`Gateway::serve`](crate::Gateway::serve) adds the rest
/// of the edge middleware around it ([`crate::edge::middleware`]: request ids, body limit and timeout).
pub(crate) fn router(
    state: &AppState,
    observability: &Observability,
    limits: Option<LimitsLayer>,
) -> Router {
    // Shared, not cloned per request: axum clones the state for every extractor and middleware that asks
    // for it, and a clone of the stack is a clone of every layer in it.
    let state = Arc::new(state.clone());
    let records = state.turns.records.clone();
    let console_limits = limits.clone();
    let limits_for_admin = limits.clone();
    let usage = move |caller: Option<Extension<CallerIdentity>>| {
        crate::api::usage::usage(limits, records, caller.map(|Extension(c)| c))
    };
    let mut api = crate::api::chat::routes::<Arc<AppState>>(&state.turns, state.managed.clone())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            limit_in_flight,
        ))
        .merge(
            crate::api::models::models_route(
                observability.router.clone(),
                observability.upstream.clone(),
            )
            .layer(CompressionLayer::new()),
        )
        .route("/v1/usage", get(usage).layer(CompressionLayer::new()))
        // Counting runs nothing: it takes no in-flight slot.
        .route(
            AnthropicMessages::COUNT_ROUTE,
            post(crate::api::count_tokens::count::<AnthropicMessages>),
        )
        .route(
            Responses::COUNT_ROUTE,
            post(crate::api::count_tokens::count::<Responses>),
        );
    // Outside authentication: a rebound page or another site's request is refused whatever it carries.
    let guard = Arc::new(ApiGuard::new(state.allowed_hosts.clone().unwrap_or_else(
        || AllowedHosts::default_for(state.listen, state.keys.is_some()),
    )));
    let mut operator = Router::new();
    let mut console = Router::new();
    if let Some(operators) = &state.turns.operators {
        if state.console {
            console = crate::operator::console::router(
                operators.clone(),
                state.turns.records.clone(),
                console_limits,
                state.managed.clone(),
            )
            .layer(CompressionLayer::new());
        }
        // The client's long-poll shares the client routes' authentication; decisions take operator keys.
        api = api.route(
            "/v1/approvals/{id}",
            get(crate::operator::poll).with_state(operators.clone()),
        );
        operator = Router::new()
            .route(
                "/v1/approvals",
                get(crate::operator::list).layer(CompressionLayer::new()),
            )
            .route("/v1/approvals/{id}/decision", post(crate::operator::decide))
            .with_state(operators.clone())
            .merge(admin(state.managed.clone(), limits_for_admin.clone()))
            .route_layer(middleware::from_fn_with_state(
                operators.clone(),
                crate::operator::authenticate_operator,
            ))
            .route_layer(middleware::from_fn_with_state(
                guard.clone(),
                crate::edge::browser_guard::guard,
            ));
    } else if state.console {
        console = crate::operator::console::not_configured_router();
    }
    let api = api
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .route_layer(middleware::from_fn_with_state(
            guard,
            crate::edge::browser_guard::guard,
        ));
    let router = Router::new()
        .merge(api)
        .merge(operator)
        .merge(console)
        .route("/healthz", get(healthz))
        .merge(if observability.metrics_elsewhere {
            Router::new()
        } else {
            crate::api::metrics::metrics_route(
                observability.metrics.clone(),
                observability.metrics_key.clone(),
            )
        })
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    crate::edge::middleware::per_route(router.with_state(state))
}

/// The admin API ([`crate::keys::admin`]) when the gateway manages keys; nothing otherwise.
fn admin<T: Clone + Send + Sync + 'static>(
    managed: Option<crate::keys::ManagedKeys>,
    limits: Option<LimitsLayer>,
) -> Router<T> {
    match managed {
        Some(keys) => crate::keys::admin::routes()
            .layer(CompressionLayer::new())
            .with_state(crate::keys::admin::AdminState { keys, limits }),
        None => Router::new(),
    }
}

async fn method_not_allowed(request: Request) -> Response {
    let error = ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        ..ApiError::invalid_request(
            "method_not_allowed",
            format!(
                "{} is not allowed on {}",
                request.method(),
                request.uri().path()
            ),
        )
    };
    error.into_response()
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

async fn not_found(request: Request) -> Response {
    crate::error::unknown_route(request.uri().path()).into_response()
}

async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(keys) = &state.keys {
        let path = request.uri().path();
        let checked = crate::edge::auth::presented_key(request.headers()).and_then(|token| {
            match keys.identify(token) {
                Some(caller) => Ok(caller),
                // A managed key: the table in memory, never the database.
                None => state
                    .managed
                    .as_ref()
                    .and_then(|managed| {
                        managed
                            .table()
                            .authenticate(token, path, crate::keys::now_ms())
                    })
                    .unwrap_or_else(|| Err(ApiError::unauthorized("invalid API key"))),
            }
        });
        match checked {
            Ok(caller) => {
                crate::edge::middleware::record_caller(caller.as_str());
                request.extensions_mut().insert(caller);
            }
            Err(error) => return refusal(path, error),
        }
    }
    next.run(request).await
}

/// The in-flight limits, after authentication (the per-key limit needs the caller). The slots are held until
/// the response body has been sent, a stream's whole life.
async fn limit_in_flight(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let caller = request.extensions().get::<CallerIdentity>().cloned();
    let permit = match state.in_flight.admit(caller.as_ref()) {
        Ok(permit) => permit,
        Err(error) => return refusal(request.uri().path(), error),
    };
    next.run(request)
        .await
        .map(|body| Body::new(GuardedBody::new(body, permit)))
}
