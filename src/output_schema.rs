//! A response schema in the shape each provider takes, rewritten once per schema and cached.
//!
//! [`ResponseFormat::JsonSchema`](crate::ResponseFormat::JsonSchema) carries the caller's JSON Schema as written
//! (by hand or by `schemars`). Providers take different subsets of it:
//!
//! - **OpenAI strict mode** ([`SchemaDialect::OpenAiStrict`], used when `strict` is `Some(true)`): every object
//!   lists all its properties in `required` and sets `additionalProperties: false`; a property that was optional
//!   becomes a `null` union instead (`"type": ["string", "null"]`, or `anyOf: [.., {"type": "null"}]` for a
//!   `$ref`, an `enum` gains `null`); `$defs` are kept (recursion through `$ref` is allowed); `oneOf` becomes
//!   `anyOf`; keywords strict mode rejects (`minLength`, `default`, `allOf`, `patternProperties`, a map's
//!   `additionalProperties` schema, …) move into the schema's `description` as text.
//! - **Anthropic structured outputs** ([`SchemaDialect::Anthropic`]): `additionalProperties: false` on every
//!   object, `required` unchanged; numeric and length bounds move into `description` (Anthropic's own SDKs do
//!   the same).
//! - **Gemini `responseJsonSchema`** ([`SchemaDialect::GeminiJson`]): the keywords Gemini documents are kept, the
//!   rest move into `description`.
//!
//! What moved is listed in [`NormalisedSchema::moved`]: the provider's answer may then be wider than the original
//! schema, so it must be validated against the original afterwards (the structured-output layer does).
//!
//! Rewriting walks the whole schema; [`normalise`] does it once per distinct schema and dialect and hands out the
//! cached result behind an [`Arc`] afterwards (keyed by a hash of the schema, checked for equality on a hit).
//!
//! A schema is first measured against the default [`SchemaLimits`] ([`rewrite`], and so [`normalise`] on a cache
//! miss, before anything walks or keeps it): one that nests too deep, or whose `$ref`s expand past the limits, is
//! a [`SchemaLimitError`] naming the limit, whether or not the caller checked it before.
//!
//! ```
//! use serde_json::json;
//! use tower_chat::output_schema::{normalise, SchemaDialect};
//!
//! let schema = json!({"type": "object", "properties": {
//!     "age": {"type": "integer"},
//!     "name": {"type": "string", "minLength": 1}}, "required": ["name"]});
//! let strict = normalise(&schema, SchemaDialect::OpenAiStrict)?;
//! assert_eq!(strict.schema, json!({"type": "object", "properties": {
//!     "age": {"type": ["integer", "null"]},
//!     "name": {"type": "string", "description": "minLength: 1"}},
//!     "required": ["age", "name"], "additionalProperties": false}));
//! assert_eq!(strict.moved, ["/properties/name/minLength"]);
//! // The second call is a cache hit: the same allocation.
//! assert!(std::sync::Arc::ptr_eq(&strict, &normalise(&schema, SchemaDialect::OpenAiStrict)?));
//!
//! // Sixty-five `items` deep: past `max_depth`, refused before anything walks it.
//! let mut deep = json!({"type": "string"});
//! for _ in 0..65 {
//!     deep = json!({"type": "array", "items": deep});
//! }
//! let error = normalise(&deep, SchemaDialect::Anthropic).unwrap_err();
//! assert_eq!(error.limit(), tower_chat::schema_limits::SchemaLimit::Depth);
//! # Ok::<(), tower_chat::schema_limits::SchemaLimitError>(())
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::schema_limits::{SchemaLimitError, SchemaLimits};

/// Which provider's subset of JSON Schema to rewrite a schema into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaDialect {
    /// OpenAI `response_format` / Responses `text.format` with `strict: true`.
    OpenAiStrict,
    /// Anthropic `output_config.format` (and a forced tool's `input_schema`).
    Anthropic,
    /// Gemini `generationConfig.responseJsonSchema`.
    GeminiJson,
}

/// A schema rewritten for one provider.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalisedSchema {
    /// The schema to send.
    pub schema: Value,
    /// JSON pointers (into the original schema) of the keywords moved into a `description` or otherwise
    /// loosened: the answer may break them, so validate it against the original schema.
    pub moved: Vec<String>,
}

