//! Settings every HTTP leaf shares, and the builder methods that set them.

use bytes::Bytes;
use http::header::{HeaderName, ACCEPT, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, Uri};
use http_body_util::Full;

use crate::error::ChatError;
use crate::metadata::{known_context_window, ModelMetadata};
use crate::request::ChatRequest;
use crate::stream::ChatStream;
use crate::transport::{
    endpoint, parse_headers, HttpTransport, ProviderWire, Secret, Timeouts, WireDecoder,
};

/// What every leaf builder collects.
#[derive(Debug)]
pub(crate) struct LeafSettings {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<Secret>,
    pub(crate) model: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeouts: Timeouts,
    pub(crate) http2_prior_knowledge: bool,
    pub(crate) provider_name: String,
    pub(crate) supports_tools: bool,
    pub(crate) supports_parallel_tool_calls: bool,
    pub(crate) context_window: Option<u32>,
    pub(crate) transport: Option<HttpTransport>,
}

/// What a built leaf keeps (besides its transport).
pub(crate) struct LeafConfig {
    pub(crate) endpoint: Uri,
    pub(crate) api_key: Option<Secret>,
    pub(crate) default_model: Option<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) metadata: ModelMetadata,
}

impl LeafConfig {
    /// Post `body` for `request` and stream the answer: the shared body of every leaf's `call`.
    pub(crate) async fn execute<D: WireDecoder>(
        &self,
        transport: &HttpTransport,
        body: Vec<u8>,
        request: &ChatRequest,
        auth: (HeaderName, &str),
        wire: ProviderWire<D>,
    ) -> Result<ChatStream, ChatError> {
        let streaming = request.options.stream;
        let http_request = self.post_json(body, streaming, auth)?;
        let cancel = request.cancellation().cloned();
        transport
            .execute(http_request, streaming, self.api_key.as_ref(), cancel, wire)
            .await
    }

    /// A JSON `POST` to the endpoint; `auth` names the header the key goes in and its prefix.
    pub(crate) fn post_json(
        &self,
        body: Vec<u8>,
        streaming: bool,
        auth: (HeaderName, &str),
    ) -> Result<http::Request<Full<Bytes>>, ChatError> {
        let mut request = http::Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("tower-chat/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some(key) = &self.api_key {
            headers.insert(auth.0, key.header_value(auth.1)?);
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request)
    }
}

impl LeafSettings {
    pub(crate) fn new(base_url: &str, provider_name: &str) -> Self {
        LeafSettings {
            base_url: base_url.to_owned(),
            api_key: None,
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

    /// Validate and build; `path` is appended to the base URL.
    pub(crate) fn build(
        self,
        path: &str,
        supports_streaming_usage: bool,
    ) -> Result<(LeafConfig, HttpTransport), ChatError> {
        let endpoint = endpoint(&self.base_url, path)?;
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
            supports_streaming_usage,
        };
        let config = LeafConfig {
            endpoint,
            api_key: self.api_key,
            default_model: self.model,
            headers,
            metadata,
        };
        Ok((config, transport))
    }
}

/// The builder methods every leaf builder has; the builder keeps a `LeafSettings` in its `settings` field.
macro_rules! leaf_builder_methods {
    ($default_base:literal, $default_provider:literal) => {
        #[doc = concat!("The API base URL, up to and including `/v1` (default `", $default_base, "`).")]
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.settings.base_url = url.into();
            self
        }

        /// The API key. An empty key sends no key header. It never appears in `Debug` output or error messages.
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            let key = key.into();
            self.settings.api_key = (!key.is_empty()).then(|| $crate::transport::Secret::new(key));
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
        pub fn timeouts(mut self, timeouts: $crate::transport::Timeouts) -> Self {
            self.settings.timeouts = timeouts;
            self
        }

        /// Speak HTTP/2 over plain `http://` (h2c). Over `https://`, HTTP/2 is negotiated by ALPN anyway.
        pub fn http2_prior_knowledge(mut self, enabled: bool) -> Self {
            self.settings.http2_prior_knowledge = enabled;
            self
        }

        #[doc = concat!("The provider name reported by [`ModelInfo`](crate::ModelInfo) (default `", $default_provider, "`).")]
        pub fn provider_name(mut self, name: impl Into<String>) -> Self {
            self.settings.provider_name = name.into();
            self
        }

        /// Capabilities reported by [`ModelInfo`](crate::ModelInfo) (default: tools and parallel calls).
        pub fn capabilities(mut self, tools: bool, parallel_tool_calls: bool) -> Self {
            self.settings.supports_tools = tools;
            self.settings.supports_parallel_tool_calls = parallel_tool_calls;
            self
        }

        /// The context window reported by [`ModelInfo`](crate::ModelInfo) (default: looked up for well-known ids).
        pub fn context_window(mut self, tokens: u32) -> Self {
            self.settings.context_window = Some(tokens);
            self
        }

        /// Share an existing transport (and its connection pool) instead of building one.
        pub fn transport(mut self, transport: $crate::transport::HttpTransport) -> Self {
            self.settings.transport = Some(transport);
            self
        }
    };
}

pub(crate) use leaf_builder_methods;

/// A public byte-level decoder over one provider's event mapping, for callers with their own transport (a proxy
/// relaying bytes, a recorded stream) and for benchmarks.
macro_rules! byte_stream_decoder {
    ($(#[$doc:meta])* $name:ident, $wire:ty) => {
        $(#[$doc])*
        pub struct $name($crate::transport::EventDecoder<$wire>);

        impl $name {
            /// A decoder at the start of a response body.
            pub fn new() -> Self {
                $name($crate::transport::EventDecoder::new(<$wire>::default()))
            }

            /// Feed the next chunk of the body, split anywhere (copied; see [`feed_bytes`](Self::feed_bytes)).
            /// Decoding happens as events are taken with [`next_event`](Self::next_event).
            pub fn feed(&mut self, bytes: &[u8]) {
                self.0.feed(bytes);
            }

            /// Feed the next chunk of the body as `Bytes` (a hyper body frame, say), without copying it.
            pub fn feed_bytes(&mut self, bytes: ::bytes::Bytes) {
                self.0.push(bytes);
            }

            /// The body ended: a response the provider did not finish yields an error item.
            pub fn finish(&mut self) {
                self.0.end(None);
            }

            /// The next decoded event; after an error item there are no more.
            pub fn next_event(&mut self) -> Option<Result<$crate::ChatEvent, $crate::ChatError>> {
                self.0.next_item()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::new()
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use byte_stream_decoder;
