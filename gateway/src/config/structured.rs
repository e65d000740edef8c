//! `[structured]`: JSON answers validated and repaired, off without the table (built by `stack::structured`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The `[structured]` table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StructuredSection {
    /// Whether JSON answers are validated (default `true`).
    #[serde(default = "validate_by_default")]
    pub validate: bool,
    /// How many times an answer that breaks its schema is asked for again (default 2).
    #[serde(default = "default_repairs")]
    pub repairs: usize,
    /// Per model (the name clients send): its own `validate` and `repairs`, each defaulting to the table's.
    #[serde(default)]
    pub models: BTreeMap<String, StructuredModel>,
    /// Per inbound route (`chat_completions`, `messages`, `responses`, or its path): its own `validate` and
    /// `repairs`, each over the model's entry, then the table's.
    #[serde(default)]
    pub routes: BTreeMap<String, StructuredModel>,
}

/// One model's entry under `[structured.models]` (or one route's under `[structured.routes]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StructuredModel {
    /// Overrides the table's `validate`.
    pub validate: Option<bool>,
    /// Overrides the table's `repairs`.
    pub repairs: Option<usize>,
}

fn validate_by_default() -> bool {
    true
}

fn default_repairs() -> usize {
    2
}
