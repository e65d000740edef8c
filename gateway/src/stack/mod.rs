//! Stack assembly: the upstream leaf ([`Upstream`]) and the layers around it ([`stack`]), type-erased into one
//! [`ChatStack`]. Holds no HTTP: the chat routes (the wire crate's, in `api/chat.rs`) call the stack under the
//! turn layer (`turn/`, outermost: it rebuilds a resumed or continued conversation before any layer here sees
//! the request, and keeps what the answer leaves for a later one); this module only builds the stack from the
//! configuration ([`Config`]) and the optional layers of [`StackOptions`].
//!
//! ```no_run
//! use tower_chat_gateway::{stack, Config, StackOptions, Upstream};
//!
//! # async fn build() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::new("http://127.0.0.1:9000/v1");
//! let stores = tower_chat_gateway::stores(&config).await?;
//! let stack = stack(
//!     &config,
//!     Upstream::from_config(&config)?,
//!     StackOptions {
//!         persistence: Some(&stores.persistence),
//!         approvals: Some(&stores.approvals),
//!         ..StackOptions::default()
//!     },
//! )?;
//! # drop(stack); Ok(()) }
//! ```

pub mod cache;
pub mod demo;
pub mod guardrail;
pub mod mcp;
pub mod rate_limits;
pub mod retention;
pub mod stores;
pub mod structured;
pub mod tools;
pub mod upstream_key;
pub mod upstreams;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::util::BoxCloneSyncService;
use tower::ServiceBuilder;
use tower_chat::anthropic::{AnthropicChat, AnthropicVertexChat};
use tower_chat::azure::{AzureOpenAiChat, AzureResponsesChat};
use tower_chat::bedrock::BedrockChat;
use tower_chat::gemini::GeminiChat;
use tower_chat::openai::OpenAiChat;
use tower_chat::responses::ResponsesChat;
use tower_chat::{ChatError, ChatRequest, ChatStream, ModelInfo, ModelMetadata};
use tower_chat_approval::ApprovalLayer;
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_limits::LimitsLayer;
use tower_chat_persistence::PersistenceLayer;
use tower_chat_tracing::TracingLayer;

use crate::config::Config;
use crate::stack::mcp::GatewayMcp;
use crate::stack::tools::{server_tools, server_tools_in, Sandbox};
use crate::telemetry::metrics::PrometheusMetrics;

/// The chat stack behind the endpoint, type-erased.
pub type ChatStack = BoxCloneSyncService<ChatRequest, ChatStream, ChatError>;

/// The upstream leaf: OpenAI-compatible or Anthropic, chosen by `--provider`, or any kind an `[upstreams]`
/// target names ([`crate::config::Provider`]).
#[derive(Clone, Debug)]
pub enum Upstream {
    /// `--provider openai`.
    OpenAi(OpenAiChat),
    /// An `[upstreams]` target with `provider = "openai-responses"`.
    Responses(ResponsesChat),
    /// `--provider anthropic`.
    Anthropic(AnthropicChat),
    /// An `[upstreams]` target with `provider = "anthropic-vertex"`.
    AnthropicVertex(AnthropicVertexChat),
    /// An `[upstreams]` target with `provider = "azure"`.
    Azure(AzureOpenAiChat),
    /// An `[upstreams]` target with `provider = "azure-responses"`.
    AzureResponses(AzureResponsesChat),
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
            Upstream::AnthropicVertex($leaf) => $body,
            Upstream::Azure($leaf) => $body,
            Upstream::AzureResponses($leaf) => $body,
            Upstream::Gemini($leaf) => $body,
            Upstream::Bedrock($leaf) => $body,
        }
    };
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

