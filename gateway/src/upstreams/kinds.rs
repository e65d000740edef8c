//! The kinds of provider a `[upstreams]` target speaks to (`provider = "…"`), the fields each kind takes, and
//! where each kind's credential may come from. Every credential is read from an environment variable or a file
//! the configuration names, never from the file itself, and never logged: the start-up summary names the
//! variable or file ([`describe_credential`]), `Debug` output redacts what was read.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tower_chat::anthropic::AnthropicChat;
use tower_chat::azure::AzureOpenAiChat;
use tower_chat::bedrock::{AwsCredentials, BedrockChat, ProfileCredentials};
use tower_chat::gemini::{GeminiChat, SchemaForm, ServiceAccount};
use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
use tower_chat::openai::OpenAiChat;
use tower_chat::responses::ResponsesChat;
use tower_chat::transport::{Secret, Timeouts};
use tower_chat::{ChatError, ErrorKind};

use super::TargetSection;
use crate::stack::Upstream;
use crate::upstream_key::KeySource;

/// The provider a target speaks to, and what each kind takes:
///
/// | `provider` | wire | endpoint fields | credential (exactly one) |
/// | --- | --- | --- | --- |
/// | `openai` | Chat Completions | `base_url` | `key_env`, `key_file`, `no_key` |
/// | `openai-responses` | Responses | `base_url` | `key_env`, `key_file`, `no_key` |
/// | `anthropic` | Messages | `base_url` | `key_env`, `key_file`, `no_key` |
/// | `azure` | Chat Completions on Azure | `base_url` (the resource endpoint, required), `azure_deployment` + `api_version`, or neither: `/openai/v1` | `key_env`, `key_file` (`api-key` header), `token_env` (Entra ID bearer), `no_key` |
/// | `gemini` | `generateContent` | `base_url` | `key_env`, `key_file` (`x-goog-api-key`), `no_key` |
/// | `vertex` | `generateContent` on Vertex AI | `project`, `location` (required), `base_url` (the API host) | `credentials_file`, `credentials_env` (a service-account key), `token_env` (an OAuth access token), `no_key` |
/// | `bedrock` | Converse / ConverseStream, SigV4-signed | `region` (required), `base_url` (default: the region's `bedrock-runtime` host) | `aws_env` (the standard AWS variables), `aws_profile` (the shared AWS files), `key_env`, `key_file` (a Bedrock API key, as a bearer token) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderName {
    /// OpenAI Chat Completions (OpenAI, vLLM, Ollama, …).
    OpenAi,
    /// The OpenAI Responses API (`openai-responses`): reasoning models continue tool rounds from their
    /// reasoning items, which this leaf carries.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Azure OpenAI: Chat Completions at a resource's deployment URL (with `api-version`) or its `/openai/v1`
    /// URL, the `api-key` header or an Entra ID bearer token.
    Azure,
    /// The Gemini API (`generativelanguage`), the key in `x-goog-api-key`.
    Gemini,
    /// Gemini models on Vertex AI, in a project and location, with OAuth bearer tokens.
    Vertex,
    /// Amazon Bedrock's Converse API in a region, requests signed with SigV4.
    Bedrock,
}

impl ProviderName {
    /// The name as the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderName::OpenAi => "openai",
            ProviderName::OpenAiResponses => "openai-responses",
            ProviderName::Anthropic => "anthropic",
            ProviderName::Azure => "azure",
            ProviderName::Gemini => "gemini",
            ProviderName::Vertex => "vertex",
            ProviderName::Bedrock => "bedrock",
        }
    }

    /// The public API, where the kind has one without further fields (an Azure resource has its own host; a
    /// Vertex AI host is derived from the location).
    pub(super) fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderName::OpenAi | ProviderName::OpenAiResponses => {
                Some("https://api.openai.com/v1")
            }
            ProviderName::Anthropic => Some("https://api.anthropic.com/v1"),
            ProviderName::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            ProviderName::Azure | ProviderName::Vertex | ProviderName::Bedrock => None,
        }
    }

    /// The credential fields this kind takes.
    fn credentials(self) -> &'static [CredentialField] {
        use CredentialField::*;
        match self {
            ProviderName::OpenAi
            | ProviderName::OpenAiResponses
            | ProviderName::Anthropic
            | ProviderName::Gemini => &[KeyEnv, KeyFile, NoKey],
            ProviderName::Azure => &[KeyEnv, KeyFile, TokenEnv, NoKey],
            ProviderName::Vertex => &[CredentialsFile, CredentialsEnv, TokenEnv, NoKey],
            ProviderName::Bedrock => &[AwsEnv, AwsProfile, KeyEnv, KeyFile],
        }
    }
}

