//! The response cache: the `[cache]` table of the configuration file and the [`CacheLayer`] built from it, the
//! `Cache-Control` request header read into the layer's per-request control, and the `x-cache` response header.
//!
//! Off unless the file has a `[cache]` table. The layer sits inside the tool loop, around each model call (tools
//! still run on a hit; a hit is recorded as a call marked cached, at zero cost, and limits charge it nothing).
//!
//! ```
//! use tower_chat_gateway::config_file::ConfigFile;
//!
//! let file = ConfigFile::parse(r#"
//! [cache]
//! store = "memory"          # or "redis", shared by every replica (`redis_url_env` names the URL's variable)
//! ttl_seconds = 3600
//! max_bytes = 67108864      # the memory store's bound
//! scope = "caller"          # or "shared": identical prompts of different callers share one answer
//!
//! [cache.models]            # per model, seconds; 0 = never cached
//! "gpt-4o" = 600
//! "o3" = 0
//!
//! [cache.routes]            # per inbound route (chat_completions, messages, responses), seconds; over the model's
//! responses = 0
//! "#, "gateway.toml").unwrap();
//! assert!(file.cache.is_some());
//! ```
//!
//! Per request, `Cache-Control: no-store` bypasses the cache (nothing read, nothing stored) and `no-cache`
//! refreshes it (the model is asked, its answer stored); each answer says `x-cache: hit`, `miss` or `bypass`.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tower_chat::ChatRequest;
use tower_chat_cache::{
    CacheControl, CacheLayer, CacheOutcome, CacheScope, CacheTtl, MemoryCacheStore, RedisCacheStore,
};

pub use crate::config::cache::{CacheScopeName, CacheSection, CacheStoreKind};
use crate::GatewayError;
use tower_chat_wire::extensions::ResponseHeaders;
use tower_chat_wire::format::InboundRoute;

/// The default bound of the memory store.
const DEFAULT_MAX_BYTES: u64 = 64 << 20;

impl CacheSection {
    /// The layer this table describes. An unknown route in `[cache.routes]`, a Redis URL variable that is unset,
    /// or a URL that is not Redis, refuses the start (a cache meant to be shared never silently runs per process).
    pub fn layer(&self) -> Result<CacheLayer, GatewayError> {
        RouteTtls::of(self)?;
        let mut layer = CacheLayer::new().scope(match self.scope {
            CacheScopeName::Caller => CacheScope::Caller,
            CacheScopeName::Shared => CacheScope::Shared,
        });
        if let Some(seconds) = self.ttl_seconds {
            layer = layer.ttl(Duration::from_secs(seconds));
        }
        for (model, seconds) in &self.models {
            layer = layer.model_ttl(model, Duration::from_secs(*seconds));
        }
        Ok(match self.store {
            CacheStoreKind::Memory => layer.store(MemoryCacheStore::new(
                self.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
            )),
            CacheStoreKind::Redis => {
                let variable = self.redis_url_env.as_deref().unwrap_or("REDIS_URL");
                let url = std::env::var(variable)
                    .ok()
                    .filter(|u| !u.trim().is_empty());
                let Some(url) = url else {
                    return Err(GatewayError::Config(format!(
                        "[cache] store = \"redis\": the variable {variable} holding the Redis URL is unset or \
                         empty"
                    )));
                };
                let store = RedisCacheStore::new(url.trim()).map_err(|e| {
                    GatewayError::Config(format!("[cache] store = \"redis\" ({variable}): {e}"))
                })?;
                layer.store(store)
            }
        })
    }
}

/// `[cache.routes]` read: the time to live of each route that has one.
#[derive(Clone, Debug, Default)]
pub(crate) struct RouteTtls(Vec<(InboundRoute, Duration)>);

impl RouteTtls {
    /// The routes of `section`; an unknown route name refuses the start.
    pub(crate) fn of(section: &CacheSection) -> Result<Self, GatewayError> {
        section
            .routes
            .iter()
            .map(|(name, seconds)| {
                InboundRoute::parse(name)
                    .map(|route| (route, Duration::from_secs(*seconds)))
                    .ok_or_else(|| {
                        GatewayError::Config(format!(
                            "[cache.routes] \"{name}\": not a route (chat_completions, messages, responses)"
                        ))
                    })
            })
            .collect::<Result<_, _>>()
            .map(RouteTtls)
    }

