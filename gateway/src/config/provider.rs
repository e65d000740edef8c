//! `--provider`: which wire format the single `--upstream` speaks.

/// Which wire format the upstream provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
pub enum Provider {
    /// OpenAI Chat Completions (OpenAI, vLLM, Ollama, DeepSeek, …).
    #[value(name = "openai")]
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    #[value(name = "anthropic")]
    #[serde(rename = "anthropic")]
    Anthropic,
}

impl From<Provider> for tower_chat_wire::UpstreamFormat {
    fn from(provider: Provider) -> Self {
        match provider {
            Provider::OpenAi => tower_chat_wire::UpstreamFormat::OpenAi,
            Provider::Anthropic => tower_chat_wire::UpstreamFormat::Anthropic,
        }
    }
}

impl Provider {
    /// The environment variable holding the upstream key when `--upstream-key-env` is not given.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    pub(crate) fn default_upstream(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com/v1",
        }
    }
}
