//! `[upstreams]` in `--config gateway.toml`: several models, each served by ordered fallback targets (OpenAI-
//! compatible and Anthropic mixed), a target optionally balanced over several deployments or keys, with a retry
//! policy, circuit breakers and timeouts. Without the table the gateway keeps its single `--upstream`.
//!
//! ```toml
//! [upstreams.retry]
//! max_attempts = 3            # calls per model call, the first included
//! base_backoff_ms = 500       # full-jitter exponential backoff
//! max_backoff_ms = 30000
//! retry_after_cap_secs = 60   # a longer Retry-After fails at once (and falls back)
//! deadline_secs = 120         # whole call, until its first content event
//! budget_percent = 20         # retries allowed, as a share of calls (tower's TpsBudget)
//! budget_min_per_sec = 10
//!
//! [upstreams.breaker]
//! consecutive_failures = 5
//! open_for_secs = 30
//! failure_ratio = 0.5         # optional: also open at this failure share ...
//! min_calls = 20              # ... once the window holds this many calls
//! window_secs = 60
//!
//! [upstreams.timeouts]
//! connect_secs = 10
//! first_byte_secs = 120       # default: --upstream-timeout
//! idle_secs = 120
//!
//! [[upstreams.models]]
//! name = "smart"              # what clients send as `model`
//!
//! [[upstreams.models.targets]]   # tried first
//! provider = "openai"
//! model = "gpt-4o"
//! base_url = "https://api.openai.com/v1"
//! key_env = "OPENAI_API_KEY"
//!
//! [[upstreams.models.targets]]   # then this one
//! name = "claude"
//! provider = "anthropic"
//! model = "claude-sonnet-4-5"
//! key_env = "ANTHROPIC_API_KEY"
//!
//! [[upstreams.models]]
//! name = "fast"
//! sticky = true               # a conversation stays on one deployment
//!
//! [[upstreams.models.targets]]
//! provider = "openai"
//! model = "gpt-4o-mini"
//! deployments = [
//!   { base_url = "https://eu.example.com/v1", key_env = "EU_KEY", weight = 2 },
//!   { base_url = "https://us.example.com/v1", key_env = "US_KEY" },
//! ]
//!
//! [[upstreams.models]]
//! name = "local"
//!
//! [[upstreams.models.targets]]
//! provider = "openai"
//! model = "llama3"
//! base_url = "http://127.0.0.1:11434/v1"
//! no_key = true               # Ollama takes no key: said explicitly
//! ```
//!
//! A model's `name` may be a pattern (`claude-*`) and `aliases` adds names and patterns; a client's name reaches
//! the model it names exactly, else the longest matching pattern (`routes.rs`); a target's `model = "*"` passes
//! the client's name on.
//!
//! Targets of seven kinds mix in one model's fallback order: `openai`, `openai-responses`, `anthropic`, `azure`,
//! `gemini`, `vertex` and `bedrock`, each with its own fields and credentials ([`Provider`] lists them).
//!
//! Every target (every deployment of a balanced one) names the variable holding its key (`key_env`) or says it
//! takes none (`no_key = true`), or another credential its kind takes (`key_file`, `token_env`,
//! `credentials_file`, `credentials_env`, `aws_env`, `aws_profile`); one without any is refused where the file is read. A named variable that is
//! unset, empty, not a valid name, or holds a key a header cannot carry refuses the start (or the reload), naming
//! the target and the variable ([`crate::stack::upstream_key`]).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tower::retry::budget::TpsBudget;
use tower::Layer;
use tower_chat::transport::{StaleConnections, Timeouts};
use tower_chat::{
    BoxChatService, ChatError, ChatRequest, ChatStream, ErrorKind, ModelInfo, ModelMetadata,
};
use tower_chat_resilience::{
    Backoff, Balance, BreakerHandle, CircuitBreakerLayer, Deployment, Fallback, Jitter, RetryLayer,
    Target,
};

mod leaf;
pub(crate) mod routes;

use crate::config::upstreams::{positive_seconds, Checked};
pub use crate::config::upstreams::{
    BreakerSection, DeploymentSection, Endpoint, ModelSection, ProviderTarget, RetrySection,
    TargetSection, TimeoutsSection, UpstreamsSection,
};
use crate::config::Provider;
use crate::stack::Upstream;

