//! `GET /v1/models`: the models `[upstreams]` configures, in the caller's API's shape.

use crate::stack::upstreams::{CatalogEntry, ModelRouter};

/// `GET /v1/models`: the configured models (none with a single `--upstream`, which passes any model name
/// through), in the shape of the caller's API: Anthropic's list (`type: model`, `display_name`, `created_at`,
/// `has_more`, `first_id`, `last_id`) to a caller that sends `anthropic-version`, as Anthropic's SDKs and Claude
/// Code do, OpenAI's otherwise.
pub(crate) fn models_route<S: Clone + Send + Sync + 'static>(
    router: Option<ModelRouter>,
) -> axum::Router<S> {
    axum::Router::new().route(
        "/v1/models",
        axum::routing::get(move |headers: http::HeaderMap| {
            // Read per request: a reload changes the list.
            let catalog = router.as_ref().map(|r| r.catalog()).unwrap_or_default();
            async move {
                let body = if headers.contains_key("anthropic-version") {
                    anthropic_model_list(&catalog)
                } else {
                    openai_model_list(&catalog)
                };
                crate::error::json_response(http::StatusCode::OK, &body)
            }
        }),
    )
}

fn openai_model_list(catalog: &[CatalogEntry]) -> serde_json::Value {
    let data: Vec<serde_json::Value> = catalog
        .iter()
        .map(|m| {
            serde_json::json!({
                "id": m.name,
                "object": "model",
                "created": 0,
                "owned_by": m.owned_by,
                "provider": m.providers[0],
                "providers": m.providers,
                "targets": m.targets,
            })
        })
        .collect();
    serde_json::json!({"object": "list", "data": data})
}

fn anthropic_model_list(catalog: &[CatalogEntry]) -> serde_json::Value {
    let data: Vec<serde_json::Value> = catalog
        .iter()
        .map(|m| {
            serde_json::json!({
                "type": "model",
                "id": m.name,
                "display_name": m.name,
                // The configuration has no release date; the epoch says "unknown" in the required format.
                "created_at": "1970-01-01T00:00:00Z",
            })
        })
        .collect();
    serde_json::json!({
        "data": data,
        "has_more": false,
        "first_id": catalog.first().map(|m| m.name.as_str()),
        "last_id": catalog.last().map(|m| m.name.as_str()),
    })
}