/// The optional layers of [`stack`]; each `None` leaves its layer out. `StackOptions::default()` is the bare
/// stack: tracing into a fresh registry and the tool loop.
#[derive(Clone, Debug, Default)]
pub struct StackOptions<'a> {
    /// Records every model round trip (one record per round, inside the tool loop).
    pub persistence: Option<&'a PersistenceLayer>,
    /// Verified, single-use approval ids for `write_file` and approval-gated MCP tools; without it the loop's
    /// own approval protocol still gates `write_file`.
    pub approvals: Option<&'a ApprovalLayer>,
    /// Where the tracing layer records every call (what `GET /metrics` shows).
    pub metrics: PrometheusMetrics,
    /// `[limits]` of the configuration file: every model round checked before it is sent and settled with its
    /// own usage.
    pub limits: Option<&'a LimitsLayer>,
    /// The tools of started MCP servers, offered to the tool loop per caller ([`crate::stack::mcp`]).
    pub mcp: Option<&'a GatewayMcp>,
    /// The sandbox of `config.files`, when the caller opened it already (so that the console previews writes
    /// through the one the tools use); `None` opens it here.
    pub files: Option<&'a Arc<Sandbox>>,
}

/// The stack the gateway runs, outermost first: tracing (unless `config.trace_calls` is off; one span per client request, tool spans inside, every
/// call recorded into `options.metrics`), the content policies (`[guardrail]`), approvals, the MCP tools, the tool loop with the server-side tools,
/// structured-output validation and repair (`[structured]`), persistence (one record per model round trip: the loop's every call to `upstream` is recorded with its own
/// usage, timestamps, model and outcome), limits, the response cache (`[cache]`), `upstream`.
///
/// One box for the whole stack: the optional layers are `Either`s ([`ServiceBuilder::option_layer`]), so a
/// request clones (and the tool loop re-calls) plain structs instead of allocating a box per layer and a boxed
/// future per call.
pub fn stack<S>(
    config: &Config,
    upstream: S,
    options: StackOptions<'_>,
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
        .map(crate::stack::cache::CacheSection::layer)
        .transpose()
        .map_err(|e| ChatError::new(tower_chat::ErrorKind::InvalidRequest, e.to_string()))?;
    // Inside the loop, one record per model round trip; outside the limits layer, so a round the limits refuse
    // is recorded as failed.
    let persistence = options.persistence.map(|persistence| {
        ServiceBuilder::new()
            .map_request(crate::turn::rounds::name_round)
            .layer(persistence.clone())
    });
    // Outside persistence and limits: a repair is a model call recorded and charged like any other.
    let structured = config
        .file
        .structured
        .as_ref()
        .map(crate::stack::structured::StructuredSection::layer)
        .transpose()
        .map_err(|e| ChatError::new(tower_chat::ErrorKind::InvalidRequest, e.to_string()))?;
    let rounds = ServiceBuilder::new()
        .option_layer(structured)
        .option_layer(persistence)
        .option_layer(options.limits.cloned())
        // Around each model call: inside the limits (a hit is charged nothing) and persistence (a hit is
        // recorded).
        .option_layer(cache)
        .service(upstream);
    let tool_loop = FunctionInvocationLayer::new()
        .tools(match options.files {
            Some(sandbox) => server_tools_in(Some(sandbox.clone()), config.add_tool)?,
            None => server_tools(config.files.as_deref(), config.add_tool)?,
        })?
        .max_rounds(config.max_rounds);
    let mcp = options
        .mcp
        .cloned()
        .map(|mcp| tower::layer::layer_fn(move |service| mcp.wrap(service)));
    // Content policies (`[guardrail]`): outside the tool loop, so tool calls and results are checked as events;
    // inside tracing, which records what the client was sent.
    let guardrails = match &config.file.guardrail {
        Some(section) => Some(
            crate::stack::guardrail::GuardrailsLayer::new(
                section.compile().map_err(|e| {
                    ChatError::new(tower_chat::ErrorKind::InvalidRequest, e.to_string())
                })?,
                options.metrics.clone(),
            )
            .record_refusals(options.persistence.cloned()),
        ),
        None => None,
    };
    // `--no-tracing` leaves the layer out: no span, no `/metrics` count, none of its per-call work.
    let tracing = config.trace_calls.then(|| {
        TracingLayer::new()
            .metadata(metadata)
            .record_content(config.record_content)
            // `None` (no OTLP export) costs nothing per call.
            .metrics((options.metrics, config.otel_metrics.clone()))
    });
    let service = ServiceBuilder::new()
        .option_layer(tracing)
        .option_layer(guardrails)
        .option_layer(options.approvals.cloned())
        .option_layer(mcp)
        .layer(tool_loop)
        .service(rounds);
    Ok(BoxCloneSyncService::new(service))
}
