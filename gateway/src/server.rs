//! The axum application: routes, the chat stack, serving with graceful shutdown.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use futures_util::StreamExt;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use tokio::net::TcpListener;
use tower::util::{BoxCloneSyncService, Either};
use tower::{Layer, ServiceExt};
use tower_chat::anthropic::AnthropicChat;
use tower_chat::azure::AzureOpenAiChat;
use tower_chat::bedrock::BedrockChat;
use tower_chat::gemini::GeminiChat;
use tower_chat::openai::OpenAiChat;
use tower_chat::responses::ResponsesChat;
use tower_chat::transport::Timeouts;
use tower_chat::{
    CallerIdentity, ChatError, ChatRequest, ChatStream, ConversationId, Message, ModelInfo,
    ModelMetadata,
};
use tower_chat_approval::{
    ApprovalLayer, ApprovalStore, PostgresApprovalStore, SqliteApprovalStore,
};
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_limits::LimitsLayer;
use tower_chat_persistence::{PersistenceLayer, PostgresStore, SqliteStore, Store, StoreError};
use tower_chat_tracing::TracingLayer;

use crate::api_guard::{AllowedHosts, ApiGuard};
use crate::auth::ApiKeys;
use crate::config::{Config, Provider};
use crate::connection::{self, BodyTimeout, ConnectionLimits, GuardedBody, InFlight};
use crate::error::{json_bytes_response, json_response, ApiError};
use crate::mcp::GatewayMcp;
use crate::metrics::PrometheusMetrics;
use crate::operator::{Decisions, OperatorState};
use crate::pending::{PendingStore, Resumption};
use crate::request_limits::RequestLimits;
use crate::respond::{self, Turn};
use crate::tools::{server_tools, SERVER_TOOLS};
use crate::warn_limit::WarnLimit;
use crate::wire::{
    self, anthropic_messages::AnthropicMessages, chat_completions::ChatCompletions,
    responses::Responses, ParseContext, WireFormat,
};
use crate::GatewayError;

/// How long the requests still in flight when the drain time is over get to write their `shutting_down` error
/// (their connections close after it); a client that does not read it loses it.
const FINAL_WORDS: Duration = Duration::from_secs(1);

/// The chat stack behind the endpoint, type-erased.
pub type ChatStack = BoxCloneSyncService<ChatRequest, ChatStream, ChatError>;

/// The upstream leaf: OpenAI-compatible or Anthropic, chosen by `--provider`, or any kind an `[upstreams]`
/// target names ([`crate::upstreams::ProviderName`]).
#[derive(Clone, Debug)]
pub enum Upstream {
    /// `--provider openai`.
    OpenAi(OpenAiChat),
    /// An `[upstreams]` target with `provider = "openai-responses"`.
    Responses(ResponsesChat),
    /// `--provider anthropic`.
    Anthropic(AnthropicChat),
    /// An `[upstreams]` target with `provider = "azure"`.
    Azure(AzureOpenAiChat),
    /// An `[upstreams]` target with `provider = "gemini"` or `"vertex"` (one wire format).
    Gemini(GeminiChat),
    /// An `[upstreams]` target with `provider = "bedrock"`.
    Bedrock(BedrockChat),
}

/// `$body` with `$leaf` bound to whichever leaf `$upstream` holds: one line per kind of leaf, here only.
macro_rules! each_leaf {
    ($upstream:expr, $leaf:ident => $body:expr) => {
        match $upstream {
            Upstream::OpenAi($leaf) => $body,
            Upstream::Responses($leaf) => $body,
            Upstream::Anthropic($leaf) => $body,
            Upstream::Azure($leaf) => $body,
            Upstream::Gemini($leaf) => $body,
            Upstream::Bedrock($leaf) => $body,
        }
    };
}

