//! One `[upstreams]` target: its name and model, and the settings of its provider as a [`ProviderTarget`], an
//! enum tagged by `provider` whose variants hold exactly their kind's settings, so that a setting of another
//! kind cannot be written. Everything is checked where the file is read; an error names the target, the
//! setting and (through the TOML parser) the target's line.

use std::path::PathBuf;

use serde::de::{DeserializeOwned, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use tower_chat::gemini::SchemaForm;

use crate::config::credential::{Credential, CredentialField, GivenCredentials};
use crate::config::provider::Provider;

/// One fallback target: a provider and model, at one endpoint or balanced over several deployments.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSection {
    /// The name in errors and metrics (default `provider/model`).
    pub name: Option<String>,
    /// The provider's model id; `*`: the name the client sent, as it is (behind a pattern, `claude-*`, each
    /// client's own model reaches the provider).
    pub model: String,
    /// `provider = "…"` and that kind's settings.
    pub provider: ProviderTarget,
}

/// A target's provider and the settings of that kind ([`Provider`] lists what each takes).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "provider")]
pub enum ProviderTarget {
    /// `openai`: Chat Completions.
    #[serde(rename = "openai")]
    OpenAi(KeyedTarget),
    /// `openai-responses`: the Responses API.
    #[serde(rename = "openai-responses")]
    OpenAiResponses(KeyedTarget),
    /// `anthropic`: Messages.
    #[serde(rename = "anthropic")]
    Anthropic(KeyedTarget),
    /// `azure`: Azure OpenAI.
    #[serde(rename = "azure")]
    Azure(AzureTarget),
    /// `gemini`: the Gemini API.
    #[serde(rename = "gemini")]
    Gemini(GeminiTarget),
    /// `vertex`: Gemini on Vertex AI.
    #[serde(rename = "vertex")]
    Vertex(VertexTarget),
    /// `bedrock`: Amazon Bedrock's Converse API.
    #[serde(rename = "bedrock")]
    Bedrock(BedrockTarget),
}

impl ProviderTarget {
    /// The kind.
    pub fn kind(&self) -> Provider {
        match self {
            ProviderTarget::OpenAi(_) => Provider::OpenAi,
            ProviderTarget::OpenAiResponses(_) => Provider::OpenAiResponses,
            ProviderTarget::Anthropic(_) => Provider::Anthropic,
            ProviderTarget::Azure(_) => Provider::Azure,
            ProviderTarget::Gemini(_) => Provider::Gemini,
            ProviderTarget::Vertex(_) => Provider::Vertex,
            ProviderTarget::Bedrock(_) => Provider::Bedrock,
        }
    }

    /// Where the target is called, and with what credential.
    pub fn endpoint(&self) -> &Endpoint {
        match self {
            ProviderTarget::OpenAi(target)
            | ProviderTarget::OpenAiResponses(target)
            | ProviderTarget::Anthropic(target) => &target.endpoint,
            ProviderTarget::Azure(target) => &target.endpoint,
            ProviderTarget::Gemini(target) => &target.endpoint,
            ProviderTarget::Vertex(target) => &target.endpoint,
            ProviderTarget::Bedrock(target) => &target.endpoint,
        }
    }
}

/// Where a target is called.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    /// One endpoint.
    Single {
        /// The base URL (`None`: the kind's default, see [`TargetSection::url`]).
        base_url: Option<String>,
        /// Where its credential comes from.
        credential: Credential,
    },
    /// Balanced over these deployments, each with its own URL and key.
    Balanced(Vec<DeploymentSection>),
}

/// One deployment of a balanced target.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSection {
    /// The name in metrics (default: the target's name and the position).
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

impl DeploymentSection {
    /// Where its key comes from (checked to be exactly one of `key_env` and `no_key` where the file is read).
    pub fn credential(&self) -> Credential {
        match &self.key_env {
            Some(variable) if !self.no_key => Credential::KeyEnv(variable.clone()),
            _ => Credential::NoKey,
        }
    }
}

fn one() -> u32 {
    1
}

