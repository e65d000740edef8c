//! The Gemini leaf: Google's `generateContent` wire format, on the Gemini API
//! (`{base}/models/{model}:generateContent`, `:streamGenerateContent?alt=sse` when streaming, the key in
//! `x-goog-api-key`) and on Vertex AI (`…/projects/{p}/locations/{l}/publishers/google/models/{model}:…`, an OAuth
//! bearer token from a [`TokenProvider`](crate::leaf::TokenProvider)).
//!
//! Mapped: system messages as `systemInstruction`; user images, audio and files as `inlineData` (bytes, `data:`
//! URLs) or `fileData` (URLs, uploaded files); tools as `functionDeclarations` with their JSON Schemas as
//! `parametersJsonSchema` and answer schemas as `responseJsonSchema` (or, for models that do not take JSON
//! Schema, lowered to Gemini's OpenAPI subset: [`SchemaForm`]); tool choice as `toolConfig`; function calls, which Gemini sends whole and several per turn;
//! tool results as `functionResponse`; each part's `thoughtSignature`, kept in the assistant message and sent
//! back on the same part (Gemini refuses a function-calling continuation without it); thought summaries as
//! reasoning; `usageMetadata` (prompt, candidates, thoughts, cached tokens); `finishReason` (`SAFETY` and its
//! family as [`FinishReason::ContentFilter`](crate::FinishReason::ContentFilter), `RECITATION` as
//! [`FinishReason::Recitation`](crate::FinishReason::Recitation), `MALFORMED_FUNCTION_CALL` as
//! [`FinishReason::MalformedFunctionCall`](crate::FinishReason::MalformedFunctionCall)); a blocked prompt
//! (`promptFeedback.blockReason`) as an error whose source is a [`PromptBlocked`]. With the `gcp-adc` feature,
//! `ServiceAccount` supplies Vertex AI's bearer tokens from a service-account key.
//!
//! ```
//! use tower::ServiceExt;
//! use tower_chat::gemini::GeminiChat;
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
//! // A scripted server stands in for `https://generativelanguage.googleapis.com/v1beta`.
//! let gemini = ScriptedProvider::start(|_, _| Reply::gemini_text("Hello from Gemini")).await;
//! let leaf = GeminiChat::builder()
//!     .base_url(gemini.base_url())
//!     .api_key("gemini-key")
//!     .model("gemini-2.5-flash")
//!     .build()?;
//! let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
//! let reply = leaf.oneshot(request).await?.collect_response().await?;
//! assert_eq!(reply.text(), "Hello from Gemini");
//! let sent = &gemini.requests()[0];
//! assert_eq!(sent.path, "/v1/models/gemini-2.5-flash:streamGenerateContent");
//! assert_eq!(sent.query.as_deref(), Some("alt=sse"));
//! assert_eq!(sent.headers["x-goog-api-key"], "gemini-key");
//! assert_eq!(sent.body["systemInstruction"]["parts"][0]["text"], "Be brief.");
//! # Ok(()) }
//! ```

mod blocked;
mod decode;
#[cfg(test)]
mod decode_tests;
mod partial_args;
mod schema;
mod schema_form;
#[cfg(feature = "gcp-adc")]
mod service_account;
mod signature;
mod wire;

use std::sync::Arc;

use http::header::HeaderName;
use http::Uri;

pub use blocked::{PromptBlocked, SafetyRating};
pub use schema::{to_gemini_schema, to_gemini_schema_within, SchemaError};
pub use schema_form::SchemaForm;
#[cfg(feature = "gcp-adc")]
pub use service_account::{ServiceAccount, CLOUD_PLATFORM_SCOPE, CREDENTIALS_ENV};

use crate::error::{ChatError, ErrorKind};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::transport::{resolve_model, ToolsJson};

/// The Gemini leaf service: [`ChatLeaf`] speaking [`Gemini`]'s wire format.
pub type GeminiChat = ChatLeaf<Gemini>;

/// Configures a [`GeminiChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`vertex`](ChatLeafBuilder::vertex) for Vertex AI.
pub type GeminiChatBuilder = ChatLeafBuilder<Gemini>;

/// Decodes a Gemini SSE body (`streamGenerateContent?alt=sse`) into chat events, byte chunk by byte chunk.
///
/// ```
/// use tower_chat::{ChatEvent, FinishReason};
///
/// let mut decoder = tower_chat::gemini::StreamDecoder::new();
/// decoder.feed(br#"data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"finishReason":"STOP"}]}"#);
/// decoder.feed(b"\r\n\r\n");
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::text("Hi"));
/// decoder.finish(); // Gemini's stream has no end marker: the body's end ends it
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::finish(FinishReason::Stop));
/// ```
pub type StreamDecoder = crate::leaf::StreamDecoder<Gemini>;

