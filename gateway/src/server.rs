//! The axum application: routes, their middleware, serving with graceful shutdown. The stack it calls is built
//! in [`mod@crate::stack`], the stores it opens in [`mod@crate::stores`], each request's turn handled in [`crate::turn`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{HeaderMap, StatusCode};
use tokio::net::TcpListener;
use tower_chat::CallerIdentity;
use tower_chat_limits::LimitsLayer;
use tower_chat_persistence::PersistenceLayer;

use crate::api_guard::{AllowedHosts, ApiGuard};
use crate::auth::ApiKeys;
use crate::config::Config;
use crate::connection::{self, BodyTimeout, ConnectionLimits, GuardedBody, InFlight};
use crate::error::{json_response, ApiError};
use crate::mcp::GatewayMcp;
use crate::metrics::PrometheusMetrics;
use crate::operator::{Decisions, OperatorState};
use crate::pending::PendingStore;
use crate::stack::{stack, ChatStack, StackOptions, Upstream};
use crate::stores::{stores, Stores};
use crate::tools::SERVER_TOOLS;
use crate::turn::{handle, Turns};
use crate::warn_limit::WarnLimit;
use crate::wire::{
    anthropic_messages::AnthropicMessages, chat_completions::ChatCompletions, responses::Responses,
    ParseContext, WireFormat,
};
use crate::GatewayError;

/// How long the requests still in flight when the drain time is over get to write their `shutting_down` error
/// (their connections close after it); a client that does not read it loses it.
const FINAL_WORDS: Duration = Duration::from_secs(1);

#[derive(Clone)]
struct AppState {
    /// What every turn needs ([`crate::turn`]).
    turns: Turns,
    keys: Option<Arc<ApiKeys>>,
    in_flight: Arc<InFlight>,
    /// Serve the operator console ([`crate::console`]) when operators are configured.
    console: bool,
    /// `--allowed-hosts`, when given (else the default of [`AllowedHosts::default_for`]).
    allowed_hosts: Option<AllowedHosts>,
    /// The address the gateway listens on: `--listen`, then the listener's own once [`Gateway::serve`] has it.
    listen: std::net::SocketAddr,
}

/// What `/metrics` and `/v1/models` read.
#[derive(Clone, Default)]
struct Observability {
    metrics: PrometheusMetrics,
    /// `--metrics-key-env`: the key `/metrics` requires.
    metrics_key: Option<crate::metrics::MetricsKey>,
    /// `--metrics-listen`: `/metrics` is served on another listener, not the main one.
    metrics_elsewhere: bool,
    /// `[upstreams]`' models (read per request: a reload changes them).
    router: Option<crate::upstreams::ModelRouter>,
}

/// A configured gateway, ready to serve.
pub struct Gateway {
    state: AppState,
    /// `/metrics` and `/v1/models` (see [`crate::metrics`], [`crate::upstreams`]).
    observability: Observability,
    shutdown_timeout: Duration,
    connections: ConnectionLimits,
    stores: Option<Stores>,
    limits: Option<LimitsLayer>,
    reloader: Option<crate::upstreams::Reloader>,
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
        let options = StackOptions {
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
                        upstream: config.provider,
                        limits: config.limits,
                    },
                    limits: Arc::new(config.limits),
                    mcp: None,
                    caching: config.file.cache.is_some(),
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

