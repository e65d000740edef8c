//! The provider table: every kind of upstream the gateway calls, once. Its name (in `provider = "…"` and
//! `--provider`) and its defaults (public base URL, key variable) are [`Provider`]'s; the settings and credentials
//! each kind takes are its variant of [`ProviderTarget`](crate::config::upstreams::ProviderTarget)
//! (`Provider::settings`, `Provider::credentials`), and its leaf is built in `stack::upstreams::leaf`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The provider an upstream speaks to: `--provider NAME` for the single `--upstream`, `provider = "NAME"` for an
/// `[upstreams]` target.
///
/// | `provider` | wire | endpoint fields | credential (exactly one) |
/// | --- | --- | --- | --- |
/// | `openai` | Chat Completions | `base_url` | `key_env`, `key_file`, `no_key` |
/// | `openai-responses` | Responses | `base_url` | `key_env`, `key_file`, `no_key` |
/// | `anthropic` | Messages | `base_url` | `key_env`, `key_file`, `no_key` |
/// | `anthropic-vertex` | Messages on Vertex AI (`:rawPredict`, `:streamRawPredict`) | `project`, `location` (required), `base_url` (the API host) | `credentials_file`, `credentials_env` (a service-account key), `token_env` (an OAuth access token), `no_key` |
/// | `azure` | Chat Completions on Azure | `base_url` (the resource endpoint, required), `azure_deployment` + `api_version`, or neither: `/openai/v1` | `key_env`, `key_file` (`api-key` header), `token_env` (Entra ID bearer), `no_key` |
/// | `azure-responses` | Responses on Azure | `base_url` (the resource endpoint, required), `api_version` (`/openai/responses?api-version=…`) or none (`/openai/v1/responses`) | `key_env`, `key_file` (`api-key` header), `token_env` (Entra ID bearer), `no_key` |
/// | `gemini` | `generateContent` | `base_url`, `schema_form` | `key_env`, `key_file` (`x-goog-api-key`), `no_key` |
/// | `vertex` | `generateContent` on Vertex AI | `project`, `location` (required), `base_url` (the API host), `schema_form` | `credentials_file`, `credentials_env` (a service-account key), `token_env` (an OAuth access token), `no_key` |
/// | `bedrock` | Converse / ConverseStream, SigV4-signed | `region` (required), `base_url` (default: the region's `bedrock-runtime` host) | `aws_env` (the standard AWS variables), `aws_profile` (the shared AWS files), `key_env`, `key_file` (a Bedrock API key, as a bearer token) |
///
/// `openai`, `openai-responses`, `anthropic`, `azure`, `azure-responses` and `gemini` targets may be balanced over
/// `deployments`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Deserialize, Serialize)]
pub enum Provider {
    /// OpenAI Chat Completions (OpenAI, vLLM, Ollama, DeepSeek, …).
    #[value(name = "openai")]
    #[serde(rename = "openai")]
    OpenAi,
    /// The OpenAI Responses API: reasoning models continue tool rounds from their reasoning items, which this
    /// leaf carries.
    #[value(name = "openai-responses")]
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages.
    #[value(name = "anthropic")]
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Anthropic's Claude models on Vertex AI: the Messages wire format, in a project and location, with OAuth
    /// bearer tokens.
    #[value(name = "anthropic-vertex")]
    #[serde(rename = "anthropic-vertex")]
    AnthropicVertex,
    /// Azure OpenAI: Chat Completions at a resource's deployment URL (with `api-version`) or its `/openai/v1`
    /// URL, the `api-key` header or an Entra ID bearer token.
    #[value(name = "azure")]
    #[serde(rename = "azure")]
    Azure,
    /// The Responses API on Azure OpenAI: a resource's `/openai/v1/responses` (or `/openai/responses` with an
    /// `api-version`), the `api-key` header or an Entra ID bearer token.
    #[value(name = "azure-responses")]
    #[serde(rename = "azure-responses")]
    AzureResponses,
    /// The Gemini API (`generativelanguage`), the key in `x-goog-api-key`.
    #[value(name = "gemini")]
    #[serde(rename = "gemini")]
    Gemini,
    /// Gemini models on Vertex AI, in a project and location, with OAuth bearer tokens.
    #[value(name = "vertex")]
    #[serde(rename = "vertex")]
    Vertex,
    /// Amazon Bedrock's Converse API in a region, requests signed with SigV4.
    #[value(name = "bedrock")]
    #[serde(rename = "bedrock")]
    Bedrock,
}

impl Provider {
    /// The name as the configuration and the command line spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::AnthropicVertex => "anthropic-vertex",
            Provider::Azure => "azure",
            Provider::AzureResponses => "azure-responses",
            Provider::Gemini => "gemini",
            Provider::Vertex => "vertex",
            Provider::Bedrock => "bedrock",
        }
    }

    /// The public API, where the kind has one without further settings (an Azure resource has its own host; a
    /// Vertex AI host is derived from the location, a Bedrock host from the region).
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi | Provider::OpenAiResponses => Some("https://api.openai.com/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com/v1"),
            Provider::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            Provider::Azure
            | Provider::AzureResponses
            | Provider::Vertex
            | Provider::AnthropicVertex
            | Provider::Bedrock => None,
        }
    }

    /// The environment variable holding the key when `--upstream-key-env` is not given; `None` for a kind whose
    /// credential is not a key (Vertex AI takes a service account or a token).
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi | Provider::OpenAiResponses => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::Azure | Provider::AzureResponses => Some("AZURE_OPENAI_API_KEY"),
            Provider::Gemini => Some("GEMINI_API_KEY"),
            Provider::Bedrock => Some("AWS_BEARER_TOKEN_BEDROCK"),
            Provider::Vertex | Provider::AnthropicVertex => None,
        }
    }

    /// Every kind, in the table's order.
    pub const ALL: [Provider; 9] = [
        Provider::OpenAi,
        Provider::OpenAiResponses,
        Provider::Anthropic,
        Provider::AnthropicVertex,
        Provider::Azure,
        Provider::AzureResponses,
        Provider::Gemini,
        Provider::Vertex,
        Provider::Bedrock,
    ];
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the request parser must know of the upstream: Anthropic's Messages API, or an OpenAI-shaped one.
impl From<Provider> for tower_chat_wire::UpstreamFormat {
    fn from(provider: Provider) -> Self {
        match provider {
            Provider::Anthropic | Provider::AnthropicVertex => {
                tower_chat_wire::UpstreamFormat::Anthropic
            }
            _ => tower_chat_wire::UpstreamFormat::OpenAi,
        }
    }
}
