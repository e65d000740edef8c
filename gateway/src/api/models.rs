//! `GET /v1/models`: the models `[upstreams]` configures (or a single upstream's own), in the caller's API's
//! shape.

use std::sync::Arc;

use crate::config::Provider;
use crate::stack::upstreams::{CatalogEntry, ModelRouter};
use crate::stack::Upstream;

/// `GET /v1/models`: the configured models, or with a single `--upstream` (which passes any model name through)
/// the upstream's own list, asked of it with the gateway's key, in the shape of the caller's API: Anthropic's
/// list (`type: model`, `display_name`, `created_at`, `has_more`, `first_id`, `last_id`) to a caller that sends
/// `anthropic-version`, as Anthropic's SDKs and Claude Code do, OpenAI's otherwise.
pub(crate) fn models_route<S: Clone + Send + Sync + 'static>(
    router: Option<ModelRouter>,
    single: Option<Upstream>,
) -> axum::Router<S> {
    axum::Router::new().route(
        "/v1/models",
        axum::routing::get(move |headers: http::HeaderMap| {
            // Read per request: a reload changes the list.
            let catalog = router.as_ref().map(|r| r.catalog()).unwrap_or_default();
            let single = single.clone();
            async move {
                let catalog = match (catalog.is_empty(), single) {
                    (true, Some(upstream)) => Arc::new(upstream_models(&upstream).await),
                    _ => catalog,
                };
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

/// The single upstream's own models (`GET {upstream}/models`), or none when it cannot say (logged).
async fn upstream_models(upstream: &Upstream) -> Vec<CatalogEntry> {
    let (answer, provider) = match upstream {
        Upstream::OpenAi(leaf) => (
            leaf.fetch(http::Method::GET, "models", None).await,
            Provider::OpenAi,
        ),
        // Anthropic pages its list (20 a page by default); 1000 is its largest page.
        Upstream::Anthropic(leaf) => (
            leaf.fetch(http::Method::GET, "models?limit=1000", None)
                .await,
            Provider::Anthropic,
        ),
        _ => return Vec::new(),
    };
    let listed = answer.map_err(|e| e.to_string()).and_then(|body| {
        serde_json::from_slice::<serde_json::Value>(&body).map_err(|e| e.to_string())
    });
    let list = match listed {
        Ok(list) => list,
        Err(error) => {
            tracing::warn!(%error, "GET /v1/models: the upstream's model list could not be read");
            return Vec::new();
        }
    };
    list["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|model| model["id"].as_str())
        .map(|id| CatalogEntry {
            name: id.to_owned(),
            targets: Vec::new(),
            owned_by: provider.to_string(),
            providers: vec![provider],
        })
        .collect()
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