/// `schema` rewritten for `dialect`, computed once per distinct schema and shared afterwards. A schema over the
/// default [`SchemaLimits`] is refused on the cache miss, before it is walked, and is not cached: a hit costs a
/// hash and an equality check, as before.
pub fn normalise(
    schema: &Value,
    dialect: SchemaDialect,
) -> Result<Arc<NormalisedSchema>, SchemaLimitError> {
    let rewritten = cached_if(
        schema,
        dialect as u8,
        || rewrite(schema, dialect).map(Arc::new),
        Result::is_ok,
    );
    (*rewritten).clone()
}

/// `schema` rewritten for `dialect`, without the cache (what [`normalise`] computes on a miss), after the same
/// check against the default [`SchemaLimits`].
pub fn rewrite(
    schema: &Value,
    dialect: SchemaDialect,
) -> Result<NormalisedSchema, SchemaLimitError> {
    SchemaLimits::DEFAULT.check(schema)?;
    Ok(rewrite_checked(schema, dialect))
}

/// The rewrite of a schema within the limits: the walk recurses as deep as the schema nests as written, which
/// the check bounds.
fn rewrite_checked(schema: &Value, dialect: SchemaDialect) -> NormalisedSchema {
    let mut out = schema.clone();
    let mut moved = Vec::new();
    if let Value::Object(root) = &mut out {
        root.remove("$schema");
    }
    Walker {
        dialect,
        moved: &mut moved,
    }
    .walk(&mut out, &mut String::new());
    NormalisedSchema { schema: out, moved }
}

/// How many distinct schemas the process-wide cache keeps before it starts over (a bound, not a tuning knob:
/// an application has a handful of answer types).
const CACHE_CAPACITY: usize = 256;

type CacheKey = (u8, u64);

/// The process-wide cache of values computed from a schema: [`normalise`]'s rewrites, and anything else worth
/// computing once per schema (a compiled validator). `kind` and the type `T` tell the computations apart.
/// Hashing, comparing and keeping a copy of the schema recurse as deep as it nests as written (at most 128 for
/// a schema serde_json parsed); `compute` is where to check it against [`SchemaLimits`], as [`normalise`] does.
pub fn cached<T: Send + Sync + 'static>(
    schema: &Value,
    kind: u8,
    compute: impl FnOnce() -> T,
) -> Arc<T> {
    cached_if(schema, kind, compute, |_| true)
}

/// [`cached`], keeping the value computed on a miss only when `keep` says so (a refusal is not worth a copy of
/// the schema it refused).
fn cached_if<T: Send + Sync + 'static>(
    schema: &Value,
    kind: u8,
    compute: impl FnOnce() -> T,
    keep: impl FnOnce(&T) -> bool,
) -> Arc<T> {
    type Entries =
        HashMap<(CacheKey, std::any::TypeId), (Value, Arc<dyn std::any::Any + Send + Sync>)>;
    static CACHE: OnceLock<Mutex<Entries>> = OnceLock::new();
    let mut hasher = DefaultHasher::new();
    hash_value(schema, &mut hasher);
    let key = ((kind, hasher.finish()), std::any::TypeId::of::<T>());
    let cache = CACHE.get_or_init(Default::default);
    {
        let entries = cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((original, value)) = entries.get(&key) {
            if original == schema {
                if let Ok(value) = Arc::clone(value).downcast::<T>() {
                    return value;
                }
            }
        }
    }
    // Computed outside the lock: two threads missing at once both compute, and the last one stays cached.
    let value = Arc::new(compute());
    if !keep(&*value) {
        return value;
    }
    let mut entries = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if entries.len() >= CACHE_CAPACITY {
        entries.clear();
    }
    entries.insert(key, (schema.clone(), value.clone()));
    value
}

