//! [`Gateway`] and all its methods: assembled from its configuration, its router and serving. The routes and
//! their middleware are in [`mod@crate::api::routes`], the accept loop in [`mod@crate::edge::serve`]; the stack
//! it calls is built in [`mod@crate::stack`], the stores it opens in [`mod@crate::stack::stores`]; the chat
//! routes ([`mod@crate::api::chat`]) serve that stack under the turn layer ([`crate::turn`]).

use std::sync::Arc;
use std::time::Duration;

use std::future::Future;

use axum::response::Response;
use axum::Router;
use http::Request;
use tokio::net::TcpListener;
use tower_chat_limits::LimitsLayer;
use tower_chat_persistence::PersistenceLayer;

use crate::api::state::{AppState, Observability};
use crate::config::Config;
use crate::edge::auth::ApiKeys;
use crate::edge::in_flight::{self, ConnectionLimits, InFlight};
use crate::edge::middleware::EdgeLimits;
use crate::operator::{Decisions, OperatorState};
use crate::stack::mcp::GatewayMcp;
use crate::stack::stores::{stores, Stores};
use crate::stack::tools::server_tool_names;
use crate::stack::{stack, ChatStack, StackOptions, Upstream};
use crate::telemetry::metrics::PrometheusMetrics;
use crate::turn::pending::PendingStore;
use crate::turn::Turns;
use crate::GatewayError;
use tower_chat_wire::format::ParseContext;

