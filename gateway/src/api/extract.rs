//! axum's `Query` and `Json` extractors with the API's own rejections: a bad query string or body is answered
//! with its JSON error ([`ApiError`], code `invalid_query` / `invalid_body`). The types are axum's; only the shape
//! of the refusal is ours. The console's own (an HTML error page) are in `operator::console::extract`.

use axum::extract::{FromRequest, FromRequestParts, Request};
use http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A query string for the API, decoded into `T`; a bad one is a 400 JSON error naming the problem.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(ApiError::invalid_request(
                "invalid_query",
                rejection.body_text(),
            )),
        }
    }
}

/// A JSON body for the API, decoded into `T`; a bad one is a 400 JSON error naming the problem (and the
/// expected shape, `expected`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiJson<T>(pub T);

/// What a body of this type should look like, for the error when it does not.
pub(crate) trait Expected {
    /// E.g. `{"approved": true|false, "reason": "…"}`.
    const EXPECTED: &'static str;
}

impl<T: DeserializeOwned + Expected, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(ApiError {
                status: rejection.status(),
                ..ApiError::invalid_request(
                    "invalid_body",
                    format!("expected {}: {}", T::EXPECTED, rejection.body_text()),
                )
            }),
        }
    }
}
