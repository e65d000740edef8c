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

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::AUTHORIZATION;
use http::Uri;

pub use wire::MaxTokensField;

use crate::error::ChatError;
use crate::leaf::{byte_stream_decoder, leaf_builder_methods, LeafConfig, LeafSettings};
use crate::metadata::{ModelInfo, ModelMetadata};
use crate::request::ChatRequest;
use crate::stream::ChatStream;
use crate::transport::{HttpTransport, ProviderWire};

/// The Chat Completions leaf service. Cheap to clone: clones share configuration and the connection pool.
#[derive(Clone)]
pub struct OpenAiChat {
    config: Arc<Config>,
    transport: HttpTransport,
}

struct Config {
    leaf: LeafConfig,
    max_tokens_field: MaxTokensField,
    include_usage: bool,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
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

impl OpenAiChat {
    /// Configure a leaf.
    pub fn builder() -> OpenAiChatBuilder {
        OpenAiChatBuilder::default()
    }

    /// The full URL requests go to.
    pub fn endpoint(&self) -> &Uri {
        &self.config.leaf.endpoint
    }
}

impl tower_service::Service<ChatRequest> for OpenAiChat {
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
                    max_tokens_field: config.max_tokens_field,
                    include_usage: config.include_usage,
                },
            )?;
            let wire = ProviderWire {
                provider_message: decode::provider_message,
                decode_whole: decode::decode_completion,
                stream_decoder: decode::ChunkDecoder::default,
            };
            config
                .leaf
                .execute(
                    &this.transport,
                    body,
                    &request,
                    (AUTHORIZATION, "Bearer "),
                    wire,
                )
                .await
        })
    }
}

byte_stream_decoder!(
    /// Decodes a Chat Completions SSE body into chat events, byte chunk by byte chunk — the leaf's own decoder,
    /// for bodies that arrive some other way.
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
    StreamDecoder,
    decode::ChunkDecoder
);

impl ModelInfo for OpenAiChat {
    fn model_metadata(&self) -> ModelMetadata {
        self.config.leaf.metadata.clone()
    }
}

/// Configures an [`OpenAiChat`].
#[derive(Debug)]
pub struct OpenAiChatBuilder {
    settings: LeafSettings,
    max_tokens_field: MaxTokensField,
    include_usage: bool,
}

impl Default for OpenAiChatBuilder {
    fn default() -> Self {
        OpenAiChatBuilder {
            settings: LeafSettings::new("https://api.openai.com/v1", "openai"),
            max_tokens_field: MaxTokensField::default(),
            include_usage: true,
        }
    }
}

impl OpenAiChatBuilder {
    leaf_builder_methods!("https://api.openai.com/v1", "openai");

    /// How the output token limit is spelled (`max_tokens` by default; OpenAI's reasoning models need
    /// `max_completion_tokens`).
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = field;
        self
    }

    /// Whether to send `stream_options.include_usage` on streaming calls (default on; turn it off for a server
    /// that rejects the field).
    pub fn include_usage(mut self, include: bool) -> Self {
        self.include_usage = include;
        self
    }

    /// Build the leaf; the base URL and headers are validated here.
    pub fn build(self) -> Result<OpenAiChat, ChatError> {
        let (leaf, transport) = self
            .settings
            .build("chat/completions", self.include_usage)?;
        Ok(OpenAiChat {
            config: Arc::new(Config {
                leaf,
                max_tokens_field: self.max_tokens_field,
                include_usage: self.include_usage,
            }),
            transport,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

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
