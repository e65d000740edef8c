//! The Anthropic Messages API leaf service (`POST {base_url}/messages`).
//!
//! System messages become the `system` prompt, tool calls and results become `tool_use` / `tool_result` blocks
//! (consecutive results share one user message, as the API requires), and the streamed event sequence
//! (`message_start`, `content_block_*`, `message_delta` with cumulative usage, `message_stop`, `ping`, `error`)
//! maps to the same [`ChatEvent`](crate::ChatEvent)s as every other leaf.
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
mod wire;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{HeaderValue, Uri};

use crate::error::{ChatError, ErrorKind};
use crate::leaf::{byte_stream_decoder, leaf_builder_methods, LeafConfig, LeafSettings};
use crate::metadata::{ModelInfo, ModelMetadata};
use crate::request::ChatRequest;
use crate::stream::ChatStream;
use crate::transport::{HttpTransport, ProviderWire};

/// The Messages API version sent in `anthropic-version` unless configured otherwise.
pub const DEFAULT_API_VERSION: &str = "2023-06-01";

/// The Messages API leaf service. Cheap to clone: clones share configuration and the connection pool.
#[derive(Clone)]
pub struct AnthropicChat {
    config: Arc<Config>,
    transport: HttpTransport,
}

struct Config {
    leaf: LeafConfig,
    default_max_tokens: u32,
}

impl fmt::Debug for AnthropicChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicChat")
            .field("endpoint", &self.config.leaf.endpoint)
            .field(
                "api_key",
                &self.config.leaf.api_key.as_ref().map(|_| "[redacted]"),
            )
            .field("default_model", &self.config.leaf.default_model)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl AnthropicChat {
    /// Configure a leaf.
    pub fn builder() -> AnthropicChatBuilder {
        AnthropicChatBuilder::default()
    }

    /// The full URL requests go to.
    pub fn endpoint(&self) -> &Uri {
        &self.config.leaf.endpoint
    }
}

impl tower_service::Service<ChatRequest> for AnthropicChat {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.transport.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let config = &*this.config;
            let body = wire::encode(
                &request,
                &wire::EncodeOptions {
                    default_model: config.leaf.default_model.as_deref(),
                    default_max_tokens: config.default_max_tokens,
                },
            )?;
            let wire = ProviderWire {
                provider_message: decode::provider_message,
                decode_whole: decode::decode_message,
                stream_decoder: decode::MessageDecoder::default,
            };
            config
                .leaf
                .execute(
                    &this.transport,
                    body,
                    &request,
                    (HeaderName::from_static("x-api-key"), ""),
                    wire,
                )
                .await
        })
    }
}

byte_stream_decoder!(
    /// Decodes a Messages API SSE body into chat events, byte chunk by byte chunk — the leaf's own decoder, for
    /// bodies that arrive some other way.
    StreamDecoder,
    decode::MessageDecoder
);

impl ModelInfo for AnthropicChat {
    fn model_metadata(&self) -> ModelMetadata {
        self.config.leaf.metadata.clone()
    }
}

/// Configures an [`AnthropicChat`].
#[derive(Debug)]
pub struct AnthropicChatBuilder {
    settings: LeafSettings,
    api_version: String,
    default_max_tokens: u32,
}

impl Default for AnthropicChatBuilder {
    fn default() -> Self {
        AnthropicChatBuilder {
            settings: LeafSettings::new("https://api.anthropic.com/v1", "anthropic"),
            api_version: DEFAULT_API_VERSION.to_owned(),
            default_max_tokens: 4096,
        }
    }
}

impl AnthropicChatBuilder {
    leaf_builder_methods!("https://api.anthropic.com/v1", "anthropic");

    /// The `anthropic-version` header (default [`DEFAULT_API_VERSION`]).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.api_version = version.into();
        self
    }

    /// `max_tokens` for requests that set no `max_output_tokens` (the API requires one; default 4096).
    pub fn default_max_tokens(mut self, tokens: u32) -> Self {
        self.default_max_tokens = tokens;
        self
    }

    /// Build the leaf; the base URL and headers are validated here.
    pub fn build(mut self) -> Result<AnthropicChat, ChatError> {
        HeaderValue::try_from(self.api_version.as_str()).map_err(|_| {
            ChatError::new(ErrorKind::InvalidRequest, "invalid anthropic-version value")
        })?;
        self.settings
            .headers
            .insert(0, ("anthropic-version".to_owned(), self.api_version));
        let (leaf, transport) = self.settings.build("messages", true)?;
        Ok(AnthropicChat {
            config: Arc::new(Config {
                leaf,
                default_max_tokens: self.default_max_tokens,
            }),
            transport,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
