//! JSON Schemas of tool parameters converted to the subset Gemini's `functionDeclarations` take (an OpenAPI 3.0
//! schema object): `type` lists with `null` become `nullable`, `const` a one-value `enum`, `oneOf` an `anyOf`,
//! local `$ref`s are inlined; annotations Gemini does not know are dropped. What cannot be expressed (`allOf`,
//! `not`, conditionals, `patternProperties`, a recursive `$ref`, …) is refused with a [`SchemaError`] naming the
//! keyword and where it is, before any request is sent.
//!
//! Inlining is where a small schema can become a huge one (four `$ref`s per level, ten levels: a million
//! copies), so the schema is first measured against [`SchemaLimits`] and refused when its expansion is over
//! [`SchemaLimits::max_expanded_nodes`] or another limit; the conversion itself also stops at that many values
//! and at the first `$ref` back into a schema it is inlining.

use std::fmt;

use serde_json::{Map, Value};

use crate::schema_limits::{SchemaLimit, SchemaLimitError, SchemaLimits};

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
    to_gemini_schema_within(schema, &SchemaLimits::DEFAULT)
}

/// [`to_gemini_schema`] within `limits`: a schema over them is refused (at `/`) before anything is inlined.
pub fn to_gemini_schema_within(
    schema: &Value,
    limits: &SchemaLimits,
) -> Result<Value, SchemaError> {
    let over = |error: SchemaLimitError| SchemaError {
        path: String::new(),
        reason: error.to_string(),
    };
    limits.check(schema).map_err(over)?;
    Converter {
        root: schema,
        inlining: vec![schema],
        budget: limits.max_expanded_nodes,
        limits,
    }
    .convert(schema, "")
}

struct Converter<'a> {
    root: &'a Value,
    /// The `$ref` targets being inlined around the current schema (the root first): a `$ref` to one of them is
    /// recursion, which Gemini's schemas cannot express.
    inlining: Vec<&'a Value>,
    /// Schemas the conversion may still produce.
    budget: usize,
    limits: &'a SchemaLimits,
}

impl<'a> Converter<'a> {
    fn convert(&mut self, schema: &'a Value, path: &str) -> Result<Value, SchemaError> {
        let fail = |reason: String| SchemaError {
            path: path.to_owned(),
            reason,
        };
        if self.budget == 0 {
            let over = SchemaLimitError::new(
                SchemaLimit::ExpandedNodes,
                self.limits.max_expanded_nodes as u64 + 1,
                self.limits.max_expanded_nodes,
            );
            return Err(fail(over.to_string()));
        }
        self.budget -= 1;
        let fields = match schema {
            Value::Object(fields) => fields,
            // `true` (anything): Gemini has no "any" type; an empty schema is the closest it takes.
            Value::Bool(true) => return Ok(Value::Object(Map::new())),
            other => return Err(fail(format!("{other} is not a schema Gemini can take"))),
        };
        if let Some(reference) = fields.get("$ref") {
            let root = self.root;
            let target = reference
                .as_str()
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|pointer| root.pointer(pointer))
                .ok_or_else(|| fail(format!("$ref {reference} is not a local reference")))?;
            if self.inlining.iter().any(|open| std::ptr::eq(*open, target)) {
                return Err(fail(
                    "a recursive $ref (Gemini schemas cannot refer to themselves)".into(),
                ));
            }
            self.inlining.push(target);
            let converted = self.convert(target, path);
            self.inlining.pop();
            return converted;
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
                            self.convert(property, &format!("{here}/{name}"))?,
                        );
                    }
                    out.insert("properties".into(), Value::Object(converted));
                }
                "items" => {
                    out.insert("items".into(), self.convert(value, &here)?);
                }
                "anyOf" | "oneOf" => {
                    let options = value
                        .as_array()
                        .ok_or_else(|| fail(format!("{key} is not an array")))?
                        .iter()
                        .enumerate()
                        .map(|(i, option)| self.convert(option, &format!("{here}/{i}")))
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

    /// Each level an object of `fanout` properties referring to the level below.
    fn laughs(depth: usize, fanout: usize) -> Value {
        let mut defs = Map::new();
        defs.insert("d0".into(), json!({"type": "string"}));
        for level in 1..=depth {
            let below = json!({"$ref": format!("#/$defs/d{}", level - 1)});
            let properties: Map<String, Value> = (0..fanout)
                .map(|i| (format!("p{i}"), below.clone()))
                .collect();
            defs.insert(
                format!("d{level}"),
                json!({"type": "object", "properties": properties}),
            );
        }
        json!({"$defs": defs, "$ref": format!("#/$defs/d{depth}")})
    }

    #[test]
    fn a_ref_billion_laughs_is_refused_before_anything_is_inlined_naming_the_limit() {
        for depth in [10, 14] {
            let err = to_gemini_schema(&laughs(depth, 4)).unwrap_err();
            assert_eq!(err.path, "", "{err}");
            assert!(err.reason.ends_with("(max_expanded_nodes)"), "{err}");
        }
        // Within the limits it inlines; with a tighter limit the same schema is refused.
        let small = laughs(3, 4);
        let inlined = to_gemini_schema(&small).unwrap();
        assert_eq!(
            inlined["properties"]["p3"]["properties"]["p0"]["properties"]["p1"],
            json!({"type": "string"})
        );
        let tight = SchemaLimits {
            max_expanded_nodes: 50,
            ..SchemaLimits::default()
        };
        let err = to_gemini_schema_within(&small, &tight).unwrap_err();
        assert!(
            err.reason.ends_with("the limit is 50 (max_expanded_nodes)"),
            "{err}"
        );
    }

    #[test]
    fn mutual_recursion_fanning_out_is_refused_at_the_first_ref_back() {
        // `a` and `b` refer to each other four times each: inlining until some depth would be 4^depth copies.
        let defs = |other: &str| {
            let to = json!({"$ref": format!("#/$defs/{other}")});
            json!({"type": "object", "properties": {"w": to, "x": to, "y": to, "z": to}})
        };
        let schema = json!({"$defs": {"a": defs("b"), "b": defs("a")}, "$ref": "#/$defs/a"});
        let err = to_gemini_schema(&schema).unwrap_err();
        assert!(err.reason.contains("recursive"), "{err}");
        assert_eq!(err.path, "/properties/w/properties/w");
    }
}