use crate::config::Config;
use crate::telemetry::metrics::PrometheusMetrics;

/// `[upstreams.{table}] {key}` as a positive duration (checked where the file was read; a section built in code
/// is checked here).
fn seconds(value: f64, table: &str, key: &str) -> Result<Duration, ChatError> {
    positive_seconds(value, table, key).map_err(|e| ChatError::new(ErrorKind::InvalidRequest, e))
}

/// A model's name and the targets behind it, for `GET /v1/models`.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogEntry {
    /// The name clients send.
    pub name: String,
    /// Target names, in fallback order.
    pub targets: Vec<String>,
    /// The first target's provider, as its leaf names it (`openai`, `azure`, `vertex_ai`, …).
    pub owned_by: String,
    /// Each target's kind, in fallback order.
    pub providers: Vec<Provider>,
}

/// The gateway's leaf when `[upstreams]` names models: the client's `model` picks a stack of retry, fallback
/// and breakers; an unknown name is refused.
///
/// The routing table can be replaced while the gateway runs ([`ModelRouter::reload`], on SIGHUP): every clone
/// shares it, a call takes the model's service out of the table it sees when it starts, so requests already in
/// flight finish on the configuration they started with.
#[derive(Clone)]
pub struct ModelRouter {
    table: Arc<RwLock<Arc<RouterTable>>>,
    /// What the stack reports as its model: the first model's first target when the gateway started.
    metadata: ModelMetadata,
}

/// One configuration's models.
struct RouterTable {
    models: BTreeMap<String, BoxChatService>,
    /// What each client name reaches: names, aliases, patterns.
    routes: routes::Routes,
    /// The models whose first target is Anthropic's API: its leaf, and the model it is called with (`None`:
    /// the client's), for `POST /v1/messages/count_tokens`.
    counters: BTreeMap<String, (tower_chat::anthropic::AnthropicChat, Option<String>)>,
    catalog: Arc<Vec<CatalogEntry>>,
    /// The breakers of every target, for `/metrics`.
    breakers: Vec<(String, BreakerHandle)>,
    /// Each leaf's count of stale pooled connections, by target (or deployment) name, for `/metrics`.
    stale: Vec<(String, StaleConnections)>,
    metadata: ModelMetadata,
}

impl fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRouter")
            .field("models", &self.catalog())
            .finish_non_exhaustive()
    }
}

impl ModelRouter {
    fn current(&self) -> Arc<RouterTable> {
        // The lock is held for a pointer copy; a panic under it cannot leave a half-written table.
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The Anthropic leaf that first answers the client's model `requested`, and the model id to ask it for
    /// (`None`: `requested` itself), when the model's first target is Anthropic's API.
    pub(crate) fn anthropic_counter(
        &self,
        requested: &str,
    ) -> Option<(tower_chat::anthropic::AnthropicChat, Option<String>)> {
        let table = self.current();
        let model = table.routes.resolve(requested)?;
        table.counters.get(model).cloned()
    }

    /// The configured models, in file order.
    pub fn catalog(&self) -> Arc<Vec<CatalogEntry>> {
        self.current().catalog.clone()
    }

    /// Replace the models with those `config`'s `[upstreams]` describes. The new table is built completely
    /// first: an invalid section (or one without models) is refused and the running table stays. Requests in
    /// flight keep the services they took; `metrics` reports the new breakers instead of the old ones, and labels
    /// calls with the new model names.
    pub fn reload(&self, config: &Config, metrics: &PrometheusMetrics) -> Result<(), ChatError> {
        let table = build_table(config, metrics)?
            .ok_or_else(|| invalid("names no model: the running models are kept".into()))?;
        metrics.replace_breakers(table.breakers.clone());
        metrics.replace_upstream_connections(table.stale.clone());
        metrics.label_models(config.file.upstreams.models.iter().map(|m| &m.name));
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
        Ok(())
    }
}

/// Reads `--config` again and replaces the running `[upstreams]` (see [`ModelRouter::reload`]); the gateway runs
/// it on SIGHUP ([`crate::reload_on_sighup`]). Only `[upstreams]` is replaced: other tables changed in the file
/// need a restart (a warning says so).
#[derive(Clone)]
pub struct Reloader {
    router: ModelRouter,
    config: Config,
    metrics: PrometheusMetrics,
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("config_path", &self.config.config_path)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    pub(crate) fn new(router: ModelRouter, config: &Config, metrics: PrometheusMetrics) -> Self {
        Reloader {
            router,
            config: config.clone(),
            metrics,
        }
    }

