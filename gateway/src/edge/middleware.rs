//! The standard HTTP middleware, from `tower-http` (and axum's body limit):
//!
//! - `SetSensitiveRequestHeadersLayer`: `authorization`, `proxy-authorization`, `x-api-key` and `cookie` are
//!   marked sensitive, so no layer that prints headers prints them;
//! - a request with more than one `Host` line is answered `400 duplicate_host` (RFC 9112 §3.2: which of them
//!   names the host is anyone's guess, and the host checks must not pick one the routing does not);
//! - `SetRequestIdLayer` + `PropagateRequestIdLayer`: every request has an `x-request-id` (the client's, or a
//!   new UUID) and every response carries it back; every JSON error body carries it too, as `request_id`
//!   ([`crate::error::with_request_id`]). A client's id is taken only as 1 to [`MAX_REQUEST_ID`] bytes of
//!   visible ASCII: an empty, longer or unprintable one is replaced by a new UUID, so that what is echoed in
//!   the header, the body and the access line stays small and printable;
//! - `DefaultBodyLimit` (`--body-limit`) and `RequestBodyTimeoutLayer` (`--body-timeout`: a body that goes that
//!   long without a byte fails, answered `408`);
//! - `TraceLayer`: one access-log line per request at `INFO` when its response starts (method, route, status,
//!   latency, request id and the caller's id once authentication has named it; never a key), inside a span that
//!   OpenTelemetry export turns into the request's server span;
//! - `CatchPanicLayer`: a handler that panics answers 500 in the API's error shape, and the gateway lives on.
//!
//! All but the last two wrap the router as a whole ([`around`]): `Router::layer` wraps every route in one more
//! boxed service, which axum clones for every request. The access line names the matched route, known only
//! after routing, so tracing (with the panic catcher inside it) is the one layer around each route
//! ([`per_route`]).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http::header::HOST;
use http::header::{AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};
use http::{HeaderName, HeaderValue, Request, StatusCode};
use tower::{Service, ServiceBuilder};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::LatencyUnit;
use tracing::{Level, Span};

use crate::error::ApiError;

pub(crate) use crate::error::{MAX_REQUEST_ID, X_REQUEST_ID};

/// Whether a client's `x-request-id` may be echoed: 1 to [`MAX_REQUEST_ID`] bytes of visible ASCII.
fn usable_request_id(id: &HeaderValue) -> bool {
    let id = id.as_bytes();
    !id.is_empty() && id.len() <= MAX_REQUEST_ID && id.iter().all(u8::is_ascii_graphic)
}

/// The request without a client `x-request-id` that may not be echoed, so that one is generated in its place.
fn without_unusable_request_id<B>(mut request: Request<B>) -> Request<B> {
    let headers = request.headers_mut();
    if headers
        .get_all(&X_REQUEST_ID)
        .iter()
        .any(|id| !usable_request_id(id))
    {
        headers.remove(&X_REQUEST_ID);
    }
    request
}

/// `400 duplicate_host` for a request with more than one `Host` line (RFC 9112 §3.2), before any route.
async fn one_host(request: Request<Body>, next: axum::middleware::Next) -> Response {
    let hosts = request.headers().get_all(HOST).iter().count();
    if hosts > 1 {
        let error = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "duplicate_host",
            format!(
                "the request has {hosts} Host header lines; a request names its host in exactly one \
                 (RFC 9112 section 3.2)"
            ),
        );
        return crate::error::refusal(request.uri().path(), error);
    }
    next.run(request).await
}

/// What the edge middleware needs to know.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EdgeLimits {
    /// The largest request body read, in bytes.
    pub(crate) body_limit: usize,
    /// How long a request body may go without a byte.
    pub(crate) body_timeout: Duration,
}

/// `router` with the middleware that needs the matched route around each of its routes: the access line and,
/// inside it, the panic catcher (so a panic's `500` is logged like any answer).
pub(crate) fn per_route(router: Router) -> Router {
    // One `Router::layer` call for both: each call is one more boxed service per route, cloned per request.
    router.layer(
        ServiceBuilder::new()
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
            .layer(CatchPanicLayer::custom(panicked)),
    )
}

/// `app` (a router from [`per_route`]) with the rest of the standard middleware around it as a whole.
pub(crate) fn around<B>(
    app: Router,
    limits: EdgeLimits,
) -> impl Service<
    Request<B>,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let body_timeout = limits.body_timeout;
    ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            AUTHORIZATION,
            PROXY_AUTHORIZATION,
            COOKIE,
            HeaderName::from_static("x-api-key"),
        ]))
        .map_request(without_unusable_request_id)
        .layer(SetRequestIdLayer::new(X_REQUEST_ID, MakeRequestUuid))
        // Outside the propagation: the response carries the id by then.
        .layer(axum::middleware::map_response(
            crate::error::with_request_id,
        ))
        .layer(PropagateRequestIdLayer::new(X_REQUEST_ID))
        .layer(DefaultBodyLimit::max(limits.body_limit))
        // One deadline over the whole body ([`crate::edge::body_deadline`]: tower-http's restarts at every frame).
        .map_request(move |request| {
            crate::edge::body_deadline::with_deadline(request, body_timeout)
        })
        .layer(axum::middleware::from_fn(one_host))
        .service(app)
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

    fn app() -> impl Service<
        Request<Body>,
        Response = Response,
        Error = Infallible,
        Future = impl Future<Output = Result<Response, Infallible>> + Send,
    > + Clone {
        let limits = EdgeLimits {
            body_limit: 1024,
            body_timeout: Duration::from_secs(30),
        };
        around(
            per_route(
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
            ),
            limits,
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
        // An id too long to echo is replaced before the access line reads it.
        let long = "L".repeat(60_000);
        let (response, _) = call("/v1/things/1", &[("x-request-id", &long)]).await;
        let echoed = response.headers()["x-request-id"].to_str().unwrap();
        assert_eq!(echoed.len(), 36, "a UUID in its place: {echoed}");
        let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(logged.contains(echoed), "{logged}");
        assert!(!logged.contains("LLLL"), "{logged}");
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
        assert_eq!(
            body["request_id"],
            response.headers()["x-request-id"].to_str().unwrap(),
            "{body}"
        );
        let (after, _) = call("/v1/things/2", &[]).await;
        assert_eq!(after.status(), StatusCode::OK);
    }
}