/// A configured gateway, ready to serve.
pub struct Gateway {
    pub(crate) state: AppState,
    /// `/metrics` and `/v1/models` (see [`crate::telemetry::metrics`], [`crate::stack::upstreams`]).
    pub(crate) observability: Observability,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) connections: ConnectionLimits,
    pub(crate) stores: Option<Stores>,
    pub(crate) limits: Option<LimitsLayer>,
    pub(crate) reloader: Option<crate::stack::upstreams::Reloader>,
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
        let router =
            crate::stack::upstreams::build(config, &metrics).map_err(GatewayError::Chat)?;
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
        // Managed keys and teams carry limits of their own: a gateway that can hold them (client keys and
        // operators to manage them) runs the limits layer even when `[limits]` sets none, so a budget given
        // through `/admin` applies to the next call.
        let limits = if keys.is_some() && operators.is_some() {
            Some(config.file.limits.build_layer()?)
        } else {
            config.file.limits.layer()?
        };
        let stores = stores(config).await?;
        let mcp = GatewayMcp::start(&config.file.mcp, &server_tool_names(config))
            .await
            .map_err(GatewayError::Config)?;
        let models = router.clone();
        let single = upstream.clone();
        let files = config
            .files
            .as_deref()
            .map(crate::stack::tools::open_sandbox)
            .transpose()
            .map_err(GatewayError::Chat)?;
        let options = StackOptions {
            files: files.as_ref(),
            persistence: config.record_calls.then_some(&stores.persistence),
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
        gateway.reloader = models.as_ref().map(|router| {
            crate::stack::upstreams::Reloader::new(router.clone(), config, metrics.clone())
        });
        if let Some(Upstream::Anthropic(leaf)) = &single {
            gateway.state.turns.anthropic_counter = Some(leaf.clone());
        }
        gateway.state.turns.router = models.clone();
        gateway.observability = Observability {
            metrics,
            router: models,
            upstream: single,
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
        // Without records nothing is written there: what needs a record (a resumed conversation, the call
        // log) is refused, not read stale.
        gateway.state.turns.records = config
            .record_calls
            .then(|| stores.persistence.store().clone());
        // Managed keys need a gateway that authenticates clients, and operators to manage them.
        if let (Some(clients), Some(_)) = (&gateway.state.keys, &gateway.state.turns.operators) {
            // Each new table of keys and teams hands the limits layer its policy; one that cannot be built
            // leaves the layer's as it is.
            let recheck = config.file.keys.recheck().map_err(GatewayError::Config)?;
            let live = gateway.limits.clone().map(|layer| {
                let section = config.file.limits.clone();
                crate::keys::OnChange(Box::new(move |table: &crate::keys::table::Table| {
                    match crate::keys::policy::limit_policy(&section, table) {
                        Ok(policy) => layer.set_policy(policy),
                        Err(e) => {
                            tracing::warn!(error = %e, "managed keys: the limits stay as they were")
                        }
                    }
                }))
            });
            let managed =
                crate::keys::ManagedKeys::open(stores.keys.clone(), clients.names(), live, recheck)
                    .await
                    .map_err(|e| GatewayError::Config(format!("managed keys: {e}")))?;
            gateway.state.managed = Some(managed);
        }
        gateway.stores = Some(stores);
        Ok(gateway)
    }

    /// A gateway around a stack of your own (its server-side tools are whatever the stack runs; client tools
    /// may not take the names of those the config turns on, a subset of
    /// [`SERVER_TOOLS`](crate::stack::tools::SERVER_TOOLS)).
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
            polls: Arc::new(in_flight::PerKey::new(config.max_polls_per_key)),
            sessions: crate::operator::console::SessionStore::default(),
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
                    media: Arc::new(crate::edge::in_flight::MediaInFlight::new(
                        &config.connections,
                    )),
                    server_tools: server_tool_names(config),
                    anthropic_counter: None,
                    router: None,
                    mcp: None,
                    // `[cache.routes]` was checked when the stack's cache layer was built.
                    caching: config.file.cache.as_ref().map(|section| {
                        Arc::new(crate::stack::cache::RouteTtls::of(section).unwrap_or_default())
                    }),
                    drain_over: tower_chat::CancellationToken::new(),
                },
                keys,
                managed: None,
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
    pub fn reloader(&self) -> Option<crate::stack::upstreams::Reloader> {
        self.reloader.clone()
    }

    /// The limits layer (`[limits]` of the configuration file), when one runs.
    pub fn limits(&self) -> Option<&LimitsLayer> {
        self.limits.as_ref()
    }

    /// The axum application: the routes, their checks and the access log. [`serve`](Self::serve) adds the rest
    /// of the edge middleware around it ([`crate::edge::middleware`]: request ids, body limit and timeout).
    pub fn router(&self) -> Router {
        crate::api::routes::router(&self.state, &self.observability, self.limits.clone())
    }

    /// What [`serve`](Self::serve) answers with: [`router`](Self::router) inside the edge middleware
    /// ([`crate::edge::middleware`]).
    pub(crate) fn app<B>(
        &self,
        body_timeout: std::time::Duration,
    ) -> impl tower::Service<
        Request<B>,
        Response = Response,
        Error = std::convert::Infallible,
        Future = impl std::future::Future<Output = Result<Response, std::convert::Infallible>>
                     + Send
                     + 'static,
    > + Clone
           + Send
           + Sync
           + 'static
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        crate::edge::middleware::around(
            self.router(),
            EdgeLimits {
                body_limit: self
                    .state
                    .turns
                    .limits
                    .body_allowance(self.state.turns.body_limit),
                body_timeout,
            },
        )
    }

    /// `GET /metrics` alone (with its key check, when `--metrics-key-env` is set): what `--metrics-listen`
    /// serves. [`router`](Self::router) includes it unless `--metrics-listen` is set.
    pub fn metrics_router(&self) -> Router {
        crate::api::metrics::metrics_route(
            self.observability.metrics.clone(),
            self.observability.metrics_key.clone(),
        )
    }

    /// Serve on `listener` until `shutdown` resolves; then stop accepting, let in-flight requests finish for at
    /// most the configured shutdown timeout, and return. Requests still in flight then end with a
    /// `shutting_down` error in their client's format (a `503`, or a stream's error event), given up to a second
    /// to be written.
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // The port really bound (`--listen` may say 0): the default allowed hosts name it.
        self.state.listen = listener.local_addr()?;
        let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
        let signal = async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections, draining in-flight requests");
            let _ = signalled_tx.send(());
        };
        let app = self.app(self.connections.body_timeout);
        let server = crate::edge::serve::serve(listener, app, self.connections.clone(), signal);
        tokio::pin!(server);
        let drain = self.shutdown_timeout;
        let deadline = async move {
            if signalled_rx.await.is_err() {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(drain).await;
        };
        tokio::select! {
            () = &mut server => {},
            () = deadline => {
                tracing::warn!(?drain, "drain time over: ending the requests still in flight");
                self.state.turns.drain_over.cancel();
                if tokio::time::timeout(crate::edge::serve::FINAL_WORDS, &mut server).await.is_err() {
                    tracing::warn!("dropping the connections still open");
                }
            }
        }
        drop(self.state);
        if let Some(limits) = &self.limits {
            // Settlements of the calls that just ended may still be on their way to the store.
            limits.settled().await;
        }
        if let Some(persistence) = self.stores.as_ref().map(|s| &s.persistence) {
            // Records of the calls that just ended may still sit in the writer's buffer.
            match persistence.flush().await {
                Ok(()) => tracing::info!("persistence flushed"),
                Err(error) => tracing::error!(%error, "flushing persistence failed"),
            }
        }
        Ok(())
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
fn load_metrics_key(
    config: &Config,
) -> Result<Option<crate::telemetry::metrics::MetricsKey>, GatewayError> {
    config
        .metrics_key_env
        .as_deref()
        .map(|var| {
            crate::telemetry::metrics::MetricsKey::from_env(var).map_err(GatewayError::Config)
        })
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
