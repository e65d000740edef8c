//! JSON Schemas of tool parameters converted to the subset Gemini's `functionDeclarations` take (an OpenAPI 3.0
//! schema object): `type` lists with `null` become `nullable`, `const` a one-value `enum`, `oneOf` an `anyOf`,
//! local `$ref`s are inlined; annotations Gemini does not know are dropped. What cannot be expressed (`allOf`,
//! `not`, conditionals, `patternProperties`, a recursive `$ref`, …) is refused with a [`SchemaError`] naming the
//! keyword and where it is, before any request is sent.

use std::fmt;

use serde_json::{Map, Value};

/// A tool schema Gemini's schema subset cannot express.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    /// Where in the schema, as a JSON pointer (`/properties/when`).
    pub path: String,
    /// What cannot be expressed.
    pub reason: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "at {path}: {}", self.reason)
    }
}

impl std::error::Error for SchemaError {}

/// Keywords Gemini's schema takes as they are.
const KEPT: [&str; 14] = [
    "format",
    "title",
    "description",
    "nullable",
    "maxItems",
    "minItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "minimum",
    "maximum",
];

/// Annotations (or restrictions the tool loop validates anyway) with no place in Gemini's schema: dropped.
const DROPPED: [&str; 9] = [
    "$schema",
    "$id",
    "$comment",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
];

/// How deep `$ref`s may nest before the schema counts as recursive.
const MAX_REF_DEPTH: usize = 16;

/// `schema` in Gemini's schema subset.
///
/// ```
/// use serde_json::json;
/// use tower_chat::gemini::to_gemini_schema;
///
/// let schema = json!({"type": "object", "properties": {"unit": {"type": ["string", "null"], "const": "C"}},
///                     "additionalProperties": false});
/// assert_eq!(
///     to_gemini_schema(&schema).unwrap(),
///     json!({"type": "object", "properties": {"unit": {"type": "string", "nullable": true, "enum": ["C"]}}})
/// );
/// let err = to_gemini_schema(&json!({"allOf": [{"type": "string"}]})).unwrap_err();
/// assert!(err.to_string().contains("allOf"));
/// ```
pub fn to_gemini_schema(schema: &Value) -> Result<Value, SchemaError> {
    Converter { root: schema }.convert(schema, "", 0)
}

struct Converter<'a> {
    root: &'a Value,
}

