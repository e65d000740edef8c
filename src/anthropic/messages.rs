//! The Messages API's own wire format: [`Anthropic`], the provider of [`AnthropicChat`](super::AnthropicChat).

use std::sync::Arc;

use http::header::HeaderName;
use http::HeaderValue;

use super::{decode, wire};
use crate::error::{ChatError, ErrorKind};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::transport::ToolsJson;

/// The Messages API version sent in `anthropic-version` unless configured otherwise.
pub const DEFAULT_API_VERSION: &str = "2023-06-01";

/// The Messages API wire format (`POST {base_url}/messages`, `x-api-key`, `anthropic-version`), with its two
/// settings: the API version and the `max_tokens` sent when a request sets none.
#[derive(Clone, Debug)]
pub struct Anthropic {
    api_version: String,
    /// `None`: the model's own maximum ([`crate::output_limits`]).
    pub(super) default_max_tokens: Option<u32>,
    /// Shared by the provider's clones (the leaf's clones): one list offered to every call is serialised once.
    pub(super) tools: Arc<ToolsJson>,
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
