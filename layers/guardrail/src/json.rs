//! The texts of a JSON value — every string and every object key — judged one by one, and redactions put back
//! in place: tool-call arguments (a key can carry an address as well as a value), tool schemas, provider
//! options, content parts kept as their provider's JSON.

use std::collections::HashMap;

use serde_json::Value;
use tower_chat::{ChatError, GuardrailStage, GuardrailVerdict};

use crate::policy::{judge, StagePolicy};
use crate::scan::Budget;

/// One text of a JSON value: a string, or an object key (its pointer names the member; `member` is its
/// position in its object).
struct JsonText {
    pointer: String,
    key: Option<usize>,
    text: String,
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn collect(value: &Value, pointer: String, out: &mut Vec<JsonText>) {
    match value {
        Value::String(text) => out.push(JsonText {
            pointer,
            key: None,
            text: text.clone(),
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect(item, format!("{pointer}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (position, (key, item)) in map.iter().enumerate() {
                let member = format!("{pointer}/{}", escape(key));
                out.push(JsonText {
                    pointer: member.clone(),
                    key: Some(position),
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
    // Members whose key a check objected to: locations name them by position, never by the key (a verdict,
    // an error message or a log line must not carry what was found).
    let mut hidden: HashMap<String, usize> = HashMap::new();
    for text in texts {
        let at = format!("{location}{}", shown(&text, &hidden));
        let verdict = judge(policy, stage, &at, &text.text, whole, budget).await?;
        if let (Some(position), false) = (text.key, verdict.verdicts.is_empty()) {
            hidden.insert(text.pointer.clone(), position);
        }
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
    changes.sort_by_key(|(text, _)| (text.key.is_some(), std::cmp::Reverse(text.pointer.len())));
    for (text, redacted) in changes {
        if text.key.is_none() {
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

/// The pointer of `text` as locations show it: a key as `<key N>` (its position) — always for the key itself,
/// and in the paths below it once a check objected to it.
fn shown(text: &JsonText, hidden: &HashMap<String, usize>) -> String {
    let mut real = String::new();
    let mut out = String::new();
    let segments: Vec<&str> = text.pointer.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        real.push('/');
        real.push_str(segment);
        let last = i + 1 == segments.len();
        match (hidden.get(&real), text.key) {
            (Some(position), _) => out.push_str(&format!("/<key {position}>")),
            (None, Some(position)) if last => out.push_str(&format!("/<key {position}>")),
            _ => {
                out.push('/');
                out.push_str(segment);
            }
        }
    }
    out
}
