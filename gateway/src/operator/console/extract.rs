//! axum's `Query` and `Form` extractors with the console's own rejection: a bad query string or form is
//! answered with the console's HTML error page. The types are axum's; only the shape of the refusal is ours.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::StatusCode;
use serde::de::DeserializeOwned;

use super::layout::error_page;

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
                error_page(
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
                error_page(
                    rejection.status(),
                    &format!("The form could not be read: {}", rejection.body_text()),
                )
                .into_response()
            })
    }
}
