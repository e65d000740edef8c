//! `[guardrail]`: content policies, off without `[[guardrail.policy]]` entries (compiled by `stack::guardrail`).

use serde::Deserialize;

/// The `[guardrail]` table: policies, first match wins.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailSection {
    /// `[[guardrail.policy]]`, in the order they are tried.
    #[serde(default)]
    pub policy: Vec<PolicyEntry>,
}

/// One `[[guardrail.policy]]`: whom it applies to and its checks.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// Names the policy in start-up errors.
    pub name: Option<String>,
    /// Caller names (the API keys file's `name:` or `key-…` identities); absent: any caller.
    pub callers: Option<Vec<String>>,
    /// `chat_completions`, `messages`, `responses` or their paths (`/v1/chat/completions`, …); absent: any.
    pub routes: Option<Vec<String>>,
    /// Model names as clients send them; absent: any model.
    pub models: Option<Vec<String>>,
    /// The text that ends a blocked answer; `{check}` is replaced by the check's name.
    pub block_message: Option<String>,
    /// How many candidate matches each pattern check may examine per request (and per answer); past it the
    /// request is refused (`content_filter`, naming `max_candidates`) or the answer ends. Default 100,000.
    pub max_candidates: Option<usize>,
    /// `[[guardrail.policy.check]]`, in order (the first listed wins a tie).
    #[serde(default)]
    pub check: Vec<CheckEntry>,
}

/// One `[[guardrail.policy.check]]`. Which fields apply depends on `kind`; a field another kind uses is refused.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckEntry {
    /// What it looks for.
    pub kind: CheckKind,
    /// The name verdicts, errors and metrics carry (default: the kind; `pattern` and `deny_list` need one).
    pub name: Option<String>,
    /// What to do on a finding (default: the kind's own).
    pub action: Option<ActionName>,
    /// Where to look (default: the kind's own).
    pub stages: Option<Vec<StageName>>,
    /// `pattern`: the regular expression.
    pub pattern: Option<String>,
    /// `deny_list`: the words and phrases.
    pub words: Option<Vec<String>>,
    /// `output_length`: the most bytes of answer text.
    pub max_bytes: Option<usize>,
    /// `json_schema`: the schema, as JSON text.
    pub schema: Option<String>,
    /// `moderation`: the service's base URL (`https://api.openai.com/v1`).
    pub endpoint: Option<String>,
    /// `moderation`: the environment variable holding the service's key.
    pub api_key_env: Option<String>,
    /// `moderation`: the moderation model.
    pub model: Option<String>,
    /// `moderation`: the deadline of one call, in seconds (default 5).
    pub timeout_seconds: Option<f64>,
}

/// The built-in checks a policy can list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// API keys and private keys.
    Secrets,
    /// Emails, phone numbers, payment cards, IBANs.
    PersonalData,
    /// A bounded regular expression.
    Pattern,
    /// Words and phrases, whole words, any case.
    DenyList,
    /// Answers longer than `max_bytes`.
    OutputLength,
    /// Answers that do not match a JSON Schema.
    JsonSchema,
    /// An OpenAI-format moderation service.
    Moderation,
}

/// A check's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionName {
    /// Refuse the request, end the answer.
    Block,
    /// Replace what was found by `[REDACTED:<kind>]`.
    Redact,
    /// Record only.
    Flag,
}

/// Where a check looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageName {
    /// The request's text before it is sent.
    Request,
    /// Tool calls' arguments.
    ToolCall,
    /// Tool results.
    ToolResult,
    /// The answer.
    Output,
}
