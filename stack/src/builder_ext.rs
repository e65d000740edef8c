//! [`ServiceBuilderExt`]: the tower-chat layers as `ServiceBuilder` methods, in the style of tower-http's.

#[allow(unused_imports)] // every method is behind a feature
use tower::layer::util::Stack;
use tower::ServiceBuilder;

/// Adds tower-chat's layers to a [`ServiceBuilder`], outermost first, so a whole stack reads as one chain:
///
/// ```
/// use tower_chat_stack::prelude::*;
/// # use serde_json::{json, Value};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let weather = tool_json("get_weather", "Weather for a city", json!({"type": "object"}), |_args: Value, _ctx| async {
///     Ok::<_, String>("sunny".to_owned())
/// });
/// let store = SqliteStore::open(dir.path().join("chat.db")).await?;
///
/// let chat = ServiceBuilder::new()
///     .chat_tracing()                                               // spans + GenAI metrics
///     .approvals(ApprovalLayer::new().require_approval("get_weather")) // outside the loop
///     .tool_loop([weather])?                                        // call model -> run tools -> again
///     .persist(PersistenceLayer::new(store))                        // every round trip recorded
///     .service(OpenAiChat::builder().base_url("http://127.0.0.1:9").model("gpt-4o-mini").build()?);
/// # let _ = chat;
/// # Ok(()) }
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Trace every call: a `chat {model}` span with the GenAI attributes, at `INFO`, content off
    /// ([`TracingLayer::new`](tower_chat_tracing::TracingLayer::new)); use [`chat_tracing_with`](Self::chat_tracing_with)
    /// for other settings or a metrics sink.
    #[cfg(feature = "tracing")]
    fn chat_tracing(self) -> ServiceBuilder<Stack<tower_chat_tracing::TracingLayer, L>>;

    /// Trace every call with this layer.
    #[cfg(feature = "tracing")]
    fn chat_tracing_with<M, P>(
        self,
        layer: tower_chat_tracing::TracingLayer<M, P>,
    ) -> ServiceBuilder<Stack<tower_chat_tracing::TracingLayer<M, P>, L>>;

    /// Gate tool calls with human approvals. Must be outside [`tool_loop`](Self::tool_loop) (the next method in
    /// the chain, or with other middleware between); a misplaced approval layer fails its first call with a typed
    /// error (`ApprovalMisplaced`) rather than being ignored.
    #[cfg(feature = "approval")]
    fn approvals(
        self,
        layer: tower_chat_approval::ApprovalLayer,
    ) -> ServiceBuilder<Stack<tower_chat_approval::ApprovalLayer, L>>;

    /// The tool loop with these tools and default settings. Each tool's schema is compiled here (tools are taken
    /// as written, or as [`CompiledTool`](tower_chat_function_invocation::CompiledTool)s): an invalid one is an
    /// error now, so the chain continues after `?`.
    #[cfg(feature = "tools")]
    fn tool_loop<T: tower_chat_function_invocation::IntoTool>(
        self,
        tools: impl IntoIterator<Item = T>,
    ) -> Result<
        ServiceBuilder<Stack<tower_chat_function_invocation::FunctionInvocationLayer, L>>,
        tower_chat::ChatError,
    >;

    /// The tool loop, configured.
    #[cfg(feature = "tools")]
    fn tool_loop_with(
        self,
        layer: tower_chat_function_invocation::FunctionInvocationLayer,
    ) -> ServiceBuilder<Stack<tower_chat_function_invocation::FunctionInvocationLayer, L>>;

    /// Record every call below this point (inside the tool loop: every model round trip).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn persist(
        self,
        layer: tower_chat_persistence::PersistenceLayer,
    ) -> ServiceBuilder<Stack<tower_chat_persistence::PersistenceLayer, L>>;

    /// Rate limits and budgets.
    #[cfg(feature = "limits")]
    fn limits(
        self,
        layer: tower_chat_limits::LimitsLayer,
    ) -> ServiceBuilder<Stack<tower_chat_limits::LimitsLayer, L>>;

    /// Stream-aware retries (per model call when inside the tool loop).
    #[cfg(feature = "resilience")]
    fn chat_retry(
        self,
        layer: tower_chat_resilience::RetryLayer,
    ) -> ServiceBuilder<Stack<tower_chat_resilience::RetryLayer, L>>;

    /// Offer MCP servers' tools to the tool loop below.
    #[cfg(feature = "mcp")]
    fn mcp(
        self,
        layer: tower_chat_mcp::McpLayer,
    ) -> ServiceBuilder<Stack<tower_chat_mcp::McpLayer, L>>;

    /// Validate JSON answers against the request's schema and ask again with the violations (twice at most),
    /// each repair a model call of its own (so a persistence layer below records each).
    #[cfg(feature = "structured")]
    fn structured_output(
        self,
        layer: tower_chat_structured_output::StructuredOutputLayer,
    ) -> ServiceBuilder<Stack<tower_chat_structured_output::StructuredOutputLayer, L>>;

    /// Answer repeated calls from a cache: inside the tool loop it caches model calls (the tools still run),
    /// outside it whole turns. Put it inside persistence, tracing and limits so that hits are recorded, traced
    /// and charged nothing.
    #[cfg(feature = "cache")]
    fn response_cache(
        self,
        layer: tower_chat_cache::CacheLayer,
    ) -> ServiceBuilder<Stack<tower_chat_cache::CacheLayer, L>>;

    /// Check requests, tool calls and answers against a content policy. Place it inside
    /// [`persist`](Self::persist) and [`chat_tracing`](Self::chat_tracing), so they record what the provider was
    /// sent and what the client received, with the verdicts.
    #[cfg(feature = "guardrail")]
    fn guardrails(
        self,
        layer: tower_chat_guardrail::GuardrailLayer,
    ) -> ServiceBuilder<Stack<tower_chat_guardrail::GuardrailLayer, L>>;
}

