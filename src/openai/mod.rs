//! The OpenAI-compatible Chat Completions leaf service (`POST {base_url}/chat/completions`).
//!
//! One leaf speaks to OpenAI, DeepSeek, vLLM, Ollama, llama.cpp's server, OpenRouter and LiteLLM: they share the
//! wire format, and the decoder handles their differences (see the tests in `decode.rs`).
//!
//! ```no_run
//! use std::time::Duration;
//! use tower::ServiceExt;
//! use tower_chat::openai::OpenAiChat;
//! use tower_chat::transport::Timeouts;
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # async fn run() -> Result<(), tower_chat::ChatError> {
//! // A local Ollama; no key, a default model, a short connect timeout.
//! let leaf = OpenAiChat::builder()
//!     .base_url("http://127.0.0.1:11434/v1")
//!     .model("llama3.1")
//!     .provider_name("ollama")
//!     .timeouts(Timeouts { connect: Some(Duration::from_secs(2)), ..Timeouts::default() })
//!     .build()?;
//! let reply = leaf
//!     .oneshot(ChatRequest::new(vec![Message::user("Hi")]))
//!     .await?
//!     .collect_response()
//!     .await?;
//! println!("{}", reply.text());
//! # Ok(()) }
//! ```

mod decode;
mod wire;

use std::sync::Arc;

use http::header::{HeaderName, AUTHORIZATION};

pub use wire::MaxTokensField;

use crate::error::ChatError;
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::transport::ToolsJson;

/// The Chat Completions leaf service: [`ChatLeaf`] speaking [`OpenAi`]'s wire format. Cheap to clone: clones
/// share configuration and the connection pool.
pub type OpenAiChat = ChatLeaf<OpenAi>;

/// Configures an [`OpenAiChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`max_tokens_field`](ChatLeafBuilder::max_tokens_field) and [`include_usage`](ChatLeafBuilder::include_usage).
pub type OpenAiChatBuilder = ChatLeafBuilder<OpenAi>;

/// Decodes a Chat Completions SSE body into chat events, byte chunk by byte chunk — the leaf's own decoder, for
/// bodies that arrive some other way.
///
/// ```
/// use tower_chat::{ChatEvent, FinishReason};
///
/// let mut decoder = tower_chat::openai::StreamDecoder::new();
/// decoder.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\nda");
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::text("Hi"));
/// assert!(decoder.next_event().is_none()); // the rest of the body is needed
/// decoder.feed_bytes(bytes::Bytes::from_static(
///     b"ta: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
/// ));
/// decoder.finish();
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::finish(FinishReason::Stop));
/// assert!(decoder.next_event().is_none());
/// ```
pub type StreamDecoder = crate::leaf::StreamDecoder<OpenAi>;

/// The Chat Completions wire format (`POST {base_url}/chat/completions`, `Authorization: Bearer`), with its two
/// settings: how the output token limit is spelled and whether streamed calls ask for usage.
#[derive(Clone, Debug)]
pub struct OpenAi {
    max_tokens_field: MaxTokensField,
    include_usage: bool,
    /// Shared by the provider's clones (the leaf's clones): one list offered to every call is serialised once.
    tools: Arc<ToolsJson>,
}

impl Default for OpenAi {
    fn default() -> Self {
        OpenAi {
            max_tokens_field: MaxTokensField::default(),
            include_usage: true,
            tools: Arc::default(),
        }
    }
}

impl Provider for OpenAi {}

impl ProviderWire for OpenAi {
    type Decoder = decode::ChunkDecoder;
    const LEAF_NAME: &'static str = "OpenAiChat";
    const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    const DEFAULT_PROVIDER_NAME: &'static str = "openai";
    const PATH: &'static str = "chat/completions";
    const API_FORMAT: Option<crate::ApiFormat> = Some(crate::ApiFormat::ChatCompletions);

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        part.provider == "openai"
    }

    fn auth_header(&self) -> (HeaderName, &'static str) {
        (AUTHORIZATION, "Bearer ")
    }

    fn supports_streaming_usage(&self) -> bool {
        self.include_usage
    }

    fn encode(
        &self,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Vec<u8>, ChatError> {
        wire::encode(
            request,
            &wire::EncodeOptions {
                default_model,
                max_tokens_field: self.max_tokens_field,
                include_usage: self.include_usage,
                tools: &self.tools,
            },
        )
    }

    fn error_message(body: &[u8]) -> Option<String> {
        decode::provider_message(body)
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        decode::decode_completion(body)
    }
}

impl ChatLeafBuilder<OpenAi> {
    /// How the output token limit is spelled (`max_tokens` by default; OpenAI's reasoning models need
    /// `max_completion_tokens`).
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.provider.max_tokens_field = field;
        self
    }

    /// Whether to send `stream_options.include_usage` on streaming calls (default on; turn it off for a server
    /// that rejects the field).
    pub fn include_usage(mut self, include: bool) -> Self {
        self.provider.include_usage = include;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorKind, ModelInfo};

    #[test]
    fn debug_output_never_shows_the_key() {
        let leaf = OpenAiChat::builder()
            .api_key("sk-very-secret")
            .model("gpt-4o")
            .build()
            .unwrap();
        let debug = format!("{leaf:?}");
        assert!(!debug.contains("sk-very-secret"), "{debug}");
        assert!(debug.contains("[redacted]"));
    }

    #[test]
    fn metadata_reports_provider_model_and_context_window() {
        let leaf = OpenAiChat::builder().model("gpt-4o-mini").build().unwrap();
        let meta = leaf.model_metadata();
        assert_eq!(meta.provider, "openai");
        assert_eq!(meta.model_id.as_deref(), Some("gpt-4o-mini"));
        assert_eq!(meta.context_window, Some(128_000));
        assert_eq!(
            meta.endpoint.as_deref(),
            Some("https://api.openai.com/v1/chat/completions")
        );
    }

    #[test]
    fn bad_base_urls_are_refused_at_build_time() {
        for base in ["not a url", "ftp://x/v1", "/v1"] {
            let err = OpenAiChat::builder().base_url(base).build().unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::InvalidRequest, "{base}");
        }
    }
}
