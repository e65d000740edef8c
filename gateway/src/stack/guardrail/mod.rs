//! Content policies: the `[guardrail]` table of the configuration file, and the service that applies the policy
//! each request falls under — chosen by its caller (API key), its route (inbound wire format) and its model.
//!
//! Off unless the file has `[[guardrail.policy]]` entries. Every policy is compiled once at start-up (patterns,
//! schemas, moderation clients); a request only picks one. **The first policy whose `callers`, `routes` and
//! `models` all match the request applies** (an absent list matches anything; a request that matches no policy
//! goes through unchecked), so list narrow policies before broad ones and end with a catch-all when every request
//! must be checked.
//!
//! ```
//! use tower_chat_gateway::config_file::ConfigFile;
//!
//! let file = ConfigFile::parse(r#"
//! [[guardrail.policy]]
//! name = "support"                         # names the policy in start-up errors
//! callers = ["support-bot"]                # API key names (absent: any caller)
//! routes = ["chat_completions", "/v1/messages"]  # a format or its path (absent: any route)
//! models = ["gpt-4o-mini"]                 # as the client names it (absent: any model)
//! block_message = "[withheld: {check}]"    # ends a blocked answer (optional)
//! max_candidates = 100000                  # work bound per check and request (optional)
//!
//! [[guardrail.policy.check]]
//! kind = "secrets"                         # block by default
//!
//! [[guardrail.policy.check]]
//! kind = "personal_data"                   # redact by default
//! stages = ["output"]                      # request, tool_call, tool_result, output
//!
//! [[guardrail.policy.check]]
//! kind = "deny_list"
//! name = "topics"
//! words = ["project zeus"]
//! action = "flag"                          # block, redact or flag
//!
//! [[guardrail.policy]]                     # everyone else
//! [[guardrail.policy.check]]
//! kind = "pattern"
//! name = "ticket"
//! pattern = "TCK-[0-9]{4,8}"               # bounded: `{1,64}`, not `+`
//! action = "redact"
//!
//! [[guardrail.policy.check]]
//! kind = "output_length"
//! max_bytes = 16000
//! "#, "gateway.toml").unwrap();
//! let policies = file.guardrail.unwrap().compile().unwrap();
//! assert_eq!(policies.len(), 2);
//! ```
//!
//! The other kinds: `kind = "moderation"` (an OpenAI-format moderation service: `endpoint` is its base URL,
//! `api_key_env` the variable holding its key, `model`, `timeout_seconds`, default 5) and `kind = "json_schema"`
//! (`schema`: the JSON Schema as JSON text; answers must match it).
//!
//! What a client sees: a blocked request is a 400 with code `content_filter` in its format's error shape; a
//! blocked answer ends with the text before the match, the block message and the format's filtered finish
//! (Chat Completions `finish_reason: "content_filter"`, Messages `stop_reason: "refusal"`, Responses `status:
//! "incomplete"` with `incomplete_details.reason: "content_filter"`); a redaction shows as `[REDACTED:<kind>]`
//! in the text. Every verdict counts in `tower_chat_guardrail_verdicts_total` (see [`crate::telemetry::metrics`]).

mod select;

use std::time::Duration;

use tower_chat::GuardrailStage;
use tower_chat_guardrail::{Check, GuardrailLayer, Moderation};

use crate::GatewayError;
use tower_chat_wire::format::InboundRoute;

pub use crate::config::guardrail::{
    ActionName, CheckEntry, CheckKind, GuardrailSection, PolicyEntry, StageName,
};
use select::Selector;
pub use select::{Guardrails, GuardrailsLayer, Policies};

impl From<StageName> for GuardrailStage {
    fn from(stage: StageName) -> Self {
        match stage {
            StageName::Request => GuardrailStage::Request,
            StageName::ToolCall => GuardrailStage::ToolCall,
            StageName::ToolResult => GuardrailStage::ToolResult,
            StageName::Output => GuardrailStage::Output,
        }
    }
}