    fn get(&self, route: InboundRoute) -> Option<Duration> {
        self.0
            .iter()
            .find(|(r, _)| *r == route)
            .map(|(_, ttl)| *ttl)
    }
}

/// What a request asks of the cache (`Cache-Control: no-store` / `no-cache`, and its route's time to live),
/// put in its extensions, and the slot its outcome is written to, for the `x-cache` header.
pub(crate) fn control(
    headers: &HeaderMap,
    route: InboundRoute,
    routes: &RouteTtls,
    request: &mut ChatRequest,
) -> CacheOutcome {
    if let Some(ttl) = routes.get(route) {
        request.extensions.insert(CacheTtl(ttl));
    }
    let directives = headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().to_ascii_lowercase());
    let mut control = None;
    for directive in directives {
        match directive.as_str() {
            "no-store" => control = Some(CacheControl::NoStore),
            "no-cache" if control.is_none() => control = Some(CacheControl::NoCache),
            _ => {}
        }
    }
    if let Some(control) = control {
        request.extensions.insert(control);
    }
    let outcome = CacheOutcome::new();
    request.extensions.insert(outcome.clone());
    outcome
}

/// `x-cache: hit|miss|bypass` for the answer's head, once the first model call has said which.
pub(crate) fn outcome_header(outcome: &CacheOutcome, headers: &ResponseHeaders) {
    if let Some(status) = outcome.get() {
        headers.insert(
            HeaderName::from_static("x-cache"),
            HeaderValue::from_static(status.header_value()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::Message;

    fn asked(value: &str) -> Option<CacheControl> {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CACHE_CONTROL, value.parse().unwrap());
        let mut request = ChatRequest::new(vec![Message::user("hi")]);
        control(
            &headers,
            InboundRoute::ChatCompletions,
            &RouteTtls::default(),
            &mut request,
        );
        request.extensions.get::<CacheControl>().copied()
    }

    #[test]
    fn a_routes_time_to_live_goes_with_its_requests_and_unknown_routes_refuse_the_start() {
        let section: CacheSection =
            toml::from_str("[routes]\nresponses = 0\n\"/v1/messages\" = 60\n").unwrap();
        let routes = RouteTtls::of(&section).unwrap();
        let ttl_of = |route| {
            let mut request = ChatRequest::new(vec![Message::user("hi")]);
            control(&HeaderMap::new(), route, &routes, &mut request);
            request.extensions.get::<CacheTtl>().copied()
        };
        assert_eq!(
            ttl_of(InboundRoute::Responses),
            Some(CacheTtl(Duration::ZERO))
        );
        assert_eq!(
            ttl_of(InboundRoute::Messages),
            Some(CacheTtl(Duration::from_secs(60)))
        );
        assert_eq!(ttl_of(InboundRoute::ChatCompletions), None, "the model's");
        let bad: CacheSection = toml::from_str("[routes]\nembeddings = 5\n").unwrap();
        let error = RouteTtls::of(&bad).unwrap_err().to_string();
        assert!(error.contains("embeddings"), "{error}");
    }

    #[test]
    fn cache_control_directives_are_read() {
        assert_eq!(asked("no-store"), Some(CacheControl::NoStore));
        assert_eq!(asked("No-Cache"), Some(CacheControl::NoCache));
        assert_eq!(asked("no-cache, no-store"), Some(CacheControl::NoStore));
        assert_eq!(asked("max-age=0"), None);
    }

    #[test]
    fn a_redis_cache_without_its_url_refuses_the_start() {
        let section: CacheSection = toml::from_str(
            "store = \"redis\"\nredis_url_env = \"TOWER_CHAT_GATEWAY_TEST_CACHE_URL_UNSET\"\n",
        )
        .unwrap();
        let error = section.layer().unwrap_err().to_string();
        assert!(
            error.contains("TOWER_CHAT_GATEWAY_TEST_CACHE_URL_UNSET"),
            "{error}"
        );
    }
}
