//! Claude on Vertex AI: the Messages wire format at `…/publishers/anthropic/models/{model}:rawPredict`
//! (`:streamRawPredict` when streaming), the model in the URL instead of the body, the API version in the body
//! as `anthropic_version`, and an OAuth bearer token from a [`TokenProvider`](crate::leaf::TokenProvider).
//! Requests, answers and streams are the Messages API's own ([`Anthropic`]'s code).

use http::header::{HeaderName, AUTHORIZATION};
use http::Uri;

use super::messages::Anthropic;
use super::{decode, wire};
use crate::error::{ChatError, ErrorKind};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::transport::resolve_model;

/// The `anthropic_version` Vertex AI takes in the body unless configured otherwise.
pub const VERTEX_API_VERSION: &str = "vertex-2023-10-16";

/// Claude on Vertex AI: [`ChatLeaf`] speaking [`AnthropicVertex`]'s wire format.
///
/// ```
/// use tower::ServiceExt;
/// use tower_chat::anthropic::AnthropicVertexChat;
/// use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
/// use tower_chat::test_server::{Reply, ScriptedProvider};
/// use tower_chat::{ChatRequest, ChatStreamExt, Message};
///
/// #[derive(Debug)]
/// struct Fixed;
///
/// impl TokenProvider for Fixed {
///     fn fetch_token(&self) -> TokenFuture<'_> {
///         Box::pin(async { Ok(AccessToken::new("ya29.token", None)) })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
/// let vertex = ScriptedProvider::start(|_, _| {
///     Reply::json(200, serde_json::json!({
///         "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
///         "content": [{"type": "text", "text": "Hello from Vertex AI"}],
///         "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 4}
///     }))
/// })
/// .await;
/// // `vertex("my-project", "us-east5")` names the real host; a scripted server stands in for it here.
/// let leaf = AnthropicVertexChat::builder()
///     .vertex("my-project", "us-east5")
///     .base_url(format!(
///         "http://{}/v1/projects/my-project/locations/us-east5/publishers/anthropic",
///         vertex.addr()
///     ))
///     .token_provider(Fixed)
///     .model("claude-sonnet-4-5@20250929")
///     .build()?;
/// let request = ChatRequest::new(vec![Message::user("Hi")]).stream(false);
/// let reply = leaf.oneshot(request).await?.collect_response().await?;
/// assert_eq!(reply.text(), "Hello from Vertex AI");
/// let sent = &vertex.requests()[0];
/// assert_eq!(
///     sent.path,
///     "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
/// );
/// assert_eq!(sent.headers["authorization"], "Bearer ya29.token");
/// assert_eq!(sent.body["anthropic_version"], "vertex-2023-10-16");
/// assert!(sent.body.get("model").is_none());
/// # Ok(()) }
/// ```
pub type AnthropicVertexChat = ChatLeaf<AnthropicVertex>;

/// Configures an [`AnthropicVertexChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`vertex`](ChatLeafBuilder::vertex) (the project and location), [`anthropic_version`](ChatLeafBuilder::anthropic_version)
/// and [`default_max_tokens`](ChatLeafBuilder::default_max_tokens).
pub type AnthropicVertexChatBuilder = ChatLeafBuilder<AnthropicVertex>;

/// The Messages wire format as Vertex AI serves it (see [`AnthropicVertexChat`]). It has no default base URL:
/// name the project and location with [`vertex`](ChatLeafBuilder::vertex), or the full URL with
/// [`base_url`](ChatLeafBuilder::base_url).
#[derive(Clone, Debug)]
pub struct AnthropicVertex {
    /// The Messages code: its `max_tokens` default and its tools cache.
    messages: Anthropic,
    version: String,
}

impl Default for AnthropicVertex {
    fn default() -> Self {
        AnthropicVertex {
            messages: Anthropic::default(),
            version: VERTEX_API_VERSION.to_owned(),
        }
    }
}

impl Provider for AnthropicVertex {}