mod sealed {
    pub trait Sealed<L> {}
    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    #[cfg(feature = "tracing")]
    fn chat_tracing(self) -> ServiceBuilder<Stack<tower_chat_tracing::TracingLayer, L>> {
        self.layer(tower_chat_tracing::TracingLayer::new())
    }

    #[cfg(feature = "tracing")]
    fn chat_tracing_with<M, P>(
        self,
        layer: tower_chat_tracing::TracingLayer<M, P>,
    ) -> ServiceBuilder<Stack<tower_chat_tracing::TracingLayer<M, P>, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "approval")]
    fn approvals(
        self,
        layer: tower_chat_approval::ApprovalLayer,
    ) -> ServiceBuilder<Stack<tower_chat_approval::ApprovalLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "tools")]
    fn tool_loop<T: tower_chat_function_invocation::IntoTool>(
        self,
        tools: impl IntoIterator<Item = T>,
    ) -> Result<
        ServiceBuilder<Stack<tower_chat_function_invocation::FunctionInvocationLayer, L>>,
        tower_chat::ChatError,
    > {
        Ok(
            self.layer(
                tower_chat_function_invocation::FunctionInvocationLayer::new().tools(tools)?,
            ),
        )
    }

    #[cfg(feature = "tools")]
    fn tool_loop_with(
        self,
        layer: tower_chat_function_invocation::FunctionInvocationLayer,
    ) -> ServiceBuilder<Stack<tower_chat_function_invocation::FunctionInvocationLayer, L>> {
        self.layer(layer)
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn persist(
        self,
        layer: tower_chat_persistence::PersistenceLayer,
    ) -> ServiceBuilder<Stack<tower_chat_persistence::PersistenceLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "limits")]
    fn limits(
        self,
        layer: tower_chat_limits::LimitsLayer,
    ) -> ServiceBuilder<Stack<tower_chat_limits::LimitsLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "resilience")]
    fn chat_retry(
        self,
        layer: tower_chat_resilience::RetryLayer,
    ) -> ServiceBuilder<Stack<tower_chat_resilience::RetryLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "mcp")]
    fn mcp(
        self,
        layer: tower_chat_mcp::McpLayer,
    ) -> ServiceBuilder<Stack<tower_chat_mcp::McpLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "structured")]
    fn structured_output(
        self,
        layer: tower_chat_structured_output::StructuredOutputLayer,
    ) -> ServiceBuilder<Stack<tower_chat_structured_output::StructuredOutputLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "cache")]
    fn response_cache(
        self,
        layer: tower_chat_cache::CacheLayer,
    ) -> ServiceBuilder<Stack<tower_chat_cache::CacheLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "guardrail")]
    fn guardrails(
        self,
        layer: tower_chat_guardrail::GuardrailLayer,
    ) -> ServiceBuilder<Stack<tower_chat_guardrail::GuardrailLayer, L>> {
        self.layer(layer)
    }
}