    /// Read the file again and swap in its `[upstreams]`. On any error (unreadable, invalid TOML with its line,
    /// an `[upstreams]` that does not build) the running configuration stays and the error says why.
    pub fn reload(&self) -> Result<(), crate::GatewayError> {
        let path =
            self.config.config_path.as_deref().ok_or_else(|| {
                crate::GatewayError::Config("no --config file to read again".into())
            })?;
        let file = crate::config::file::ConfigFile::load(path)
            .map_err(|e| crate::GatewayError::Config(e.to_string()))?;
        if file.limits != self.config.file.limits || file.mcp != self.config.file.mcp {
            tracing::warn!(
                path = %path.display(),
                "only [upstreams] is reloaded: the changes to [limits] or [[mcp]] take effect at the next start"
            );
        }
        let mut config = self.config.clone();
        config.file = file;
        self.router
            .reload(&config, &self.metrics)
            .map_err(crate::GatewayError::Chat)
    }
}

impl ModelInfo for ModelRouter {
    /// The first model's first target.
    fn model_metadata(&self) -> ModelMetadata {
        self.metadata.clone()
    }
}

impl tower::Service<ChatRequest> for ModelRouter {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

    /// Always ready: the model's stack is polled ready in the call.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let table = self.current();
        let name = request.options.model.as_deref().unwrap_or_default();
        match table
            .routes
            .resolve(name)
            .and_then(|model| table.models.get(model))
        {
            Some(service) => {
                let service = service.clone();
                Box::pin(tower::ServiceExt::oneshot(service, request))
            }
            None => {
                let known: Vec<&str> = table
                    .catalog
                    .iter()
                    .map(|m| m.name.as_str())
                    .filter(|name| !name.contains('*'))
                    .chain(table.routes.aliases())
                    .collect();
                let patterns: Vec<&str> = table.routes.patterns().collect();
                let patterns = if patterns.is_empty() {
                    String::new()
                } else {
                    format!("; patterns: {}", patterns.join(", "))
                };
                let error = ChatError::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "the model `{name}` is not configured here; configured models: {}{patterns}",
                        known.join(", ")
                    ),
                )
                .with_status(http::StatusCode::NOT_FOUND)
                // Nothing was sent: the call's record keeps the model and the request's size, not the request.
                .refused_before_sending();
                Box::pin(std::future::ready(Err(error)))
            }
        }
    }
}

/// What the gateway serves, for its start-up line: each `[upstreams]` model with its targets in fallback order
/// (name, URL, where the key comes from), or the single `--upstream` when the table names no model. Never a key.
pub fn describe(config: &Config) -> String {
    let models = &config.file.upstreams.models;
    if models.is_empty() {
        return match config.upstream_target() {
            Ok(target) => match target.provider.endpoint() {
                Endpoint::Single {
                    base_url,
                    credential,
                } => format!(
                    "{} {} ({})",
                    target.kind(),
                    target.url(base_url.as_deref()),
                    credential.describe()
                ),
                Endpoint::Balanced(_) => unreachable!("the command line names one endpoint"),
            },
            Err(error) => error,
        };
    }
    let model = |model: &ModelSection| {
        let targets: Vec<String> = model
            .targets
            .iter()
            .map(|target| {
                let name = target.display_name();
                match target.provider.endpoint() {
                    Endpoint::Single {
                        base_url,
                        credential,
                    } => format!(
                        "{name} {} ({})",
                        target.url(base_url.as_deref()),
                        credential.describe()
                    ),
                    Endpoint::Balanced(deployments) => {
                        let deployments: Vec<String> = deployments
                            .iter()
                            .map(|d| format!("{} ({})", d.base_url, d.credential().describe()))
                            .collect();
                        format!("{name} [{}]", deployments.join(", "))
                    }
                }
            })
            .collect();
        format!("{}: {}", model.name, targets.join(" then "))
    };
    models.iter().map(model).collect::<Vec<_>>().join("; ")
}

