//! The generic HTTP leaf: [`ChatLeaf`] over a [`Provider`]'s wire format, its builder, and the byte-level
//! [`StreamDecoder`] for bodies that arrive some other way.
//!
//! Every leaf works the same: a builder collects the base URL, key, default model, headers, timeouts and the
//! metadata [`ModelInfo`] reports; `build()` checks them and returns a cheap-to-clone service whose `call`
//! encodes the request with the provider's wire format, posts it through the shared [`HttpTransport`], and
//! streams the answer. [`OpenAiChat`](crate::openai::OpenAiChat),
//! [`ResponsesChat`](crate::responses::ResponsesChat), [`AnthropicChat`](crate::anthropic::AnthropicChat),
//! [`AzureOpenAiChat`](crate::azure::AzureOpenAiChat), [`GeminiChat`](crate::gemini::GeminiChat) and, with the
//! `bedrock` feature, `BedrockChat` (signing each request instead of sending a key) are this leaf with each
//! provider.

mod foreign;
mod provider;
mod token;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, Uri};
use http_body_util::Full;

pub(crate) use provider::sealed::{ProviderWire, RequestSigner};
pub use provider::Provider;
#[cfg(feature = "bedrock")]
pub(crate) use provider::SignFuture;
pub use token::{AccessToken, TokenFuture, TokenProvider};
use token::{TokenCache, DEFAULT_REFRESH_MARGIN};

use crate::error::{ChatError, ErrorKind};
use crate::event::ChatEvent;
use crate::message::CallKind;
use crate::metadata::{known_context_window, ModelInfo, ModelMetadata};
use crate::request::ChatRequest;
use crate::stream::ChatStream;
use crate::transport::{endpoint, parse_headers, EventDecoder, HttpTransport, Secret, Timeouts};

/// An HTTP leaf service speaking provider `P`'s wire format. Cheap to clone: clones share configuration and the
/// connection pool. Build one with [`ChatLeaf::builder`] (through the aliases
/// [`OpenAiChat`](crate::openai::OpenAiChat) and [`AnthropicChat`](crate::anthropic::AnthropicChat)).
pub struct ChatLeaf<P> {
    shared: Arc<Shared<P>>,
}

/// What every clone of a leaf shares. The transport is here too: cloning hyper's client clones half a dozen
/// `Arc`s, and a leaf is cloned for every call (its future owns it).
struct Shared<P> {
    leaf: LeafConfig,
    provider: P,
    transport: HttpTransport,
}

impl<P> Clone for ChatLeaf<P> {
    fn clone(&self) -> Self {
        ChatLeaf {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<P: Provider> fmt::Debug for ChatLeaf<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leaf = &self.shared.leaf;
        f.debug_struct(P::LEAF_NAME)
            .field("endpoint", &leaf.endpoint)
            .field("api_key", &leaf.api_key.as_ref().map(|_| "[redacted]"))
            .field("token_provider", &leaf.token)
            .field("default_model", &leaf.default_model)
            .field("transport", &self.shared.transport)
            .finish_non_exhaustive()
    }
}

impl<P: Provider + Default> ChatLeaf<P> {
    /// Configure a leaf.
    pub fn builder() -> ChatLeafBuilder<P> {
        ChatLeafBuilder::default()
    }
}

impl<P: Provider> ChatLeaf<P> {
    /// The full URL requests go to.
    pub fn endpoint(&self) -> &Uri {
        &self.shared.leaf.endpoint
    }

    /// The HTTP client this leaf sends through (shared with its clones), e.g. to read its
    /// [`stale_connections`](HttpTransport::stale_connections) count.
    pub fn transport(&self) -> &HttpTransport {
        &self.shared.transport
    }
}

impl<P: Provider> tower_service::Service<ChatRequest> for ChatLeaf<P> {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.shared.transport.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let shared = &*this.shared;
            let default_model = shared.leaf.default_model.as_deref();
            let request = foreign::for_upstream(request, P::API_FORMAT, |part| {
                shared.provider.keeps_part(part)
            })?;
            // The fields carried for this format are set in the same pass as the provider's own extras.
            let body = shared.provider.encode(&request, default_model)?;
            let url = shared
                .provider
                .call_url(&shared.leaf.endpoint, &request, default_model)?;
            let stream = shared
                .leaf
                .execute::<P>(
                    &shared.transport,
                    body,
                    url,
                    &request,
                    shared.provider.auth_header(),
                    shared.provider.request_signer(),
                )
                .await?;
            Ok(mark_custom_calls(stream, &request))
        })
    }
}

