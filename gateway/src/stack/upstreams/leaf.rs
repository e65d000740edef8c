//! One leaf of a `[upstreams]` target: the provider's client, built with the target's endpoint and credential.

use std::fmt;
use std::path::Path;

use tower_chat::anthropic::{AnthropicChat, AnthropicVertexChat};
use tower_chat::azure::{AzureOpenAiChat, AzureResponsesChat};
use tower_chat::bedrock::{AwsCredentials, BedrockChat, ProfileCredentials};
use tower_chat::gemini::{GeminiChat, ServiceAccount};
use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
use tower_chat::openai::OpenAiChat;
use tower_chat::responses::ResponsesChat;
use tower_chat::transport::{Secret, Timeouts};
use tower_chat::{ChatError, ErrorKind};

use crate::config::credential::{Credential, KeySource};
use crate::config::upstreams::{ProviderTarget, TargetSection};
use crate::stack::Upstream;

/// A bearer token read once from the environment at start (an Entra ID or Google access token an operator
/// refreshes by restarting or reloading). Its `Debug` output never shows the token.
struct StaticToken(Secret);

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticToken([redacted])")
    }
}

impl TokenProvider for StaticToken {
    fn fetch_token(&self) -> TokenFuture<'_> {
        let token = AccessToken::new(self.0.expose(), None);
        Box::pin(std::future::ready(Ok(token)))
    }
}

/// One leaf: `name` (the target's or deployment's) and its URL name it in a refused credential's message.
pub(super) fn leaf(
    target: &TargetSection,
    name: &str,
    base_url: Option<&str>,
    credential: &Credential,
    timeouts: Timeouts,
) -> Result<Upstream, ChatError> {
    let url = target.url(base_url);
    let upstream = format!("`{name}` ({url})");
    let (key, token) = match credential {
        Credential::KeyEnv(variable) => (KeySource::Env(variable).read(&upstream)?, None),
        Credential::KeyFile(path) => (KeySource::File(path).read(&upstream)?, None),
        Credential::NoKey => (None, None),
        Credential::TokenEnv(variable) => {
            let token = KeySource::Env(variable)
                .read(&upstream)?
                .unwrap_or_default();
            (None, Some(TokenSource::Static(token)))
        }
        Credential::ServiceAccountFile(path) => (None, Some(service_account(&upstream, path)?)),
        Credential::ServiceAccountEnv(variable) => {
            // The variable names the key file; its value is never printed (it may hold the key itself).
            let account = ServiceAccount::from_env_var(variable)
                .map_err(|e| refused(&upstream, &format!("credentials_env = \"{variable}\""), e))?;
            (None, Some(TokenSource::ServiceAccount(account)))
        }
        // Bedrock signs with these itself (below).
        Credential::AwsEnv | Credential::AwsProfile(_) => (None, None),
    };
    macro_rules! configured {
        ($builder:expr) => {{
            let mut builder = $builder.timeouts(timeouts);
            // `*`: the model the client named (a pattern's match) goes to the provider as it is.
            if target.model != "*" {
                builder = builder.model(&target.model);
            }
            if let Some(key) = key {
                builder = builder.api_key(key);
            }
            match token {
                Some(TokenSource::Static(token)) => {
                    builder = builder.token_provider(StaticToken(Secret::new(token)))
                }
                Some(TokenSource::ServiceAccount(account)) => {
                    builder = builder.token_provider(account)
                }
                None => {}
            }
            builder.build()?
        }};
    }
    Ok(match &target.provider {
        ProviderTarget::OpenAi(_) => {
            Upstream::OpenAi(configured!(OpenAiChat::builder().base_url(&url)))
        }
        ProviderTarget::OpenAiResponses(_) => {
            Upstream::Responses(configured!(ResponsesChat::builder().base_url(&url)))
        }
        ProviderTarget::Anthropic(_) => {
            Upstream::Anthropic(configured!(AnthropicChat::builder().base_url(&url)))
        }
        ProviderTarget::AnthropicVertex(_) => {
            Upstream::AnthropicVertex(configured!(AnthropicVertexChat::builder().base_url(&url)))
        }
        ProviderTarget::Azure(azure) => {
            let mut builder = AzureOpenAiChat::builder().endpoint(&url);
            if let Some(deployment) = &azure.deployment {
                builder = builder.deployment(deployment);
            }
            if let Some(version) = &azure.api_version {
                builder = builder.api_version(version);
            }
            Upstream::Azure(configured!(builder))
        }
        ProviderTarget::AzureResponses(azure) => {
            let mut builder = AzureResponsesChat::builder().endpoint(&url);
            if let Some(version) = &azure.api_version {
                builder = builder.api_version(version);
            }
            Upstream::AzureResponses(configured!(builder))
        }
        ProviderTarget::Gemini(gemini) => Upstream::Gemini(configured!(GeminiChat::builder()
            .base_url(&url)
            .schema_form(gemini.schema_form))),
        ProviderTarget::Vertex(vertex) => Upstream::Gemini(configured!(GeminiChat::builder()
            .base_url(&url)
            .provider_name("vertex_ai")
            .schema_form(vertex.schema_form))),
        ProviderTarget::Bedrock(bedrock) => {
            let mut builder = BedrockChat::builder()
                .base_url(url.as_str())
                .region(&bedrock.region);
            // Read now, so that credentials that cannot sign refuse the start instead of failing every call.
            match credential {
                Credential::AwsEnv => {
                    let credentials = AwsCredentials::from_env()
                        .map_err(|e| refused(&upstream, "aws_env = true", e))?;
                    builder = builder.credentials(credentials)
                }
                Credential::AwsProfile(profile) => {
                    let credentials = ProfileCredentials::named(profile).load().map_err(|e| {
                        refused(&upstream, &format!("aws_profile = {profile:?}"), e)
                    })?;
                    builder = builder.credentials(credentials)
                }
                _ => {}
            }
            Upstream::Bedrock(configured!(builder))
        }
    })
}

/// A target's credential `key` (as the file spells it) that cannot be used: the table, the target, the key and
/// what is wrong (the credential's own message, which never holds its value).
fn refused(upstream: &str, key: &str, error: ChatError) -> ChatError {
    ChatError::new(
        ErrorKind::InvalidRequest,
        format!(
            "[upstreams] target {upstream}: `{key}`: {}",
            error.message()
        ),
    )
    .with_source(error)
}

/// A target's bearer tokens.
enum TokenSource {
    Static(String),
    ServiceAccount(ServiceAccount),
}

fn service_account(upstream: &str, path: &Path) -> Result<TokenSource, ChatError> {
    ServiceAccount::from_file(path)
        .map(TokenSource::ServiceAccount)
        .map_err(|error| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("upstream {upstream}: {}", error.message()),
            )
            .with_source(error)
        })
}
