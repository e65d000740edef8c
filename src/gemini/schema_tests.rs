//! The lowering to Gemini's schema subset: what is rewritten, lowered, dropped and refused.

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

/// Claude Code's `Read` tool as it sends it (draft 7, an exclusive bound, a closed object).
fn claude_code_read() -> Value {
    json!({"type": "object", "properties": {
        "file_path": {"type": "string"},
        "offset": {"type": "number"},
        "limit": {"type": "integer", "exclusiveMinimum": 0}},
        "required": ["file_path"], "additionalProperties": false,
        "$schema": "http://json-schema.org/draft-07/schema#"})
}

#[test]
fn claude_code_schemas_are_lowered_instead_of_refused() {
    assert_eq!(
        to_gemini_schema(&claude_code_read()).unwrap(),
        json!({"type": "object", "properties": {
            "file_path": {"type": "string"},
            "offset": {"type": "number"},
            "limit": {"type": "integer", "minimum": 1}},
            "required": ["file_path"]})
    );
    // An open map and a bound on its keys: both dropped (the arguments are checked against the original).
    let env = json!({"type": "object", "properties": {
        "env": {"type": "object", "additionalProperties": {}, "propertyNames": {"pattern": "^[A-Z_]+$"}},
        "flags": {"type": "object", "additionalProperties": true},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}});
    assert_eq!(
        to_gemini_schema(&env).unwrap(),
        json!({"type": "object", "properties": {
            "env": {"type": "object"},
            "flags": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}}}})
    );
}

#[test]
fn exclusive_bounds_become_the_inclusive_bounds_inside_them() {
    let lowered = |schema: Value| to_gemini_schema(&schema).unwrap();
    assert_eq!(
        lowered(json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})),
        json!({"type": "integer", "minimum": 1, "maximum": 9})
    );
    assert_eq!(
        lowered(json!({"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 7.5})),
        json!({"type": "integer", "minimum": 3, "maximum": 7})
    );
    // On a number the same value: the closest inclusive bound there is.
    assert_eq!(
        lowered(json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5})),
        json!({"type": "number", "minimum": 0, "maximum": 1.5})
    );
    // Draft 4's boolean form, and the tighter of two bounds.
    assert_eq!(
        lowered(json!({"type": "integer", "minimum": 5, "exclusiveMinimum": true})),
        json!({"type": "integer", "minimum": 6})
    );
    assert_eq!(
        lowered(json!({"type": "integer", "minimum": 5, "exclusiveMinimum": 0})),
        json!({"type": "integer", "minimum": 5})
    );
    assert_eq!(
        lowered(json!({"type": ["integer", "null"], "exclusiveMaximum": 0})),
        json!({"type": "integer", "nullable": true, "maximum": -1})
    );
}

#[test]
fn type_lists_and_a_single_all_of_are_rewritten() {
    assert_eq!(
        to_gemini_schema(&json!({"type": ["string", "integer", "null"]})).unwrap(),
        json!({"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": true})
    );
    assert_eq!(
        to_gemini_schema(
            &json!({"description": "n", "allOf": [{"type": "integer", "minimum": 1}]})
        )
        .unwrap(),
        json!({"description": "n", "type": "integer", "minimum": 1})
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
            json!({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}),
            "/if",
        ),
        (
            json!({"allOf": [{"type": "string"}, {"maxLength": 3}]}),
            "/allOf",
        ),
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
