//! An assistant's reasoning, with what its provider needs to continue from it.
//!
//! Anthropic requires the `thinking` blocks of a turn, signatures included, to come back unchanged when a tool
//! round continues with extended thinking on; OpenAI's reasoning models continue from their `reasoning` items
//! (`encrypted_content` when not stored). A [`ReasoningPart`] keeps the readable text and that
//! [`Continuation`]; the leaf of the provider that produced it sends it back as received, any other leaf drops it
//! (with a `tracing` debug line) rather than send it where it would be refused.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One piece of reasoning of an assistant message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasoningPart {
    /// The readable text (thinking, or a reasoning summary); empty for redacted or encrypted reasoning.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// What the provider needs to continue from this reasoning; `None` for text only (DeepSeek's
    /// `reasoning_content`, which must not be sent back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Continuation>,
}

impl ReasoningPart {
    /// Reasoning text with nothing to send back.
    pub fn text(text: impl Into<String>) -> Self {
        ReasoningPart {
            text: text.into(),
            continuation: None,
        }
    }

    /// The provider family that can take this part back, if any.
    pub fn provider(&self) -> Option<&str> {
        self.continuation.as_ref().map(Continuation::provider)
    }
}

/// What a provider needs, beside the text, to continue from its reasoning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Continuation {
    /// An Anthropic `thinking` block's signature.
    AnthropicThinking {
        /// The signature, as received.
        signature: String,
    },
    /// An Anthropic `redacted_thinking` block.
    AnthropicRedacted {
        /// The encrypted data, as received.
        data: String,
    },
    /// An OpenAI `reasoning` item (Responses API).
    OpenAiReasoning {
        /// The item's id.
        id: String,
        /// The encrypted reasoning, when the request asked for it (`include: ["reasoning.encrypted_content"]`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
        /// The summary texts, one per summary part.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
    },
    /// Another provider's form, as its JSON.
    Other {
        /// The provider family.
        provider: String,
        /// The JSON as received.
        value: Value,
    },
}

impl Continuation {
    /// The provider family that can take this back (`anthropic`, `openai`, or the named one).
    pub fn provider(&self) -> &str {
        match self {
            Continuation::AnthropicThinking { .. } | Continuation::AnthropicRedacted { .. } => {
                "anthropic"
            }
            Continuation::OpenAiReasoning { .. } => "openai",
            Continuation::Other { provider, .. } => provider,
        }
    }
}

/// Reads the reasoning list, or the single reasoning text stored before reasoning had parts.
pub(crate) fn deserialize_reasoning<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<ReasoningPart>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Text(String),
        Parts(Vec<ReasoningPart>),
    }
    Ok(match Option::<Stored>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(Stored::Text(text)) => vec![ReasoningPart::text(text)],
        Some(Stored::Parts(parts)) => parts,
    })
}
