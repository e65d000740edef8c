//! One `[upstreams]` target: its name and model, and the settings of its provider as a [`ProviderTarget`], an
//! enum tagged by `provider` whose variants hold exactly their kind's settings, so that a setting of another
//! kind cannot be written. Everything is checked where the file is read; an error names the target, the
//! setting and (through the TOML parser) the target's line.

mod endpoint;
mod fields;
mod kinds;

use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

pub use endpoint::{DeploymentSection, Endpoint};
use fields::fields_of;
pub use kinds::{
    AnthropicVertexTarget, AzureResponsesTarget, AzureTarget, BedrockTarget, GeminiTarget,
    KeyedTarget, VertexTarget,
};

use crate::config::credential::CredentialField;
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
    /// `anthropic-vertex`: Claude (Messages) on Vertex AI.
    #[serde(rename = "anthropic-vertex")]
    AnthropicVertex(AnthropicVertexTarget),
    /// `azure`: Azure OpenAI.
    #[serde(rename = "azure")]
    Azure(AzureTarget),
    /// `azure-responses`: the Responses API on Azure OpenAI.
    #[serde(rename = "azure-responses")]
    AzureResponses(AzureResponsesTarget),
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
            ProviderTarget::AnthropicVertex(_) => Provider::AnthropicVertex,
            ProviderTarget::Azure(_) => Provider::Azure,
            ProviderTarget::AzureResponses(_) => Provider::AzureResponses,
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
            ProviderTarget::AnthropicVertex(target) => &target.endpoint,
            ProviderTarget::Azure(target) => &target.endpoint,
            ProviderTarget::AzureResponses(target) => &target.endpoint,
            ProviderTarget::Gemini(target) => &target.endpoint,
            ProviderTarget::Vertex(target) => &target.endpoint,
            ProviderTarget::Bedrock(target) => &target.endpoint,
        }
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
    /// [`ProviderTarget`] declares them.
    pub fn settings(self) -> &'static [&'static str] {
        match self {
            Provider::OpenAi | Provider::OpenAiResponses | Provider::Anthropic => {
                fields_of::<KeyedTarget>()
            }
            Provider::AnthropicVertex => fields_of::<AnthropicVertexTarget>(),
            Provider::Azure => fields_of::<AzureTarget>(),
            Provider::AzureResponses => fields_of::<AzureResponsesTarget>(),
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
    /// that URL, else the kind's public API; the Vertex AI path of the project, location and publisher (Google
    /// for Gemini, Anthropic for Claude), under the location's host unless `base_url` names another; the
    /// region's Bedrock host.
    pub fn url(&self, base_url: Option<&str>) -> String {
        match (&self.provider, base_url) {
            (ProviderTarget::Vertex(vertex), host) => {
                vertex_url(host, &vertex.project, &vertex.location, "google")
            }
            (ProviderTarget::AnthropicVertex(vertex), host) => {
                vertex_url(host, &vertex.project, &vertex.location, "anthropic")
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

/// A Vertex AI publisher's models in `project` at `location`, on `host` (default: the location's).
fn vertex_url(host: Option<&str>, project: &str, location: &str, publisher: &str) -> String {
    let host = match host {
        Some(host) => host.trim_end_matches('/').to_owned(),
        None if location == "global" => "https://aiplatform.googleapis.com".to_owned(),
        None => format!("https://{location}-aiplatform.googleapis.com"),
    };
    format!("{host}/v1/projects/{project}/locations/{location}/publishers/{publisher}")
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

#[cfg(test)]
mod tests;