/// `openai`, `openai-responses`, `anthropic`: a base URL (or deployments) and a key.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "KeyedFields")]
pub struct KeyedTarget {
    /// Where it is called.
    pub endpoint: Endpoint,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyedFields {
    base_url: Option<String>,
    key_env: Option<String>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    no_key: bool,
    #[serde(default)]
    deployments: Vec<DeploymentSection>,
}

impl KeyedFields {
    fn endpoint(self, settings: &[&str]) -> Result<Endpoint, String> {
        let given = GivenCredentials::default()
            .with(
                CredentialField::KeyEnv,
                self.key_env.map(Credential::KeyEnv),
            )
            .with(
                CredentialField::KeyFile,
                self.key_file.map(Credential::KeyFile),
            )
            .with(
                CredentialField::NoKey,
                self.no_key.then_some(Credential::NoKey),
            );
        endpoint(self.base_url, self.deployments, given, settings)
    }
}

impl TryFrom<KeyedFields> for KeyedTarget {
    type Error = String;

    fn try_from(fields: KeyedFields) -> Result<Self, String> {
        Ok(KeyedTarget {
            endpoint: fields.endpoint(fields_of::<KeyedTarget>())?,
        })
    }
}

/// `azure`: the resource's endpoint (required), a deployment and API version or neither (the `/openai/v1`
/// URL), a key or an Entra ID token.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "AzureFields")]
pub struct AzureTarget {
    /// The resource endpoint (or deployments) and credential.
    pub endpoint: Endpoint,
    /// `azure_deployment`: call this deployment at its URL, with `api_version`.
    pub deployment: Option<String>,
    /// `api_version`: the `api-version` query (default `2024-10-21` with a deployment; none otherwise).
    pub api_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AzureFields {
    base_url: Option<String>,
    azure_deployment: Option<String>,
    api_version: Option<String>,
    key_env: Option<String>,
    key_file: Option<PathBuf>,
    token_env: Option<String>,
    #[serde(default)]
    no_key: bool,
    #[serde(default)]
    deployments: Vec<DeploymentSection>,
}

impl TryFrom<AzureFields> for AzureTarget {
    type Error = String;

    fn try_from(fields: AzureFields) -> Result<Self, String> {
        check_path_segment(fields.azure_deployment.as_deref(), "azure_deployment")?;
        check_path_segment(fields.api_version.as_deref(), "api_version")?;
        if fields.base_url.is_none() && fields.deployments.is_empty() {
            return Err(
                "an `azure` target needs its resource's endpoint as `base_url` (e.g. \
                 \"https://my-resource.openai.azure.com\")"
                    .into(),
            );
        }
        let given = GivenCredentials::default()
            .with(
                CredentialField::KeyEnv,
                fields.key_env.map(Credential::KeyEnv),
            )
            .with(
                CredentialField::KeyFile,
                fields.key_file.map(Credential::KeyFile),
            )
            .with(
                CredentialField::TokenEnv,
                fields.token_env.map(Credential::TokenEnv),
            )
            .with(
                CredentialField::NoKey,
                fields.no_key.then_some(Credential::NoKey),
            );
        Ok(AzureTarget {
            endpoint: endpoint(
                fields.base_url,
                fields.deployments,
                given,
                fields_of::<AzureTarget>(),
            )?,
            deployment: fields.azure_deployment,
            api_version: fields.api_version,
        })
    }
}

/// `gemini`: a base URL (or deployments), a key, how schemas are sent.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "GeminiFields")]
pub struct GeminiTarget {
    /// Where it is called.
    pub endpoint: Endpoint,
    /// `schema_form`: how tool and answer schemas are sent.
    pub schema_form: SchemaForm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GeminiFields {
    base_url: Option<String>,
    /// `json-schema` (the default: `parametersJsonSchema`, `responseJsonSchema`) or `openapi` (the OpenAPI
    /// subset of `parameters` and `responseSchema`, for models that do not take JSON Schema).
    schema_form: Option<String>,
    key_env: Option<String>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    no_key: bool,
    #[serde(default)]
    deployments: Vec<DeploymentSection>,
}

impl TryFrom<GeminiFields> for GeminiTarget {
    type Error = String;