/// A structural hash of a JSON value (object keys in their order; equal values by `==` may differ only in key
/// order, which the equality check on a hit settles).
fn hash_value(value: &Value, state: &mut DefaultHasher) {
    match value {
        Value::Null => 0u8.hash(state),
        Value::Bool(b) => (1u8, b).hash(state),
        // Without formatting the number (an allocation per number, most of a cache hit's cost otherwise).
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => (2u8, u).hash(state),
            (_, Some(i), _) => (3u8, i).hash(state),
            (_, _, f) => (4u8, f.map(f64::to_bits)).hash(state),
        },
        Value::String(s) => (5u8, s).hash(state),
        Value::Array(items) => {
            (6u8, items.len()).hash(state);
            items.iter().for_each(|item| hash_value(item, state));
        }
        Value::Object(fields) => {
            (7u8, fields.len()).hash(state);
            for (key, field) in fields {
                key.hash(state);
                hash_value(field, state);
            }
        }
    }
}

/// Keywords OpenAI strict mode accepts (everything else moves into `description`).
const OPENAI_KEPT: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// The `format`s strict mode knows (others, such as `schemars`' `uint32`, move into `description`).
const OPENAI_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// The `format`s Anthropic structured outputs know.
const ANTHROPIC_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords Anthropic structured outputs accept.
const ANTHROPIC_KEPT: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "description",
    "title",
    "format",
    "default",
];

/// Keywords Gemini's `responseJsonSchema` documents.
const GEMINI_KEPT: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "enum",
    "anyOf",
    "oneOf",
    "$ref",
    "$defs",
    "$id",
    "$anchor",
    "description",
    "title",
    "format",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "propertyOrdering",
];

/// Keywords whose value is a map of subschemas.
const SCHEMA_MAPS: &[&str] = &["properties", "$defs", "definitions"];
/// Keywords whose value is a list of subschemas.
const SCHEMA_LISTS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];

struct Walker<'a> {
    dialect: SchemaDialect,
    moved: &'a mut Vec<String>,
}

impl Walker<'_> {
    fn kept(&self) -> &'static [&'static str] {
        match self.dialect {
            SchemaDialect::OpenAiStrict => OPENAI_KEPT,
            SchemaDialect::Anthropic => ANTHROPIC_KEPT,
            SchemaDialect::GeminiJson => GEMINI_KEPT,
        }
    }

    fn walk(&mut self, schema: &mut Value, path: &mut String) {
        let Value::Object(fields) = schema else {
            return;
        };
        if self.dialect == SchemaDialect::OpenAiStrict {
            if let Some(one_of) = fields.remove("oneOf") {
                // `anyOf` accepts what `oneOf` does and more: loosened, so reported.
                self.moved.push(format!("{path}/oneOf"));
                fields.insert("anyOf".into(), one_of);
            }
        }
        self.walk_children(fields, path);
        let is_object = fields.contains_key("properties")
            || fields.get("type").and_then(Value::as_str) == Some("object");
        if is_object && self.dialect != SchemaDialect::GeminiJson {
            self.close_object(fields, path);
        }
        self.move_unsupported(fields, path);
    }

    fn walk_children(&mut self, fields: &mut Map<String, Value>, path: &mut String) {
        let len = path.len();
        for (key, value) in fields.iter_mut() {
            if SCHEMA_MAPS.contains(&key.as_str()) {
                if let Value::Object(children) = value {
                    for (name, child) in children.iter_mut() {
                        push_segment(path, key);
                        push_segment(path, name);
                        self.walk(child, path);
                        path.truncate(len);
                    }
                }
            } else if SCHEMA_LISTS.contains(&key.as_str()) {
                if let Value::Array(children) = value {
                    for (i, child) in children.iter_mut().enumerate() {
                        push_segment(path, key);
                        let _ = write!(path, "/{i}");
                        self.walk(child, path);
                        path.truncate(len);
                    }
                }
            } else if key == "items" || key == "additionalProperties" {
                path.push('/');
                path.push_str(key);
                self.walk(value, path);
                path.truncate(len);
            }
        }
    }

    /// `additionalProperties: false`; in strict mode, every property required and the optional ones nullable.
    fn close_object(&mut self, fields: &mut Map<String, Value>, path: &str) {
        match fields.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            // A map (`additionalProperties: {schema}`) or an open object: closing it narrows what the model may
            // answer, which the original schema allowed; reported so the caller knows.
            Some(_) => {
                self.moved.push(format!("{path}/additionalProperties"));
                let text = format!("additionalProperties: {}", fields["additionalProperties"]);
                append_description(fields, &text);
            }
            None => {}
        }
        fields.insert("additionalProperties".into(), Value::Bool(false));
        if self.dialect != SchemaDialect::OpenAiStrict {
            return;
        }
        let required: Vec<String> = fields
            .get("required")
            .and_then(Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let Some(Value::Object(properties)) = fields.get_mut("properties") else {
            fields.insert("properties".into(), Value::Object(Map::new()));
            fields.insert("required".into(), Value::Array(Vec::new()));
            return;
        };
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                make_nullable(property);
            }
        }
        let all: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
        fields.insert("required".into(), Value::Array(all));
    }

    fn move_unsupported(&mut self, fields: &mut Map<String, Value>, path: &str) {
        let kept = self.kept();
        let formats = match self.dialect {
            SchemaDialect::OpenAiStrict => Some(OPENAI_FORMATS),
            SchemaDialect::Anthropic => Some(ANTHROPIC_FORMATS),
            SchemaDialect::GeminiJson => None,
        };
        let unknown_format = |value: &Value| {
            formats.is_some_and(|known| !known.contains(&value.as_str().unwrap_or("")))
        };
        let unsupported: Vec<String> = fields
            .iter()
            .filter(|(key, value)| {
                !kept.contains(&key.as_str()) || (*key == "format" && unknown_format(value))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in unsupported {
            let value = fields.remove(&key).expect("listed above");
            // Annotations that constrain nothing are dropped without a report.
            if matches!(
                key.as_str(),
                "$schema" | "$comment" | "examples" | "deprecated" | "readOnly" | "writeOnly"
            ) {
                continue;
            }
            let mut at = path.to_owned();
            push_segment(&mut at, &key);
            self.moved.push(at);
            append_description(fields, &format!("{key}: {value}"));
        }
    }
}

/// Whether `schema` already accepts `null`.
fn accepts_null(schema: &Map<String, Value>) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => schema
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|options| {
                options
                    .iter()
                    .any(|o| o.as_object().is_some_and(accepts_null))
            }),
    }
}

