//! What a schema document declares before any keyword is compiled: the anchors of its root resource and the
//! schema resources embedded in it (subschemas with an `$id` of their own), plus the JSON pointer helpers
//! `$ref` resolution needs.
//!
//! References resolve against the root resource only. An embedded resource changes the base URI of everything
//! inside it (a `#/$defs/a` there means its own `$defs`, a `#name` its own anchors) and opens a dynamic scope
//! for `$dynamicRef`; neither is implemented, so a reference inside one is refused when the schema is compiled
//! rather than resolved against the wrong base. Outside them the document is one resource, where a
//! `$dynamicRef` resolves exactly like a `$ref`.

use std::collections::HashMap;

use serde_json::Value;
pub(crate) use tower_chat::schema_limits::percent_decode;

/// The anchors and embedded resources of a document.
#[derive(Debug, Default)]
pub(crate) struct Document {
    /// Anchor name → the pointers of the root resource's schemas declaring it (`$anchor`, `$dynamicAnchor`,
    /// draft 7's `"$id": "#name"`). More than one pointer: the name is ambiguous.
    anchors: HashMap<String, Vec<String>>,
    /// Pointers of embedded resources, with their `$id`.
    resources: Vec<(String, String)>,
}

/// Keywords whose values are data, not schemas: an `$id` or `$anchor` inside them declares nothing.
const DATA_KEYWORDS: [&str; 4] = ["enum", "const", "default", "examples"];

impl Document {
    /// Scan `root`; `draft7` for drafts 4–7, where an `$id` beside a `$ref` is ignored with the other siblings.
    pub(crate) fn scan(root: &Value, draft7: bool) -> Document {
        let mut document = Document::default();
        document.walk(root, &mut String::new(), draft7);
        document
    }

    /// The pointer of the schema declaring anchor `name` in the root resource: `Ok(None)` when none does,
    /// `Err(pointers)` when several do.
    pub(crate) fn anchor(&self, name: &str) -> Result<Option<&str>, &[String]> {
        match self.anchors.get(name).map(Vec::as_slice) {
            None | Some([]) => Ok(None),
            Some([one]) => Ok(Some(one)),
            Some(many) => Err(many),
        }
    }

    /// The embedded resource holding the schema at `pointer` (its pointer and `$id`), if any.
    pub(crate) fn resource_around(&self, pointer: &str) -> Option<(&str, &str)> {
        self.resources
            .iter()
            .filter(|(at, _)| {
                pointer
                    .strip_prefix(at.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .map(|(at, id)| (at.as_str(), id.as_str()))
            .next()
    }

    fn walk(&mut self, value: &Value, pointer: &mut String, draft7: bool) {
        match value {
            Value::Object(map) => {
                let ignored_id = draft7 && map.contains_key("$ref");
                let id = map
                    .get("$id")
                    .and_then(Value::as_str)
                    .filter(|_| !ignored_id);
                if let Some(id) = id.filter(|id| !id.starts_with('#') && !pointer.is_empty()) {
                    // Everything below belongs to this resource: its anchors are not the root's.
                    self.resources.push((pointer.clone(), id.to_owned()));
                    return;
                }
                let anchors = [
                    map.get("$anchor").and_then(Value::as_str),
                    map.get("$dynamicAnchor").and_then(Value::as_str),
                    id.and_then(|id| id.strip_prefix('#')),
                ];
                for name in anchors.into_iter().flatten().filter(|n| !n.is_empty()) {
                    let declared = self.anchors.entry(name.to_owned()).or_default();
                    if !declared.contains(pointer) {
                        declared.push(pointer.clone());
                    }
                }
                for (key, child) in map {
                    // Only objects and arrays can hold a schema; most values (`type`, `description`) are neither.
                    if !(child.is_object() || child.is_array())
                        || DATA_KEYWORDS.contains(&key.as_str())
                    {
                        continue;
                    }
                    let len = pointer.len();
                    push_segment(pointer, key);
                    self.walk(child, pointer, draft7);
                    pointer.truncate(len);
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&index.to_string());
                    self.walk(child, pointer, draft7);
                    pointer.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// Append `/key` to a JSON pointer, escaping `~` and `/`.
pub(crate) fn push_segment(pointer: &mut String, key: &str) {
    pointer.push('/');
    for c in key.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// The value at a JSON pointer (`/a/0/b~1c`) inside `root`.
pub(crate) fn resolve_pointer<'s>(root: &'s Value, pointer: &str) -> Option<&'s Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let mut current = root;
    for raw in pointer.strip_prefix('/')?.split('/') {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        current = match current {
            Value::Object(map) => map.get(&segment)?,
            Value::Array(items) => {
                if segment.starts_with('+') || (segment.len() > 1 && segment.starts_with('0')) {
                    return None;
                }
                items.get(segment.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(current)
}
