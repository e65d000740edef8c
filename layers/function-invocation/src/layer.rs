use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_chat::ChatError;
use tower_layer::Layer;

use crate::config::Config;
use crate::into_tool::IntoTool;
use crate::policy::{ApprovalPolicy, ErrorDetail, ErrorPolicy, UnknownToolPolicy};
use crate::service::FunctionInvocation;
use crate::toolset::{Resolved, ToolResolver, ToolSet};

/// Wraps a chat service so that it runs tools until the model is done.
///
/// Configuration (all optional):
///
/// | setting | default |
/// | --- | --- |
/// | [`tool`](Self::tool) / [`tools`](Self::tools): tools offered on every request | none |
/// | [`registry`](Self::registry): tools a request may name in [`RequestTools`](crate::RequestTools) | none |
/// | [`max_rounds`](Self::max_rounds): tool rounds per request | 10 |
/// | [`max_tool_calls`](Self::max_tool_calls): tool bodies run per request | unlimited |
/// | [`final_round_without_tools`](Self::final_round_without_tools): at a limit, one more model call that may not call tools | off |
/// | [`max_concurrency`](Self::max_concurrency): tool bodies running at once in a round | all calls of the round |
/// | [`tool_timeout`](Self::tool_timeout): time limit per call (needs a Tokio runtime with time) | none |
/// | [`max_consecutive_failures`](Self::max_consecutive_failures): failing rounds in a row before the stream ends | 3 |
/// | [`error_detail`](Self::error_detail) | [`ErrorDetail::Full`] |
/// | [`error_policy`](Self::error_policy) | failures never end the stream |
/// | [`unknown_tool`](Self::unknown_tool) | [`UnknownToolPolicy::ErrorResult`] |
/// | [`approval_policy`](Self::approval_policy) | tools' own flags only |
#[derive(Clone)]
pub struct FunctionInvocationLayer {
    config: Arc<Config>,
}

impl Default for FunctionInvocationLayer {
    fn default() -> Self {
        FunctionInvocationLayer {
            config: Arc::new(Config {
                tools: ToolSet::new(),
                base: Arc::default(),
                registry: None,
                max_rounds: 10,
                max_tool_calls: None,
                final_round_without_tools: false,
                max_concurrency: None,
                tool_timeout: None,
                max_consecutive_failures: 3,
                error_detail: ErrorDetail::Full,
                error_policy: None,
                unknown_tool: UnknownToolPolicy::ErrorResult,
                approval_policy: None,
            }),
        }
    }
}

impl FunctionInvocationLayer {
    /// A layer with no tools and default limits.
    pub fn new() -> Self {
        FunctionInvocationLayer::default()
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Offer a tool on every request (replacing a layer tool of the same name). The tool's schema is compiled
    /// here (unless it is a [`CompiledTool`](crate::CompiledTool) already), so an invalid schema or name is an error now, not at the
    /// first call.
    pub fn tool(mut self, tool: impl IntoTool) -> Result<Self, ChatError> {
        let tool = tool.into_tool()?;
        let config = self.config_mut();
        config.tools.insert(tool);
        config.base = Arc::new(Resolved::from_layer(&config.tools));
        Ok(self)
    }

    /// Offer these tools on every request (added to those already set); fails at the first tool whose schema
    /// or name is invalid.
    pub fn tools<T: IntoTool>(self, tools: impl IntoIterator<Item = T>) -> Result<Self, ChatError> {
        tools
            .into_iter()
            .try_fold(self, FunctionInvocationLayer::tool)
    }

    /// Where tools named in [`RequestTools::registered`](crate::RequestTools) come from. A [`ToolSet`] works.
    pub fn registry(mut self, registry: impl ToolResolver) -> Self {
        self.config_mut().registry = Some(Arc::new(registry));
        self
    }

    /// The most tool rounds per request (at least 1). After that many rounds the loop makes no further model call
    /// and ends with [`FinishReason::MaxRounds`](tower_chat::FinishReason::MaxRounds), unless
    /// [`final_round_without_tools`](Self::final_round_without_tools) is on.
    pub fn max_rounds(mut self, rounds: usize) -> Self {
        self.config_mut().max_rounds = rounds.max(1);
        self
    }

    /// The most tool bodies run per request. Calls past the budget get a "not run" result without running; once
    /// it is spent the loop ends as at [`max_rounds`](Self::max_rounds).
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.config_mut().max_tool_calls = Some(calls);
        self
    }

    /// At a limit, call the model once more with tool calls forbidden (`tool_choice: none`) so it answers in text;
    /// that answer's finish reason ends the stream. Should the model call tools anyway, they are not run and the
    /// stream ends with `max_rounds` (the caller's history then ends with those unanswered calls).
    pub fn final_round_without_tools(mut self, enabled: bool) -> Self {
        self.config_mut().final_round_without_tools = enabled;
        self
    }

    /// The most tool bodies running at once within a round (at least 1). Results are reported in the model's call
    /// order whatever order they finish in.
    pub fn max_concurrency(mut self, limit: usize) -> Self {
        self.config_mut().max_concurrency = Some(limit.max(1));
        self
    }

    /// A time limit for every call (a tool's own [`timeout`](crate::Tool::timeout) wins). Running past it is an
    /// error result. Requires a Tokio runtime with the time driver.
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().tool_timeout = Some(timeout);
        self
    }

    /// End the stream with an [`ErrorKind::Tool`](tower_chat::ErrorKind::Tool) error after this many rounds in a row
    /// in which some call failed (at least 1).
    pub fn max_consecutive_failures(mut self, rounds: usize) -> Self {
        self.config_mut().max_consecutive_failures = rounds.max(1);
        self
    }

    /// How much of a failure the model sees.
    pub fn error_detail(mut self, detail: ErrorDetail) -> Self {
        self.config_mut().error_detail = detail;
        self
    }

    /// Decide which failures end the stream.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.config_mut().error_policy = Some(policy);
        self
    }

    /// What to do with calls of unknown tools.
    pub fn unknown_tool(mut self, policy: UnknownToolPolicy) -> Self {
        self.config_mut().unknown_tool = policy;
        self
    }

    /// A layer-wide approval policy (combined with a request's own, see [`ApprovalPolicy`]).
    pub fn approval_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.config_mut().approval_policy = Some(policy);
        self
    }
}

impl fmt::Debug for FunctionInvocationLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("FunctionInvocationLayer")
            .field("tools", &c.tools)
            .field("registry", &c.registry.is_some())
            .field("max_rounds", &c.max_rounds)
            .field("max_tool_calls", &c.max_tool_calls)
            .field("final_round_without_tools", &c.final_round_without_tools)
            .field("max_concurrency", &c.max_concurrency)
            .field("tool_timeout", &c.tool_timeout)
            .field("max_consecutive_failures", &c.max_consecutive_failures)
            .field("error_detail", &c.error_detail)
            .field("error_policy", &c.error_policy)
            .field("unknown_tool", &c.unknown_tool)
            .field("approval_policy", &c.approval_policy)
            .finish()
    }
}

impl<S> Layer<S> for FunctionInvocationLayer {
    type Service = FunctionInvocation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FunctionInvocation::from_config(inner, self.config.clone())
    }
}
