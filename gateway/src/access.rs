//! The standard HTTP middleware around every route, from `tower-http`:
//!
//! - `SetSensitiveRequestHeadersLayer`: `authorization`, `proxy-authorization`, `x-api-key` and `cookie` are
//!   marked sensitive, so no layer that prints headers prints them;
//! - `SetRequestIdLayer` + `PropagateRequestIdLayer`: every request has an `x-request-id` (the client's, or a
//!   new UUID) and every response carries it back;
//! - `TraceLayer`: one access-log line per request at `INFO` when its response starts (method, route, status,
//!   latency, request id and the caller's id once authentication has named it; never a key), inside a span that
//!   OpenTelemetry export turns into the request's server span;
//! - `CatchPanicLayer`: a handler that panics answers 500 in the API's error shape, and the gateway lives on.

use axum::body::Body;
use axum::extract::MatchedPath;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http::header::{AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};
use http::{HeaderName, Request};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::LatencyUnit;
use tracing::{Level, Span};

use crate::error::ApiError;

/// The request id header, as clients and load balancers name it.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// `router` with the standard middleware around each of its routes.
pub(crate) fn around(router: Router) -> Router {
    router
        .layer(CatchPanicLayer::custom(panicked))
        .layer(PropagateRequestIdLayer::new(X_REQUEST_ID))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(
                    DefaultOnResponse::new()
                        .level(Level::INFO)
                        .latency_unit(LatencyUnit::Micros),
                )
                // A failed response is already logged by its status; a body that fails midway by the stream.
                .on_failure(()),
        )
        .layer(SetRequestIdLayer::new(X_REQUEST_ID, MakeRequestUuid))
        .layer(SetSensitiveRequestHeadersLayer::new([
            AUTHORIZATION,
            PROXY_AUTHORIZATION,
            COOKIE,
            HeaderName::from_static("x-api-key"),
        ]))
}

/// The span of one request: what the access-log line carries. `caller` is filled by authentication
/// ([`record_caller`]).
fn request_span(request: &Request<Body>) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| request.uri().path(), MatchedPath::as_str);
    let request_id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        request_id,
        caller = tracing::field::Empty,
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
    )
}

/// Name the authenticated caller (a client key's caller id, or an operator) in the request's access line.
pub(crate) fn record_caller(caller: &str) {
    Span::current().record("caller", caller);
}

/// What a panicking handler answers.
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %what, "a handler panicked; answered 500");
    ApiError::internal("the gateway failed while handling this request").into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::routing::get;
    use http::StatusCode;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    /// Log lines written by a test's subscriber.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn app() -> Router {
        around(
            Router::new()
                .route(
                    "/v1/things/{id}",
                    get(|| async {
                        record_caller("alice");
                        "ok"
                    }),
                )
                .route(
                    "/v1/broken",
                    get(|| async {
                        if true {
                            panic!("a bug in a handler");
                        }
                        "never"
                    }),
                ),
        )
    }

    async fn call(uri: &str, headers: &[(&str, &str)]) -> (Response, String) {
        let mut request = Request::get(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = app()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            Response::from_parts(parts, Body::empty()),
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[tokio::test(flavor = "current_thread")]
    async fn one_access_line_per_request_names_the_caller_and_never_the_key() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(Level::INFO)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let (response, body) = call(
            "/v1/things/42",
            &[
                ("authorization", "Bearer sk-secret-key"),
                ("x-request-id", "req-7"),
            ],
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body, "ok");
        assert_eq!(
            response.headers()["x-request-id"],
            "req-7",
            "passed through"
        );
        let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let access: Vec<&str> = logged.lines().collect();
        assert_eq!(access.len(), 1, "{logged}");
        for part in [
            "method=GET",
            "route=\"/v1/things/{id}\"",
            "request_id=\"req-7\"",
            "caller=\"alice\"",
            "status=200",
            "latency=",
        ] {
            assert!(access[0].contains(part), "{part} missing: {logged}");
        }
        assert!(!logged.contains("sk-secret-key"), "{logged}");
    }

    #[tokio::test]
    async fn a_request_without_an_id_gets_one() {
        let (first, _) = call("/v1/things/1", &[]).await;
        let (second, _) = call("/v1/things/1", &[]).await;
        let id = |r: &Response| r.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert_eq!(id(&first).len(), 36, "a UUID: {}", id(&first));
        assert_ne!(id(&first), id(&second));
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_the_router_serves_on() {
        let (response, body) = call("/v1/broken", &[]).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "internal_error", "{body}");
        assert!(response.headers().contains_key("x-request-id"));
        let (after, _) = call("/v1/things/2", &[]).await;
        assert_eq!(after.status(), StatusCode::OK);
    }
}
