//! The kinds of provider a `[upstreams]` target speaks to (`provider = "…"`), the fields each kind takes, and
//! where each kind's credential may come from. Every credential is read from an environment variable or a file
//! the configuration names, never from the file itself, and never logged: the start-up summary names the
//! variable or file ([`describe_credential`]), `Debug` output redacts what was read.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::stack::upstream_key::KeySource;

/// One fallback target: a provider and model, at one endpoint or balanced over several deployments.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSection {
    /// The name in errors and metrics (default `provider/model`).
    pub name: Option<String>,
    /// `openai`, `openai-responses`, `anthropic`, `azure`, `gemini` or `vertex` ([`ProviderName`]).
    pub provider: ProviderName,
    /// The provider's model id; `*`: the name the client sent, as it is (behind a pattern, `claude-*`, each
    /// client's own model reaches the provider).
    pub model: String,
    /// The base URL (default: the provider's public API); an `azure` target's resource endpoint; a `vertex`
    /// target's API host (default: its location's). Not with `deployments`.
    pub base_url: Option<String>,
    /// `azure`: call this deployment at its URL, with `api_version`; without it, the `/openai/v1` URL.
    pub azure_deployment: Option<String>,
    /// `azure`: the `api-version` query (default `2024-10-21` with `azure_deployment`; none otherwise).
    pub api_version: Option<String>,
    /// `vertex`: the Google Cloud project.
    pub project: Option<String>,
    /// `vertex`: the location (`us-central1`, `europe-west4`, `global`, …).
    pub location: Option<String>,
    /// `gemini`, `vertex`: how tool and answer schemas are sent: `json-schema` (the default:
    /// `parametersJsonSchema`, `responseJsonSchema`) or `openapi` (the OpenAPI subset of `parameters` and
    /// `responseSchema`, for models that do not take JSON Schema).
    pub schema_form: Option<String>,
    /// `bedrock`: the AWS region requests are signed for (`us-east-1`, …); the endpoint is the region's
    /// `bedrock-runtime` host unless `base_url` names another (a VPC endpoint, a proxy).
    pub region: Option<String>,
    /// `bedrock`: sign with the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`), read when a request is first signed.
    #[serde(default)]
    pub aws_env: bool,
    /// `bedrock`: sign with this profile of the shared AWS files (`~/.aws/credentials`, `~/.aws/config`, or
    /// where `AWS_SHARED_CREDENTIALS_FILE` / `AWS_CONFIG_FILE` point).
    pub aws_profile: Option<String>,
    /// The environment variable holding the key. Exactly one credential field (this, `key_file`,
    /// `token_env`, `credentials_file`, `credentials_env` or `no_key`) per target; none with `deployments`.
    pub key_env: Option<String>,
    /// The file holding the key (its final line break dropped).
    pub key_file: Option<PathBuf>,
    /// `azure`, `vertex`: the environment variable holding a bearer token (Entra ID, a Google access token),
    /// sent as `Authorization: Bearer`.
    pub token_env: Option<String>,
    /// `vertex`: a service-account key file; its tokens are fetched and renewed before they expire.
    pub credentials_file: Option<PathBuf>,
    /// `vertex`: the environment variable naming a service-account key file (Application Default
    /// Credentials read `GOOGLE_APPLICATION_CREDENTIALS`).
    pub credentials_env: Option<String>,
    /// The target takes no key (a local server): no key header is sent.
    #[serde(default)]
    pub no_key: bool,
    /// Balance this target over these deployments instead.
    #[serde(default)]
    pub deployments: Vec<DeploymentSection>,
}

impl TargetSection {
    /// The target's name.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}/{}", self.provider, self.model))
    }
}

/// One deployment of a balanced target.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSection {
    /// The name in metrics (default: the base URL's host and the position).
    pub name: Option<String>,
    /// The base URL.
    pub base_url: String,
    /// The environment variable holding this deployment's key. Not with `no_key`.
    pub key_env: Option<String>,
    /// The deployment takes no key. Not with `key_env`.
    #[serde(default)]
    pub no_key: bool,
    /// Relative capacity (default 1, at least 1).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

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
    pub(crate) fn default_base_url(self) -> Option<&'static str> {
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
pub(crate) enum Credential<'a> {
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
    pub(crate) fn credential(&self) -> Credential<'_> {
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
            Credential::Key(key_source(self.key_env.as_deref(), self.no_key))
        }
    }
}

/// The checks of one target's kind-specific fields and credential, made where the file is read.
pub(crate) fn check_target(target: &TargetSection) -> Result<(), String> {
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
        form.parse::<tower_chat::gemini::SchemaForm>()?;
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
pub(crate) fn describe_credential(credential: Credential<'_>) -> String {
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
pub(crate) fn display_url(target: &TargetSection, base_url: Option<&str>) -> String {
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
pub(crate) fn vertex_base(target: &TargetSection, host: Option<&str>) -> String {
    let project = target.project.as_deref().unwrap_or_default();
    let location = target.location.as_deref().unwrap_or_default();
    let host = match host {
        Some(host) => host.trim_end_matches('/').to_owned(),
        None if location == "global" => "https://aiplatform.googleapis.com".to_owned(),
        None => format!("https://{location}-aiplatform.googleapis.com"),
    };
    format!("{host}/v1/projects/{project}/locations/{location}/publishers/google")
}

/// Where a target's or deployment's key comes from (the file's check made sure it says one of the two).
pub(crate) fn key_source(key_env: Option<&str>, no_key: bool) -> KeySource<'_> {
    match key_env {
        Some(variable) if !no_key => KeySource::Env(variable),
        _ => KeySource::None,
    }
}
