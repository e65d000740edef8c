//! The Azure OpenAI leaf: Chat Completions on an Azure resource, in either URL form —
//! `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=…` or the version-less
//! `{endpoint}/openai/v1/chat/completions` — with the `api-key` header or a bearer token from a
//! [`TokenProvider`](crate::leaf::TokenProvider) (Entra ID).
//!
//! The wire format is OpenAI's (its encoder and decoder, not a copy). What Azure adds is mapped: its content
//! filter refusing a prompt (HTTP 400, `code: "content_filter"`) or cutting a completion
//! (`finish_reason: "content_filter"`) is an [`ErrorKind::InvalidRequest`](crate::ErrorKind::InvalidRequest)
//! error whose source is a [`ContentFiltered`] naming the categories; the `prompt_filter_results` and
//! `content_filter_results` annotations of its streams are read past.
//!
//! [`AzureResponsesChat`] is the Responses API on the same resource (`/openai/v1/responses`, or
//! `/openai/responses?api-version=…`), with the same credentials.
//!
//! ```
//! use tower::ServiceExt;
//! use tower_chat::azure::AzureOpenAiChat;
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
//! // A scripted server stands in for `https://my-resource.openai.azure.com`.
//! let azure = ScriptedProvider::start(|_, _| Reply::openai_text("Hello from Azure")).await;
//! let leaf = AzureOpenAiChat::builder()
//!     .endpoint(format!("http://{}", azure.addr()))
//!     .deployment("gpt-4o-prod")
//!     .api_version("2024-10-21")
//!     .api_key("azure-key")
//!     .build()?;
//! let reply = leaf.oneshot(ChatRequest::new(vec![Message::user("Hi")])).await?.collect_response().await?;
//! assert_eq!(reply.text(), "Hello from Azure");
//! let sent = &azure.requests()[0];
//! assert_eq!(sent.path, "/openai/deployments/gpt-4o-prod/chat/completions");
//! assert_eq!(sent.query.as_deref(), Some("api-version=2024-10-21"));
//! assert_eq!(sent.headers["api-key"], "azure-key");
//! # Ok(()) }
//! ```

mod content_filter;
mod decode;
mod responses;

use std::borrow::Cow;

use http::header::HeaderName;

pub use content_filter::{ContentFiltered, FilterCategory, FilterStage};
pub use responses::{AzureResponses, AzureResponsesChat, AzureResponsesChatBuilder};

use crate::carried::DroppedFields;
use crate::error::{BoxError, ChatError};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::openai::{MaxTokensField, OpenAi, OpenAiChat};
use crate::request::ChatRequest;

/// The Azure OpenAI leaf service: [`ChatLeaf`] speaking [`AzureOpenAi`]'s wire format.
pub type AzureOpenAiChat = ChatLeaf<AzureOpenAi>;

/// Configures an [`AzureOpenAiChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`endpoint`](ChatLeafBuilder::endpoint), [`deployment`](ChatLeafBuilder::deployment) and
/// [`api_version`](ChatLeafBuilder::api_version).
pub type AzureOpenAiChatBuilder = ChatLeafBuilder<AzureOpenAi>;

/// Decodes an Azure OpenAI SSE body into chat events, byte chunk by byte chunk.
pub type StreamDecoder = crate::leaf::StreamDecoder<AzureOpenAi>;

/// The API version the deployment URL form is given when none is configured (the latest GA data-plane version).
pub const DEFAULT_API_VERSION: &str = "2024-10-21";

/// Azure OpenAI's Chat Completions: OpenAI's wire format at an Azure URL, `api-key` authentication.
#[derive(Clone, Debug)]
pub struct AzureOpenAi {
    openai: OpenAi,
    max_tokens_field: MaxTokensField,
    include_usage: bool,
    /// The resource's endpoint (`https://{resource}.openai.azure.com`), once configured.
    endpoint: Option<String>,
    /// The deployment, for the deployment URL form.
    deployment: Option<String>,
    /// The `api-version` query; `None` sends none (the `/openai/v1` form).
    api_version: Option<String>,
}

impl Default for AzureOpenAi {
    fn default() -> Self {
        AzureOpenAi {
            openai: OpenAi::default(),
            max_tokens_field: MaxTokensField::default(),
            include_usage: true,
            endpoint: None,
            deployment: None,
            api_version: None,
        }
    }
}

impl Provider for AzureOpenAi {}

/// The first dated api-version whose Chat Completions take `reasoning_effort`.
const FIRST_REASONING_EFFORT_VERSION: &str = "2024-12-01-preview";

impl AzureOpenAi {
    /// Whether the api-version called takes `reasoning_effort`: the version-less `/openai/v1` form and its
    /// `preview`/`latest` do, and dated versions from [`FIRST_REASONING_EFFORT_VERSION`] on (dated versions,
    /// `YYYY-MM-DD[-preview]`, order as strings).
    fn takes_reasoning_effort(&self) -> bool {
        match self.api_version.as_deref() {
            None | Some("preview" | "latest") => true,
            Some(version) => version >= FIRST_REASONING_EFFORT_VERSION,
        }
    }
}

