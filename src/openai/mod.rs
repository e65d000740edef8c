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

use bytes::Bytes;
use http::header::{HeaderName, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, Uri};
use http_body_util::Full;

pub use wire::MaxTokensField;

use crate::error::{ChatError, ErrorKind};
use crate::metadata::{known_context_window, ModelInfo, ModelMetadata};
use crate::request::ChatRequest;
use crate::stream::{cancellable, ChatStream};
use crate::transport::{HttpTransport, Secret, SseChatStream, Timeouts};

/// The Chat Completions leaf service. Cheap to clone: clones share configuration and the connection pool.
#[derive(Clone)]
pub struct OpenAiChat {
    config: Arc<Config>,
    transport: HttpTransport,
}

struct Config {
    endpoint: Uri,
    api_key: Option<Secret>,
    default_model: Option<String>,
    headers: HeaderMap,
    max_tokens_field: MaxTokensField,
    include_usage: bool,
    metadata: ModelMetadata,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("endpoint", &self.config.endpoint)
            .field(
                "api_key",
                &self.config.api_key.as_ref().map(|_| "[redacted]"),
            )
            .field("default_model", &self.config.default_model)
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
        &self.config.endpoint
    }

    fn http_request(
        &self,
        body: Vec<u8>,
        streaming: bool,
    ) -> Result<http::Request<Full<Bytes>>, ChatError> {
        let config = &*self.config;
        let mut request = http::Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = config.endpoint.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(if streaming {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("tower-chat/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some(key) = &config.api_key {
            headers.insert(AUTHORIZATION, key.header_value("Bearer ")?);
        }
        for (name, value) in &config.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request)
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
                    default_model: config.default_model.as_deref(),
                    max_tokens_field: config.max_tokens_field,
                    include_usage: config.include_usage,
                },
            )?;
            let streaming = request.options.stream;
            let http_request = this.http_request(body, streaming)?;
            let cancel = request.cancellation().cloned();
            let send = this.transport.send(
                http_request,
                config.api_key.as_ref(),
                decode::provider_message,
            );
            let response = match &cancel {
                Some(token) => tokio::select! {
                    biased;
                    _ = token.cancelled() => return Err(ChatError::cancelled()),
                    response = send => response?,
                },
                None => send.await?,
            };
            let stream: ChatStream = if streaming {
                SseChatStream::new(
                    response.into_body(),
                    decode::ChunkDecoder::default(),
                    this.transport.timeouts().idle,
                )
                .boxed()
            } else {
                let events = this
                    .transport
                    .read_body(response.into_body())
                    .await
                    .and_then(|body| decode::decode_completion(&body));
                match events {
                    Ok(events) => Box::pin(futures_util::stream::iter(events.into_iter().map(Ok))),
                    Err(error) => Box::pin(futures_util::stream::iter([Err(error)])),
                }
            };
            Ok(match cancel {
                Some(token) => cancellable(stream, token),
                None => stream,
            })
        })
    }
}

impl ModelInfo for OpenAiChat {
    fn model_metadata(&self) -> ModelMetadata {
        self.config.metadata.clone()
    }
}

/// Configures an [`OpenAiChat`].
#[derive(Debug)]
pub struct OpenAiChatBuilder {
    base_url: String,
    api_key: Option<Secret>,
    model: Option<String>,
    headers: Vec<(String, String)>,
    timeouts: Timeouts,
    http2_prior_knowledge: bool,
    max_tokens_field: MaxTokensField,
    include_usage: bool,
    provider_name: String,
    supports_tools: bool,
    supports_parallel_tool_calls: bool,
    context_window: Option<u32>,
    transport: Option<HttpTransport>,
}