    /// The axum application.
    pub fn router(&self) -> Router {
        // Shared, not cloned per request: axum clones the state for every extractor and middleware that asks
        // for it, and a clone of the stack is a clone of every layer in it.
        let state = Arc::new(self.state.clone());
        let (limits, records) = (self.limits.clone(), self.state.turns.records.clone());
        let usage = move |caller: Option<Extension<CallerIdentity>>| {
            crate::limits::usage(limits, records, caller.map(|Extension(c)| c))
        };
        let mut api = Router::new()
            .route("/v1/chat/completions", post(endpoint::<ChatCompletions>))
            .route("/v1/messages", post(endpoint::<AnthropicMessages>))
            .route("/v1/responses", post(endpoint::<Responses>))
            .route_layer(middleware::from_fn_with_state(
                state.clone(),
                limit_in_flight,
            ))
            .merge(crate::upstreams::models_route(
                self.observability.router.clone(),
            ))
            .route("/v1/usage", get(usage));
        // Outside authentication: a rebound page or another site's request is refused whatever it carries.
        let guard = Arc::new(ApiGuard::new(
            self.state.allowed_hosts.clone().unwrap_or_else(|| {
                AllowedHosts::default_for(self.state.listen, self.state.keys.is_some())
            }),
        ));
        let mut operator = Router::new();
        let mut console = Router::new();
        if let Some(operators) = &self.state.turns.operators {
            if self.state.console {
                console =
                    crate::console::router(operators.clone(), self.state.turns.records.clone());
            }
            // The client's long-poll shares the client routes' authentication; decisions take operator keys.
            api = api.route(
                "/v1/approvals/{id}",
                get(crate::operator::poll).with_state(operators.clone()),
            );
            operator = Router::new()
                .route("/v1/approvals", get(crate::operator::list))
                .route("/v1/approvals/{id}/decision", post(crate::operator::decide))
                .route_layer(middleware::from_fn_with_state(
                    operators.clone(),
                    crate::operator::authenticate_operator,
                ))
                .route_layer(middleware::from_fn_with_state(
                    guard.clone(),
                    crate::api_guard::guard,
                ))
                .with_state(operators.clone());
        } else if self.state.console {
            console = crate::console::not_configured_router();
        }
        let api = api
            .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
            .route_layer(middleware::from_fn_with_state(
                guard,
                crate::api_guard::guard,
            ));
        let router = Router::new()
            .merge(api)
            .merge(operator)
            .merge(console)
            .route("/healthz", get(healthz))
            .merge(if self.observability.metrics_elsewhere {
                Router::new()
            } else {
                crate::metrics::metrics_route(
                    self.observability.metrics.clone(),
                    self.observability.metrics_key.clone(),
                )
            })
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(
                self.state
                    .turns
                    .limits
                    .body_allowance(self.state.turns.body_limit),
            ));
        crate::access::around(router.with_state(state))
    }

    /// `GET /metrics` alone (with its key check, when `--metrics-key-env` is set): what `--metrics-listen`
    /// serves. [`router`](Self::router) includes it unless `--metrics-listen` is set.
    pub fn metrics_router(&self) -> Router {
        crate::metrics::metrics_route(
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
        // Memory a load freed goes back to the operating system once the gateway is idle again.
        let release = tokio::spawn(crate::idle_memory::release_when_idle(
            self.state.in_flight.idle_tracker(),
            crate::idle_memory::Schedule::default(),
            crate::idle_memory::release_free_memory,
        ));
        let server = connection::serve(listener, self.router(), self.connections.clone(), signal);
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
                if tokio::time::timeout(FINAL_WORDS, &mut server).await.is_err() {
                    tracing::warn!("dropping the connections still open");
                }
            }
        }
        release.abort();
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

async fn method_not_allowed(request: Request) -> Response {
    let error = ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        ..ApiError::invalid_request(
            "method_not_allowed",
            format!(
                "{} is not allowed on {}",
                request.method(),
                request.uri().path()
            ),
        )
    };
    error.into_response()
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

async fn healthz() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

async fn not_found(request: Request) -> Response {
    ApiError::not_found(request.uri().path()).into_response()
}

async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(keys) = &state.keys {
        match keys.check(request.headers()) {
            Ok(caller) => {
                crate::access::record_caller(caller.as_str());
                request.extensions_mut().insert(caller);
            }
            Err(error) => return refusal(request.uri().path(), error),
        }
    }
    next.run(request).await
}

/// A refusal by a middleware, in the shape the route's clients parse.
pub(crate) fn refusal(path: &str, error: ApiError) -> Response {
    if path == "/v1/messages" {
        AnthropicMessages::error_response(error)
    } else {
        error.into_response()
    }
}

/// The in-flight limits, after authentication (the per-key limit needs the caller). The slots are held until
/// the response body has been sent, a stream's whole life.
async fn limit_in_flight(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let caller = request.extensions().get::<CallerIdentity>().cloned();
    let permit = match state.in_flight.admit(caller.as_ref()) {
        Ok(permit) => permit,
        Err(error) => return refusal(request.uri().path(), error),
    };
    next.run(request)
        .await
        .map(|body| Body::new(GuardedBody::new(body, permit)))
}

/// One route per wire format; everything but parsing and encoding is shared.
async fn endpoint<F: WireFormat>(
    State(state): State<Arc<AppState>>,
    caller: Option<Extension<CallerIdentity>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if matches!(&body, Err(rejection) if BodyTimeout::caused(rejection)) {
        return connection::body_timeout_response();
    }
    let drain_over = state.turns.drain_over.clone();
    let handled = tokio::select! {
        biased;
        handled = handle::<F>(&state.turns, caller.map(|Extension(c)| c), headers, body) => handled,
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
