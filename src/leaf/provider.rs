//! The part of a leaf that differs between providers.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::header::HeaderName;
use http::Uri;
use http_body_util::Full;

use crate::error::ChatError;
use crate::event::ChatEvent;
use crate::request::ChatRequest;
use crate::transport::WireDecoder;

/// One provider's wire format: how a [`ChatRequest`] is encoded, where it goes, how the key is sent and how the
/// answer (streamed, whole, or an error body) is read. [`ChatLeaf`](super::ChatLeaf) is generic over it and
/// does everything else (transport, timeouts, cancellation, metadata) the same way for every provider.
///
/// Implemented by [`OpenAi`](crate::openai::OpenAi) (Chat Completions, and every server that speaks it),
/// [`OpenAiResponses`](crate::responses::OpenAiResponses) (the Responses API),
/// [`Anthropic`](crate::anthropic::Anthropic) (the Messages API),
/// [`AnthropicVertex`](crate::anthropic::AnthropicVertex) (Messages on Vertex AI),
/// [`AzureOpenAi`](crate::azure::AzureOpenAi) (Chat Completions on Azure),
/// [`AzureResponses`](crate::azure::AzureResponses) (Responses on Azure),
/// [`Gemini`](crate::gemini::Gemini) (`generateContent`, Gemini API and Vertex AI)
/// and, with the `bedrock` feature, `Bedrock` (Converse, SigV4-signed). The trait is sealed: its methods work on
/// the crate's internal decoding machinery, which is not a public API.
pub trait Provider: sealed::ProviderWire + std::fmt::Debug + Send + Sync + 'static {}

/// The future of [`RequestSigner::sign`](sealed::RequestSigner::sign).
pub(crate) type SignFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ChatError>> + Send + 'a>>;

pub(crate) mod sealed {
    use super::*;

    /// Signs each request after it is built, for providers whose credential is a signature over the request
    /// (Bedrock's SigV4) rather than a key in a header.
    pub trait RequestSigner: Send + Sync {
        /// Add the signature's headers to `request`, whose body is `body`.
        fn sign<'a>(
            &'a self,
            request: &'a mut http::Request<Full<Bytes>>,
            body: &'a [u8],
        ) -> SignFuture<'a>;
    }

    /// What a [`Provider`](super::Provider) supplies to the generic leaf (sealed: not nameable outside the crate).
    pub trait ProviderWire {
        /// Maps the provider's streamed SSE events to chat events; a fresh one per response.
        type Decoder: WireDecoder + Default;
        /// The leaf's name in `Debug` output (`OpenAiChat`, `ResponsesChat`, `AnthropicChat`).
        const LEAF_NAME: &'static str;
        /// The API base URL when none is configured, up to and including `/v1`.
        const DEFAULT_BASE_URL: &'static str;
        /// The provider name [`ModelInfo`](crate::ModelInfo) reports when none is configured.
        const DEFAULT_PROVIDER_NAME: &'static str;
        /// The endpoint's path below the base URL.
        const PATH: &'static str;
        /// The `Accept` header of a streaming request.
        const STREAM_ACCEPT: &'static str = "text/event-stream";
        /// The request format this wire speaks, when a client could speak it too: carried fields and forwarded
        /// headers in it are sent ([`crate::Carried`]); `None` (Gemini, Bedrock) sends none.
        const API_FORMAT: Option<crate::ApiFormat> = None;
        /// Whether a query forwarded with the request's headers (Messages' `beta=true`) is added to the URL:
        /// not where the URL names a method of its own (Vertex AI's `:rawPredict`).
        const FORWARDS_QUERY: bool = true;

        /// Whether a part kept for a provider goes in this wire's body (false: it is left out of the call and
        /// named in the request's [`DroppedFields`](crate::DroppedFields)).
        fn keeps_part(&self, _part: &crate::ProviderPart) -> bool {
            false
        }

        /// The base URL a builder starts with (default [`DEFAULT_BASE_URL`](Self::DEFAULT_BASE_URL); Bedrock's
        /// depends on the region).
        fn default_base_url(&self) -> Cow<'static, str> {
            Cow::Borrowed(Self::DEFAULT_BASE_URL)
        }

        /// Checks the provider's own settings when the leaf is built (Bedrock needs a region).
        fn validate(&self) -> Result<(), ChatError> {
            Ok(())
        }

        /// The signer of every request, for providers that sign requests instead of sending a key (`None`, the
        /// default: the key goes in [`auth_header`](Self::auth_header)).
        fn request_signer(&self) -> Option<&dyn RequestSigner> {
            None
        }

        /// The endpoint's path (and query) below the base URL, fixed when the leaf is built (default
        /// [`PATH`](Self::PATH); Azure adds its `?api-version=`).
        fn endpoint_path(&self) -> Cow<'static, str> {
            Cow::Borrowed(Self::PATH)
        }

        /// The URL of one call, when it is not the endpoint built once from the base URL and
        /// [`endpoint_path`](Self::endpoint_path) (the default, `None`). Gemini names the model in the path
        /// and streams from another method; `default_model` is the leaf's model, for requests that name none.
        fn call_url(
            &self,
            _endpoint: &Uri,
            _request: &ChatRequest,
            _default_model: Option<&str>,
        ) -> Result<Option<Uri>, ChatError> {
            Ok(None)
        }

        /// The header the API key goes in, and the prefix before the key.
        fn auth_header(&self) -> (HeaderName, &'static str);

        /// Headers the provider always sends, checked at build time; configured headers come after them (and
        /// replace them when they have the same name).
        fn fixed_headers(&self) -> Result<Vec<(String, String)>, ChatError> {
            Ok(Vec::new())
        }

        /// Whether streamed responses report token usage (metadata for the layers above).
        fn supports_streaming_usage(&self) -> bool;

        /// The JSON body for `request`; `default_model` is the leaf's model, for requests that name none.
        fn encode(
            &self,
            request: &ChatRequest,
            default_model: Option<&str>,
        ) -> Result<Vec<u8>, ChatError>;

        /// The provider's message in an error response body.
        fn error_message(body: &[u8]) -> Option<String>;

        /// A typed detail of an error response (its headers and body), attached as the error's source (Azure's
        /// content filter categories, Bedrock's `x-amzn-errortype`); `None` by default.
        fn error_detail(
            _headers: &http::HeaderMap,
            _body: &[u8],
        ) -> Option<crate::error::BoxError> {
            None
        }

        /// The wait an error response's body asks for before a retry, where its headers name none (Gemini's
        /// `RetryInfo` detail); `None` by default.
        fn error_retry_after(_body: &[u8]) -> Option<std::time::Duration> {
            None
        }

        /// A whole (non-streaming) response body as chat events.
        fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError>;
    }
}