impl Upstream {
    /// The leaf of the single `--upstream`: the target the command line describes (`--provider`, `--upstream`,
    /// the key options: [`Config::upstream_target`]), built by the same code as an `[upstreams]` target's, with
    /// `--upstream-timeout` as its first-byte and idle deadlines. The key comes from the configured environment
    /// variable, which must hold a usable key unless `--no-upstream-key` says the upstream takes none
    /// ([`crate::stack::upstream_key`]).
    pub fn from_config(config: &Config) -> Result<Self, ChatError> {
        let target = config.upstream_target().map_err(invalid_upstream)?;
        let timeouts = timeouts(config)?;
        match target.provider.endpoint() {
            Endpoint::Single {
                base_url,
                credential,
            } => leaf::leaf(
                &target,
                crate::config::SINGLE_UPSTREAM,
                base_url.as_deref(),
                credential,
                timeouts,
            ),
            Endpoint::Balanced(_) => Err(invalid_upstream(
                "the command line names one endpoint".into(),
            )),
        }
    }
}

fn invalid_upstream(message: String) -> ChatError {
    ChatError::new(ErrorKind::InvalidRequest, message)
}

/// Every leaf's deadlines: `[upstreams.timeouts]`, `--upstream-timeout` where it says nothing.
fn timeouts(config: &Config) -> Result<Timeouts, ChatError> {
    let section = &config.file.upstreams.timeouts;
    Ok(Timeouts {
        connect: match section.connect_secs {
            Some(s) => Some(seconds(s, "timeouts", "connect_secs")?),
            None => Timeouts::default().connect,
        },
        first_byte: Some(match section.first_byte_secs {
            Some(s) => seconds(s, "timeouts", "first_byte_secs")?,
            None => config.upstream_timeout,
        }),
        idle: Some(match section.idle_secs {
            Some(s) => seconds(s, "timeouts", "idle_secs")?,
            None => config.upstream_timeout,
        }),
    })
}

/// Build the leaf `[upstreams]` describes (`None` when it names no model: the single `--upstream` applies).
/// Retries, fallbacks and breaker states are reported to `metrics`.
pub fn build(
    config: &Config,
    metrics: &PrometheusMetrics,
) -> Result<Option<ModelRouter>, ChatError> {
    let Some(table) = build_table(config, metrics)? else {
        return Ok(None);
    };
    metrics.replace_breakers(table.breakers.clone());
    metrics.replace_upstream_connections(table.stale.clone());
    metrics.label_models(config.file.upstreams.models.iter().map(|m| &m.name));
    Ok(Some(ModelRouter {
        metadata: table.metadata.clone(),
        table: Arc::new(RwLock::new(Arc::new(table))),
    }))
}

