//! The Anthropic Messages API leaf service (`POST {base_url}/messages`).
//!
//! System messages become the `system` prompt, tool calls and results become `tool_use` / `tool_result` blocks
//! (consecutive results share one user message, as the API requires), and the streamed event sequence
//! (`message_start`, `content_block_*`, `message_delta` with cumulative usage, `message_stop`, `ping`, `error`)
//! maps to the same [`ChatEvent`](crate::ChatEvent)s as every other leaf.
//!
//! [`AnthropicVertexChat`] is the same wire format on Vertex AI (`:rawPredict`, an OAuth bearer token).
//!
//! ```no_run
//! use tower::ServiceExt;
//! use tower_chat::anthropic::AnthropicChat;
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # async fn run() -> Result<(), tower_chat::ChatError> {
//! let leaf = AnthropicChat::builder()
//!     .api_key(std::env::var("ANTHROPIC_API_KEY").unwrap_or_default())
//!     .model("claude-sonnet-4-5")
//!     .build()?;
//! let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
//! println!("{}", leaf.oneshot(request).await?.collect_response().await?.text());
//! # Ok(()) }
//! ```

mod decode;
#[cfg(test)]
mod decode_tests;
mod vertex;
mod wire;

use std::sync::Arc;

use http::header::HeaderName;
use http::HeaderValue;

use crate::error::{ChatError, ErrorKind};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::transport::ToolsJson;

pub use vertex::{
    AnthropicVertex, AnthropicVertexChat, AnthropicVertexChatBuilder, VERTEX_API_VERSION,
};

/// The Messages API version sent in `anthropic-version` unless configured otherwise.
pub const DEFAULT_API_VERSION: &str = "2023-06-01";

/// The Messages API leaf service: [`ChatLeaf`] speaking [`Anthropic`]'s wire format. Cheap to clone: clones
/// share configuration and the connection pool.
pub type AnthropicChat = ChatLeaf<Anthropic>;

/// Configures an [`AnthropicChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`api_version`](ChatLeafBuilder::api_version) and [`default_max_tokens`](ChatLeafBuilder::default_max_tokens).
pub type AnthropicChatBuilder = ChatLeafBuilder<Anthropic>;

/// Decodes a Messages API SSE body into chat events, byte chunk by byte chunk — the leaf's own decoder, for
/// bodies that arrive some other way.
pub type StreamDecoder = crate::leaf::StreamDecoder<Anthropic>;

/// The Messages API wire format (`POST {base_url}/messages`, `x-api-key`, `anthropic-version`), with its two
/// settings: the API version and the `max_tokens` sent when a request sets none.
#[derive(Clone, Debug)]
pub struct Anthropic {
    api_version: String,
    /// `None`: the model's own maximum ([`crate::output_limits`]).
    default_max_tokens: Option<u32>,
    /// Shared by the provider's clones (the leaf's clones): one list offered to every call is serialised once.
    tools: Arc<ToolsJson>,
}

impl Default for Anthropic {
    fn default() -> Self {
        Anthropic {
            api_version: DEFAULT_API_VERSION.to_owned(),
            default_max_tokens: None,
            tools: Arc::default(),
        }
    }
}

impl Provider for Anthropic {}

impl ProviderWire for Anthropic {
    type Decoder = decode::MessageDecoder;
    const LEAF_NAME: &'static str = "AnthropicChat";
    const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com/v1";
    const DEFAULT_PROVIDER_NAME: &'static str = "anthropic";
    const PATH: &'static str = "messages";
    const API_FORMAT: Option<crate::ApiFormat> = Some(crate::ApiFormat::Messages);

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        part.provider == "anthropic"
    }

    fn auth_header(&self) -> (HeaderName, &'static str) {
        (HeaderName::from_static("x-api-key"), "")
    }

    fn fixed_headers(&self) -> Result<Vec<(String, String)>, ChatError> {
        HeaderValue::try_from(self.api_version.as_str()).map_err(|_| {
            ChatError::new(ErrorKind::InvalidRequest, "invalid anthropic-version value")
        })?;
        Ok(vec![(
            "anthropic-version".to_owned(),
            self.api_version.clone(),
        )])
    }

    fn supports_streaming_usage(&self) -> bool {
        true
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
                default_max_tokens: self.default_max_tokens,
                tools: &self.tools,
                anthropic_version: None,
            },
        )
    }

    fn error_message(body: &[u8]) -> Option<String> {
        decode::provider_message(body)
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        decode::decode_message(body)
    }
}

impl ChatLeafBuilder<Anthropic> {
    /// The `anthropic-version` header (default [`DEFAULT_API_VERSION`]).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.provider.api_version = version.into();
        self
    }

    /// `max_tokens` for requests that set no `max_output_tokens` (the API requires one; default: the model's
    /// own output maximum, [`output_limits::max_output_tokens`](crate::output_limits::max_output_tokens)).
    pub fn default_max_tokens(mut self, tokens: u32) -> Self {
        self.provider.default_max_tokens = Some(tokens);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelInfo;

    #[test]
    fn debug_hides_the_key_and_metadata_names_anthropic() {
        let leaf = AnthropicChat::builder()
            .api_key("sk-ant-secret")
            .model("claude-sonnet-4-5")
            .build()
            .unwrap();
        assert!(!format!("{leaf:?}").contains("sk-ant-secret"));
        let meta = leaf.model_metadata();
        assert_eq!(meta.provider, "anthropic");
        assert_eq!(meta.context_window, Some(200_000));
        assert_eq!(
            leaf.endpoint().to_string(),
            "https://api.anthropic.com/v1/messages"
        );
    }
}
