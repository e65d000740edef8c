//! The gateway assembled from its configuration: its state, keys and the chat endpoint. Routes and their
//! middleware are in [`mod@crate::routes`], serving in [`mod@crate::serve`]; the stack it calls is built in
//! [`mod@crate::stack`], the stores it opens in [`mod@crate::stores`], each request's turn handled in
//! [`crate::turn`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::HeaderMap;
use tower_chat::CallerIdentity;
use tower_chat_limits::LimitsLayer;
use tower_chat_persistence::PersistenceLayer;

use crate::api_guard::AllowedHosts;
use crate::auth::ApiKeys;
use crate::config::Config;
use crate::connection::{self, BodyTimeout, ConnectionLimits, InFlight};
use crate::error::ApiError;
use crate::mcp::GatewayMcp;
use crate::metrics::PrometheusMetrics;
use crate::operator::{Decisions, OperatorState};
use crate::pending::PendingStore;
use crate::stack::{stack, ChatStack, StackOptions, Upstream};
use crate::stores::{stores, Stores};
use crate::tools::SERVER_TOOLS;
use crate::turn::{handle, Turns};
use crate::warn_limit::WarnLimit;
use crate::GatewayError;
use tower_chat_wire::format::{ParseContext, WireFormat};

#[derive(Clone)]
pub(crate) struct AppState {
    /// What every turn needs ([`crate::turn`]).
    pub(crate) turns: Turns,
    pub(crate) keys: Option<Arc<ApiKeys>>,
    pub(crate) in_flight: Arc<InFlight>,
    /// Serve the operator console ([`crate::console`]) when operators are configured.
    pub(crate) console: bool,
    /// `--allowed-hosts`, when given (else the default of [`AllowedHosts::default_for`]).
    pub(crate) allowed_hosts: Option<AllowedHosts>,
    /// The address the gateway listens on: `--listen`, then the listener's own once [`Gateway::serve`] has it.
    pub(crate) listen: std::net::SocketAddr,
}

/// What `/metrics` and `/v1/models` read.
#[derive(Clone, Default)]
pub(crate) struct Observability {
    pub(crate) metrics: PrometheusMetrics,
    /// `--metrics-key-env`: the key `/metrics` requires.
    pub(crate) metrics_key: Option<crate::metrics::MetricsKey>,
    /// `--metrics-listen`: `/metrics` is served on another listener, not the main one.
    pub(crate) metrics_elsewhere: bool,
    /// `[upstreams]`' models (read per request: a reload changes them).
    pub(crate) router: Option<crate::upstreams::ModelRouter>,
}

