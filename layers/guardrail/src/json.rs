//! The texts of a JSON value — every string and every object key — judged one by one, and redactions put back
//! in place: tool-call arguments (a key can carry an address as well as a value), tool schemas, provider
//! options, content parts kept as their provider's JSON.

use serde_json::Value;
use tower_chat::{ChatError, GuardrailStage, GuardrailVerdict};

use crate::policy::{judge, StagePolicy};
use crate::scan::Budget;

/// One text of a JSON value: a string, or an object key (its pointer names the member).
struct JsonText {
    pointer: String,
    key: bool,
    text: String,
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn collect(value: &Value, pointer: String, out: &mut Vec<JsonText>) {
    match value {
        Value::String(text) => out.push(JsonText {
            pointer,
            key: false,
            text: text.clone(),
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect(item, format!("{pointer}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let member = format!("{pointer}/{}", escape(key));
                out.push(JsonText {
                    pointer: member.clone(),
                    key: true,
                    text: key.clone(),
                });
                collect(item, member, out);
            }
        }
        _ => {}
    }
}

/// What judging a JSON value's texts decided.
#[derive(Debug, Default)]
pub(crate) struct JudgedJson {
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    pub(crate) block: Option<GuardrailVerdict>,
    /// The value with every redaction made, when one was.
    pub(crate) redacted: Option<Value>,
}

/// Judge every string and key of `value` with the checks of `stage` (location: `location` and the text's JSON
/// pointer); stops at the first block.
pub(crate) async fn judge_json(
    policy: &StagePolicy,
    stage: GuardrailStage,
    location: &str,
    value: &Value,
    whole: bool,
    budget: &mut Budget,
) -> Result<JudgedJson, ChatError> {
    let mut judged = JudgedJson::default();
    if policy.is_empty() {
        return Ok(judged);
    }
    let mut texts = Vec::new();
    collect(value, String::new(), &mut texts);
    let mut changes: Vec<(JsonText, String)> = Vec::new();
    for text in texts {
        let at = format!("{location}{}", text.pointer);
        let verdict = judge(policy, stage, &at, &text.text, whole, budget).await?;
        judged.verdicts.extend(verdict.verdicts);
        if verdict.block.is_some() {
            judged.block = verdict.block;
            return Ok(judged);
        }
        if let Some(redacted) = verdict.redacted {
            changes.push((text, redacted));
        }
    }
    if changes.is_empty() {
        return Ok(judged);
    }
    let mut value = value.clone();
    // Strings first, by pointers that still hold; then keys, deepest first, so a renamed member does not move
    // a pointer still to be used.
    changes.sort_by_key(|(text, _)| (text.key, std::cmp::Reverse(text.pointer.len())));
    for (text, redacted) in changes {
        if !text.key {
            if let Some(slot) = value.pointer_mut(&text.pointer) {
                *slot = Value::String(redacted);
            }
            continue;
        }
        let parent = text
            .pointer
            .rsplit_once('/')
            .map_or("", |(parent, _)| parent);
        if let Some(Value::Object(map)) = value.pointer_mut(parent) {
            if let Some(member) = map.remove(&text.text) {
                map.insert(redacted, member);
            }
        }
    }
    judged.redacted = Some(value);
    Ok(judged)
}