impl ProviderWire for AnthropicVertex {
    type Decoder = decode::MessageDecoder;
    const LEAF_NAME: &'static str = "AnthropicVertexChat";
    const DEFAULT_BASE_URL: &'static str = "";
    const DEFAULT_PROVIDER_NAME: &'static str = "vertex_ai";
    const PATH: &'static str = "models";
    const API_FORMAT: Option<crate::ApiFormat> = Some(crate::ApiFormat::Messages);
    const FORWARDS_QUERY: bool = false;

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        self.messages.keeps_part(part)
    }

    fn call_url(
        &self,
        endpoint: &Uri,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Option<Uri>, ChatError> {
        let model = resolve_model(&request.options, default_model)?;
        if model.is_empty()
            || model.contains(['/', '?', '#', ':', '%'])
            || model.contains(char::is_whitespace)
        {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!("{model:?} is not a Vertex AI model id"),
            )
            .refused_before_sending());
        }
        let method = if request.options.stream {
            "streamRawPredict"
        } else {
            "rawPredict"
        };
        let url = format!("{endpoint}/{model}:{method}");
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
        wire::encode(
            request,
            &wire::EncodeOptions {
                default_model,
                default_max_tokens: self.messages.default_max_tokens,
                tools: &self.messages.tools,
                anthropic_version: Some(&self.version),
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

impl ChatLeafBuilder<AnthropicVertex> {
    /// Call Claude on Vertex AI in `project` at `location` (`us-east5`, `europe-west1`, `global`, …): the base URL
    /// becomes `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/
    /// publishers/anthropic` (`aiplatform.googleapis.com` for `global`). Vertex AI takes OAuth bearer tokens:
    /// configure a [`token_provider`](ChatLeafBuilder::token_provider).
    pub fn vertex(self, project: &str, location: &str) -> Self {
        let host = if location == "global" {
            "aiplatform.googleapis.com".to_owned()
        } else {
            format!("{location}-aiplatform.googleapis.com")
        };
        self.base_url(format!(
            "https://{host}/v1/projects/{project}/locations/{location}/publishers/anthropic"
        ))
    }

    /// The body's `anthropic_version` (default [`VERTEX_API_VERSION`]).
    pub fn anthropic_version(mut self, version: impl Into<String>) -> Self {
        self.provider.version = version.into();
        self
    }

    /// `max_tokens` for requests that set no `max_output_tokens` (the API requires one; default: the model's
    /// own output maximum, [`output_limits::max_output_tokens`](crate::output_limits::max_output_tokens)).
    pub fn default_max_tokens(mut self, tokens: u32) -> Self {
        self.provider.messages.default_max_tokens = Some(tokens);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, ModelInfo};

    fn url(leaf: &AnthropicVertexChat, request: &ChatRequest) -> Result<String, ChatError> {
        AnthropicVertex::default()
            .call_url(leaf.endpoint(), request, Some("claude-sonnet-4-5@20250929"))
            .map(|url| url.unwrap().to_string())
    }

    #[test]
    fn the_url_names_project_location_model_and_method() {
        let leaf = AnthropicVertexChat::builder()
            .vertex("my-project", "us-east5")
            .build()
            .unwrap();
        let whole = ChatRequest::new(vec![Message::user("hi")]).stream(false);
        assert_eq!(
            url(&leaf, &whole).unwrap(),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
        );
        let streamed = ChatRequest::new(vec![Message::user("hi")])
            .stream(true)
            .model("claude-haiku-4-5");
        assert!(url(&leaf, &streamed)
            .unwrap()
            .ends_with("/models/claude-haiku-4-5:streamRawPredict"));
        let global = AnthropicVertexChat::builder()
            .vertex("p", "global")
            .build()
            .unwrap();
        assert!(url(&global, &whole).unwrap().starts_with(
            "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/anthropic/models/"
        ));
        assert_eq!(leaf.model_metadata().provider, "vertex_ai");
    }

    #[test]
    fn a_model_id_that_would_change_the_url_is_refused_before_sending() {
        let leaf = AnthropicVertexChat::builder()
            .vertex("p", "us-east5")
            .build()
            .unwrap();
        for model in ["../x", "a:b", "a?b", "a b", "a%2Fb", ""] {
            let request = ChatRequest::new(vec![Message::user("hi")]).model(model);
            let err = url(&leaf, &request).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::InvalidRequest, "{model:?}");
        }
    }

    #[test]
    fn without_a_project_and_location_there_is_no_url_to_call() {
        let err = AnthropicVertexChat::builder().build().unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    }

    #[test]
    fn the_body_carries_the_version_and_no_model() {
        let provider = AnthropicVertex::default();
        let request = ChatRequest::new(vec![Message::system("be brief"), Message::user("hi")]);
        let body: serde_json::Value = serde_json::from_slice(
            &provider
                .encode(&request, Some("claude-sonnet-4-5@20250929"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(body["anthropic_version"], VERTEX_API_VERSION);
        assert!(body.get("model").is_none(), "{body}");
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 64_000);
        let messages: serde_json::Value = serde_json::from_slice(
            &Anthropic::default()
                .encode(&request, Some("claude-sonnet-4-5"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(messages["model"], "claude-sonnet-4-5");
        assert!(messages.get("anthropic_version").is_none());
    }
}
