//! `GET /metrics`: the Prometheus registry in the OpenMetrics text format, behind the metrics key when one is set.

use axum::response::IntoResponse;

use crate::telemetry::metrics::{MetricsKey, PrometheusMetrics};

/// The `Content-Type` of a scrape.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`, open, or for callers presenting `key`.
pub(crate) fn metrics_route<S: Clone + Send + Sync + 'static>(
    metrics: PrometheusMetrics,
    key: Option<MetricsKey>,
) -> axum::Router<S> {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: http::HeaderMap| {
            let admitted = key.as_ref().is_none_or(|key| key.admits(&headers));
            let body = admitted.then(|| metrics.render());
            async move {
                match body {
                    Some(body) => (
                        [(
                            http::header::CONTENT_TYPE,
                            OPENMETRICS,
                        )],
                        body,
                    )
                        .into_response(),
                    None => {
                        let mut response = crate::error::ApiError::unauthorized(
                            "/metrics needs `Authorization: Bearer <key>` with the key of --metrics-key-env",
                        )
                        .into_response();
                        response.headers_mut().insert(
                            http::header::WWW_AUTHENTICATE,
                            http::HeaderValue::from_static("Bearer"),
                        );
                        response
                    }
                }
            }
        }),
    )
}