impl fmt::Display for ProviderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the fields that say where a target's credential comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CredentialField {
    KeyEnv,
    KeyFile,
    TokenEnv,
    CredentialsFile,
    CredentialsEnv,
    AwsEnv,
    AwsProfile,
    NoKey,
}

impl CredentialField {
    fn example(self) -> &'static str {
        match self {
            CredentialField::KeyEnv => "`key_env = \"VAR\"`",
            CredentialField::KeyFile => "`key_file = \"PATH\"`",
            CredentialField::TokenEnv => "`token_env = \"VAR\"`",
            CredentialField::CredentialsFile => "`credentials_file = \"service-account.json\"`",
            CredentialField::CredentialsEnv => {
                "`credentials_env = \"GOOGLE_APPLICATION_CREDENTIALS\"`"
            }
            CredentialField::AwsEnv => "`aws_env = true`",
            CredentialField::AwsProfile => "`aws_profile = \"default\"`",
            CredentialField::NoKey => "`no_key = true`",
        }
    }

    fn name(self) -> &'static str {
        match self {
            CredentialField::KeyEnv => "key_env",
            CredentialField::KeyFile => "key_file",
            CredentialField::TokenEnv => "token_env",
            CredentialField::CredentialsFile => "credentials_file",
            CredentialField::CredentialsEnv => "credentials_env",
            CredentialField::AwsEnv => "aws_env",
            CredentialField::AwsProfile => "aws_profile",
            CredentialField::NoKey => "no_key",
        }
    }
}

