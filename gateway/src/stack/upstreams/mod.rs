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
//! `gemini`, `vertex` and `bedrock`, each with its own fields and credentials ([`ProviderName`] lists them).
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
mod routes;

use crate::config::upstreams::kinds::{describe_credential, display_url, key_source, Credential};
pub use crate::config::upstreams::{
    BreakerSection, DeploymentSection, ModelSection, ProviderName, RetrySection, TargetSection,
    TimeoutsSection, UpstreamsSection,
};

use crate::config::Config;
use crate::telemetry::metrics::PrometheusMetrics;

fn seconds(value: f64, what: &str) -> Result<Duration, ChatError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("[upstreams] {what} must be a positive number of seconds, not {value}"),
            )
        })
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
    pub providers: Vec<ProviderName>,
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
    let key = |key_env: Option<&str>, no_key: bool| {
        describe_credential(Credential::Key(key_source(key_env, no_key)))
    };
    let models = &config.file.upstreams.models;
    if models.is_empty() {
        let provider = match config.provider {
            crate::Provider::OpenAi => "openai",
            crate::Provider::Anthropic => "anthropic",
        };
        let key = describe_credential(Credential::Key(config.key_source()));
        return format!("{provider} {} ({key})", config.upstream);
    }
    let model = |model: &ModelSection| {
        let targets: Vec<String> = model
            .targets
            .iter()
            .map(|target| {
                let name = target.display_name();
                if target.deployments.is_empty() {
                    let url = display_url(target, target.base_url.as_deref());
                    format!(
                        "{name} {url} ({})",
                        describe_credential(target.credential())
                    )
                } else {
                    let deployments: Vec<String> = target
                        .deployments
                        .iter()
                        .map(|d| {
                            format!("{} ({})", d.base_url, key(d.key_env.as_deref(), d.no_key))
                        })
                        .collect();
                    format!("{name} [{}]", deployments.join(", "))
                }
            })
            .collect();
        format!("{}: {}", model.name, targets.join(" then "))
    };
    models.iter().map(model).collect::<Vec<_>>().join("; ")
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
    let timeouts = Timeouts {
        connect: match section.timeouts.connect_secs {
            Some(s) => Some(seconds(s, "timeouts.connect_secs")?),
            None => Timeouts::default().connect,
        },
        first_byte: Some(match section.timeouts.first_byte_secs {
            Some(s) => seconds(s, "timeouts.first_byte_secs")?,
            None => config.upstream_timeout,
        }),
        idle: Some(match section.timeouts.idle_secs {
            Some(s) => seconds(s, "timeouts.idle_secs")?,
            None => config.upstream_timeout,
        }),
    };
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
            let built = if target.deployments.is_empty() {
                let leaf = leaf::leaf(
                    target,
                    &name,
                    target.base_url.as_deref(),
                    target.credential(),
                    timeouts,
                )?;
                stale.push((name.clone(), leaf.stale_connections()));
                if let (true, crate::Upstream::Anthropic(anthropic)) = (targets.is_empty(), &leaf) {
                    let fixed = (target.model != "*").then(|| target.model.clone());
                    counters.insert(model.name.clone(), (anthropic.clone(), fixed));
                }
                // The fallback drives the target's breaker itself (no stream wrapper per call).
                let target = Target::new(name, leaf).breaker(&breaker);
                breakers.extend(target.breaker_handle().map(|h| (model.name.clone(), h)));
                target
            } else {
                let mut balance = Balance::builder().breaker(breaker).sticky(model.sticky);
                for (i, deployment) in target.deployments.iter().enumerate() {
                    let name = deployment
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("{name}#{}", i + 1));
                    let leaf = leaf::leaf(
                        target,
                        &name,
                        Some(&deployment.base_url),
                        Credential::Key(key_source(
                            deployment.key_env.as_deref(),
                            deployment.no_key,
                        )),
                        timeouts,
                    )?;
                    stale.push((name.clone(), leaf.stale_connections()));
                    balance = balance.deployment(Deployment::new(name, deployment.weight, leaf));
                }
                let balance = balance.build()?;
                for handle in balance.breakers() {
                    breakers.push((model.name.clone(), handle));
                }
                Target::new(name, balance)
            };
            targets.push(built);
        }
        metadata.get_or_insert_with(|| targets[0].metadata().clone());
        catalog.push(CatalogEntry {
            name: model.name.clone(),
            targets: targets.iter().map(|t| t.name().to_owned()).collect(),
            owned_by: targets[0].metadata().provider.to_string(),
            providers: model.targets.iter().map(|t| t.provider).collect(),
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

fn retry_layer(retry: &RetrySection) -> Result<RetryLayer, ChatError> {
    if retry.max_attempts == 0 {
        return Err(invalid("retry.max_attempts must be at least 1".into()));
    }
    if !(0.0..=1000.0).contains(&retry.budget_percent) {
        return Err(invalid(format!(
            "retry.budget_percent must be between 0 and 1000, not {}",
            retry.budget_percent
        )));
    }
    if retry.budget_min_per_sec >= i32::MAX as u32 {
        return Err(invalid("retry.budget_min_per_sec is too large".into()));
    }
    let mut layer = RetryLayer::new()
        .max_attempts(retry.max_attempts)
        .backoff(Backoff {
            base: Duration::from_millis(retry.base_backoff_ms),
            max: Duration::from_millis(retry.max_backoff_ms.max(retry.base_backoff_ms)),
            jitter: Jitter::Full,
        })
        .retry_after_cap(
            Duration::try_from_secs_f64(retry.retry_after_cap_secs)
                .map_err(|_| invalid("retry.retry_after_cap_secs must be 0 or more".into()))?,
        )
        .budget(TpsBudget::new(
            Duration::from_secs(10),
            retry.budget_min_per_sec,
            retry.budget_percent / 100.0,
        ));
    if let Some(deadline) = retry.deadline_secs {
        layer = layer.deadline(seconds(deadline, "retry.deadline_secs")?);
    }
    Ok(layer)
}

fn breaker_layer(breaker: &BreakerSection) -> Result<CircuitBreakerLayer, ChatError> {
    if breaker.consecutive_failures == 0 {
        return Err(invalid(
            "breaker.consecutive_failures must be at least 1".into(),
        ));
    }
    let mut layer = CircuitBreakerLayer::new()
        .consecutive_failures(breaker.consecutive_failures)
        .open_for(seconds(breaker.open_for_secs, "breaker.open_for_secs")?);
    if let Some(ratio) = breaker.failure_ratio {
        if !(0.0..=1.0).contains(&ratio) || ratio == 0.0 {
            return Err(invalid(format!(
                "breaker.failure_ratio must be in (0, 1], not {ratio}"
            )));
        }
        layer = layer.failure_ratio(
            ratio,
            breaker.min_calls,
            seconds(breaker.window_secs, "breaker.window_secs")?,
        );
    }
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use crate::config::file::ConfigFile;

    const GOOD: &str = r#"
[upstreams.retry]
max_attempts = 2

[[upstreams.models]]
name = "smart"

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o"
base_url = "http://127.0.0.1:9/v1"
no_key = true

[[upstreams.models.targets]]
name = "claude"
provider = "anthropic"
model = "claude-sonnet-4-5"
key_env = "ANTHROPIC_API_KEY"

[[upstreams.models]]
name = "fast"
sticky = true

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o-mini"
deployments = [
  { base_url = "http://127.0.0.1:9/v1", weight = 2, no_key = true },
  { base_url = "http://127.0.0.1:10/v1", key_env = "K" },
]
"#;

    #[test]
    fn a_full_section_parses() {
        let file = ConfigFile::parse(GOOD, "g.toml").unwrap();
        let section = &file.upstreams;
        assert_eq!(section.retry.max_attempts, 2);
        assert_eq!(section.breaker.consecutive_failures, 5);
        assert_eq!(section.models.len(), 2);
        assert_eq!(section.models[0].targets[0].display_name(), "openai/gpt-4o");
        assert_eq!(section.models[0].targets[1].display_name(), "claude");
        assert_eq!(section.models[1].targets[0].deployments[0].weight, 2);
        assert_eq!(section.models[1].targets[0].deployments[1].weight, 1);
    }

    /// The examples in the README and in this module's docs parse, and build (with their keys set).
    #[test]
    fn the_documented_examples_are_valid() {
        for variable in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "EU_KEY", "US_KEY"] {
            if std::env::var_os(variable).is_none() {
                std::env::set_var(variable, "sk-documented-example");
            }
        }
        for doc in [include_str!("../../../README.md"), include_str!("mod.rs")] {
            let start = doc.find("[upstreams.retry]").unwrap();
            let end = start + doc[start..].find("```").unwrap();
            let text: String = doc[start..end]
                .lines()
                .map(|l| {
                    l.strip_prefix("//! ")
                        .or(l.strip_prefix("//!"))
                        .unwrap_or(l)
                })
                .collect::<Vec<_>>()
                .join("\n");
            let file =
                ConfigFile::parse(&text, "example.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(file.upstreams.models.len(), 3);
            let mut config = crate::Config::new("http://127.0.0.1:9/v1");
            config.file = file;
            let router = super::build(&config, &crate::PrometheusMetrics::new())
                .unwrap()
                .unwrap();
            assert_eq!(router.catalog().len(), 3);
        }
    }

    /// The READMEs' examples of the other kinds parse and build (their credentials set).
    #[test]
    fn the_documented_kinds_example_is_valid() {
        let dir = std::env::temp_dir().join(format!("tower-chat-kinds-doc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("azure-key");
        std::fs::write(&key, "azure-documented-key\n").unwrap();
        let account = dir.join("sa.json");
        std::fs::write(
            &account,
            serde_json::json!({"type": "service_account", "client_email": "doc@p.iam.gserviceaccount.com",
                "private_key": include_str!("../../../../tests/data/service_account_test_key.pem"),
                "token_uri": "https://oauth2.googleapis.com/token"})
            .to_string(),
        )
        .unwrap();
        // The Bedrock target's credentials are read at start.
        for variable in [
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "AZURE_OPENAI_API_KEY",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            if std::env::var_os(variable).is_none() {
                std::env::set_var(variable, "documented-example-key");
            }
        }
        std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &account);
        use super::ProviderName::*;
        let examples = [
            // (document, the block's first line, the kinds of its models' targets)
            (
                include_str!("../../../README.md"),
                "  [[upstreams.models]]\n  name = \"gpt-4o\"",
                vec![
                    vec![OpenAi, Azure],
                    vec![Gemini, Vertex],
                    vec![Anthropic, Bedrock],
                ],
            ),
            (
                include_str!("../../../../README.md"),
                "[[upstreams.models]]\nname = \"gpt-4o\"",
                vec![vec![OpenAi, Azure], vec![Vertex]],
            ),
        ];
        for (doc, first, expected) in examples {
            let start = doc.find(first).unwrap();
            let end = start + doc[start..].find("```").unwrap();
            let text = doc[start..end]
                .lines()
                .map(|l| l.strip_prefix("  ").unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n")
                .replace("/run/secrets/azure-openai-key", &key.display().to_string());
            let file =
                ConfigFile::parse(&text, "example.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
            let mut config = crate::Config::new("http://127.0.0.1:9/v1");
            config.file = file;
            let router = super::build(&config, &crate::PrometheusMetrics::new())
                .unwrap_or_else(|e| panic!("{e}\n{text}"))
                .unwrap();
            let kinds: Vec<Vec<super::ProviderName>> = router
                .catalog()
                .iter()
                .map(|m| m.providers.clone())
                .collect();
            assert_eq!(kinds, expected);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn refused(text: &str) -> (Option<usize>, String) {
        let err = ConfigFile::parse(text, "g.toml").unwrap_err();
        (err.line(), err.message().to_owned())
    }

    #[test]
    fn invalid_sections_are_refused_with_their_line_and_reason() {
        let (line, message) = refused(
            "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"cohere\"\nmodel = \"x\"\n",
        );
        assert_eq!(line, Some(5), "{message}");
        assert!(message.contains("cohere"), "{message}");

        let (line, message) = refused("[[upstreams.models]]\nname = \"a\"\ntargets = []\n");
        assert_eq!(line, Some(3), "{message}");
        assert!(message.contains("at least one target"), "{message}");

        let (line, message) = refused(
            "[[upstreams.models]]\nname = \"a\"\ntargets = [{ provider = \"openai\", model = \"m\", base_url = \"ftp://x\" }]\n",
        );
        assert_eq!(line, Some(3), "{message}");
        assert!(message.contains("not an http(s) URL"), "{message}");

        let (line, message) = refused("[upstreams.retry]\nmax_attempts = 3\nbackof = 1\n");
        assert_eq!(line, Some(3), "{message}");
        assert!(message.contains("backof"), "{message}");

        let twice = "[[upstreams.models]]\nname = \"a\"\ntargets = [{ provider = \"openai\", model = \"m\", no_key = true }]\n";
        let (line, message) = refused(&format!("{twice}{twice}"));
        assert!(line.is_some(), "{message}");
        assert!(message.contains("configured twice"), "{message}");
    }

    #[test]
    fn the_description_names_every_target_and_key_variable_or_the_single_upstream() {
        let mut config = crate::Config::new("http://127.0.0.1:8000/v1");
        config.upstream_key_env = Some("LOCAL_KEY".into());
        assert_eq!(
            super::describe(&config),
            "openai http://127.0.0.1:8000/v1 (key from LOCAL_KEY)"
        );
        config.upstream_key_env = None;
        config.no_upstream_key = true;
        assert_eq!(
            super::describe(&config),
            "openai http://127.0.0.1:8000/v1 (no key)"
        );
        config.file = ConfigFile::parse(GOOD, "g.toml").unwrap();
        assert_eq!(
            super::describe(&config),
            "smart: openai/gpt-4o http://127.0.0.1:9/v1 (no key) then claude https://api.anthropic.com/v1 \
             (key from ANTHROPIC_API_KEY); fast: openai/gpt-4o-mini [http://127.0.0.1:9/v1 (no key), \
             http://127.0.0.1:10/v1 (key from K)]"
        );
    }

    #[test]
    fn a_target_says_where_its_key_comes_from() {
        let model = "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"openai\"\nmodel = \"m\"\n";
        let (line, message) = refused(model);
        assert_eq!(line, Some(4), "{message}");
        assert!(message.contains("target `openai/m`"), "{message}");
        assert!(message.contains("no_key = true"), "{message}");
        let (_, message) = refused(&format!("{model}key_env = \"K\"\nno_key = true\n"));
        assert!(message.contains("exclude each other"), "{message}");
        let (_, message) = refused(&format!(
            "{model}deployments = [{{ base_url = \"http://127.0.0.1:9/v1\", no_key = true }}, \
             {{ base_url = \"http://127.0.0.1:10/v1\" }}]\n"
        ));
        assert!(message.contains("deployment 2"), "{message}");
        let (_, message) = refused(&format!(
            "{model}no_key = true\ndeployments = [{{ base_url = \"http://127.0.0.1:9/v1\", no_key = true }}]\n"
        ));
        assert!(message.contains("go in each deployment"), "{message}");
    }

    /// One target of `provider` with these fields.
    fn target(provider: &str, fields: &str) -> String {
        format!(
            "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"{provider}\"\n\
             model = \"m\"\n{fields}\n"
        )
    }

    #[test]
    fn every_kind_parses_with_its_own_fields_and_credentials() {
        for (provider, fields) in [
            ("azure", "base_url = \"https://r.openai.azure.com\"\nazure_deployment = \"d\"\napi_version = \"2024-10-21\"\nkey_env = \"K\""),
            ("azure", "base_url = \"https://r.openai.azure.com\"\ntoken_env = \"AZURE_TOKEN\""),
            ("gemini", "key_file = \"/run/secrets/gemini\""),
            ("vertex", "project = \"p\"\nlocation = \"global\"\ncredentials_file = \"/sa.json\""),
            ("vertex", "project = \"p\"\nlocation = \"us-central1\"\ncredentials_env = \"GOOGLE_APPLICATION_CREDENTIALS\""),
            ("vertex", "project = \"p\"\nlocation = \"us-central1\"\ntoken_env = \"VERTEX_TOKEN\""),
            ("openai", "key_file = \"key.txt\""),
            ("bedrock", "region = \"us-east-1\"\naws_env = true"),
            ("bedrock", "region = \"eu-central-1\"\naws_profile = \"prod\""),
            ("bedrock", "region = \"us-west-2\"\nkey_env = \"AWS_BEARER_TOKEN_BEDROCK\""),
        ] {
            let text = target(provider, fields);
            ConfigFile::parse(&text, "g.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        }
    }

    #[test]
    fn a_kind_missing_its_fields_or_given_anothers_is_refused_with_the_reason() {
        let cases = [
            (
                "vertex",
                "credentials_file = \"/sa.json\"",
                "needs its Google Cloud `project` and `location`",
            ),
            (
                "vertex",
                "project = \"p\"\ncredentials_file = \"/sa.json\"",
                "`project` and `location`",
            ),
            (
                "vertex",
                "project = \"p/x\"\nlocation = \"l\"\nno_key = true",
                "must be letters, digits",
            ),
            (
                "vertex",
                "project = \"p\"\nlocation = \"l\"",
                "credentials_file",
            ),
            (
                "vertex",
                "project = \"p\"\nlocation = \"l\"\nkey_env = \"K\"",
                "`key_env` is not a credential of `vertex`",
            ),
            (
                "azure",
                "key_env = \"K\"",
                "resource's endpoint as `base_url`",
            ),
            ("bedrock", "aws_env = true", "needs the AWS `region`"),
            (
                "bedrock",
                "region = \"us-east-1\"\naws_env = true\naws_profile = \"p\"",
                "`aws_env` and `aws_profile` exclude each other",
            ),
            (
                "bedrock",
                "region = \"us-east-1\"\nno_key = true",
                "`no_key` is not a credential of `bedrock`",
            ),
            (
                "openai",
                "region = \"us-east-1\"\nno_key = true",
                "`region` is for `provider = \"bedrock\"` targets",
            ),
            (
                "gemini",
                "aws_env = true",
                "`aws_env` is not a credential of `gemini`",
            ),
            (
                "gemini",
                "token_env = \"T\"",
                "`token_env` is not a credential of `gemini`",
            ),
            (
                "openai",
                "project = \"p\"\nno_key = true",
                "`project` is for `provider = \"vertex\"` targets",
            ),
            (
                "gemini",
                "api_version = \"v\"\nno_key = true",
                "`api_version` is for `provider = \"azure\"`",
            ),
            (
                "openai",
                "key_env = \"K\"\nkey_file = \"k\"",
                "`key_env` and `key_file` exclude each other",
            ),
            (
                "azure",
                "base_url = \"https://r.openai.azure.com\"\nkey_env = \"K\"\ntoken_env = \"T\"",
                "exclude each other",
            ),
        ];
        for (provider, fields, expected) in cases {
            let (line, message) = refused(&target(provider, fields));
            assert_eq!(line, Some(4), "{provider} {fields}: {message}");
            assert!(message.contains(expected), "{provider} {fields}: {message}");
            assert!(
                message.contains(&format!("target `{provider}/m`")),
                "{message}"
            );
        }
        let (_, message) = refused(&target("bedrock-next", "no_key = true"));
        assert!(message.contains("bedrock-next"), "{message}");
    }

    #[test]
    fn the_summary_names_where_each_credential_is_read_never_the_credential() {
        let mut config = crate::Config::new("http://127.0.0.1:9/v1");
        let text = format!(
            "{}\n{}\n{}",
            target("vertex", "project = \"p\"\nlocation = \"europe-west4\"\ncredentials_file = \"/etc/sa.json\""),
            "[[upstreams.models.targets]]\nprovider = \"azure\"\nmodel = \"gpt-4o\"\nbase_url = \"https://r.openai.azure.com\"\ntoken_env = \"AZURE_TOKEN\"\n",
            "[[upstreams.models.targets]]\nprovider = \"gemini\"\nmodel = \"flash\"\nkey_file = \"/run/gemini.key\"\n",
        );
        config.file = ConfigFile::parse(&text, "g.toml").unwrap();
        assert_eq!(
            super::describe(&config),
            "a: vertex/m https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/\
             publishers/google (service account /etc/sa.json) then azure/gpt-4o https://r.openai.azure.com \
             (bearer token from AZURE_TOKEN) then gemini/flash https://generativelanguage.googleapis.com/v1beta \
             (key from file /run/gemini.key)"
        );
    }

    #[test]
    fn a_bearer_token_from_the_environment_never_shows_in_debug_output() {
        std::env::set_var("TOWER_CHAT_UPSTREAMS_TEST_AZURE_TOKEN", "eyJ-secret-token");
        let mut config = crate::Config::new("http://127.0.0.1:9/v1");
        config.file = ConfigFile::parse(
            &target(
                "azure",
                "base_url = \"http://127.0.0.1:9\"\ntoken_env = \"TOWER_CHAT_UPSTREAMS_TEST_AZURE_TOKEN\"",
            ),
            "g.toml",
        )
        .unwrap();
        let router = super::build(&config, &crate::PrometheusMetrics::new())
            .unwrap()
            .unwrap();
        let table = router.current();
        let debug = format!("{router:?} {:?}", table.models.values().collect::<Vec<_>>());
        assert!(!debug.contains("eyJ-secret-token"), "{debug}");
        assert!(!super::describe(&config).contains("eyJ-secret-token"));
    }

    #[test]
    fn an_unusable_service_account_file_refuses_the_build_naming_the_target() {
        let mut config = crate::Config::new("http://127.0.0.1:9/v1");
        config.file = ConfigFile::parse(
            &target(
                "vertex",
                "project = \"p\"\nlocation = \"l\"\ncredentials_file = \"/nonexistent/sa.json\"",
            ),
            "g.toml",
        )
        .unwrap();
        let error = super::build(&config, &crate::PrometheusMetrics::new()).unwrap_err();
        assert!(error.message().contains("`vertex/m`"), "{error}");
        assert!(error.message().contains("/nonexistent/sa.json"), "{error}");
    }

    #[test]
    fn a_target_whose_key_cannot_be_used_refuses_the_build_naming_target_and_variable() {
        let text = |variable: &str| {
            format!(
                "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"anthropic\"\n\
                 model = \"claude\"\nbase_url = \"http://127.0.0.1:9/v1\"\nkey_env = \"{variable}\"\n"
            )
        };
        let build = |variable: &str| {
            let mut config = crate::Config::new("http://127.0.0.1:9/v1");
            config.file = ConfigFile::parse(&text(variable), "g.toml").unwrap();
            super::build(&config, &crate::PrometheusMetrics::new())
        };
        std::env::set_var("TOWER_CHAT_UPSTREAMS_TEST_CRLF_KEY", "sk-a\r\n");
        for variable in [
            "TOWER_CHAT_UPSTREAMS_TEST_UNSET_KEY",
            "TOWER_CHAT_UPSTREAMS_TEST_CRLF_KEY",
            "NOT-A-NAME",
            "",
        ] {
            let error = build(variable).unwrap_err();
            let source = std::error::Error::source(&error)
                .and_then(|s| s.downcast_ref::<crate::stack::upstream_key::UpstreamKeyError>())
                .unwrap_or_else(|| panic!("{variable:?}: {error}"));
            assert_eq!(source.variable(), variable);
            assert_eq!(
                source.upstream(),
                "`anthropic/claude` (http://127.0.0.1:9/v1)"
            );
            assert!(error.message().contains("anthropic/claude"), "{error}");
        }
        std::env::set_var("TOWER_CHAT_UPSTREAMS_TEST_GOOD_KEY", "sk-good");
        assert!(build("TOWER_CHAT_UPSTREAMS_TEST_GOOD_KEY").is_ok());
    }
}