    fn try_from(fields: GeminiFields) -> Result<Self, String> {
        let schema_form = schema_form(fields.schema_form.as_deref())?;
        let keyed = KeyedFields {
            base_url: fields.base_url,
            key_env: fields.key_env,
            key_file: fields.key_file,
            no_key: fields.no_key,
            deployments: fields.deployments,
        };
        Ok(GeminiTarget {
            endpoint: keyed.endpoint(fields_of::<GeminiTarget>())?,
            schema_form,
        })
    }
}

/// `vertex`: a Google Cloud project and location, a service account or token.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "VertexFields")]
pub struct VertexTarget {
    /// `base_url` (the API host, default: the location's) and the credential; never balanced.
    pub endpoint: Endpoint,
    /// `project`: the Google Cloud project.
    pub project: String,
    /// `location`: `us-central1`, `europe-west4`, `global`, …
    pub location: String,
    /// `schema_form`: how tool and answer schemas are sent.
    pub schema_form: SchemaForm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VertexFields {
    project: Option<String>,
    location: Option<String>,
    base_url: Option<String>,
    schema_form: Option<String>,
    credentials_file: Option<PathBuf>,
    credentials_env: Option<String>,
    token_env: Option<String>,
    #[serde(default)]
    no_key: bool,
}

impl TryFrom<VertexFields> for VertexTarget {
    type Error = String;

    fn try_from(fields: VertexFields) -> Result<Self, String> {
        check_path_segment(fields.project.as_deref(), "project")?;
        check_path_segment(fields.location.as_deref(), "location")?;
        let (Some(project), Some(location)) = (fields.project, fields.location) else {
            return Err(
                "a `vertex` target needs its Google Cloud `project` and `location` (e.g. \
                 `location = \"us-central1\"`)"
                    .into(),
            );
        };
        let given = GivenCredentials::default()
            .with(
                CredentialField::CredentialsFile,
                fields.credentials_file.map(Credential::ServiceAccountFile),
            )
            .with(
                CredentialField::CredentialsEnv,
                fields.credentials_env.map(Credential::ServiceAccountEnv),
            )
            .with(
                CredentialField::TokenEnv,
                fields.token_env.map(Credential::TokenEnv),
            )
            .with(
                CredentialField::NoKey,
                fields.no_key.then_some(Credential::NoKey),
            );
        Ok(VertexTarget {
            schema_form: schema_form(fields.schema_form.as_deref())?,
            endpoint: endpoint(
                fields.base_url,
                Vec::new(),
                given,
                fields_of::<VertexTarget>(),
            )?,
            project,
            location,
        })
    }
}

/// `bedrock`: an AWS region, AWS credentials or a Bedrock API key.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "BedrockFields")]
pub struct BedrockTarget {
    /// `base_url` (default: the region's `bedrock-runtime` host: a VPC endpoint, a proxy) and the
    /// credential; never balanced.
    pub endpoint: Endpoint,
    /// `region`: the AWS region requests are signed for.
    pub region: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BedrockFields {
    region: Option<String>,
    base_url: Option<String>,
    #[serde(default)]
    aws_env: bool,
    aws_profile: Option<String>,
    key_env: Option<String>,
    key_file: Option<PathBuf>,
}

impl TryFrom<BedrockFields> for BedrockTarget {
    type Error = String;