impl Default for OpenAiChatBuilder {
    fn default() -> Self {
        OpenAiChatBuilder {
            base_url: "https://api.openai.com/v1".to_owned(),
            api_key: None,
            model: None,
            headers: Vec::new(),
            timeouts: Timeouts::default(),
            http2_prior_knowledge: false,
            max_tokens_field: MaxTokensField::default(),
            include_usage: true,
            provider_name: "openai".to_owned(),
            supports_tools: true,
            supports_parallel_tool_calls: true,
            context_window: None,
            transport: None,
        }
    }
}

impl OpenAiChatBuilder {
    /// The API base URL, up to and including `/v1` (default `https://api.openai.com/v1`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The API key, sent as `Authorization: Bearer …`. An empty key sends no header.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.api_key = (!key.is_empty()).then(|| Secret::new(key));
        self
    }

    /// The model used when a request names none.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// An extra header on every request (`OpenAI-Organization`, `HTTP-Referer` for OpenRouter, …).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Connect / first-byte / idle deadlines.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Speak HTTP/2 over plain `http://` (h2c). Over `https://`, HTTP/2 is negotiated anyway.
    pub fn http2_prior_knowledge(mut self, enabled: bool) -> Self {
        self.http2_prior_knowledge = enabled;
        self
    }

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

    /// The provider name reported by [`ModelInfo`] (default `openai`; e.g. `deepseek`, `ollama`, `vllm`).
    pub fn provider_name(mut self, name: impl Into<String>) -> Self {
        self.provider_name = name.into();
        self
    }

    /// Capabilities reported by [`ModelInfo`] (default: tools and parallel calls supported).
    pub fn capabilities(mut self, tools: bool, parallel_tool_calls: bool) -> Self {
        self.supports_tools = tools;
        self.supports_parallel_tool_calls = parallel_tool_calls;
        self
    }

    /// The context window reported by [`ModelInfo`] (default: looked up for well-known model ids).
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Share an existing transport (and its connection pool) instead of building one.
    pub fn transport(mut self, transport: HttpTransport) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Build the leaf.
    pub fn build(self) -> Result<OpenAiChat, ChatError> {
        let endpoint = endpoint(&self.base_url, "chat/completions")?;
        let headers = parse_headers(&self.headers)?;
        let transport = match self.transport {
            Some(transport) => transport,
            None => HttpTransport::new(self.timeouts, self.http2_prior_knowledge)?,
        };
        let metadata = ModelMetadata {
            provider: self.provider_name.into(),
            context_window: self
                .context_window
                .or_else(|| self.model.as_deref().and_then(known_context_window)),
            model_id: self.model.clone(),
            endpoint: Some(endpoint.to_string()),
            supports_tools: self.supports_tools,
            supports_parallel_tool_calls: self.supports_parallel_tool_calls,
            supports_streaming_usage: self.include_usage,
        };
        Ok(OpenAiChat {
            config: Arc::new(Config {
                endpoint,
                api_key: self.api_key,
                default_model: self.model,
                headers,
                max_tokens_field: self.max_tokens_field,
                include_usage: self.include_usage,
                metadata,
            }),
            transport,
        })
    }
}

/// `base` joined with `path`, validated once at build time.
pub(crate) fn endpoint(base: &str, path: &str) -> Result<Uri, ChatError> {
    let url = format!("{}/{path}", base.trim_end_matches('/'));
    let uri: Uri = url.parse().map_err(|e| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            format!("invalid base URL {base:?}"),
        )
        .with_source(e)
    })?;
    match uri.scheme_str() {
        Some("http") | Some("https") if uri.host().is_some() => Ok(uri),
        _ => Err(ChatError::new(
            ErrorKind::InvalidRequest,
            format!("base URL {base:?} must be an absolute http:// or https:// URL"),
        )),
    }
}

pub(crate) fn parse_headers(headers: &[(String, String)]) -> Result<HeaderMap, ChatError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str()).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("invalid header name {name:?}"),
            )
            .with_source(e)
        })?;
        let value = HeaderValue::try_from(value.as_str()).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("invalid value for header {name}"),
            )
            .with_source(e)
        })?;
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

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
