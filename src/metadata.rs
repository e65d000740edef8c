//! What model a stack talks to, readable through every layer.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Identity and capabilities of the model behind a stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMetadata {
    /// The provider, as OpenTelemetry's `gen_ai.provider.name` spells it (`openai`, `anthropic`, …).
    pub provider: Cow<'static, str>,
    /// The default model id, when the service has one.
    pub model_id: Option<String>,
    /// The API endpoint.
    pub endpoint: Option<String>,
    /// Whether the model accepts tools.
    pub supports_tools: bool,
    /// Whether the model may call several tools in one response.
    pub supports_parallel_tool_calls: bool,
    /// Whether the streaming API reports usage.
    pub supports_streaming_usage: bool,
    /// The context window in tokens, where known.
    pub context_window: Option<u32>,
}

impl ModelMetadata {
    /// Metadata naming only the provider (no model, endpoint, capabilities or context window): for a service that
    /// cannot tell its own, such as a test double boxed with [`BoxChatService::with_metadata`](crate::BoxChatService::with_metadata).
    ///
    /// ```
    /// let metadata = tower_chat::ModelMetadata::new("scripted").model("scripted-1");
    /// assert_eq!((metadata.provider.as_ref(), metadata.model_id.as_deref()), ("scripted", Some("scripted-1")));
    /// ```
    pub fn new(provider: impl Into<Cow<'static, str>>) -> Self {
        ModelMetadata {
            provider: provider.into(),
            model_id: None,
            endpoint: None,
            supports_tools: false,
            supports_parallel_tool_calls: false,
            supports_streaming_usage: false,
            context_window: None,
        }
    }

    /// The same metadata with this default model id.
    pub fn model(mut self, model_id: impl Into<String>) -> Self {
        self.model_id = Some(model_id.into());
        self
    }
}

/// Read [`ModelMetadata`] from a service. Leaf services know it; every tower-chat layer forwards to the service it
/// wraps, so the call works on a whole stack (the tower counterpart of Microsoft.Extensions.AI's
/// `GetService<ChatClientMetadata>()` walk).
pub trait ModelInfo {
    /// The metadata of the model this service (eventually) calls.
    fn model_metadata(&self) -> ModelMetadata;
}

/// Context windows of well-known model families, matched by id prefix (longest prefix listed first).
const CONTEXT_WINDOWS: &[(&str, u32)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gpt-3.5-turbo", 16_385),
    ("claude-", 200_000),
    ("deepseek-", 128_000),
];

/// The context window of a well-known model id, if listed.
pub fn known_context_window(model_id: &str) -> Option<u32> {
    CONTEXT_WINDOWS
        .iter()
        .find(|(prefix, _)| model_id.starts_with(prefix))
        .map(|(_, tokens)| *tokens)
}