/// The models `[upstreams]` describes, their breakers not yet registered with `metrics`.
fn build_table(
    config: &Config,
    metrics: &PrometheusMetrics,
) -> Result<Option<RouterTable>, ChatError> {
    let section = &config.file.upstreams;
    if section.models.is_empty() {
        return Ok(None);
    }
    let timeouts = timeouts(config)?;
    let retry = retry_layer(&section.retry)?;
    let breaker = breaker_layer(&section.breaker)?;
    let mut models = BTreeMap::new();
    let mut catalog = Vec::new();
    let mut metadata = None;
    let mut breakers = Vec::new();
    let mut stale = Vec::new();
    let mut counters = BTreeMap::new();
    for model in &section.models {
        let mut targets = Vec::new();
        for target in &model.targets {
            let name = target.display_name();
            let breaker = breaker
                .clone()
                .observer(metrics.observer(&model.name))
                .name(name.clone());
            let built = match target.provider.endpoint() {
                Endpoint::Single {
                    base_url,
                    credential,
                } => {
                    let leaf =
                        leaf::leaf(target, &name, base_url.as_deref(), credential, timeouts)?;
                    stale.push((name.clone(), leaf.stale_connections()));
                    if let (true, Upstream::Anthropic(anthropic)) = (targets.is_empty(), &leaf) {
                        let fixed = (target.model != "*").then(|| target.model.clone());
                        counters.insert(model.name.clone(), (anthropic.clone(), fixed));
                    }
                    // The fallback drives the target's breaker itself (no stream wrapper per call).
                    let target = Target::new(name, leaf).breaker(&breaker);
                    breakers.extend(target.breaker_handle().map(|h| (model.name.clone(), h)));
                    target
                }
                Endpoint::Balanced(deployments) => {
                    let mut balance = Balance::builder().breaker(breaker).sticky(model.sticky);
                    for (i, deployment) in deployments.iter().enumerate() {
                        let name = deployment
                            .name
                            .clone()
                            .unwrap_or_else(|| format!("{name}#{}", i + 1));
                        let leaf = leaf::leaf(
                            target,
                            &name,
                            Some(&deployment.base_url),
                            &deployment.credential(),
                            timeouts,
                        )?;
                        stale.push((name.clone(), leaf.stale_connections()));
                        balance =
                            balance.deployment(Deployment::new(name, deployment.weight, leaf));
                    }
                    let balance = balance.build()?;
                    for handle in balance.breakers() {
                        breakers.push((model.name.clone(), handle));
                    }
                    Target::new(name, balance)
                }
            };
            targets.push(built);
        }
        metadata.get_or_insert_with(|| targets[0].metadata().clone());
        catalog.push(CatalogEntry {
            name: model.name.clone(),
            targets: targets.iter().map(|t| t.name().to_owned()).collect(),
            owned_by: targets[0].metadata().provider.to_string(),
            providers: model.targets.iter().map(|t| t.kind()).collect(),
        });
        let fallback = Fallback::new(targets).observer(metrics.observer(&model.name));
        let stack = retry
            .clone()
            .observer(metrics.observer(&model.name))
            .layer(fallback);
        models.insert(model.name.clone(), BoxChatService::new(stack));
    }
    Ok(Some(RouterTable {
        models,
        counters,
        routes: routes::Routes::new(
            section
                .models
                .iter()
                .map(|m| (m.name.as_str(), m.aliases.as_slice())),
        ),
        catalog: Arc::new(catalog),
        breakers,
        stale,
        metadata: metadata.expect("at least one model"),
    }))
}

fn invalid(message: String) -> ChatError {
    ChatError::new(ErrorKind::InvalidRequest, format!("[upstreams] {message}"))
}

fn checked(section: &impl Checked) -> Result<(), ChatError> {
    section
        .check()
        .map_err(|e| ChatError::new(ErrorKind::InvalidRequest, e))
}

fn retry_layer(retry: &RetrySection) -> Result<RetryLayer, ChatError> {
    checked(retry)?;
    let mut layer = RetryLayer::new()
        .max_attempts(retry.max_attempts)
        .backoff(Backoff {
            base: Duration::from_millis(retry.base_backoff_ms),
            max: Duration::from_millis(retry.max_backoff_ms.max(retry.base_backoff_ms)),
            jitter: Jitter::Full,
        })
        .retry_after_cap(Duration::from_secs_f64(retry.retry_after_cap_secs))
        .budget(TpsBudget::new(
            Duration::from_secs(10),
            retry.budget_min_per_sec,
            retry.budget_percent / 100.0,
        ));
    if let Some(deadline) = retry.deadline_secs {
        layer = layer.deadline(seconds(deadline, "retry", "deadline_secs")?);
    }
    Ok(layer)
}

fn breaker_layer(breaker: &BreakerSection) -> Result<CircuitBreakerLayer, ChatError> {
    checked(breaker)?;
    let mut layer = CircuitBreakerLayer::new()
        .consecutive_failures(breaker.consecutive_failures)
        .open_for(seconds(breaker.open_for_secs, "breaker", "open_for_secs")?);
    if let Some(ratio) = breaker.failure_ratio {
        layer = layer.failure_ratio(
            ratio,
            breaker.min_calls,
            seconds(breaker.window_secs, "breaker", "window_secs")?,
        );
    }
    Ok(layer)
}

#[cfg(test)]
mod tests;