/// `stream` with each call of one of the request's freeform tools marked [`CallKind::Custom`]: a provider
/// that took the tool as a function answers with a function call, and the layers above (and a Responses
/// client) must know it for what it is.
fn mark_custom_calls(stream: ChatStream, request: &ChatRequest) -> ChatStream {
    let names: Vec<String> = request
        .options
        .tools
        .iter()
        .filter(|tool| tool.is_custom())
        .map(|tool| tool.name.clone())
        .collect();
    if names.is_empty() {
        return stream;
    }
    Box::pin(futures_util::StreamExt::map(
        stream,
        move |item| match item {
            Ok(ChatEvent::ToolCallEnd { index, mut call }) if names.contains(&call.name) => {
                call.kind = CallKind::Custom;
                Ok(ChatEvent::ToolCallEnd { index, call })
            }
            other => other,
        },
    ))
}

impl<P: Provider> ChatLeaf<P> {
    /// `method` to `path` below the base URL (`messages/count_tokens`, `models`), with the leaf's credential and
    /// headers and `body` as JSON, answered with the whole response body: the provider's endpoints beside the
    /// chat call. A failure status is the typed error a chat call would get.
    pub async fn fetch(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, ChatError> {
        let shared = &*self.shared;
        let config = &shared.leaf;
        let url = endpoint(&config.base_url, path)?;
        let token = match &config.token {
            Some(cache) => Some(cache.token().await?),
            None => None,
        };
        let credential = match &token {
            Some(token) => Some((token, (AUTHORIZATION, "Bearer "))),
            None => config
                .api_key
                .as_ref()
                .map(|key| (key, shared.provider.auth_header())),
        };
        let body = Bytes::from(body.unwrap_or_default());
        let mut request = config.post_json(body.clone(), Some(url), false, "", credential)?;
        *request.method_mut() = method;
        if let Some(signer) = shared.provider.request_signer() {
            signer.sign(&mut request, &body).await?;
        }
        shared.transport.fetch::<P>(request).await
    }
}

impl<P: Provider> ModelInfo for ChatLeaf<P> {
    fn model_metadata(&self) -> ModelMetadata {
        self.shared.leaf.metadata.clone()
    }
}

/// What every leaf builder collects.
#[derive(Debug)]
struct LeafSettings {
    base_url: String,
    api_key: Option<Secret>,
    token_provider: Option<Arc<dyn TokenProvider>>,
    token_refresh_margin: Duration,
    model: Option<String>,
    headers: Vec<(String, String)>,
    timeouts: Timeouts,
    http2_prior_knowledge: bool,
    provider_name: String,
    supports_tools: bool,
    supports_parallel_tool_calls: bool,
    context_window: Option<u32>,
    transport: Option<HttpTransport>,
}

/// What a built leaf keeps (besides its transport).
struct LeafConfig {
    endpoint: Uri,
    /// The base URL, for the provider's endpoints beside the chat call.
    base_url: String,
    api_key: Option<Secret>,
    /// Bearer tokens from a [`TokenProvider`], instead of the key.
    token: Option<TokenCache>,
    default_model: Option<String>,
    headers: HeaderMap,
    metadata: ModelMetadata,
}

impl LeafConfig {
    /// Post `body` for `request` (to `url`, or the endpoint) and stream the answer: the shared body of every
    /// leaf's `call`.
    async fn execute<P: ProviderWire>(
        &self,
        transport: &HttpTransport,
        body: Vec<u8>,
        url: Option<Uri>,
        request: &ChatRequest,
        auth: (HeaderName, &str),
        signer: Option<&dyn RequestSigner>,
    ) -> Result<ChatStream, ChatError> {
        let streaming = request.options.stream;
        let token = match &self.token {
            Some(cache) => Some(cache.token().await?),
            None => None,
        };
        let credential = match &token {
            Some(token) => Some((token, (AUTHORIZATION, "Bearer "))),
            None => self.api_key.as_ref().map(|key| (key, auth)),
        };
        let body = Bytes::from(body);
        // Only a signing provider keeps a handle on the body: cloning `Bytes` made from a `Vec` allocates.
        let signed = signer.map(|signer| (signer, body.clone()));
        let forwarded = request
            .extensions
            .get::<crate::ForwardedHeaders>()
            .filter(|f| Some(f.format()) == P::API_FORMAT);
        let query = forwarded
            .and_then(|f| f.query_string())
            .filter(|_| P::FORWARDS_QUERY);
        let url = match query {
            Some(query) => Some(with_query(
                url.unwrap_or_else(|| self.endpoint.clone()),
                query,
            )?),
            None => url,
        };
        let mut http_request =
            self.post_json(body, url, streaming, P::STREAM_ACCEPT, credential)?;
        if let Some(forwarded) = forwarded {
            for (name, value) in forwarded.headers() {
                http_request.headers_mut().append(name, value.clone());
            }
        }
        if let Some((signer, body)) = signed {
            signer.sign(&mut http_request, &body).await?;
        }
        let cancel = request.cancellation().cloned();
        transport
            .execute::<P>(http_request, streaming, cancel)
            .await
    }

