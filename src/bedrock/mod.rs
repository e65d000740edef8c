//! The Amazon Bedrock leaf (feature `bedrock`): the Converse API (`POST /model/{modelId}/converse`) and
//! ConverseStream (`/model/{modelId}/converse-stream`, an `application/vnd.amazon.eventstream` body) at
//! `https://bedrock-runtime.{region}.amazonaws.com`, every request SigV4-signed.
//!
//! Credentials come from a [`CredentialsProvider`]: by default the standard environment variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) and, with the `bedrock-profile` feature,
//! the shared files' profile ([`ProfileCredentials`], `AWS_PROFILE`) when those are not set; fixed
//! [`AwsCredentials`], or a provider of your own for credentials that refresh. The region comes from
//! [`region`](ChatLeafBuilder::region), else `AWS_REGION` / `AWS_DEFAULT_REGION` (else the profile's `region`
//! with `bedrock-profile`); a leaf without one is refused at build time. A Bedrock API key
//! ([`api_key`](ChatLeafBuilder::api_key)) is sent as a bearer token instead of a signature.
//!
//! Mapped: system text as `system` blocks; user text, images (`image` blocks from bytes, `data:` URLs or `s3://`
//! locations) and documents (`document` blocks: format from the media type, a name Converse accepts); tools as
//! `toolSpec`s with `inputSchema.json`, tool choice as `auto` / `any` / `tool`; `toolUse` blocks streamed as
//! tool-call fragments (`contentBlockDelta.delta.toolUse.input`); tool results as `toolResult` blocks (a JSON
//! object as `json`, other text as `text`, `status: error` for failures); `reasoningContent` kept as
//! [`ReasoningPart`](crate::ReasoningPart)s whose [`Continuation::Other`](crate::Continuation::Other) of provider
//! `bedrock` holds the `signature` or the `redactedContent`, sent back on the next round; a `cachePoint` after
//! every part, tool and system text with a [`CacheHint`](crate::CacheHint); usage with `cacheReadInputTokens` and
//! `cacheWriteInputTokens`; every `stopReason` as a [`FinishReason`](crate::FinishReason)
//! (`guardrail_intervened` and `content_filtered` as a content filter). Failures, over HTTP (`x-amzn-errortype`)
//! or as mid-stream exception frames, are typed errors whose source is a [`BedrockError`]: throttling is
//! [`RateLimited`](crate::ErrorKind::RateLimited), `modelStreamErrorException`, `internalServerException` and
//! `serviceUnavailableException` are [`Upstream`](crate::ErrorKind::Upstream) (both retryable, so the
//! resilience layer retries them), a validation failure is a bad request and access denied an authentication
//! failure. A JSON response format is asked for as a forced answer tool ([`crate::forced_answer`]), its call
//! returned as text. Not mapped: audio, media by `https:` URL or file id,
//! and [`ToolChoice::None`](crate::ToolChoice::None), which Converse does not have (the tools are sent without a
//! choice). The `metadata` event's latency is logged at `debug` level.
//!
//! ```
//! use tower::ServiceExt;
//! use tower_chat::bedrock::{AwsCredentials, BedrockChat};
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
//! // A scripted server stands in for `https://bedrock-runtime.us-east-1.amazonaws.com`.
//! let bedrock = ScriptedProvider::start(|_, _| Reply::bedrock_text("Hello from Bedrock")).await;
//! let leaf = BedrockChat::builder()
//!     .region("us-east-1")
//!     .base_url(bedrock.base_url())
//!     .credentials(AwsCredentials::new("AKIDEXAMPLE", "secret", None))
//!     .model("anthropic.claude-3-haiku-20240307-v1:0")
//!     .build()?;
//! let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
//! let reply = leaf.oneshot(request).await?.collect_response().await?;
//! assert_eq!(reply.text(), "Hello from Bedrock");
//! let sent = &bedrock.requests()[0];
//! assert_eq!(sent.path, "/v1/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream");
//! let authorization = sent.headers["authorization"].to_str().unwrap();
//! assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
//! assert_eq!(sent.body["system"][0]["text"], "Be brief.");
//! # Ok(()) }
//! ```

mod credentials;
mod decode;
mod error;
pub(crate) mod eventstream;
#[cfg(feature = "bedrock-profile")]
mod profile;
pub(crate) mod sign;
mod wire;

use std::borrow::Cow;
use std::sync::Arc;

use http::header::{HeaderName, AUTHORIZATION};
use http::Uri;

pub use credentials::{
    AwsCredentials, CredentialsFuture, CredentialsProvider, EnvironmentCredentials,
};
pub use error::BedrockError;
#[cfg(feature = "bedrock-profile")]
pub use profile::ProfileCredentials;

use crate::error::{ChatError, ErrorKind};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire, RequestSigner};
use crate::request::ChatRequest;
use crate::transport::{resolve_model, ToolsJson};
use wire::BEDROCK;