impl Upstream {
    /// Build the leaf `config` names; the key comes from the configured environment variable, which must hold
    /// a usable key unless `--no-upstream-key` says the upstream takes none ([`crate::upstream_key`]).
    pub fn from_config(config: &Config) -> Result<Self, ChatError> {
        if config.no_upstream_key && config.upstream_key_env.is_some() {
            return Err(ChatError::new(
                tower_chat::ErrorKind::InvalidRequest,
                format!(
                    "upstream {}: --no-upstream-key and --upstream-key-env exclude each other",
                    config.upstream
                ),
            ));
        }
        let key = config.key_source().read(&config.upstream)?;
        let timeouts = Timeouts {
            first_byte: Some(config.upstream_timeout),
            idle: Some(config.upstream_timeout),
            ..Timeouts::default()
        };
        Ok(match config.provider {
            Provider::OpenAi => {
                let mut builder = OpenAiChat::builder()
                    .base_url(&config.upstream)
                    .timeouts(timeouts);
                if let Some(key) = key {
                    builder = builder.api_key(key);
                }
                Upstream::OpenAi(builder.build()?)
            }
            Provider::Anthropic => {
                let mut builder = AnthropicChat::builder()
                    .base_url(&config.upstream)
                    .timeouts(timeouts);
                if let Some(key) = key {
                    builder = builder.api_key(key);
                }
                Upstream::Anthropic(builder.build()?)
            }
        })
    }
}

impl Upstream {
    /// The leaf's count of pooled connections found closed before a request was written to them.
    pub fn stale_connections(&self) -> tower_chat::transport::StaleConnections {
        each_leaf!(self, leaf => leaf.transport().stale_connections().clone())
    }
}

impl tower::Service<ChatRequest> for Upstream {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        each_leaf!(self, leaf => leaf.poll_ready(cx))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        each_leaf!(self, leaf => leaf.call(request))
    }
}

impl ModelInfo for Upstream {
    fn model_metadata(&self) -> ModelMetadata {
        each_leaf!(self, leaf => leaf.model_metadata())
    }
}

/// The stack the gateway runs, outermost first: tracing (one span per client request, tool spans inside),
/// approvals (verified, single-use ids for `write_file`), the tool loop with the server-side tools, persistence
/// (one record per model round trip: the loop's every call to `upstream` is recorded with its own usage,
/// timestamps, model and outcome), `upstream`. Layers given as `None` are left out; without an approval layer
/// the loop's own approval protocol still gates `write_file`.
pub fn stack<S>(
    config: &Config,
    upstream: S,
    persistence: Option<&PersistenceLayer>,
    approvals: Option<&ApprovalLayer>,
) -> Result<ChatStack, ChatError>
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + ModelInfo
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    stack_with(
        config,
        upstream,
        persistence,
        approvals,
        PrometheusMetrics::new(),
        None,
        None,
    )
}

/// [`stack`], its tracing layer recording every call into `metrics` (what `GET /metrics` shows), and, when
/// given, a limits layer (`[limits]` of the configuration file) right around `upstream`, inside the tool loop,
/// so that every model round is checked before it is sent and settled with its own usage, and the tools of
/// started MCP servers offered to the tool loop (per caller, see [`crate::mcp`]).
pub fn stack_with<S>(
    config: &Config,
    upstream: S,
    persistence: Option<&PersistenceLayer>,
    approvals: Option<&ApprovalLayer>,
    metrics: PrometheusMetrics,
    limits: Option<&LimitsLayer>,
    mcp: Option<&GatewayMcp>,
) -> Result<ChatStack, ChatError>
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + ModelInfo
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let metadata = upstream.model_metadata();
    let cache = config
        .file
        .cache
        .as_ref()
        .map(crate::cache::CacheSection::layer)
        .transpose()
        .map_err(|e| ChatError::new(tower_chat::ErrorKind::InvalidRequest, e.to_string()))?;
    // Around each model call: inside the limits (a hit is charged nothing) and persistence (a hit is recorded).
    let upstream = tower::ServiceBuilder::new()
        .option_layer(cache)
        .service(upstream);
    // Optional layers are `Either`s, not a box each: one box for the whole stack, so a request clones (and the
    // tool loop re-calls) plain structs instead of allocating a box per layer and a boxed future per call.
    let upstream = match limits {
        Some(limits) => Either::Left(limits.layer(upstream)),
        None => Either::Right(upstream),
    };
    let rounds = match persistence {
        // Inside the loop: one record per model round trip. Outside the limits layer, so a round the limits
        // refuse is recorded as failed.
        Some(persistence) => Either::Left(
            tower::ServiceBuilder::new()
                .map_request(crate::rounds::name_round)
                .service(persistence.layer(upstream)),
        ),
        None => Either::Right(upstream),
    };
    // Outside persistence and limits: a repair is a model call recorded and charged like any other.
    let structured = config.file.structured.as_ref().map(|s| s.layer());
    let rounds = tower::ServiceBuilder::new()
        .option_layer(structured)
        .service(rounds);
    let service = FunctionInvocationLayer::new()
        .tools(server_tools(config.files.as_deref())?)?
        .max_rounds(config.max_rounds)
        .layer(rounds);
    let service = match mcp {
        Some(mcp) => Either::Left(mcp.wrap(BoxCloneSyncService::new(service))),
        None => Either::Right(service),
    };
    let service = match approvals {
        Some(approvals) => Either::Left(approvals.layer(service)),
        None => Either::Right(service),
    };
    Ok(BoxCloneSyncService::new(
        TracingLayer::new()
            .metadata(metadata)
            .record_content(config.record_content)
            // `None` (no OTLP export) costs nothing per call.
            .metrics((metrics, config.otel_metrics.clone()))
            .layer(service),
    ))
}

