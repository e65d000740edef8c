//! [`ReasoningOptions`]: how much a model should reason, as the caller asked it in its own format, and the one
//! table every leaf maps it through (Anthropic's thinking budget ↔ effort levels, Gemini's `thinkingConfig`,
//! OpenAI's `reasoning_effort`).
//!
//! | effort    | thinking budget (tokens) | Gemini `thinkingLevel` | Anthropic `output_config.effort` |
//! |-----------|--------------------------|------------------------|----------------------------------|
//! | `none`    | — (thinking off)         | —                      | —                                |
//! | `minimal` | 1024                     | `low`                  | `low`                            |
//! | `low`     | 4096                     | `low`                  | `low`                            |
//! | `medium`  | 8192                     | `high`                 | `medium`                         |
//! | `high`    | 16384                    | `high`                 | `high`                           |
//! | `xhigh`   | 24576                    | `high`                 | `max`                            |
//! | `max`     | 32768                    | `high`                 | `max`                            |
//!
//! A budget read back as a level: up to 4096 is `low`, up to 8192 `medium`, more `high` (the levels every
//! OpenAI reasoning model takes).

use serde::{Deserialize, Serialize};

/// How much the model should reason before it answers (see the [module docs](self) for the table).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct ReasoningOptions {
    /// Anthropic's thinking mode (Messages `thinking`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// The effort level (Chat Completions `reasoning_effort`, Responses `reasoning.effort`, Messages
    /// `output_config.effort`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effort: Option<ReasoningEffort>,
    /// Responses `reasoning.summary` (`auto`, `concise`, `detailed`), as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Anthropic's thinking mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Thinking {
    /// Thinking with at most this many tokens.
    Enabled {
        /// The most tokens the model may think with.
        budget_tokens: u32,
    },
    /// The model decides how much to think.
    Adaptive,
    /// No thinking.
    Disabled,
}

/// An effort level, from every format's spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// No reasoning (OpenAI `none`).
    None,
    /// OpenAI `minimal`.
    Minimal,
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
    /// OpenAI `xhigh`.
    Xhigh,
    /// Anthropic `max`.
    Max,
}

impl ReasoningEffort {
    /// A level by its name in any format; `None` for a name no format uses.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "none" => ReasoningEffort::None,
            "minimal" => ReasoningEffort::Minimal,
            "low" => ReasoningEffort::Low,
            "medium" => ReasoningEffort::Medium,
            "high" => ReasoningEffort::High,
            "xhigh" => ReasoningEffort::Xhigh,
            "max" => ReasoningEffort::Max,
            _ => return None,
        })
    }

    /// The name as every format spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }

    /// The thinking budget of this level; `None` for [`ReasoningEffort::None`].
    pub fn budget_tokens(self) -> Option<u32> {
        Some(match self {
            ReasoningEffort::None => return None,
            ReasoningEffort::Minimal => 1024,
            ReasoningEffort::Low => 4096,
            ReasoningEffort::Medium => 8192,
            ReasoningEffort::High => 16384,
            ReasoningEffort::Xhigh => 24576,
            ReasoningEffort::Max => 32768,
        })
    }

    /// The level a thinking budget reads as.
    pub fn of_budget(budget_tokens: u32) -> Self {
        match budget_tokens {
            0..=4096 => ReasoningEffort::Low,
            4097..=8192 => ReasoningEffort::Medium,
            _ => ReasoningEffort::High,
        }
    }

    /// Anthropic's `output_config.effort` for this level (`low`, `medium`, `high`, `max`); `None` for
    /// [`ReasoningEffort::None`], which Anthropic spells as thinking disabled.
    pub fn anthropic(self) -> Option<&'static str> {
        match self {
            ReasoningEffort::None => None,
            ReasoningEffort::Minimal | ReasoningEffort::Low => Some("low"),
            ReasoningEffort::Medium => Some("medium"),
            ReasoningEffort::High => Some("high"),
            ReasoningEffort::Xhigh | ReasoningEffort::Max => Some("max"),
        }
    }

    /// OpenAI's `reasoning_effort` / `reasoning.effort` for this level: its own levels as they are, Anthropic's
    /// `max` as `xhigh`.
    pub fn openai(self) -> &'static str {
        match self {
            ReasoningEffort::Max => "xhigh",
            other => other.as_str(),
        }
    }
}

impl ReasoningOptions {
    /// The effort level for a provider that takes levels: the one given, else the thinking budget's, else
    /// `None` for thinking disabled; nothing for adaptive thinking (the provider's own default).
    pub fn level(&self) -> Option<ReasoningEffort> {
        match (self.effort, self.thinking) {
            (Some(effort), _) => Some(effort),
            (None, Some(Thinking::Enabled { budget_tokens })) => {
                Some(ReasoningEffort::of_budget(budget_tokens))
            }
            (None, Some(Thinking::Disabled)) => Some(ReasoningEffort::None),
            (None, Some(Thinking::Adaptive) | None) => None,
        }
    }

    /// The thinking budget for a provider that takes budgets: the one given, else the effort level's;
    /// `Some(0)` for thinking off, `None` for adaptive thinking or nothing asked.
    pub fn budget_tokens(&self) -> Option<u32> {
        match self.thinking {
            Some(Thinking::Enabled { budget_tokens }) => Some(budget_tokens),
            Some(Thinking::Disabled) => Some(0),
            Some(Thinking::Adaptive) => None,
            None => self.effort.map(|e| e.budget_tokens().unwrap_or(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_reads_back_from_its_budget_as_a_level_openai_takes() {
        for (effort, back) in [
            (ReasoningEffort::Minimal, ReasoningEffort::Low),
            (ReasoningEffort::Low, ReasoningEffort::Low),
            (ReasoningEffort::Medium, ReasoningEffort::Medium),
            (ReasoningEffort::High, ReasoningEffort::High),
            (ReasoningEffort::Max, ReasoningEffort::High),
        ] {
            let budget = effort.budget_tokens().unwrap();
            assert_eq!(ReasoningEffort::of_budget(budget), back, "{effort:?}");
            assert_eq!(ReasoningEffort::parse(effort.as_str()), Some(effort));
        }
        assert_eq!(ReasoningEffort::parse("extreme"), None);
    }

    #[test]
    fn an_effort_alone_is_its_level_and_a_budget_alone_reads_as_one() {
        let effort = ReasoningOptions {
            effort: Some(ReasoningEffort::Low),
            ..ReasoningOptions::default()
        };
        assert_eq!(effort.level(), Some(ReasoningEffort::Low));
        assert_eq!(effort.budget_tokens(), Some(4096));
        let budget = ReasoningOptions {
            thinking: Some(Thinking::Enabled {
                budget_tokens: 6000,
            }),
            ..ReasoningOptions::default()
        };
        assert_eq!(budget.level(), Some(ReasoningEffort::Medium));
        let adaptive = ReasoningOptions {
            thinking: Some(Thinking::Adaptive),
            ..ReasoningOptions::default()
        };
        assert_eq!((adaptive.level(), adaptive.budget_tokens()), (None, None));
    }
}