/// The Bedrock leaf service: [`ChatLeaf`] speaking [`Bedrock`]'s wire format.
pub type BedrockChat = ChatLeaf<Bedrock>;

/// Configures a [`BedrockChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`region`](ChatLeafBuilder::region), [`credentials`](ChatLeafBuilder::credentials) and
/// [`credentials_provider`](ChatLeafBuilder::credentials_provider).
pub type BedrockChatBuilder = ChatLeafBuilder<Bedrock>;

/// Decodes a ConverseStream body (AWS event-stream frames) into chat events, byte chunk by byte chunk.
///
/// ```
/// use tower_chat::{ChatEvent, FinishReason};
/// use tower_chat::test_server::bedrock_event;
///
/// let mut decoder = tower_chat::bedrock::StreamDecoder::new();
/// decoder.feed(&bedrock_event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#));
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::text("Hi"));
/// decoder.feed(&bedrock_event("messageStop", r#"{"stopReason":"end_turn"}"#));
/// decoder.finish(); // no metadata event came: the body's end ends the response
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::finish(FinishReason::Stop));
/// ```
pub type StreamDecoder = crate::leaf::StreamDecoder<Bedrock>;

/// Amazon Bedrock's Converse wire format, signed for one region.
#[derive(Clone, Debug)]
pub struct Bedrock {
    /// Shared by the provider's clones: one list offered to every call is serialised once.
    tools: Arc<ToolsJson>,
    signer: sign::Signer,
}

impl Default for Bedrock {
    /// The region and credentials of the environment (see the [module docs](self)).
    fn default() -> Self {
        Bedrock {
            tools: Arc::default(),
            signer: sign::Signer {
                region: region_from_env(),
                credentials: credentials::CredentialsCache::new(Arc::new(DefaultCredentials)),
            },
        }
    }
}

/// `AWS_REGION`, else `AWS_DEFAULT_REGION`, else (with `bedrock-profile`) the profile's `region`.
fn region_from_env() -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION"));
    #[cfg(feature = "bedrock-profile")]
    let region = region.or_else(|| ProfileCredentials::new().region());
    region
}

/// The regional endpoint of the Bedrock runtime.
fn regional_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// The environment variables, else (with `bedrock-profile`) the shared files' profile.
#[derive(Debug)]
struct DefaultCredentials;

impl CredentialsProvider for DefaultCredentials {
    fn credentials(&self) -> CredentialsFuture<'_> {
        Box::pin(async {
            let from_env = AwsCredentials::from_env();
            #[cfg(feature = "bedrock-profile")]
            if from_env.is_err() && std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
                return ProfileCredentials::new().load();
            }
            from_env
        })
    }
}

/// A model id (or an inference profile's or a model's ARN) as one URL path segment: everything but the
/// unreserved characters percent-encoded, so `:` and `/` stay inside the segment.
fn path_segment(model: &str) -> String {
    let mut out = String::with_capacity(model.len() + 8);
    for byte in model.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Provider for Bedrock {}

impl ProviderWire for Bedrock {
    type Decoder = decode::BedrockDecoder;
    const LEAF_NAME: &'static str = "BedrockChat";
    const DEFAULT_BASE_URL: &'static str = "https://bedrock-runtime.us-east-1.amazonaws.com";
    const DEFAULT_PROVIDER_NAME: &'static str = "bedrock";
    const PATH: &'static str = "model";

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        part.provider == BEDROCK
    }
    const STREAM_ACCEPT: &'static str = "application/vnd.amazon.eventstream";

    fn default_base_url(&self) -> Cow<'static, str> {
        match &self.signer.region {
            Some(region) => Cow::Owned(regional_url(region)),
            None => Cow::Borrowed(Self::DEFAULT_BASE_URL),
        }
    }

    fn validate(&self) -> Result<(), ChatError> {
        if self.signer.region.is_none() {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                "no AWS region: call region(..) on the builder or set AWS_REGION",
            ));
        }
        Ok(())
    }

    fn request_signer(&self) -> Option<&dyn RequestSigner> {
        Some(&self.signer)
    }

    fn call_url(
        &self,
        endpoint: &Uri,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Option<Uri>, ChatError> {
        let model = resolve_model(&request.options, default_model)?;
        wire::check_model(model)?;
        let method = if request.options.stream {
            "converse-stream"
        } else {
            "converse"
        };
        let url = format!("{endpoint}/{}/{method}", path_segment(model));
        url.parse().map(Some).map_err(|e| {
            ChatError::new(ErrorKind::InvalidRequest, format!("invalid URL {url:?}")).with_source(e)
        })
    }

    fn auth_header(&self) -> (HeaderName, &'static str) {
        (AUTHORIZATION, "Bearer ")
    }

    fn supports_streaming_usage(&self) -> bool {
        true
    }

    fn encode(
        &self,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Vec<u8>, ChatError> {
        let model = request.options.model.as_deref().or(default_model);
        wire::encode(request, &self.tools, model)
    }

    fn error_message(body: &[u8]) -> Option<String> {
        decode::payload_message(body)
    }

    fn error_detail(headers: &http::HeaderMap, body: &[u8]) -> Option<crate::error::BoxError> {
        let from_header = headers
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let error_type = from_header.or_else(|| {
            let value: serde_json::Value = serde_json::from_slice(body).ok()?;
            value.get("__type")?.as_str().map(str::to_owned)
        })?;
        let error_type = error_type.split(':').next().unwrap_or_default();
        // `__type` may carry a namespace before a `#`.
        let error_type = error_type.rsplit('#').next().unwrap_or_default();
        let message = decode::payload_message(body).unwrap_or_default();
        Some(Box::new(BedrockError::new(error_type, &message)))
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        decode::decode_whole(body)
    }
}

impl ChatLeafBuilder<Bedrock> {
    /// Call Bedrock in `region` (`us-east-1`, `eu-central-1`, …): requests are signed for it, and the base URL
    /// becomes its endpoint `https://bedrock-runtime.{region}.amazonaws.com` unless one of your own was set
    /// (a VPC endpoint, a proxy, a test server).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        let region = region.into();
        if is_regional_url(self.configured_base_url()) {
            self = self.base_url(regional_url(&region));
        }
        self.provider.signer.region = Some(region);
        self
    }

    /// Sign with these fixed credentials.
    pub fn credentials(self, credentials: AwsCredentials) -> Self {
        self.credentials_provider(credentials)
    }

    /// Sign with credentials from `provider`, asked again shortly before they expire.
    pub fn credentials_provider(mut self, provider: impl CredentialsProvider) -> Self {
        self.provider.signer.credentials = credentials::CredentialsCache::new(Arc::new(provider));
        self
    }
}