/// The layers backed by the database: persistence, and approvals whose pending ids and audit log live in the
/// same database (so a paused turn survives a restart and resumes in any replica sharing it).
#[derive(Clone)]
pub struct Stores {
    /// Records every call.
    pub persistence: PersistenceLayer,
    /// Issues and verifies approval ids.
    pub approvals: ApprovalLayer,
    /// The approval store, for looking up a pending approval's conversation.
    pub approval_store: Arc<dyn ApprovalStore>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("persistence", &self.persistence)
            .field("approvals", &self.approvals)
            .finish_non_exhaustive()
    }
}

/// Open the store `--database-url` (PostgreSQL) or `--db` (SQLite) names (migrations are applied on open) and
/// build the layers that use it.
pub async fn stores(config: &Config) -> Result<Stores, GatewayError> {
    let store_error =
        |what: String| move |e: StoreError| GatewayError::Config(format!("{what}: {e}"));
    let approval_error =
        |what: String| move |e: ChatError| GatewayError::Config(format!("{what}: {e}"));
    // One database for both: the call records and the approval crate's tables.
    let (store, approval_store): (Arc<dyn Store>, Arc<dyn ApprovalStore>) =
        match &config.database_url {
            Some(url) => {
                let store = PostgresStore::connect(url.clone())
                    .await
                    .map_err(store_error("--database-url".into()))?;
                let approvals = PostgresApprovalStore::new(store.clone())
                    .await
                    .map_err(approval_error("--database-url".into()))?;
                (Arc::new(store), Arc::new(approvals))
            }
            None => {
                let store = SqliteStore::open(&config.db)
                    .await
                    .map_err(store_error(format!("--db {}", config.db.display())))?;
                let approvals = SqliteApprovalStore::new(store.clone())
                    .await
                    .map_err(approval_error(format!("--db {}", config.db.display())))?;
                (Arc::new(store), Arc::new(approvals))
            }
        };
    Ok(Stores {
        persistence: PersistenceLayer::shared(store).prices(config.file.limits.price_table()),
        approvals: {
            let layer = ApprovalLayer::new()
                .store(approval_store.clone())
                .ttl(config.approval_ttl);
            if config.operator_keys_file.is_some() {
                layer.approver_rule(crate::operator::only_operators_approve)
            } else {
                layer
            }
        },
        approval_store,
    })
}