    /// A JSON `POST` to `url` or the endpoint; `credential` is the secret, the header it goes in and its prefix.
    fn post_json(
        &self,
        body: Bytes,
        url: Option<Uri>,
        streaming: bool,
        stream_accept: &'static str,
        credential: Option<(&Secret, (HeaderName, &str))>,
    ) -> Result<http::Request<Full<Bytes>>, ChatError> {
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = url.unwrap_or_else(|| self.endpoint.clone());
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if streaming {
            stream_accept
        } else {
            "application/json"
        };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("tower-chat/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some((secret, (name, prefix))) = credential {
            headers.insert(name, secret.header_value(prefix)?);
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request)
    }
}

/// `uri` with `query` added to its own.
fn with_query(uri: Uri, query: &str) -> Result<Uri, ChatError> {
    let mut parts = uri.into_parts();
    let path = parts
        .path_and_query
        .as_ref()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let joined = if path.contains('?') {
        format!("{path}&{query}")
    } else {
        format!("{path}?{query}")
    };
    parts.path_and_query = Some(joined.parse().map_err(|_| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            "a forwarded query is not a valid URL query",
        )
    })?);
    Uri::from_parts(parts).map_err(|_| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            "a forwarded query is not a valid URL query",
        )
    })
}

impl LeafSettings {
    fn new(base_url: &str, provider_name: &str) -> Self {
        LeafSettings {
            base_url: base_url.to_owned(),
            api_key: None,
            token_provider: None,
            token_refresh_margin: DEFAULT_REFRESH_MARGIN,
            model: None,
            headers: Vec::new(),
            timeouts: Timeouts::default(),
            http2_prior_knowledge: false,
            provider_name: provider_name.to_owned(),
            supports_tools: true,
            supports_parallel_tool_calls: true,
            context_window: None,
            transport: None,
        }
    }

    /// Validate and build; `path` is appended to the base URL, `fixed_headers` go before the configured ones.
    fn build(
        self,
        path: &str,
        fixed_headers: Vec<(String, String)>,
        supports_streaming_usage: bool,
    ) -> Result<(LeafConfig, HttpTransport), ChatError> {
        let endpoint = endpoint(&self.base_url, path)?;
        if self.api_key.is_some() && self.token_provider.is_some() {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                "both an API key and a token provider are configured: a leaf sends one credential",
            ));
        }
        let mut all_headers = fixed_headers;
        all_headers.extend(self.headers);
        let headers = parse_headers(&all_headers)?;
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
            supports_streaming_usage,
        };
        let config = LeafConfig {
            endpoint,
            base_url: self.base_url,
            api_key: self.api_key,
            token: self
                .token_provider
                .map(|provider| TokenCache::new(provider, self.token_refresh_margin)),
            default_model: self.model,
            headers,
            metadata,
        };
        Ok((config, transport))
    }
}

/// Configures a [`ChatLeaf`]: the settings every provider shares are here; provider-specific ones are on
/// `ChatLeafBuilder<OpenAi>` and `ChatLeafBuilder<Anthropic>` (see [`OpenAiChatBuilder`](crate::openai::OpenAiChatBuilder)
/// and [`AnthropicChatBuilder`](crate::anthropic::AnthropicChatBuilder)).
#[derive(Debug)]
pub struct ChatLeafBuilder<P> {
    settings: LeafSettings,
    pub(crate) provider: P,
}

impl<P: Provider + Default> Default for ChatLeafBuilder<P> {
    fn default() -> Self {
        let provider = P::default();
        ChatLeafBuilder {
            settings: LeafSettings::new(&provider.default_base_url(), P::DEFAULT_PROVIDER_NAME),
            provider,
        }
    }
}

