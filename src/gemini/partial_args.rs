//! Function-call arguments streamed in pieces (Gemini 3's `streamFunctionCallArguments`): a `functionCall` with
//! the name and `willContinue: true`, then `functionCall`s without a name whose `partialArgs` each set one value
//! at a JSON path (`$.location`, `$.units[0]`; a string may come in several pieces, each but the last
//! `willContinue`), and a last one without `willContinue` ending the call. The pieces are set into one
//! arguments object, which becomes the call's arguments when it ends.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ChatError;

/// One `partialArgs` entry.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PartialArg {
    json_path: String,
    #[serde(default)]
    string_value: Option<String>,
    #[serde(default)]
    number_value: Option<serde_json::Number>,
    #[serde(default)]
    bool_value: Option<bool>,
    /// `NULL_VALUE`: the argument is null.
    #[serde(default)]
    null_value: Option<Value>,
}

/// The deepest path a piece may set: far beyond any tool schema, and a bound on the work one piece costs.
const MAX_DEPTH: usize = 64;
/// The highest array index a piece may set (arrays are filled with nulls up to it).
const MAX_INDEX: usize = 4096;

/// A call whose arguments are still arriving.
pub(super) struct PartialCall {
    pub(super) index: usize,
    pub(super) id: String,
    pub(super) name: String,
    pub(super) args: Value,
}

impl PartialCall {
    /// Sets each piece's value at its path; a string piece at a path already holding a string continues it.
    pub(super) fn apply(&mut self, pieces: Vec<PartialArg>) -> Result<(), ChatError> {
        for piece in pieces {
            let value = if let Some(text) = piece.string_value {
                Value::String(text)
            } else if let Some(number) = piece.number_value {
                Value::Number(number)
            } else if let Some(flag) = piece.bool_value {
                Value::Bool(flag)
            } else if piece.null_value.is_some() {
                Value::Null
            } else {
                continue;
            };
            let slot = slot(&mut self.args, &piece.json_path)?;
            match (slot, value) {
                (Value::String(text), Value::String(more)) => text.push_str(&more),
                (slot, value) => *slot = value,
            }
        }
        Ok(())
    }
}

/// A step of a JSON path.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The value at `path` (RFC 9535's `$`, `.name`, `['name']` and `[n]` steps), created (as objects, arrays and
/// nulls) where missing.
fn slot<'v>(root: &'v mut Value, path: &str) -> Result<&'v mut Value, ChatError> {
    let bad = |why: &str| {
        ChatError::protocol(
            format_args!("a partial argument's jsonPath {why}"),
            path.as_bytes(),
        )
    };
    let mut rest = path
        .strip_prefix('$')
        .ok_or_else(|| bad("does not start with `$`"))?;
    let mut current = root;
    let mut depth = 0;
    while !rest.is_empty() {
        depth += 1;
        if depth > MAX_DEPTH {
            return Err(bad(&format!("is deeper than {MAX_DEPTH} steps")));
        }
        let step;
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            step = Step::Key(&after[..end]);
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("['") {
            let end = after
                .find("']")
                .ok_or_else(|| bad("has an unclosed `['`"))?;
            step = Step::Key(&after[..end]);
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').ok_or_else(|| bad("has an unclosed `[`"))?;
            let index: usize = after[..end].parse().map_err(|_| bad("has a bad index"))?;
            if index > MAX_INDEX {
                return Err(bad(&format!("has an index above {MAX_INDEX}")));
            }
            step = Step::Index(index);
            rest = &after[end + 1..];
        } else {
            return Err(bad("has a step that is neither `.name` nor `[…]`"));
        }
        current = match step {
            Step::Key(key) => {
                if !current.is_object() {
                    *current = Value::Object(Map::new());
                }
                let Value::Object(map) = current else {
                    unreachable!("made an object above")
                };
                map.entry(key).or_insert(Value::Null)
            }
            Step::Index(index) => {
                if !current.is_array() {
                    *current = Value::Array(Vec::new());
                }
                let Value::Array(items) = current else {
                    unreachable!("made an array above")
                };
                if items.len() <= index {
                    items.resize(index + 1, Value::Null);
                }
                &mut items[index]
            }
        };
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call() -> PartialCall {
        PartialCall {
            index: 0,
            id: "c".into(),
            name: "n".into(),
            args: json!({}),
        }
    }

    fn piece(path: &str, value: Value) -> PartialArg {
        serde_json::from_value(json!({"jsonPath": path, "stringValue": value})).unwrap()
    }

    #[test]
    fn quoted_keys_and_nested_paths_are_set() {
        let mut call = call();
        call.apply(vec![
            piece("$['a b'].c[1]", json!("x")),
            piece("$['a b'].c[1]", json!("y")),
        ])
        .unwrap();
        assert_eq!(call.args, json!({"a b": {"c": [null, "xy"]}}));
    }

    #[test]
    fn a_path_past_the_limits_is_a_protocol_error_naming_the_limit() {
        let deep = format!("${}", ".a".repeat(MAX_DEPTH + 1));
        let err = call().apply(vec![piece(&deep, json!("x"))]).unwrap_err();
        assert!(err.to_string().contains("deeper than 64"), "{err}");
        let far = call()
            .apply(vec![piece("$.a[99999999]", json!("x"))])
            .unwrap_err();
        assert!(far.to_string().contains("above 4096"), "{far}");
        let bare = call().apply(vec![piece("a", json!("x"))]).unwrap_err();
        assert!(bare.to_string().contains("`$`"), "{bare}");
    }
}