    fn try_from(fields: BedrockFields) -> Result<Self, String> {
        check_path_segment(fields.region.as_deref(), "region")?;
        let Some(region) = fields.region else {
            return Err(
                "a `bedrock` target needs the AWS `region` its requests are signed for (e.g. \
                 `region = \"us-east-1\"`)"
                    .into(),
            );
        };
        let given = GivenCredentials::default()
            .with(
                CredentialField::AwsEnv,
                fields.aws_env.then_some(Credential::AwsEnv),
            )
            .with(
                CredentialField::AwsProfile,
                fields.aws_profile.map(Credential::AwsProfile),
            )
            .with(
                CredentialField::KeyEnv,
                fields.key_env.map(Credential::KeyEnv),
            )
            .with(
                CredentialField::KeyFile,
                fields.key_file.map(Credential::KeyFile),
            );
        Ok(BedrockTarget {
            endpoint: endpoint(
                fields.base_url,
                Vec::new(),
                given,
                fields_of::<BedrockTarget>(),
            )?,
            region,
        })
    }
}

/// What each kind takes, read from its variant's settings struct: the list is written once, as the type.
impl Provider {
    /// The fields that say where this kind's credential comes from (a target gives exactly one): those of
    /// its [`settings`](Provider::settings) that name a credential.
    pub fn credentials(self) -> impl Iterator<Item = CredentialField> {
        let settings = self.settings();
        CredentialField::ALL
            .into_iter()
            .filter(move |field| settings.contains(&field.name()))
    }

    /// The settings a target of this kind takes besides `provider`, `name` and `model`, as its variant of
    /// [`ProviderTarget`](crate::config::upstreams::ProviderTarget) declares them.
    pub fn settings(self) -> &'static [&'static str] {
        match self {
            Provider::OpenAi | Provider::OpenAiResponses | Provider::Anthropic => {
                fields_of::<KeyedTarget>()
            }
            Provider::Azure => fields_of::<AzureTarget>(),
            Provider::Gemini => fields_of::<GeminiTarget>(),
            Provider::Vertex => fields_of::<VertexTarget>(),
            Provider::Bedrock => fields_of::<BedrockTarget>(),
        }
    }
}

impl TargetSection {
    /// The target's name.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{}/{}", self.kind(), self.model))
    }

    /// The kind.
    pub fn kind(&self) -> Provider {
        self.provider.kind()
    }