/// A configured gateway, ready to serve.
pub struct Gateway {
    pub(crate) state: AppState,
    /// `/metrics` and `/v1/models` (see [`crate::metrics`], [`crate::upstreams`]).
    pub(crate) observability: Observability,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) connections: ConnectionLimits,
    pub(crate) stores: Option<Stores>,
    pub(crate) limits: Option<LimitsLayer>,
    pub(crate) reloader: Option<crate::upstreams::Reloader>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("body_limit", &self.state.turns.body_limit)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Build the gateway `config` describes: the upstream leaf, the store, the stack, the keys.
    pub async fn new(config: &Config) -> Result<Self, GatewayError> {
        // Cheap checks first: a bad keys file should not leave a fresh database behind.
        let keys = load_keys(config)?;
        let operators = load_operator_keys(config, keys.as_deref())?;
        let metrics_key = load_metrics_key(config)?;
        let metrics = PrometheusMetrics::new();
        // `[upstreams]` in the config file (models, fallbacks, retries, breakers), else the single --upstream.
        let router = crate::upstreams::build(config, &metrics).map_err(GatewayError::Chat)?;
        let upstream = match router {
            Some(_) => None,
            None => Some(Upstream::from_config(config).map_err(GatewayError::Chat)?),
        };
        if let Some(upstream) = &upstream {
            metrics.replace_upstream_connections(vec![(
                "upstream".to_owned(),
                upstream.stale_connections(),
            )]);
        }
        let limits = config.file.limits.layer()?;
        let stores = stores(config).await?;
        let mcp = GatewayMcp::start(&config.file.mcp, &SERVER_TOOLS)
            .await
            .map_err(GatewayError::Config)?;
        let models = router.clone();
        let files = config
            .files
            .as_deref()
            .map(crate::tools::open_sandbox)
            .transpose()
            .map_err(GatewayError::Chat)?;
        let options = StackOptions {
            files: files.as_ref(),
            persistence: Some(&stores.persistence),
            approvals: Some(&stores.approvals),
            metrics: metrics.clone(),
            limits: limits.as_ref(),
            mcp: mcp.as_ref(),
        };
        let stack = match (router, upstream) {
            (Some(router), _) => stack(config, router, options),
            (None, Some(upstream)) => stack(config, upstream, options),
            (None, None) => unreachable!("one of the two is built"),
        }
        .map_err(GatewayError::Chat)?;
        let mut gateway = Gateway::assemble(config, stack, keys, operators);
        gateway.observability.metrics_key = metrics_key;
        gateway.reloader = models
            .as_ref()
            .map(|router| crate::upstreams::Reloader::new(router.clone(), config, metrics.clone()));
        gateway.observability = Observability {
            metrics,
            router: models,
            ..gateway.observability
        };
        gateway.limits = limits;
        gateway.state.turns.mcp = mcp;
        gateway.state.turns.approval_store = Some(stores.approval_store.clone());
        if let Some(operators) = &mut gateway.state.turns.operators {
            operators.approval_store = Some(stores.approval_store.clone());
            operators.sessions = stores.sessions.clone();
            operators.files = files;
            // A key gone from the file (removed or rotated) takes its console sessions with it.
            let ended = operators
                .sessions
                .end_unbound(operators.keys.fingerprints())
                .await
                .map_err(|e| {
                    GatewayError::Config(format!("console sessions of removed operator keys: {e}"))
                })?;
            if ended > 0 {
                tracing::info!(
                    ended,
                    "console sessions of operator keys no longer in --operator-keys-file ended"
                );
            }
        }
        gateway.state.turns.records = Some(stores.persistence.store().clone());
        gateway.stores = Some(stores);
        Ok(gateway)
    }

    /// A gateway around a stack of your own (its server-side tools are whatever the stack runs; the names in
    /// [`SERVER_TOOLS`] are never shown to clients).
    pub fn with_stack(config: &Config, stack: ChatStack) -> Result<Self, GatewayError> {
        let keys = load_keys(config)?;
        let operators = load_operator_keys(config, keys.as_deref())?;
        let metrics_key = load_metrics_key(config)?;
        let mut gateway = Gateway::assemble(config, stack, keys, operators);
        gateway.observability.metrics_key = metrics_key;
        Ok(gateway)
    }

    fn assemble(
        config: &Config,
        stack: ChatStack,
        keys: Option<Arc<ApiKeys>>,
        operator_keys: Option<Arc<ApiKeys>>,
    ) -> Self {
        let pending = Arc::new(PendingStore::new(config.approval_ttl));
        let keys_for_operators = keys.clone();
        let operators = operator_keys.map(|keys| OperatorState {
            keys,
            decisions: Arc::new(Decisions::new(config.approval_ttl)),
            pending: pending.clone(),
            approval_store: None,
            login_limit: Arc::default(),
            clients: keys_for_operators.clone(),
            proxies: config.trusted_proxies.clone().map(Arc::new),
            polls: Arc::new(connection::PerKey::new(config.max_polls_per_key)),
            sessions: crate::console::SessionStore::default(),
            prices: Arc::new(config.file.limits.price_table()),
            files: None,
        });
        Gateway {
            state: AppState {
                turns: Turns {
                    stack,
                    pending,
                    operators,
                    approval_store: None,
                    records: None,
                    body_limit: config.body_limit,
                    parse: ParseContext {
                        upstream: config.provider.into(),
                        limits: config.limits,
                        stores_responses: true,
                    },
                    limits: Arc::new(config.limits),
                    media: Arc::new(crate::connection::MediaInFlight::new(&config.connections)),
                    mcp: None,
                    // `[cache.routes]` was checked when the stack's cache layer was built.
                    caching: config.file.cache.as_ref().map(|section| {
                        Arc::new(crate::cache::RouteTtls::of(section).unwrap_or_default())
                    }),
                    drain_over: tower_chat::CancellationToken::new(),
                },
                keys,
                in_flight: Arc::new(InFlight::new(&config.connections)),
                console: config.console,
                allowed_hosts: config.allowed_hosts.clone(),
                listen: config.listen,
            },
            shutdown_timeout: config.shutdown_timeout,
            connections: config.connections.clone(),
            stores: None,
            observability: Observability {
                metrics_elsewhere: config.metrics_listen.is_some(),
                ..Observability::default()
            },
            limits: None,
            reloader: None,
        }
    }

    /// The registry `GET /metrics` renders (fed by the stack's tracing layer and the resilience layers).
    pub fn metrics(&self) -> &PrometheusMetrics {
        &self.observability.metrics
    }

    /// The persistence layer recording every call (`None` for a gateway built [`with_stack`](Self::with_stack)).
    pub fn persistence(&self) -> Option<&PersistenceLayer> {
        self.stores.as_ref().map(|s| &s.persistence)
    }

    /// What reloads `[upstreams]` from `--config` while the gateway serves (`None` when the gateway runs without
    /// `[upstreams]` models: the single-upstream stack has nothing to swap).
    pub fn reloader(&self) -> Option<crate::upstreams::Reloader> {
        self.reloader.clone()
    }

    /// The limits layer (`[limits]` of the configuration file), when one runs.
    pub fn limits(&self) -> Option<&LimitsLayer> {
        self.limits.as_ref()
    }
}

