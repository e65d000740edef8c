//! The part of a leaf that differs between providers.

use std::borrow::Cow;

use http::header::HeaderName;
use http::Uri;

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
/// [`Anthropic`](crate::anthropic::Anthropic) (the Messages API), [`AzureOpenAi`](crate::azure::AzureOpenAi)
/// (Chat Completions on Azure) and [`Gemini`](crate::gemini::Gemini) (`generateContent`, Gemini API and Vertex AI). The trait is sealed: its methods work on the
/// crate's internal decoding machinery, which is not a public API.
pub trait Provider: sealed::ProviderWire + std::fmt::Debug + Send + Sync + 'static {}

pub(crate) mod sealed {
    use super::*;

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

        /// A typed detail of an error response body, attached as the error's source (Azure's content filter
        /// categories); `None` by default.
        fn error_detail(_body: &[u8]) -> Option<crate::error::BoxError> {
            None
        }

        /// A whole (non-streaming) response body as chat events.
        fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError>;
    }
}