impl ProviderWire for AzureOpenAi {
    type Decoder = decode::AzureDecoder;
    const LEAF_NAME: &'static str = "AzureOpenAiChat";
    /// None: an Azure leaf needs its resource's endpoint (or a base URL), and building without one is refused.
    const DEFAULT_BASE_URL: &'static str = "";
    const DEFAULT_PROVIDER_NAME: &'static str = "azure";
    const PATH: &'static str = "chat/completions";
    const API_FORMAT: Option<crate::ApiFormat> = Some(crate::ApiFormat::ChatCompletions);

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        part.provider == "openai"
    }

    fn endpoint_path(&self) -> Cow<'static, str> {
        match &self.api_version {
            Some(version) => Cow::Owned(format!("{}?api-version={version}", Self::PATH)),
            None => Cow::Borrowed(Self::PATH),
        }
    }

    fn auth_header(&self) -> (HeaderName, &'static str) {
        (HeaderName::from_static("api-key"), "")
    }

    fn supports_streaming_usage(&self) -> bool {
        self.include_usage
    }

    fn encode(
        &self,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Vec<u8>, ChatError> {
        let effort = request.options.reasoning.as_ref().and_then(|r| r.level());
        if effort.is_none() || self.takes_reasoning_effort() {
            return self.openai.encode(request, default_model);
        }
        // An api-version that predates `reasoning_effort` refuses the whole call over it ("Unrecognized request
        // argument supplied"): the deployment's own default effort answers instead, and the drop is named.
        tracing::debug!(
            api_version = self.api_version.as_deref(),
            "reasoning_effort left out of an Azure call: its api-version does not take it"
        );
        if let Some(dropped) = request.extensions.get::<DroppedFields>() {
            dropped.record("reasoning_effort");
        }
        let mut request = request.clone();
        request.options.reasoning = None;
        self.openai.encode(&request, default_model)
    }

    fn error_message(body: &[u8]) -> Option<String> {
        OpenAi::error_message(body)
    }

    fn error_detail(_headers: &http::HeaderMap, body: &[u8]) -> Option<BoxError> {
        ContentFiltered::from_error_body(body).map(|detail| Box::new(detail) as BoxError)
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        decode::decode_whole(body)
    }
}

impl ChatLeafBuilder<AzureOpenAi> {
    /// The resource's endpoint, `https://{resource}.openai.azure.com` (or a custom domain): requests go to
    /// `{endpoint}/openai/v1/chat/completions`, or with a [`deployment`](Self::deployment) to its URL.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.provider.endpoint = Some(endpoint.into().trim_end_matches('/').to_owned());
        self.retarget()
    }

    /// The resource by name: the endpoint `https://{resource}.openai.azure.com`.
    pub fn resource(self, resource: &str) -> Self {
        self.endpoint(format!("https://{resource}.openai.azure.com"))
    }

    /// Call this deployment through its URL (`{endpoint}/openai/deployments/{deployment}/chat/completions`,
    /// with [`DEFAULT_API_VERSION`] unless [`api_version`](Self::api_version) says otherwise); the deployment is
    /// also the default model.
    pub fn deployment(mut self, deployment: impl Into<String>) -> Self {
        let deployment = deployment.into();
        self.provider.deployment = Some(deployment.clone());
        if self.provider.api_version.is_none() {
            self.provider.api_version = Some(DEFAULT_API_VERSION.to_owned());
        }
        self.model(deployment).retarget()
    }

    /// The `api-version` query parameter (the deployment form needs one; the `/openai/v1` form takes
    /// `preview` for preview features).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.provider.api_version = Some(version.into());
        self
    }

    /// How the output token limit is spelled (reasoning deployments need `max_completion_tokens`).
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.provider.max_tokens_field = field;
        self.rebuild_openai()
    }

    /// Whether to send `stream_options.include_usage` on streaming calls (default on).
    pub fn include_usage(mut self, include: bool) -> Self {
        self.provider.include_usage = include;
        self.rebuild_openai()
    }

    /// The base URL from the endpoint and deployment.
    fn retarget(self) -> Self {
        let Some(endpoint) = self.provider.endpoint.clone() else {
            return self;
        };
        let base = match &self.provider.deployment {
            Some(deployment) => format!("{endpoint}/openai/deployments/{deployment}"),
            None => format!("{endpoint}/openai/v1"),
        };
        self.base_url(base)
    }

    /// OpenAI's wire settings, configured through OpenAI's own builder.
    fn rebuild_openai(mut self) -> Self {
        self.provider.openai = OpenAiChat::builder()
            .max_tokens_field(self.provider.max_tokens_field)
            .include_usage(self.provider.include_usage)
            .provider;
        self
    }
}
