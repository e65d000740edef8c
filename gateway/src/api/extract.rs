//! axum's `Query`, `Form` and `Json` extractors with the gateway's own rejections: the API answers a bad query
//! string or body with its JSON error ([`ApiError`], code `invalid_query` / `invalid_body`), the console with an
//! HTML error page. The types are axum's; only the shape of the refusal is ours.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::StatusCode;
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

/// A query string for a console page; a bad one is the console's error page.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| PageQuery(value))
            .map_err(|rejection| {
                crate::operator::console::error_page(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "This address's query is not one the console reads: {}",
                        rejection.body_text()
                    ),
                )
            })
    }
}

/// A form posted to the console; a bad one is the console's error page.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageForm<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for PageForm<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        axum::extract::Form::<T>::from_request(request, state)
            .await
            .map(|axum::extract::Form(value)| PageForm(value))
            .map_err(|rejection| {
                crate::operator::console::error_page(
                    rejection.status(),
                    &format!("The form could not be read: {}", rejection.body_text()),
                )
                .into_response()
            })
    }
}