impl GuardrailSection {
    /// Compile every policy. A bad entry (a pattern that does not compile or is unbounded, a missing parameter,
    /// a field of another kind, an unknown route, an unset key variable) refuses the start, naming the policy
    /// and check.
    pub fn compile(&self) -> Result<Policies, GatewayError> {
        let selectors = self
            .policy
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let at = match &entry.name {
                    Some(name) => format!("[[guardrail.policy]] #{} (\"{name}\")", i + 1),
                    None => format!("[[guardrail.policy]] #{}", i + 1),
                };
                entry.compile(&at)
            })
            .collect::<Result<_, _>>()?;
        Ok(Policies { selectors })
    }
}

fn config_error(at: &str, message: impl std::fmt::Display) -> GatewayError {
    GatewayError::Config(format!("{at}: {message}"))
}

/// A list that, when given, must not be empty (an empty list would match nothing, which is never meant).
fn non_empty<'a>(
    at: &str,
    key: &str,
    list: &'a Option<Vec<String>>,
) -> Result<Option<&'a [String]>, GatewayError> {
    match list {
        Some(items) if items.is_empty() || items.iter().any(|i| i.trim().is_empty()) => {
            Err(config_error(
                at,
                format!("`{key}` lists nothing or an empty name; leave it out to match any"),
            ))
        }
        Some(items) => Ok(Some(items)),
        None => Ok(None),
    }
}