#[derive(Clone)]
struct AppState {
    stack: ChatStack,
    keys: Option<Arc<ApiKeys>>,
    pending: Arc<PendingStore>,
    /// Where an approval layer keeps pending approvals, and the call records: together they let a resume find
    /// its conversation after a restart, or in another replica.
    approval_store: Option<Arc<dyn ApprovalStore>>,
    records: Option<Arc<dyn Store>>,
    body_limit: usize,
    /// What the wire formats' parsers need to know about the gateway.
    parse: ParseContext,
    limits: Arc<RequestLimits>,
    in_flight: Arc<InFlight>,
    /// `--operator-keys-file`: operator decisions on pending approvals ([`crate::operator`]).
    operators: Option<OperatorState>,
    /// Serve the operator console ([`crate::console`]) when operators are configured.
    console: bool,
    /// `[[mcp]]`: the MCP tools the loop offers, whose names client tools must not take.
    mcp: Option<GatewayMcp>,
    /// `[cache]` is on: requests carry their `Cache-Control` and answers their `x-cache`.
    caching: bool,
    /// `--allowed-hosts`, when given (else the default of [`AllowedHosts::default_for`]).
    allowed_hosts: Option<AllowedHosts>,
    /// The address the gateway listens on: `--listen`, then the listener's own once [`Gateway::serve`] has it.
    listen: std::net::SocketAddr,
    /// Cancelled when the drain time after a shutdown signal is over: requests still in flight end with a
    /// `shutting_down` error (a stream with its format's error event) before their connections close.
    drain_over: tower_chat::CancellationToken,
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
            .field("body_limit", &self.state.body_limit)
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
        let (persistence, approvals) = (Some(&stores.persistence), Some(&stores.approvals));
        let models = router.clone();
        let stack = match (router, upstream) {
            (Some(router), _) => stack_with(
                config,
                router,
                persistence,
                approvals,
                metrics.clone(),
                limits.as_ref(),
                mcp.as_ref(),
            ),
            (None, Some(upstream)) => stack_with(
                config,
                upstream,
                persistence,
                approvals,
                metrics.clone(),
                limits.as_ref(),
                mcp.as_ref(),
            ),
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
        gateway.state.mcp = mcp;
        gateway.state.approval_store = Some(stores.approval_store.clone());
        if let Some(operators) = &mut gateway.state.operators {
            operators.approval_store = Some(stores.approval_store.clone());
        }
        gateway.state.records = Some(stores.persistence.store().clone());
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
        });
        Gateway {
            state: AppState {
                stack,
                keys,
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
                in_flight: Arc::new(InFlight::new(&config.connections)),
                console: config.console,
                mcp: None,
                caching: config.file.cache.is_some(),
                allowed_hosts: config.allowed_hosts.clone(),
                listen: config.listen,
                drain_over: tower_chat::CancellationToken::new(),
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
        let (limits, records) = (self.limits.clone(), self.state.records.clone());
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
        if let Some(operators) = &self.state.operators {
            if self.state.console {
                console = crate::console::router(operators.clone(), self.state.records.clone());
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
                self.state.limits.body_allowance(self.state.body_limit),
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
                self.state.drain_over.cancel();
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

/// A paused turn this process does not hold (it paused before a restart, or in another replica): the approval
/// layer's pending record names the conversation, and the call records hold the paused turn's whole history.
/// The approval layer then verifies the decisions as always (caller, conversation, single use, arguments).
///
/// `Ok(None)` when nothing is pending for `caller` under the first id (the caller gets the same error as for an
/// unknown id, so ids cannot be probed); `approval_turn_unavailable` when the approval is pending for this caller
/// but the paused turn cannot be rebuilt here (no call records of it): the approval stays pending, undecided.
async fn recorded_resumption(
    state: &AppState,
    caller: Option<&CallerIdentity>,
    answers: &[wire::ApprovalAnswer],
) -> Result<Option<Resumption>, ApiError> {
    let (Some(approvals), Some(first)) = (state.approval_store.as_ref(), answers.first()) else {
        return Ok(None);
    };
    let pending = match approvals.get_pending(&first.id).await {
        Ok(Some(pending)) if pending.caller.as_ref() == caller => pending,
        _ => return Ok(None),
    };
    let unavailable = |why: &str| {
        ApiError {
            status: StatusCode::CONFLICT,
            ..ApiError::invalid_request(
                "approval_turn_unavailable",
                format!(
                    "approval `{}` is pending, but its paused turn was held by another gateway process and {why}; \
                     the approval stays pending: resend to the process that paused it, or deny it",
                    first.id
                ),
            )
        }
    };
    let Some(records) = state.records.as_ref() else {
        return Err(unavailable("this gateway keeps no call records"));
    };
    let history = match records.load_conversation(&pending.conversation_id).await {
        Ok(history) if !history.is_empty() => history,
        Ok(_) => {
            return Err(unavailable(
                "the call records hold none of its conversation",
            ))
        }
        Err(_) => return Err(unavailable("reading the call records failed")),
    };
    let decisions = answers
        .iter()
        .map(|a| tower_chat::ApprovalDecision {
            approval_id: a.id.clone(),
            approved: a.approved,
            reason: a.reason.clone(),
        })
        .collect();
    Ok(Some(Resumption {
        hidden: history,
        whole_history: true,
        conversation: pending.conversation_id,
        decisions: tower_chat::ApprovalDecisions(decisions),
    }))
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
    let drain_over = state.drain_over.clone();
    let handled = tokio::select! {
        biased;
        handled = handle::<F>(state, caller.map(|Extension(c)| c), headers, body) => handled,
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

/// The stored conversation a `previous_response_id` names, without its system messages (a request's own
/// instructions replace them), and the conversation it belongs to. Unknown ids, another caller's, responses
/// stored with `store: false` and failed turns are one error, so ids cannot be probed.
async fn previous_response(
    state: &AppState,
    caller: Option<&CallerIdentity>,
    id: &str,
) -> Result<(Vec<Message>, ConversationId), ApiError> {
    let not_found = || {
        ApiError::not_found_error(
            "previous_response_not_found",
            format!("previous response `{id}` not found"),
        )
    };
    let Some(records) = state.records.as_ref() else {
        return Err(ApiError::invalid_request(
            "previous_response_unavailable",
            "`previous_response_id` needs the gateway's persistence store",
        ));
    };
    // The request's last model round: the conversation as that response left it.
    let record = crate::rounds::last_round(records.as_ref(), id)
        .await
        .map_err(|e| {
            ApiError::from_chat(&ChatError::new(
                tower_chat::ErrorKind::Store,
                format!("reading the previous response failed: {e}"),
            ))
        })?
        .ok_or_else(not_found)?;
    if record.caller.as_ref() != caller
        || record.outcome != tower_chat_persistence::CallOutcome::Completed
    {
        return Err(not_found());
    }
    let history = record
        .history()
        .into_iter()
        .filter(|m| !matches!(m, Message::System { .. }))
        .collect();
    Ok((history, record.conversation_id))
}

async fn handle<F: WireFormat>(
    state: Arc<AppState>,
    caller: Option<CallerIdentity>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError {
                message: format!(
                    "the request body is larger than the gateway's limit of {} bytes of text \
                     (--body-limit) and {} bytes of media (--max-media-bytes)",
                    state.body_limit, state.limits.max_media_bytes
                ),
                ..ApiError::too_large(state.body_limit)
            }
        } else {
            ApiError::invalid_request("invalid_body", rejection.body_text())
        }
    })?;
    let (parsed, encoder) = F::parse(&body, &state.parse)?;
    // Before anything is looked up, spliced or stored: the request's size in things, not bytes.
    state.limits.check(&parsed.request)?;
    state
        .limits
        .check_text_bytes(&parsed.request, body.len(), state.body_limit)?;
    state
        .limits
        .check_approvals(parsed.approvals.iter().map(|a| a.id.as_str()))?;
    let header_conversation = state.limits.conversation(
        caller.as_ref(),
        headers.get("x-conversation-id").map(|v| v.as_bytes()),
    )?;
    let mut request = parsed.request;
    let client_tools: HashSet<String> = request
        .options
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    if let Some(clash) = client_tools
        .iter()
        .find(|name| SERVER_TOOLS.contains(&name.as_str()))
    {
        return Err(ApiError::invalid_request(
            "tool_name_reserved",
            format!("the tool name `{clash}` is reserved for the gateway's own tool"),
        ));
    }
    if let Some(mcp) = &state.mcp {
        // The loop would run the MCP tool and the client would be handed the same call.
        if let Some((clash, server)) = client_tools
            .iter()
            .find_map(|name| Some((name, mcp.offered(caller.as_ref(), name)?)))
        {
            return Err(ApiError::invalid_request(
                "tool_name_reserved",
                format!(
                    "the tool name `{clash}` is taken by the gateway's MCP tool of server `{server}`; \
                     give the client tool another name"
                ),
            ));
        }
    }
    state
        .pending
        .splice_handoffs(caller.as_ref(), &mut request.messages);
    let mut hidden = Vec::new();
    let mut conversation = None;
    let mut whole_history_given = false;
    if let Some(id) = &parsed.previous_response_id {
        let (history, stored) = previous_response(&state, caller.as_ref(), id).await?;
        // The request's own instructions first, then the stored conversation, then the new input.
        let instructions = request
            .messages
            .iter()
            .take_while(|m| matches!(m, Message::System { .. }))
            .count();
        request.messages.splice(instructions..instructions, history);
        wire::name_tool_results(&mut request.messages);
        conversation = Some(stored);
        whole_history_given = true;
    }
    let mut approvals = parsed.approvals;
    let mut approver = None;
    if let (true, Some(operators)) = (approvals.is_empty(), &state.operators) {
        // A resend of a paused turn without decisions: the operators' decisions, when all are made.
        let ids = crate::operator::notice_ids(&request.messages);
        if !ids.is_empty() {
            match crate::operator::pick_decisions(operators, caller.as_ref(), &ids).await {
                Some(picked) => {
                    approvals = picked.answers;
                    approver = Some(picked.approver);
                }
                None if crate::operator::any_pending(operators, caller.as_ref(), &ids).await => {
                    return Err(crate::operator::still_pending(&ids));
                }
                None => {}
            }
        }
    }
    if !approvals.is_empty() {
        let resumption = match state.pending.resume(caller.as_ref(), &approvals) {
            Ok(resumption) => resumption,
            Err(error) => recorded_resumption(&state, caller.as_ref(), &approvals)
                .await?
                .ok_or(error)?,
        };
        // The client's copy of the paused answer (the approval notice) is replaced by what the loop really had.
        if matches!(request.messages.last(), Some(Message::Assistant(a)) if a.tool_calls.is_empty())
        {
            request.messages.pop();
        }
        if whole_history_given {
            // A stored response's history already holds the paused turn, hidden messages included.
        } else if resumption.whole_history {
            hidden = match resumption.hidden.strip_prefix(request.messages.as_slice()) {
                Some(rest) => rest.to_vec(),
                None => Vec::new(),
            };
            request.messages = resumption.hidden.into();
        } else {
            request.messages.extend(resumption.hidden.iter().cloned());
            hidden = resumption.hidden;
        }
        conversation = Some(resumption.conversation);
        request.extensions.insert(resumption.decisions);
        if let Some(approver) = approver {
            // The approval layer checks its approver rule against, and audits, the operator.
            request
                .extensions
                .insert(tower_chat_approval::ApproverIdentity::new(approver));
        }
    }
    if let Some(caller) = &caller {
        request.extensions.insert(caller.clone());
    }
    // One id per turn even without the header, so a paused turn resumes in the conversation it paused in
    // (records and approvals are bound to it).
    let conversation = header_conversation
        .or(conversation)
        .unwrap_or_else(|| ConversationId::new(format!("conv_{}", uuid::Uuid::now_v7().simple())));
    request.extensions.insert(conversation.clone());
    if let Some(id) = &parsed.record_id {
        // The request's rounds are stored under the id the client was given (the first round) and ids derived
        // from it, so a later `previous_response_id` finds the last one.
        request
            .extensions
            .insert(crate::rounds::RoundIds::new(id.as_str()));
    }
    let cache_outcome = state
        .caching
        .then(|| crate::cache::control(&headers, &mut request));
    let turn = Turn {
        model: parsed.model,
        client_tools,
        caller,
        conversation,
        hidden,
        pending: state.pending.clone(),
        operators_decide: state.operators.is_some(),
    };
    let mut stream = state
        .stack
        .clone()
        .oneshot(request)
        .await
        .map_err(|e| ApiError::from_chat(&e))?;
    if !parsed.stream {
        let body = respond::complete(stream, turn, encoder).await?;
        let mut response = json_bytes_response(StatusCode::OK, body);
        if let Some(outcome) = &cache_outcome {
            crate::cache::outcome_header(outcome, response.headers_mut());
        }
        return Ok(response);
    }
    // Wait for the first event before committing to 200, so a failure before any output (a resumed call's
    // first model call, say) is still an HTTP error with its status.
    let first = match stream.next().await {
        Some(Ok(event)) => event,
        Some(Err(error)) => return Err(ApiError::from_chat(&error)),
        None => {
            return Err(ApiError::from_chat(&ChatError::new(
                tower_chat::ErrorKind::Protocol,
                "the response ended before any event",
            )))
        }
    };
    let body = Body::from_stream(respond::stream(
        stream,
        first,
        turn,
        encoder,
        state.drain_over.clone(),
    ));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Some(outcome) = &cache_outcome {
        crate::cache::outcome_header(outcome, headers);
    }
    Ok(response)
}