fn is_regional_url(url: &str) -> bool {
    url.starts_with("https://bedrock-runtime.")
        && url.trim_end_matches('/').ends_with(".amazonaws.com")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, ModelInfo};

    fn leaf() -> BedrockChat {
        BedrockChat::builder()
            .region("eu-west-3")
            .credentials(AwsCredentials::new("AKID", "secret", None))
            .build()
            .unwrap()
    }

    #[test]
    fn the_model_id_is_one_encoded_path_segment_and_the_method_follows() {
        let leaf = leaf();
        assert_eq!(
            leaf.endpoint().to_string(),
            "https://bedrock-runtime.eu-west-3.amazonaws.com/model"
        );
        let url = |request: &ChatRequest| {
            Bedrock::default()
                .call_url(
                    leaf.endpoint(),
                    request,
                    Some("anthropic.claude-3-haiku-20240307-v1:0"),
                )
                .unwrap()
                .unwrap()
                .to_string()
        };
        let streamed = ChatRequest::new(vec![Message::user("hi")]).stream(true);
        assert_eq!(
            url(&streamed),
            "https://bedrock-runtime.eu-west-3.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
        );
        let profile = ChatRequest::new(vec![Message::user("hi")])
            .stream(false)
            .model(
                "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.amazon.nova-lite-v1:0",
            );
        assert_eq!(
            url(&profile),
            "https://bedrock-runtime.eu-west-3.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aeu-west-3%3A123456789012%3Ainference-profile%2Feu.amazon.nova-lite-v1%3A0/converse"
        );
        let bad = ChatRequest::new(vec![Message::user("hi")]).model("two words");
        let error = Bedrock::default()
            .call_url(leaf.endpoint(), &bad, None)
            .unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
        assert_eq!(leaf.model_metadata().provider, "bedrock");
    }

    #[test]
    fn a_custom_base_url_survives_the_region_and_a_missing_region_is_refused() {
        let custom = BedrockChat::builder()
            .base_url("http://127.0.0.1:9/v1")
            .region("us-west-2")
            .build()
            .unwrap();
        assert_eq!(custom.endpoint().to_string(), "http://127.0.0.1:9/v1/model");
        let mut unset = BedrockChat::builder();
        unset.provider.signer.region = None;
        let error = unset.build().unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
        assert!(
            error.message().contains("AWS_REGION"),
            "{}",
            error.message()
        );
    }

    #[test]
    fn credentials_never_show_in_debug_output() {
        let leaf = BedrockChat::builder()
            .region("us-east-1")
            .credentials(AwsCredentials::new(
                "AKIDSHOWN",
                "wJalrXUtnFEMIhidden",
                Some("tokenhidden".into()),
            ))
            .build()
            .unwrap();
        let shown = format!("{leaf:?}");
        assert!(
            !shown.contains("wJalrXUtnFEMIhidden") && !shown.contains("tokenhidden"),
            "{shown}"
        );
    }
}