    /// The URL a leaf of this target calls, given its configured `base_url` (the target's or a deployment's):
    /// that URL, else the kind's public API; the Vertex AI path of the project and location, under the
    /// location's host unless `base_url` names another; the region's Bedrock host.
    pub fn url(&self, base_url: Option<&str>) -> String {
        match (&self.provider, base_url) {
            (ProviderTarget::Vertex(vertex), host) => {
                let (project, location) = (&vertex.project, &vertex.location);
                let host = match host {
                    Some(host) => host.trim_end_matches('/').to_owned(),
                    None if location == "global" => "https://aiplatform.googleapis.com".to_owned(),
                    None => format!("https://{location}-aiplatform.googleapis.com"),
                };
                format!("{host}/v1/projects/{project}/locations/{location}/publishers/google")
            }
            (ProviderTarget::Bedrock(bedrock), None) => {
                format!("https://bedrock-runtime.{}.amazonaws.com", bedrock.region)
            }
            (_, Some(url)) => url.to_owned(),
            (_, None) => self
                .kind()
                .default_base_url()
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

impl<'de> Deserialize<'de> for TargetSection {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TargetVisitor)
    }
}

struct TargetVisitor;

impl<'de> Visitor<'de> for TargetVisitor {
    type Value = TargetSection;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a target table (`provider`, `model`, and the provider's settings)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TargetSection, A::Error> {
        let (mut name, mut model, mut kind) = (None, None, None);
        let mut settings = toml::Table::new();
        while let Some(key) = map.next_key::<String>()? {
            // Read in place, so that a misspelt kind or a mistyped name is reported at its own line.
            match key.as_str() {
                "provider" => kind = Some(map.next_value::<Provider>()?),
                "name" => name = Some(map.next_value::<String>()?),
                "model" => model = Some(map.next_value::<String>()?),
                _ => {
                    settings.insert(key, map.next_value::<toml::Value>()?);
                }
            }
        }
        let kind = kind.ok_or_else(|| A::Error::missing_field("provider"))?;
        let model = model.ok_or_else(|| A::Error::missing_field("model"))?;
        let label = name.clone().unwrap_or_else(|| format!("{kind}/{model}"));
        let provider = provider_target(kind, settings)
            .map_err(|e| A::Error::custom(format!("target `{label}`: {e}")))?;
        Ok(TargetSection {
            name,
            model,
            provider,
        })
    }
}

/// The settings of a target of `kind`: a setting another kind takes is refused with the kinds that take it.
fn provider_target(kind: Provider, mut settings: toml::Table) -> Result<ProviderTarget, String> {
    let own = kind.settings();
    if let Some(key) = settings.keys().find(|key| !own.contains(&key.as_str())) {
        return Err(not_a_setting(kind, key));
    }
    settings.insert("provider".into(), kind.as_str().into());
    ProviderTarget::deserialize(toml::Value::Table(settings)).map_err(|e| e.message().to_owned())
}

fn not_a_setting(kind: Provider, key: &str) -> String {
    if CredentialField::ALL.iter().any(|field| field.name() == key) {
        let allowed: Vec<_> = kind.credentials().map(|f| f.example()).collect();
        return format!(
            "`{key}` is not a credential of `{kind}` targets; name one of {}",
            allowed.join(", ")
        );
    }
    let owners: Vec<String> = Provider::ALL
        .into_iter()
        .filter(|other| other.settings().contains(&key))
        .map(|other| format!("`provider = \"{other}\"`"))
        .collect();
    if owners.is_empty() {
        format!(
            "unknown setting `{key}`; a `{kind}` target takes `name`, `model`, `{}`",
            kind.settings().join("`, `")
        )
    } else {
        format!(
            "`{key}` is for {} targets, not `{kind}`",
            owners.join(" and ")
        )
    }
}

/// A single endpoint with exactly one credential, or deployments that carry the URL and the key themselves.
fn endpoint(
    base_url: Option<String>,
    deployments: Vec<DeploymentSection>,
    given: GivenCredentials,
    settings: &[&str],
) -> Result<Endpoint, String> {
    if deployments.is_empty() {
        if let Some(url) = &base_url {
            check_url(url)?;
        }
        let allowed = CredentialField::ALL
            .into_iter()
            .filter(|field| settings.contains(&field.name()));
        return Ok(Endpoint::Single {
            base_url,
            credential: given.one(allowed)?,
        });
    }
    if base_url.is_some() || !given.is_empty() {
        return Err(
            "`base_url` and the credential (`key_env`, `key_file`, `no_key`, …) go in each deployment when \
             `deployments` is given"
                .into(),
        );
    }
    for (i, deployment) in deployments.iter().enumerate() {
        check_url(&deployment.base_url)
            .and_then(|()| check_key(deployment.key_env.as_deref(), deployment.no_key))
            .map_err(|e| format!("deployment {}: {e}", i + 1))?;
    }
    Ok(Endpoint::Balanced(deployments))
}

/// A deployment says where its key comes from: exactly one of `key_env` and `no_key = true`.
fn check_key(key_env: Option<&str>, no_key: bool) -> Result<(), String> {
    match (key_env, no_key) {
        (Some(_), false) | (None, true) => Ok(()),
        (Some(_), true) => Err("`key_env` and `no_key = true` exclude each other".into()),
        (None, false) => Err(
            "name the environment variable holding its key (`key_env = \"VAR\"`), or say that it takes none \
             (`no_key = true`)"
                .into(),
        ),
    }
}

fn check_url(url: &str) -> Result<(), String> {
    match url.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(())
        }
        _ => Err(format!("`{url}` is not an http(s) URL")),
    }
}

/// A value that becomes part of a URL path: letters, digits, `-`, `_` and `.` only.
fn check_path_segment(value: Option<&str>, field: &str) -> Result<(), String> {
    let Some(value) = value else {
        return Ok(());
    };
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

fn schema_form(form: Option<&str>) -> Result<SchemaForm, String> {
    form.map_or(Ok(SchemaForm::default()), str::parse)
}

/// The settings a struct's `Deserialize` reads (serde hands them to `deserialize_struct`), so that the list
/// of what each kind takes is its type, written once.
pub(crate) fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The deserializer stops at the struct's field list: the error is the expected end.
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(Self::Error::custom("only a struct's field names are read"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(Self::Error::custom("only a struct's field names are read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests;