/// Widen `schema` to also accept `null` (the strict-mode spelling of an optional property).
fn make_nullable(schema: &mut Value) {
    let Value::Object(fields) = schema else {
        return;
    };
    if accepts_null(fields) {
        return;
    }
    let simple = fields.contains_key("type")
        && !fields.contains_key("$ref")
        && !fields.contains_key("anyOf");
    if simple {
        match fields.get_mut("type") {
            Some(Value::String(t)) => {
                let t = std::mem::take(t);
                fields.insert("type".into(), Value::Array(vec![t.into(), "null".into()]));
            }
            Some(Value::Array(types)) => types.push("null".into()),
            _ => {}
        }
        if let Some(Value::Array(values)) = fields.get_mut("enum") {
            values.push(Value::Null);
        }
        return;
    }
    // A `$ref`, an `anyOf` or a bare `enum`: wrapped, keeping its description outside for the model.
    let description = fields.remove("description");
    let inner = Value::Object(std::mem::take(fields));
    fields.insert(
        "anyOf".into(),
        Value::Array(vec![inner, serde_json::json!({"type": "null"})]),
    );
    if let Some(description) = description {
        fields.insert("description".into(), description);
    }
}

fn append_description(fields: &mut Map<String, Value>, text: &str) {
    match fields.get_mut("description") {
        Some(Value::String(description)) if !description.is_empty() => {
            description.push('\n');
            description.push_str(text);
        }
        _ => {
            fields.insert("description".into(), Value::String(text.to_owned()));
        }
    }
}

/// A property name as a JSON pointer segment.
/// Append `/name` to a JSON Pointer, escaped (`~` as `~0`, `/` as `~1`) without allocating: the walk builds a
/// pointer for every schema it visits, and only the rare name holding either character needs escaping.
fn push_segment(path: &mut String, name: &str) {
    path.push('/');
    for part in name.split_inclusive(['~', '/']) {
        match part.as_bytes().last() {
            Some(b'~') => path.extend([&part[..part.len() - 1], "~0"]),
            Some(b'/') => path.extend([&part[..part.len() - 1], "~1"]),
            _ => path.push_str(part),
        }
    }
}

#[cfg(test)]
mod tests;
