//! Each model's own output maximum, for the APIs that require a `max_tokens` when the caller gave none
//! (Anthropic's Messages API; Claude models on Bedrock's Converse). Sending the model's maximum lets an agent's
//! long answer or tool call finish instead of stopping at an arbitrary cap (4096 tokens cut Claude Code's file
//! writes short); usage is billed on what is generated, not on the cap.
//!
//! Sources: Anthropic's "Models overview" (docs.anthropic.com/en/docs/about-claude/models/overview), "Max
//! output" row, and the API's own refusal of a larger value ("max_tokens: N > 128000, which is the maximum
//! allowed number of output tokens for claude-opus-4-8"):
//!
//! | family | max output |
//! | --- | --- |
//! | Claude Opus 4.6, 4.7, 4.8; Sonnet 4.6 | 128,000 |
//! | Claude Opus 4.5, Sonnet 4.5, Haiku 4.5; Sonnet 4; Sonnet 3.7 | 64,000 |
//! | Claude Opus 4, Opus 4.1 | 32,000 |
//! | Claude Sonnet 3.5, Haiku 3.5 | 8,192 |
//! | Claude 3 Opus, Sonnet, Haiku | 4,096 |
//!
//! A model the table does not know gets [`DEFAULT_MAX_OUTPUT_TOKENS`].
//!
//! ```
//! use tower_chat::output_limits::{max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS};
//!
//! assert_eq!(max_output_tokens("claude-sonnet-4-5-20250929"), 64_000);
//! assert_eq!(max_output_tokens("us.anthropic.claude-opus-4-1-20250805-v1:0"), 32_000);
//! assert_eq!(max_output_tokens("claude-opus-4@20250514"), 32_000);
//! assert_eq!(max_output_tokens("my-proxy-model"), DEFAULT_MAX_OUTPUT_TOKENS);
//! ```

/// The `max_tokens` of a model the table does not know: 8,192, the smallest output maximum of the Claude models
/// served after the Claude 3 family, so that any current Claude model (and most models behind an Anthropic-
/// compatible API) accepts it.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8_192;

/// Model id prefixes (Anthropic's ids; Bedrock's and Vertex AI's after their own prefixes are removed) and their
/// output maximum. A prefix matches a whole id, or one followed by `@` or `:` (a version), or by `-` and
/// anything but a short number (a date or `latest`, not the minor version of another model: `claude-opus-4-1`
/// is not `claude-opus-4`).
const TABLE: [(&str, u32); 16] = [
    ("claude-opus-4-8", 128_000),
    ("claude-opus-4-7", 128_000),
    ("claude-opus-4-6", 128_000),
    ("claude-sonnet-4-6", 128_000),
    ("claude-opus-4-5", 64_000),
    ("claude-sonnet-4-5", 64_000),
    ("claude-haiku-4-5", 64_000),
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4", 32_000),
    ("claude-sonnet-4", 64_000),
    ("claude-3-7-sonnet", 64_000),
    ("claude-3-5-sonnet", 8_192),
    ("claude-3-5-haiku", 8_192),
    ("claude-3-opus", 4_096),
    ("claude-3-sonnet", 4_096),
    ("claude-3-haiku", 4_096),
];

/// The output maximum of the model Anthropic, Bedrock or Vertex AI calls `model`, when the table knows it.
pub fn known_max_output_tokens(model: &str) -> Option<u32> {
    // Bedrock: `anthropic.claude-…-v1:0`, with a cross-region prefix (`us.`, `eu.`, `global.`) before it.
    let id = model.rsplit_once("anthropic.").map_or(model, |(_, id)| id);
    TABLE.iter().find_map(|(prefix, max)| {
        let rest = id.strip_prefix(prefix)?;
        let same_model = match rest.strip_prefix('-') {
            Some(suffix) => {
                let segment = suffix.split(['-', '@', ':']).next().unwrap_or_default();
                !(segment.len() <= 2 && segment.bytes().all(|b| b.is_ascii_digit()))
            }
            None => rest.is_empty() || rest.starts_with(['@', ':']),
        };
        same_model.then_some(*max)
    })
}

/// The `max_tokens` to send for `model` when the caller gave none: its own maximum, or
/// [`DEFAULT_MAX_OUTPUT_TOKENS`].
pub fn max_output_tokens(model: &str) -> u32 {
    known_max_output_tokens(model).unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_matches_its_own_row_and_not_a_longer_sibling() {
        let cases = [
            ("claude-opus-4-8", 128_000),
            ("claude-sonnet-4-6", 128_000),
            ("claude-opus-4-5-20251101", 64_000),
            ("claude-haiku-4-5", 64_000),
            ("claude-opus-4-1-20250805", 32_000),
            ("claude-opus-4-20250514", 32_000),
            ("claude-sonnet-4-20250514", 64_000),
            ("claude-3-7-sonnet-latest", 64_000),
            ("claude-3-5-haiku-20241022", 8_192),
            ("claude-3-haiku-20240307", 4_096),
            ("anthropic.claude-3-haiku-20240307-v1:0", 4_096),
            ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", 64_000),
            ("claude-sonnet-4-5@20250929", 64_000),
        ];
        for (model, max) in cases {
            assert_eq!(known_max_output_tokens(model), Some(max), "{model}");
        }
        for unknown in ["claude-opus-4-10", "claude-opus-45", "gpt-4o", "claude"] {
            assert_eq!(known_max_output_tokens(unknown), None, "{unknown}");
        }
    }
}