/// `--operator-keys-file`, refused when a key is also a client key (an operator key must not chat, and a client
/// key must not decide).
fn load_operator_keys(
    config: &Config,
    clients: Option<&ApiKeys>,
) -> Result<Option<Arc<ApiKeys>>, GatewayError> {
    let Some(path) = &config.operator_keys_file else {
        return Ok(None);
    };
    let keys = ApiKeys::load(path).map_err(|e| {
        GatewayError::Config(format!("--operator-keys-file {}: {e}", path.display()))
    })?;
    if clients.is_some_and(|clients| clients.shares_a_key_with(&keys)) {
        return Err(GatewayError::Config(format!(
            "--operator-keys-file {}: a key is also in --api-keys-file; operator keys must differ from \
             client keys",
            path.display()
        )));
    }
    Ok(Some(Arc::new(keys)))
}

/// `--metrics-key-env`: the key `/metrics` requires, read once at start.
fn load_metrics_key(config: &Config) -> Result<Option<crate::metrics::MetricsKey>, GatewayError> {
    config
        .metrics_key_env
        .as_deref()
        .map(|var| crate::metrics::MetricsKey::from_env(var).map_err(GatewayError::Config))
        .transpose()
}

fn load_keys(config: &Config) -> Result<Option<Arc<ApiKeys>>, GatewayError> {
    match &config.api_keys_file {
        Some(path) => Ok(Some(Arc::new(ApiKeys::load(path).map_err(|e| {
            GatewayError::Config(format!("--api-keys-file {}: {e}", path.display()))
        })?))),
        None => Ok(None),
    }
}

/// One route per wire format; everything but parsing and encoding is shared.
pub(crate) async fn endpoint<F: WireFormat>(
    State(state): State<Arc<AppState>>,
    caller: Option<Extension<CallerIdentity>>,
    uri: http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if matches!(&body, Err(rejection) if BodyTimeout::caused(rejection)) {
        return connection::body_timeout_response();
    }
    let drain_over = state.turns.drain_over.clone();
    let handled = tokio::select! {
        biased;
        handled = handle::<F>(&state.turns, caller.map(|Extension(c)| c), headers, uri.query(), body) => handled,
        () = drain_over.cancelled() => Err(ApiError::shutting_down()),
    };
    match handled {
        Ok(response) => response,
        Err(error) => {
            if error.status.is_server_error() {
                static FAILED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 10);
                if let Some(suppressed) = FAILED.admit(std::time::Instant::now()) {
                    tracing::warn!(status = %error.status, message = %error.message, suppressed, "request failed");
                }
            }
            F::error_response(error)
        }
    }
}