/// Where a target's credential comes from, once the file's checks have passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Credential<'a> {
    /// A static key (sent in the kind's key header).
    Key(KeySource<'a>),
    /// A bearer token in this environment variable, sent as it is.
    TokenEnv(&'a str),
    /// A service-account key file.
    ServiceAccountFile(&'a Path),
    /// A service-account key file named by this environment variable (Application Default Credentials).
    ServiceAccountEnv(&'a str),
    /// AWS credentials in the standard environment variables.
    AwsEnv,
    /// AWS credentials of this profile of the shared AWS files.
    AwsProfile(&'a str),
}

impl TargetSection {
    fn credential_fields(&self) -> Vec<CredentialField> {
        let mut given = Vec::new();
        let fields = [
            (self.key_env.is_some(), CredentialField::KeyEnv),
            (self.key_file.is_some(), CredentialField::KeyFile),
            (self.token_env.is_some(), CredentialField::TokenEnv),
            (
                self.credentials_file.is_some(),
                CredentialField::CredentialsFile,
            ),
            (
                self.credentials_env.is_some(),
                CredentialField::CredentialsEnv,
            ),
            (self.aws_env, CredentialField::AwsEnv),
            (self.aws_profile.is_some(), CredentialField::AwsProfile),
            (self.no_key, CredentialField::NoKey),
        ];
        for (set, field) in fields {
            if set {
                given.push(field);
            }
        }
        given
    }

    /// The target's own credential (a balanced target's are in its deployments).
    pub(super) fn credential(&self) -> Credential<'_> {
        if self.aws_env {
            Credential::AwsEnv
        } else if let Some(profile) = &self.aws_profile {
            Credential::AwsProfile(profile)
        } else if let Some(variable) = &self.token_env {
            Credential::TokenEnv(variable)
        } else if let Some(path) = &self.credentials_file {
            Credential::ServiceAccountFile(path)
        } else if let Some(variable) = &self.credentials_env {
            Credential::ServiceAccountEnv(variable)
        } else if let Some(path) = &self.key_file {
            Credential::Key(KeySource::File(path))
        } else {
            Credential::Key(super::key_source(self.key_env.as_deref(), self.no_key))
        }
    }
}

/// The checks of one target's kind-specific fields and credential, made where the file is read.
pub(super) fn check_target(target: &TargetSection) -> Result<(), String> {
    let kind = target.provider;
    let only = |set: bool, field: &str, owner: ProviderName| {
        if set && kind != owner {
            Err(format!(
                "`{field}` is for `provider = \"{owner}\"` targets, not `{kind}`"
            ))
        } else {
            Ok(())
        }
    };
    only(
        target.azure_deployment.is_some(),
        "azure_deployment",
        ProviderName::Azure,
    )?;
    only(
        target.api_version.is_some(),
        "api_version",
        ProviderName::Azure,
    )?;
    only(target.project.is_some(), "project", ProviderName::Vertex)?;
    only(target.location.is_some(), "location", ProviderName::Vertex)?;
    only(target.region.is_some(), "region", ProviderName::Bedrock)?;
    if let Some(form) = &target.schema_form {
        if !matches!(kind, ProviderName::Gemini | ProviderName::Vertex) {
            return Err(format!(
                "`schema_form` is for `gemini` and `vertex` targets, not `{kind}`"
            ));
        }
        form.parse::<SchemaForm>()?;
    }
    for (value, field) in [
        (&target.region, "region"),
        (&target.azure_deployment, "azure_deployment"),
        (&target.api_version, "api_version"),
        (&target.project, "project"),
        (&target.location, "location"),
    ] {
        if let Some(value) = value {
            check_path_segment(value, field)?;
        }
    }
    match kind {
        ProviderName::Vertex => {
            if target.project.is_none() || target.location.is_none() {
                return Err(
                    "a `vertex` target needs its Google Cloud `project` and `location` (e.g. \
                     `location = \"us-central1\"`)"
                        .into(),
                );
            }
            if !target.deployments.is_empty() {
                return Err(
                    "a `vertex` target is not balanced over `deployments`: give it its \
                            `project` and `location`"
                        .into(),
                );
            }
        }
        ProviderName::Bedrock => {
            if target.region.is_none() {
                return Err(
                    "a `bedrock` target needs the AWS `region` its requests are signed for (e.g. \
                     `region = \"us-east-1\"`)"
                        .into(),
                );
            }
            if !target.deployments.is_empty() {
                return Err(
                    "a `bedrock` target is not balanced over `deployments`: give it its `region`"
                        .into(),
                );
            }
        }
        ProviderName::Azure if target.base_url.is_none() && target.deployments.is_empty() => {
            return Err(
                "an `azure` target needs its resource's endpoint as `base_url` (e.g. \
                 \"https://my-resource.openai.azure.com\")"
                    .into(),
            );
        }
        _ => {}
    }
    let given = target.credential_fields();
    if !target.deployments.is_empty() {
        return match given.first() {
            Some(_) => Err(
                "`base_url` and the credential (`key_env`, `key_file`, `no_key`, …) go in each deployment when \
                 `deployments` is given"
                    .into(),
            ),
            None => Ok(()),
        };
    }
    let allowed = kind.credentials();
    if let Some(field) = given.iter().find(|f| !allowed.contains(f)) {
        return Err(format!(
            "`{}` is not a credential of `{kind}` targets; name one of {}",
            field.name(),
            examples(allowed)
        ));
    }
    match given.as_slice() {
        [_] => Ok(()),
        [] => Err(format!(
            "say where its credential comes from: one of {} (for a server that takes none)",
            examples(allowed)
        )),
        [first, second, ..] => Err(format!(
            "`{}` and `{}` exclude each other: a target has one credential",
            first.name(),
            second.name()
        )),
    }
}

fn examples(fields: &[CredentialField]) -> String {
    fields
        .iter()
        .map(|f| f.example())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value that becomes part of a URL path: letters, digits, `-`, `_` and `.` only.
fn check_path_segment(value: &str, field: &str) -> Result<(), String> {
    let fine = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "`{field} = {value:?}` must be letters, digits, `-`, `_` or `.`"
        ))
    }
}

/// How the start-up summary names a credential: where it is read from, never what it is.
pub(super) fn describe_credential(credential: Credential<'_>) -> String {
    match credential {
        Credential::Key(KeySource::Env(variable)) => format!("key from {variable}"),
        Credential::Key(KeySource::File(path)) => format!("key from file {}", path.display()),
        Credential::Key(KeySource::None) => "no key".to_owned(),
        Credential::TokenEnv(variable) => format!("bearer token from {variable}"),
        Credential::ServiceAccountFile(path) => format!("service account {}", path.display()),
        Credential::ServiceAccountEnv(variable) => format!("service account from {variable}"),
        Credential::AwsEnv => "AWS credentials from AWS_ACCESS_KEY_ID".to_owned(),
        Credential::AwsProfile(profile) => format!("AWS profile {profile}"),
    }
}

/// The URL the summary shows for a target: its configured or default base URL, the Vertex AI host derived from
/// its location.
pub(super) fn display_url(target: &TargetSection, base_url: Option<&str>) -> String {
    match (target.provider, base_url) {
        (ProviderName::Vertex, _) => vertex_base(target, base_url),
        (ProviderName::Bedrock, None) => format!(
            "https://bedrock-runtime.{}.amazonaws.com",
            target.region.as_deref().unwrap_or_default()
        ),
        (_, Some(url)) => url.to_owned(),
        (kind, None) => kind.default_base_url().unwrap_or_default().to_owned(),
    }
}

/// `{host}/v1/projects/{project}/locations/{location}/publishers/google`; the host defaults to the location's.
fn vertex_base(target: &TargetSection, host: Option<&str>) -> String {
    let project = target.project.as_deref().unwrap_or_default();
    let location = target.location.as_deref().unwrap_or_default();
    let host = match host {
        Some(host) => host.trim_end_matches('/').to_owned(),
        None if location == "global" => "https://aiplatform.googleapis.com".to_owned(),
        None => format!("https://{location}-aiplatform.googleapis.com"),
    };
    format!("{host}/v1/projects/{project}/locations/{location}/publishers/google")
}

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
    credential: Credential<'_>,
    timeouts: Timeouts,
) -> Result<Upstream, ChatError> {
    let url = display_url(target, base_url);
    let upstream = format!("`{name}` ({url})");
    let (key, token) = match credential {
        Credential::Key(source) => (source.read(&upstream)?, None),
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
    let base = |kind: ProviderName| base_url.or(kind.default_base_url()).unwrap_or_default();
    Ok(match target.provider {
        ProviderName::OpenAi => Upstream::OpenAi(configured!(
            OpenAiChat::builder().base_url(base(ProviderName::OpenAi))
        )),
        ProviderName::OpenAiResponses => Upstream::Responses(configured!(
            ResponsesChat::builder().base_url(base(ProviderName::OpenAiResponses))
        )),
        ProviderName::Anthropic => Upstream::Anthropic(configured!(
            AnthropicChat::builder().base_url(base(ProviderName::Anthropic))
        )),
        ProviderName::Azure => {
            let mut builder = AzureOpenAiChat::builder().endpoint(base(ProviderName::Azure));
            if let Some(deployment) = &target.azure_deployment {
                builder = builder.deployment(deployment);
            }
            if let Some(version) = &target.api_version {
                builder = builder.api_version(version);
            }
            Upstream::Azure(configured!(builder))
        }
        ProviderName::Gemini => Upstream::Gemini(configured!(GeminiChat::builder()
            .base_url(base(ProviderName::Gemini))
            .schema_form(schema_form(target)?))),
        ProviderName::Vertex => Upstream::Gemini(configured!(GeminiChat::builder()
            .base_url(vertex_base(target, base_url))
            .provider_name("vertex_ai")
            .schema_form(schema_form(target)?))),
        ProviderName::Bedrock => {
            let mut builder = BedrockChat::builder()
                .base_url(url.as_str())
                .region(target.region.as_deref().unwrap_or_default());
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

/// A Gemini target's `schema_form` (checked with the table, see `check_target`).
fn schema_form(target: &TargetSection) -> Result<SchemaForm, ChatError> {
    target
        .schema_form
        .as_deref()
        .map_or(Ok(SchemaForm::default()), |form| {
            form.parse()
                .map_err(|e: String| ChatError::new(ErrorKind::InvalidRequest, e))
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