/// Google's `generateContent` wire format (the Gemini API or Vertex AI).
#[derive(Clone, Debug, Default)]
pub struct Gemini {
    /// Shared by the provider's clones: one list offered to every call is converted and serialised once.
    tools: Arc<ToolsJson>,
    schemas: SchemaForm,
}

impl Provider for Gemini {}

impl ProviderWire for Gemini {
    type Decoder = decode::GeminiDecoder;
    const LEAF_NAME: &'static str = "GeminiChat";
    const DEFAULT_BASE_URL: &'static str = "https://generativelanguage.googleapis.com/v1beta";
    const DEFAULT_PROVIDER_NAME: &'static str = "gemini";
    const PATH: &'static str = "models";

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        part.provider == signature::GEMINI
    }

    fn call_url(
        &self,
        endpoint: &Uri,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Option<Uri>, ChatError> {
        let model = resolve_model(&request.options, default_model)?;
        let model = model.strip_prefix("models/").unwrap_or(model);
        if model.is_empty() || model.contains(['/', '?', '#', ':', ' ']) {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!("{model:?} is not a Gemini model id"),
            )
            .refused_before_sending());
        }
        let method = if request.options.stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        let url = format!("{endpoint}/{model}:{method}");
        url.parse().map(Some).map_err(|e| {
            ChatError::new(ErrorKind::InvalidRequest, format!("invalid URL {url:?}")).with_source(e)
        })
    }

    fn auth_header(&self) -> (HeaderName, &'static str) {
        (HeaderName::from_static("x-goog-api-key"), "")
    }

    fn supports_streaming_usage(&self) -> bool {
        true
    }

    fn encode(
        &self,
        request: &ChatRequest,
        _default_model: Option<&str>,
    ) -> Result<Vec<u8>, ChatError> {
        wire::encode(request, &self.tools, self.schemas)
    }

    fn error_message(body: &[u8]) -> Option<String> {
        decode::provider_message(body)
    }

    fn error_retry_after(body: &[u8]) -> Option<std::time::Duration> {
        decode::retry_delay(body)
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        decode::decode_whole(body)
    }
}

impl ChatLeafBuilder<Gemini> {
    /// How tool parameter and answer schemas are sent (default [`SchemaForm::JsonSchema`]).
    pub fn schema_form(mut self, form: SchemaForm) -> Self {
        self.provider.schemas = form;
        self
    }

    /// Call Gemini models on Vertex AI in `project` at `location` (`us-central1`, `europe-west4`, `global`, …):
    /// the base URL becomes `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/
    /// {location}/publishers/google` (`aiplatform.googleapis.com` for `global`) and the provider name
    /// `vertex_ai`. Vertex AI takes OAuth bearer tokens: configure a
    /// [`token_provider`](ChatLeafBuilder::token_provider).
    pub fn vertex(self, project: &str, location: &str) -> Self {
        let host = if location == "global" {
            "aiplatform.googleapis.com".to_owned()
        } else {
            format!("{location}-aiplatform.googleapis.com")
        };
        self.base_url(format!(
            "https://{host}/v1/projects/{project}/locations/{location}/publishers/google"
        ))
        .provider_name("vertex_ai")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, ModelInfo};

    fn url(leaf: &GeminiChat, request: &ChatRequest) -> String {
        Gemini::default()
            .call_url(leaf.endpoint(), request, Some("gemini-2.5-pro"))
            .unwrap()
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_model_and_the_method_are_in_the_path() {
        let leaf = GeminiChat::builder().build().unwrap();
        let streamed = ChatRequest::new(vec![Message::user("hi")]).stream(true);
        assert_eq!(
            url(&leaf, &streamed),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        let whole = ChatRequest::new(vec![Message::user("hi")])
            .stream(false)
            .model("models/gemini-2.5-flash");
        assert_eq!(
            url(&leaf, &whole),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        );
        let bad = ChatRequest::new(vec![Message::user("hi")]).model("../x");
        let err = Gemini::default()
            .call_url(leaf.endpoint(), &bad, None)
            .unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    }

    #[test]
    fn vertex_urls_name_project_location_and_publisher() {
        let leaf = GeminiChat::builder()
            .vertex("my-project", "europe-west4")
            .build()
            .unwrap();
        let request = ChatRequest::new(vec![Message::user("hi")]).stream(false);
        assert_eq!(
            url(&leaf, &request),
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/locations/europe-west4/publishers/google/models/gemini-2.5-pro:generateContent"
        );
        assert_eq!(leaf.model_metadata().provider, "vertex_ai");
        let global = GeminiChat::builder().vertex("p", "global").build().unwrap();
        assert!(global
            .endpoint()
            .to_string()
            .starts_with("https://aiplatform.googleapis.com/v1/projects/p/locations/global/"));
    }
}