impl<P: Provider> ChatLeafBuilder<P> {
    /// The API base URL, up to and including `/v1` (default: the provider's public API,
    /// `https://api.openai.com/v1` or `https://api.anthropic.com/v1`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.settings.base_url = url.into();
        self
    }

    /// The base URL configured so far.
    #[cfg(feature = "bedrock")]
    pub(crate) fn configured_base_url(&self) -> &str {
        &self.settings.base_url
    }

    /// The API key. An empty key sends no key header. It never appears in `Debug` output or error messages.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.settings.api_key = (!key.is_empty()).then(|| Secret::new(key));
        self
    }

    /// Bearer tokens from `provider` instead of a static key (Azure Entra ID, Vertex AI's OAuth tokens), sent
    /// as `Authorization: Bearer`. A token is kept until a minute before it expires (see
    /// [`token_refresh_margin`](Self::token_refresh_margin)) and fetched by one call at a time; a failing
    /// provider fails the call with its own error, before anything is sent. Configuring both a key and a
    /// token provider is refused at build time.
    pub fn token_provider(mut self, provider: impl TokenProvider) -> Self {
        self.settings.token_provider = Some(Arc::new(provider));
        self
    }

    /// How long before its expiry a token from the [`token_provider`](Self::token_provider) is replaced
    /// (default one minute).
    pub fn token_refresh_margin(mut self, margin: Duration) -> Self {
        self.settings.token_refresh_margin = margin;
        self
    }

    /// The model used when a request names none.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.settings.model = Some(model.into());
        self
    }

    /// An extra header on every request.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.headers.push((name.into(), value.into()));
        self
    }

    /// Connect / first-byte / idle deadlines.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.settings.timeouts = timeouts;
        self
    }

    /// Speak HTTP/2 over plain `http://` (h2c). Over `https://`, HTTP/2 is negotiated by ALPN anyway.
    pub fn http2_prior_knowledge(mut self, enabled: bool) -> Self {
        self.settings.http2_prior_knowledge = enabled;
        self
    }

    /// The provider name reported by [`ModelInfo`] (default `openai` or `anthropic`).
    pub fn provider_name(mut self, name: impl Into<String>) -> Self {
        self.settings.provider_name = name.into();
        self
    }

    /// Capabilities reported by [`ModelInfo`] (default: tools and parallel calls).
    pub fn capabilities(mut self, tools: bool, parallel_tool_calls: bool) -> Self {
        self.settings.supports_tools = tools;
        self.settings.supports_parallel_tool_calls = parallel_tool_calls;
        self
    }

    /// The context window reported by [`ModelInfo`] (default: looked up for well-known ids).
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.settings.context_window = Some(tokens);
        self
    }

    /// Share an existing transport (and its connection pool) instead of building one.
    pub fn transport(mut self, transport: HttpTransport) -> Self {
        self.settings.transport = Some(transport);
        self
    }

    /// Build the leaf; the base URL and headers are validated here.
    pub fn build(self) -> Result<ChatLeaf<P>, ChatError> {
        self.provider.validate()?;
        let fixed_headers = self.provider.fixed_headers()?;
        let supports_streaming_usage = self.provider.supports_streaming_usage();
        let path = self.provider.endpoint_path();
        let (leaf, transport) =
            self.settings
                .build(&path, fixed_headers, supports_streaming_usage)?;
        Ok(ChatLeaf {
            shared: Arc::new(Shared {
                leaf,
                provider: self.provider,
                transport,
            }),
        })
    }
}

/// Decodes provider `P`'s SSE response body into chat events, byte chunk by byte chunk: the leaf's own decoder,
/// for callers with their own transport (a proxy relaying bytes, a recorded stream) and for benchmarks. Use it
/// as [`openai::StreamDecoder`](crate::openai::StreamDecoder),
/// [`responses::StreamDecoder`](crate::responses::StreamDecoder) or
/// [`anthropic::StreamDecoder`](crate::anthropic::StreamDecoder).
pub struct StreamDecoder<P: Provider> {
    decoder: EventDecoder<P::Decoder>,
    provider: PhantomData<fn() -> P>,
}

impl<P: Provider> StreamDecoder<P> {
    /// A decoder at the start of a response body.
    pub fn new() -> Self {
        StreamDecoder {
            decoder: EventDecoder::new(P::Decoder::default()),
            provider: PhantomData,
        }
    }

    /// Feed the next chunk of the body, split anywhere (copied; see [`feed_bytes`](Self::feed_bytes)).
    /// Decoding happens as events are taken with [`next_event`](Self::next_event).
    pub fn feed(&mut self, bytes: &[u8]) {
        self.decoder.feed(bytes);
    }

    /// Feed the next chunk of the body as `Bytes` (a hyper body frame, say), without copying it.
    pub fn feed_bytes(&mut self, bytes: Bytes) {
        self.decoder.push(bytes);
    }

    /// The body ended: a response the provider did not finish yields an error item.
    pub fn finish(&mut self) {
        self.decoder.end(None);
    }

    /// The next decoded event; after an error item there are no more.
    pub fn next_event(&mut self) -> Option<Result<ChatEvent, ChatError>> {
        self.decoder.next_item()
    }
}

impl<P: Provider> Default for StreamDecoder<P> {
    fn default() -> Self {
        StreamDecoder::new()
    }
}

impl<P: Provider> fmt::Debug for StreamDecoder<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamDecoder").finish_non_exhaustive()
    }
}
