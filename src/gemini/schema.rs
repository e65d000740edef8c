//! JSON Schemas lowered to the OpenAPI 3.0 subset of Gemini's `parameters` and `responseSchema`: the fallback
//! for models that do not take JSON Schema itself ([`SchemaForm::OpenApiSubset`](super::SchemaForm)).
//!
//! Rewritten: `type` lists with `null` become `nullable` (several other types an `anyOf` of each), `const` a
//! one-value `enum`, `oneOf` an `anyOf`, an `allOf` of one schema that schema, local `$ref`s are inlined.
//! Lowered: an exclusive bound becomes the inclusive one (`exclusiveMinimum: 0` on an integer is `minimum: 1`; on
//! a number `minimum: 0`, a little wider). Dropped: annotations Gemini does not know, and assertions it has no
//! place for, which only narrow what an object or array may hold (`additionalProperties` of any value,
//! `propertyNames`, `patternProperties`, `uniqueItems`, `multipleOf`, …): the schema Gemini sees is then wider
//! than the one written, and whoever runs the tool still checks the arguments against the original. Refused,
//! with a [`SchemaError`] naming the keyword and where it is, before any request is sent: what would change
//! which shapes are valid if dropped (`allOf` of several schemas, `not`, `if`/`then`/`else`,
//! `dependentSchemas`), a recursive or non-local `$ref`, an `enum` of non-strings.
//!
//! Inlining is where a small schema can become a huge one (four `$ref`s per level, ten levels: a million
//! copies), so the schema is first measured against [`SchemaLimits`] and refused when its expansion is over
//! [`SchemaLimits::max_expanded_nodes`] or another limit; the conversion itself also stops at that many values
//! and at the first `$ref` back into a schema it is inlining.

use std::fmt;

use serde_json::{json, Map, Number, Value};

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

/// Annotations, and assertions that only narrow what an object, array or string may hold, with no place in
/// Gemini's schema: dropped (whoever runs the tool validates the arguments against the original schema).
const DROPPED: [&str; 27] = [
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$comment",
    "$vocabulary",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
    "additionalProperties",
    "propertyNames",
    "patternProperties",
    "unevaluatedProperties",
    "dependentRequired",
    "uniqueItems",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "multipleOf",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// `schema` in Gemini's schema subset.
///
/// ```
/// use serde_json::json;
/// use tower_chat::gemini::to_gemini_schema;
///
/// let schema = json!({"type": "object", "properties": {"unit": {"type": ["string", "null"], "const": "C"},
///                                                       "limit": {"type": "integer", "exclusiveMinimum": 0}},
///                     "additionalProperties": {}, "propertyNames": {"maxLength": 8}});
/// assert_eq!(
///     to_gemini_schema(&schema).unwrap(),
///     json!({"type": "object", "properties": {"unit": {"type": "string", "nullable": true, "enum": ["C"]},
///                                             "limit": {"type": "integer", "minimum": 1}}})
/// );
/// let err = to_gemini_schema(&json!({"not": {"type": "string"}})).unwrap_err();
/// assert_eq!(err.to_string(), "at /not: the keyword not cannot be lowered to Gemini's schema subset");
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
                "allOf" => {
                    // One schema is that schema; several would have to be merged, which is not always possible.
                    let [only] = value.as_array().map(Vec::as_slice).unwrap_or_default() else {
                        return Err(SchemaError {
                            path: here,
                            reason: "allOf of several schemas cannot be lowered to Gemini's schema subset"
                                .into(),
                        });
                    };
                    let Value::Object(merged) = self.convert(only, &format!("{here}/0"))? else {
                        unreachable!("a converted schema is an object")
                    };
                    for (k, v) in merged {
                        out.entry(k).or_insert(v);
                    }
                }
                "required" | "propertyOrdering" => {
                    out.insert(key.clone(), value.clone());
                }
                "default" => {
                    out.insert(key.clone(), value.clone());
                }
                // Lowered below, once `type` and `minimum`/`maximum` are known.
                "exclusiveMinimum" | "exclusiveMaximum" => {}
                k if KEPT.contains(&k) => {
                    out.insert(key.clone(), value.clone());
                }
                k if DROPPED.contains(&k) => {}
                other => {
                    return Err(SchemaError {
                        path: here,
                        reason: format!(
                            "the keyword {other} cannot be lowered to Gemini's schema subset"
                        ),
                    })
                }
            }
        }
        lower_exclusive_bounds(fields, &mut out);
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
                let named: Vec<&Value> = names
                    .iter()
                    .filter(|n| n.as_str() != Some("null"))
                    .collect();
                if named.iter().any(|n| !n.is_string()) {
                    return Err(fail(format!("type {value} is not a list of type names")));
                }
                match named.as_slice() {
                    [] => {}
                    [only] => {
                        out.insert("type".into(), (*only).clone());
                    }
                    several => {
                        let options = several.iter().map(|name| json!({ "type": name })).collect();
                        out.insert("anyOf".into(), Value::Array(options));
                    }
                }
                if names.len() > named.len() {
                    out.insert("nullable".into(), Value::Bool(true));
                }
            }
            other => return Err(fail(format!("type {other} is not a type name"))),
        }
        Ok(())
    }
}

/// `exclusiveMinimum` / `exclusiveMaximum` (a number, or draft 4's `true` beside `minimum` / `maximum`) as the
/// inclusive bound Gemini takes: the next integer inside on an integer, the same value on a number (a bound
/// the model may then reach, which validation of the arguments still refuses).
fn lower_exclusive_bounds(fields: &Map<String, Value>, out: &mut Map<String, Value>) {
    let integer = match fields.get("type") {
        Some(Value::String(name)) => name == "integer",
        Some(Value::Array(names)) => {
            names.iter().any(|n| n == "integer") && !names.iter().any(|n| n == "number")
        }
        _ => false,
    };
    for (exclusive, inclusive, step) in [
        ("exclusiveMinimum", "minimum", 1.0),
        ("exclusiveMaximum", "maximum", -1.0),
    ] {
        let bound = match fields.get(exclusive) {
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::Bool(true)) => fields.get(inclusive).and_then(Value::as_f64),
            _ => None,
        };
        let Some(bound) = bound else {
            continue;
        };
        let lowered = match (integer, step > 0.0) {
            (false, _) => bound,
            (true, true) => bound.floor() + 1.0,
            (true, false) => bound.ceil() - 1.0,
        };
        // Beside an inclusive bound of its own, the tighter of the two.
        let tighter = match out.get(inclusive).and_then(Value::as_f64) {
            Some(other) if (other - lowered) * step > 0.0 => other,
            _ => lowered,
        };
        out.insert(inclusive.into(), number(tighter));
    }
}

/// A whole number as an integer (`1`, not `1.0`).
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        Value::from(value as i64)
    } else {
        Number::from_f64(value).map_or(Value::Null, Value::Number)
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
#[path = "schema_tests.rs"]
mod tests;
