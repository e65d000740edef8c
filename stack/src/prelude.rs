//! What a stack is usually written with: `use tower_chat_stack::prelude::*;`.

pub use tower::{Layer, Service, ServiceBuilder, ServiceExt};
pub use tower_chat::anthropic::AnthropicChat;
pub use tower_chat::azure::AzureOpenAiChat;
pub use tower_chat::gemini::GeminiChat;
pub use tower_chat::openai::OpenAiChat;
pub use tower_chat::responses::ResponsesChat;
pub use tower_chat::{
    BoxChatService, CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatResponse, ChatStream,
    ChatStreamExt, ConversationId, ErrorKind, FinishReason, Message, ModelInfo,
};

pub use crate::ServiceBuilderExt;

#[cfg(feature = "approval")]
pub use tower_chat_approval::{ApprovalLayer, Verdict};
#[cfg(feature = "cache")]
pub use tower_chat_cache::{CacheControl, CacheLayer, CacheOutcome, CacheStatus};
#[cfg(feature = "tools")]
pub use tower_chat_function_invocation::{
    tool_fn, tool_json, CompiledTool, FnTool, FunctionInvocationLayer, IntoTool, ToolError,
};
#[cfg(feature = "guardrail")]
pub use tower_chat_guardrail::{Check, GuardrailLayer};
#[cfg(feature = "limits")]
pub use tower_chat_limits::LimitsLayer;
#[cfg(feature = "mcp")]
pub use tower_chat_mcp::{McpLayer, McpTools};
#[cfg(feature = "postgres")]
pub use tower_chat_persistence::PostgresStore;
#[cfg(feature = "sqlite")]
pub use tower_chat_persistence::SqliteStore;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use tower_chat_persistence::{PersistenceLayer, Store};
#[cfg(feature = "resilience")]
pub use tower_chat_resilience::{FallbackLayer, RetryLayer};
#[cfg(feature = "structured")]
pub use tower_chat_structured_output::{Partial, StructuredExt, StructuredOutputLayer};
#[cfg(feature = "tracing")]
pub use tower_chat_tracing::TracingLayer;