impl PolicyEntry {
    fn compile(&self, at: &str) -> Result<Selector, GatewayError> {
        let callers = non_empty(at, "callers", &self.callers)?.map(|c| c.iter().cloned().collect());
        let models = non_empty(at, "models", &self.models)?.map(|m| m.iter().cloned().collect());
        let routes = non_empty(at, "routes", &self.routes)?
            .map(|routes| {
                routes
                    .iter()
                    .map(|r| {
                        InboundRoute::parse(r).ok_or_else(|| {
                            config_error(
                                at,
                                format!(
                                    "`routes`: unknown route `{r}` (chat_completions, messages, responses, or \
                                     /v1/chat/completions, /v1/messages, /v1/responses)"
                                ),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        if self.check.is_empty() {
            return Err(config_error(
                at,
                "the policy lists no [[guardrail.policy.check]]",
            ));
        }
        let mut layer = GuardrailLayer::new();
        if let Some(message) = &self.block_message {
            layer = layer.block_message(message);
        }
        match self.max_candidates {
            Some(0) => return Err(config_error(
                at,
                "`max_candidates` must be at least 1 (it bounds the work of each pattern check)",
            )),
            Some(max) => layer = layer.max_candidates(max),
            None => {}
        }
        for (j, check) in self.check.iter().enumerate() {
            let at = format!("{at}, check #{} ({})", j + 1, check.kind.as_str());
            layer = layer.check(check.compile(&at)?);
        }
        Ok(Selector {
            callers,
            routes,
            models,
            layer,
        })
    }
}

impl CheckKind {
    fn as_str(self) -> &'static str {
        match self {
            CheckKind::Secrets => "secrets",
            CheckKind::PersonalData => "personal_data",
            CheckKind::Pattern => "pattern",
            CheckKind::DenyList => "deny_list",
            CheckKind::OutputLength => "output_length",
            CheckKind::JsonSchema => "json_schema",
            CheckKind::Moderation => "moderation",
        }
    }

    /// The parameters this kind takes (besides `kind`, `name`, `action`, `stages`).
    fn parameters(self) -> &'static [&'static str] {
        match self {
            CheckKind::Secrets | CheckKind::PersonalData => &[],
            CheckKind::Pattern => &["pattern"],
            CheckKind::DenyList => &["words"],
            CheckKind::OutputLength => &["max_bytes"],
            CheckKind::JsonSchema => &["schema"],
            CheckKind::Moderation => &["endpoint", "api_key_env", "model", "timeout_seconds"],
        }
    }
}

impl CheckEntry {
    /// The parameters given, by key.
    fn given(&self) -> Vec<&'static str> {
        [
            ("pattern", self.pattern.is_some()),
            ("words", self.words.is_some()),
            ("max_bytes", self.max_bytes.is_some()),
            ("schema", self.schema.is_some()),
            ("endpoint", self.endpoint.is_some()),
            ("api_key_env", self.api_key_env.is_some()),
            ("model", self.model.is_some()),
            ("timeout_seconds", self.timeout_seconds.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, given)| given.then_some(key))
        .collect()
    }

    fn compile(&self, at: &str) -> Result<Check, GatewayError> {
        let kind = self.kind;
        if let Some(stray) = self
            .given()
            .into_iter()
            .find(|key| !kind.parameters().contains(key))
        {
            return Err(config_error(
                at,
                format!("`{stray}` is not a parameter of kind `{}`", kind.as_str()),
            ));
        }
        let missing = |key: &str| config_error(at, format!("`{key}` is required"));
        let invalid = |e: tower_chat::ChatError| config_error(at, e.message());
        let name = match &self.name {
            Some(name) if !plain_name(name) => {
                return Err(config_error(
                    at,
                    format!("`name = \"{name}\"`: 1 to 64 characters of a-z A-Z 0-9 _ - ."),
                ))
            }
            Some(name) => name.as_str(),
            None if matches!(kind, CheckKind::Pattern | CheckKind::DenyList) => {
                return Err(missing("name"))
            }
            None => kind.as_str(),
        };
        let mut check = match kind {
            CheckKind::Secrets => Check::secrets(),
            CheckKind::PersonalData => Check::personal_data(),
            CheckKind::Pattern => {
                let pattern = self.pattern.as_deref().ok_or_else(|| missing("pattern"))?;
                Check::pattern(name, pattern).map_err(invalid)?
            }
            CheckKind::DenyList => {
                let words = self.words.as_ref().ok_or_else(|| missing("words"))?;
                if words.is_empty() || words.iter().any(|w| w.trim().is_empty()) {
                    return Err(config_error(at, "`words` lists nothing or an empty word"));
                }
                Check::deny_list(name, words).map_err(invalid)?
            }
            CheckKind::OutputLength => {
                Check::output_length(self.max_bytes.ok_or_else(|| missing("max_bytes"))?)
            }
            CheckKind::JsonSchema => {
                let text = self.schema.as_deref().ok_or_else(|| missing("schema"))?;
                let schema: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| config_error(at, format!("`schema` is not JSON: {e}")))?;
                Check::json_schema(&schema).map_err(invalid)?
            }
            CheckKind::Moderation => Check::moderation(self.moderation(at)?),
        };
        check = check.named(name);
        check = match self.action {
            Some(ActionName::Block) => check.block(),
            Some(ActionName::Redact) => {
                if kind == CheckKind::OutputLength {
                    return Err(config_error(
                        at,
                        "`action = \"redact\"`: a length cannot be redacted, only cut (block) or flagged",
                    ));
                }
                check.redact()
            }
            Some(ActionName::Flag) => check.flag(),
            None => check,
        };
        if let Some(stages) = &self.stages {
            if stages.is_empty() {
                return Err(config_error(
                    at,
                    "`stages` lists nothing; leave it out for the kind's own",
                ));
            }
            let stages: Vec<GuardrailStage> = stages.iter().map(|&s| s.into()).collect();
            check = check.on(&stages);
        }
        Ok(check)
    }

    fn moderation(&self, at: &str) -> Result<Moderation, GatewayError> {
        let endpoint = self
            .endpoint
            .as_deref()
            .ok_or_else(|| config_error(at, "`endpoint` is required"))?;
        let mut service =
            Moderation::new(endpoint).map_err(|e| config_error(at, format!("`endpoint`: {e}")))?;
        if let Some(variable) = &self.api_key_env {
            let key = std::env::var(variable)
                .ok()
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| {
                    config_error(
                        at,
                        format!("`api_key_env`: the variable {variable} is unset or empty"),
                    )
                })?;
            service = service.api_key(key.trim());
        }
        if let Some(model) = &self.model {
            service = service.model(model);
        }
        if let Some(seconds) = self.timeout_seconds {
            let timeout = Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|t| !t.is_zero())
                .ok_or_else(|| {
                    config_error(at, "`timeout_seconds` must be a positive number of seconds")
                })?;
            service = service.timeout(timeout);
        }
        Ok(service)
    }
}

/// Check names become metric label values and appear in errors: short and plain.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

#[cfg(test)]
mod tests;