impl Converter<'_> {
    fn convert(&self, schema: &Value, path: &str, depth: usize) -> Result<Value, SchemaError> {
        let fail = |reason: String| SchemaError {
            path: path.to_owned(),
            reason,
        };
        let fields = match schema {
            Value::Object(fields) => fields,
            // `true` (anything): Gemini has no "any" type; an empty schema is the closest it takes.
            Value::Bool(true) => return Ok(Value::Object(Map::new())),
            other => return Err(fail(format!("{other} is not a schema Gemini can take"))),
        };
        if let Some(reference) = fields.get("$ref") {
            if depth >= MAX_REF_DEPTH {
                return Err(fail(
                    "a recursive $ref (Gemini schemas cannot refer to themselves)".into(),
                ));
            }
            let target = reference
                .as_str()
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|pointer| self.root.pointer(pointer))
                .ok_or_else(|| fail(format!("$ref {reference} is not a local reference")))?;
            return self.convert(target, path, depth + 1);
        }
        let mut out = Map::new();
        for (key, value) in fields {
            let here = format!("{path}/{key}");
            match key.as_str() {
                "type" => self.convert_type(value, &mut out, &here)?,
                "const" => {
                    out.insert("enum".into(), Value::Array(vec![enum_value(value, &here)?]));
                }
                "enum" => {
                    let values = value
                        .as_array()
                        .ok_or_else(|| fail("enum is not an array".into()))?
                        .iter()
                        .filter(|v| !v.is_null())
                        .map(|v| enum_value(v, &here))
                        .collect::<Result<_, _>>()?;
                    out.insert("enum".into(), Value::Array(values));
                }
                "properties" => {
                    let properties = value
                        .as_object()
                        .ok_or_else(|| fail("properties is not an object".into()))?;
                    let mut converted = Map::new();
                    for (name, property) in properties {
                        converted.insert(
                            name.clone(),
                            self.convert(property, &format!("{here}/{name}"), depth)?,
                        );
                    }
                    out.insert("properties".into(), Value::Object(converted));
                }
                "items" => {
                    out.insert("items".into(), self.convert(value, &here, depth)?);
                }
                "anyOf" | "oneOf" => {
                    let options = value
                        .as_array()
                        .ok_or_else(|| fail(format!("{key} is not an array")))?
                        .iter()
                        .enumerate()
                        .map(|(i, option)| self.convert(option, &format!("{here}/{i}"), depth))
                        .collect::<Result<_, _>>()?;
                    out.insert("anyOf".into(), Value::Array(options));
                }
                "required" | "propertyOrdering" => {
                    out.insert(key.clone(), value.clone());
                }
                "default" => {
                    out.insert(key.clone(), value.clone());
                }
                "additionalProperties" if value == &Value::Bool(false) => {}
                k if KEPT.contains(&k) => {
                    out.insert(key.clone(), value.clone());
                }
                k if DROPPED.contains(&k) => {}
                other => {
                    return Err(SchemaError {
                        path: here,
                        reason: format!("the keyword {other} cannot be expressed"),
                    })
                }
            }
        }
        Ok(Value::Object(out))
    }

    /// `type`: one name, or a list of one name and `null` (nullable).
    fn convert_type(
        &self,
        value: &Value,
        out: &mut Map<String, Value>,
        path: &str,
    ) -> Result<(), SchemaError> {
        let fail = |reason: String| SchemaError {
            path: path.to_owned(),
            reason,
        };
        match value {
            Value::String(name) => {
                out.insert("type".into(), Value::String(name.clone()));
            }
            Value::Array(names) => {
                let mut named = names.iter().filter(|n| n.as_str() != Some("null"));
                let first = named.next();
                if named.next().is_some() {
                    return Err(fail(format!(
                        "a type list of several types ({value}); use anyOf"
                    )));
                }
                if let Some(first) = first {
                    out.insert("type".into(), first.clone());
                }
                if names.len() > usize::from(first.is_some()) {
                    out.insert("nullable".into(), Value::Bool(true));
                }
            }
            other => return Err(fail(format!("type {other} is not a type name"))),
        }
        Ok(())
    }
}

/// Gemini's `enum` takes strings only.
fn enum_value(value: &Value, path: &str) -> Result<Value, SchemaError> {
    match value {
        Value::String(_) => Ok(value.clone()),
        other => Err(SchemaError {
            path: path.to_owned(),
            reason: format!("the enum value {other} is not a string (Gemini enums are strings)"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn local_refs_are_inlined_and_one_of_becomes_any_of() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
            "properties": {
                "at": {"$ref": "#/$defs/point"},
                "tag": {"oneOf": [{"type": "string"}, {"type": "integer"}]}
            }
        });
        assert_eq!(
            to_gemini_schema(&schema).unwrap(),
            json!({"type": "object", "properties": {
                "at": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                "tag": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            }})
        );
    }

    #[test]
    fn what_cannot_be_expressed_is_named_with_its_place() {
        let cases = [
            (
                json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}),
                "/properties/a/not",
            ),
            (
                json!({"type": "object", "patternProperties": {"^x": {}}}),
                "/patternProperties",
            ),
            (json!({"type": ["string", "integer"]}), "/type"),
            (json!({"enum": [1, 2]}), "/enum"),
            (json!({"$ref": "https://example.com/s.json"}), ""),
        ];
        for (schema, path) in cases {
            let err = to_gemini_schema(&schema).unwrap_err();
            assert_eq!(err.path, path, "{schema}: {err}");
        }
        let recursive = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
        let err = to_gemini_schema(&recursive).unwrap_err();
        assert!(err.reason.contains("recursive"), "{err}");
        assert!(err.path.starts_with("/properties/next"), "{err}");
    }
}
