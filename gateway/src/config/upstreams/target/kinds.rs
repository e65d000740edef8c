//! The settings of each kind of target, one struct per kind: what the file may write under that `provider`
//! (`deny_unknown_fields`), checked into the public struct the leaf is built from (`TryFrom`).

use std::path::PathBuf;

use serde::Deserialize;
use tower_chat::gemini::SchemaForm;

use super::endpoint::{endpoint, DeploymentSection, Endpoint};
use super::fields::fields_of;
use crate::config::credential::{Credential, CredentialField, GivenCredentials};

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
        let given = azure_credentials(
            fields.key_env,
            fields.key_file,
            fields.token_env,
            fields.no_key,
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

/// `azure-responses`: the Responses API at an Azure resource's endpoint (required), the version-less
/// `/openai/v1` URL or `api_version`'s, a key or an Entra ID token.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "AzureResponsesFields")]
pub struct AzureResponsesTarget {
    /// The resource endpoint (or deployments) and credential.
    pub endpoint: Endpoint,
    /// `api_version`: call `/openai/responses?api-version=…` (none: `/openai/v1/responses`).
    pub api_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AzureResponsesFields {
    base_url: Option<String>,
    api_version: Option<String>,
    key_env: Option<String>,
    key_file: Option<PathBuf>,
    token_env: Option<String>,
    #[serde(default)]
    no_key: bool,
    #[serde(default)]
    deployments: Vec<DeploymentSection>,
}

impl TryFrom<AzureResponsesFields> for AzureResponsesTarget {
    type Error = String;

    fn try_from(fields: AzureResponsesFields) -> Result<Self, String> {
        check_path_segment(fields.api_version.as_deref(), "api_version")?;
        if fields.base_url.is_none() && fields.deployments.is_empty() {
            return Err(
                "an `azure-responses` target needs its resource's endpoint as `base_url` (e.g. \
                 \"https://my-resource.openai.azure.com\")"
                    .into(),
            );
        }
        let given = azure_credentials(
            fields.key_env,
            fields.key_file,
            fields.token_env,
            fields.no_key,
        );
        Ok(AzureResponsesTarget {
            endpoint: endpoint(
                fields.base_url,
                fields.deployments,
                given,
                fields_of::<AzureResponsesTarget>(),
            )?,
            api_version: fields.api_version,
        })
    }
}

/// The credentials an Azure OpenAI resource takes: a key (`api-key`), an Entra ID token, or none.
fn azure_credentials(
    key_env: Option<String>,
    key_file: Option<PathBuf>,
    token_env: Option<String>,
    no_key: bool,
) -> GivenCredentials {
    GivenCredentials::default()
        .with(CredentialField::KeyEnv, key_env.map(Credential::KeyEnv))
        .with(CredentialField::KeyFile, key_file.map(Credential::KeyFile))
        .with(
            CredentialField::TokenEnv,
            token_env.map(Credential::TokenEnv),
        )
        .with(CredentialField::NoKey, no_key.then_some(Credential::NoKey))
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

/// `vertex`: Gemini on Vertex AI, a Google Cloud project and location, a service account or token.
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
        let schema_form = schema_form(fields.schema_form.as_deref())?;
        let place = GoogleCloud {
            project: fields.project,
            location: fields.location,
            base_url: fields.base_url,
            credentials_file: fields.credentials_file,
            credentials_env: fields.credentials_env,
            token_env: fields.token_env,
            no_key: fields.no_key,
        }
        .located("a `vertex` target", fields_of::<VertexTarget>())?;
        Ok(VertexTarget {
            endpoint: place.endpoint,
            project: place.project,
            location: place.location,
            schema_form,
        })
    }
}

/// `anthropic-vertex`: Claude on Vertex AI, a Google Cloud project and location, a service account or token.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "AnthropicVertexFields")]
pub struct AnthropicVertexTarget {
    /// `base_url` (the API host, default: the location's) and the credential; never balanced.
    pub endpoint: Endpoint,
    /// `project`: the Google Cloud project.
    pub project: String,
    /// `location`: `us-east5`, `europe-west1`, `global`, …
    pub location: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicVertexFields {
    project: Option<String>,
    location: Option<String>,
    base_url: Option<String>,
    credentials_file: Option<PathBuf>,
    credentials_env: Option<String>,
    token_env: Option<String>,
    #[serde(default)]
    no_key: bool,
}

impl TryFrom<AnthropicVertexFields> for AnthropicVertexTarget {
    type Error = String;

    fn try_from(fields: AnthropicVertexFields) -> Result<Self, String> {
        let place = GoogleCloud {
            project: fields.project,
            location: fields.location,
            base_url: fields.base_url,
            credentials_file: fields.credentials_file,
            credentials_env: fields.credentials_env,
            token_env: fields.token_env,
            no_key: fields.no_key,
        }
        .located(
            "an `anthropic-vertex` target",
            fields_of::<AnthropicVertexTarget>(),
        )?;
        Ok(AnthropicVertexTarget {
            endpoint: place.endpoint,
            project: place.project,
            location: place.location,
        })
    }
}

/// The settings every Vertex AI kind takes: where (project, location, host) and the Google credential.
struct GoogleCloud {
    project: Option<String>,
    location: Option<String>,
    base_url: Option<String>,
    credentials_file: Option<PathBuf>,
    credentials_env: Option<String>,
    token_env: Option<String>,
    no_key: bool,
}

/// A Vertex AI target's project, location and endpoint, checked.
struct Located {
    endpoint: Endpoint,
    project: String,
    location: String,
}

impl GoogleCloud {
    /// Checked: `project` and `location` given and fit for a URL path, exactly one credential; `target` names
    /// the kind in the error (`a \`vertex\` target`).
    fn located(self, target: &str, settings: &[&str]) -> Result<Located, String> {
        check_path_segment(self.project.as_deref(), "project")?;
        check_path_segment(self.location.as_deref(), "location")?;
        let (Some(project), Some(location)) = (self.project, self.location) else {
            return Err(format!(
                "{target} needs its Google Cloud `project` and `location` (e.g. `location = \"us-central1\"`)"
            ));
        };
        let given = GivenCredentials::default()
            .with(
                CredentialField::CredentialsFile,
                self.credentials_file.map(Credential::ServiceAccountFile),
            )
            .with(
                CredentialField::CredentialsEnv,
                self.credentials_env.map(Credential::ServiceAccountEnv),
            )
            .with(
                CredentialField::TokenEnv,
                self.token_env.map(Credential::TokenEnv),
            )
            .with(
                CredentialField::NoKey,
                self.no_key.then_some(Credential::NoKey),
            );
        Ok(Located {
            endpoint: endpoint(self.base_url, Vec::new(), given, settings)?,
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
