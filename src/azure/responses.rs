//! The Responses API on Azure OpenAI: `{endpoint}/openai/v1/responses` (the version-less v1 API) or
//! `{endpoint}/openai/responses?api-version=…`, the deployment as the body's `model`, the `api-key` header or an
//! Entra ID bearer token. Requests, answers and streams are the Responses API's own
//! ([`OpenAiResponses`]'s code); a content-filter refusal carries a [`ContentFiltered`] as its source.

use std::borrow::Cow;

use http::header::HeaderName;

use super::content_filter::ContentFiltered;
use crate::error::{BoxError, ChatError};
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::responses::OpenAiResponses;

/// The Responses API on Azure OpenAI: [`ChatLeaf`] speaking [`AzureResponses`]'s wire format.
///
/// ```
/// use tower::ServiceExt;
/// use tower_chat::azure::AzureResponsesChat;
/// use tower_chat::test_server::{Reply, ScriptedProvider};
/// use tower_chat::{ChatRequest, ChatStreamExt, Message};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
/// // A scripted server stands in for `https://my-resource.openai.azure.com`.
/// let azure = ScriptedProvider::start(|_, _| Reply::responses_text("Hello from Azure")).await;
/// let leaf = AzureResponsesChat::builder()
///     .endpoint(format!("http://{}", azure.addr()))
///     .api_key("azure-key")
///     .model("gpt-5-mini-prod")
///     .build()?;
/// let reply = leaf.oneshot(ChatRequest::new(vec![Message::user("Hi")])).await?.collect_response().await?;
/// assert_eq!(reply.text(), "Hello from Azure");
/// let sent = &azure.requests()[0];
/// assert_eq!(sent.path, "/openai/v1/responses");
/// assert_eq!(sent.query, None);
/// assert_eq!(sent.headers["api-key"], "azure-key");
/// assert_eq!(sent.body["model"], "gpt-5-mini-prod");
/// # Ok(()) }
/// ```
pub type AzureResponsesChat = ChatLeaf<AzureResponses>;

/// Configures an [`AzureResponsesChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`endpoint`](ChatLeafBuilder::endpoint) and [`api_version`](ChatLeafBuilder::api_version).
pub type AzureResponsesChatBuilder = ChatLeafBuilder<AzureResponses>;

/// The Responses API at an Azure OpenAI resource (see [`AzureResponsesChat`]). It has no default base URL: name
/// the resource's [`endpoint`](ChatLeafBuilder::endpoint).
#[derive(Clone, Debug, Default)]
pub struct AzureResponses {
    responses: OpenAiResponses,
    /// The resource's endpoint (`https://{resource}.openai.azure.com`), once configured.
    endpoint: Option<String>,
    /// The `api-version` query; `None`: the version-less `/openai/v1` form.
    api_version: Option<String>,
}

impl Provider for AzureResponses {}

impl ProviderWire for AzureResponses {
    type Decoder = <OpenAiResponses as ProviderWire>::Decoder;
    const LEAF_NAME: &'static str = "AzureResponsesChat";
    const DEFAULT_BASE_URL: &'static str = "";
    const DEFAULT_PROVIDER_NAME: &'static str = "azure";
    const PATH: &'static str = "responses";
    const API_FORMAT: Option<crate::ApiFormat> = Some(crate::ApiFormat::Responses);

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        self.responses.keeps_part(part)
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
        self.responses.supports_streaming_usage()
    }

    fn encode(
        &self,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Vec<u8>, ChatError> {
        self.responses.encode(request, default_model)
    }

    fn error_message(body: &[u8]) -> Option<String> {
        OpenAiResponses::error_message(body)
    }

    fn error_detail(_headers: &http::HeaderMap, body: &[u8]) -> Option<BoxError> {
        ContentFiltered::from_error_body(body).map(|detail| Box::new(detail) as BoxError)
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        OpenAiResponses::decode_whole(body)
    }
}

impl ChatLeafBuilder<AzureResponses> {
    /// The resource's endpoint, `https://{resource}.openai.azure.com` (or a custom domain): requests go to
    /// `{endpoint}/openai/v1/responses`, or with an [`api_version`](Self::api_version) to
    /// `{endpoint}/openai/responses?api-version=…`. The model is the deployment's name.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.provider.endpoint = Some(endpoint.into().trim_end_matches('/').to_owned());
        self.retarget()
    }

    /// The `api-version` query of the `/openai/responses` form (`2025-04-01-preview`, …); without one the
    /// version-less `/openai/v1/responses` is called.
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.provider.api_version = Some(version.into());
        self.retarget()
    }

    /// The base URL from the endpoint and the URL form.
    fn retarget(self) -> Self {
        let Some(endpoint) = self.provider.endpoint.clone() else {
            return self;
        };
        let base = match &self.provider.api_version {
            Some(_) => format!("{endpoint}/openai"),
            None => format!("{endpoint}/openai/v1"),
        };
        self.base_url(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn either_url_form_is_built_from_the_endpoint_in_any_order() {
        let v1 = AzureResponsesChat::builder()
            .endpoint("https://r.openai.azure.com/")
            .build()
            .unwrap();
        assert_eq!(
            v1.endpoint().to_string(),
            "https://r.openai.azure.com/openai/v1/responses"
        );
        let dated = AzureResponsesChat::builder()
            .api_version("2025-04-01-preview")
            .endpoint("https://r.openai.azure.com")
            .build()
            .unwrap();
        assert_eq!(
            dated.endpoint().to_string(),
            "https://r.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
        );
        let err = AzureResponsesChat::builder().build().unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    }
}
