use serde_json::{json, Map, Value};

use super::*;

/// `n` references in a row: `a0` → `a1` → … → a string.
fn chain(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        let next = if i + 1 == n {
            json!({"type": "string"})
        } else {
            json!({"$ref": format!("#/$defs/a{}", i + 1)})
        };
        defs.insert(format!("a{i}"), next);
    }
    json!({"$defs": defs, "$ref": "#/$defs/a0"})
}

/// Levels of `applicator` each holding `fanout` references to the level below.
fn dag(applicator: &str, depth: usize, fanout: usize) -> Value {
    let mut defs = Map::new();
    defs.insert("l0".into(), json!({"type": "string"}));
    for level in 1..=depth {
        let below = json!({"$ref": format!("#/$defs/l{}", level - 1)});
        defs.insert(
            format!("l{level}"),
            json!({applicator: vec![below; fanout]}),
        );
    }
    json!({"$defs": defs, "$ref": format!("#/$defs/l{depth}")})
}

fn refused(schema: &Value) -> SchemaLimitError {
    SchemaLimits::default()
        .check(schema)
        .expect_err("over a limit")
}

#[test]
fn a_ref_chain_deeper_than_the_limit_is_refused_naming_max_depth() {
    let error = refused(&chain(1500));
    assert_eq!(error.limit(), SchemaLimit::Depth);
    assert!(error.found() >= 1500, "{error}");
    assert!(
        error.to_string().ends_with("the limit is 64 (max_depth)"),
        "{error}"
    );
    // Twenty references in a row are fine.
    let size = SchemaLimits::default().check(&chain(20)).unwrap();
    assert_eq!(size.ref_expansions, 20);
}

#[test]
fn references_doubling_per_level_are_refused_by_their_expansion_not_their_text() {
    for schema in [
        dag("allOf", 27, 2),
        dag("anyOf", 22, 2),
        dag("allOf", 10, 4),
    ] {
        let error = refused(&schema);
        assert_eq!(error.limit(), SchemaLimit::ExpandedNodes, "{error}");
        // The whole expansion is counted (saturating), though only the DAG was walked.
        assert!(error.found() > 1 << 20, "{error}");
    }
    // Three levels of the same shape: counted exactly. Each level is the object, its array and two
    // `{"$ref": …}` objects with their strings (7 values) plus two expansions of the level below.
    let size = SchemaLimits::default().check(&dag("allOf", 3, 2)).unwrap();
    assert_eq!(size.ref_expansions, 1 + 2 + 4 + 8);
    assert!(size.expanded_nodes > 8, "{size:?}");
}

#[test]
fn nesting_and_values_as_written_are_refused_before_references_are_read() {
    let mut deep = json!({"type": "string"});
    for _ in 0..70 {
        deep = json!({"items": deep});
    }
    let error = refused(&deep);
    assert_eq!((error.limit(), error.found()), (SchemaLimit::Depth, 65));
    let wide: Map<String, Value> = (0..20_000).map(|i| (format!("p{i}"), json!({}))).collect();
    let error = refused(&json!({"properties": wide}));
    assert_eq!(error.limit(), SchemaLimit::Nodes);
    assert!(error.to_string().ends_with("(max_nodes)"), "{error}");
}

#[test]
fn many_references_within_the_expanded_size_are_refused_naming_max_ref_expansions() {
    let limits = SchemaLimits {
        max_ref_expansions: 10,
        ..SchemaLimits::default()
    };
    let properties: Map<String, Value> = (0..11)
        .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/s"})))
        .collect();
    let schema = json!({"$defs": {"s": {"type": "string"}}, "properties": properties});
    let error = limits.check(&schema).unwrap_err();
    assert_eq!(
        (error.limit(), error.found()),
        (SchemaLimit::RefExpansions, 11)
    );
}

#[test]
fn recursion_is_followed_once_and_data_anchors_and_ids_resolve_like_the_validator() {
    // A tree of comments: the reference back to the root counts once.
    let tree = json!({"type": "object", "properties": {
        "text": {"type": "string"}, "replies": {"type": "array", "items": {"$ref": "#"}}}});
    let size = SchemaLimits::default().check(&tree).unwrap();
    assert_eq!(size.ref_expansions, 1);
    assert_eq!(size.expanded_nodes, size.nodes);
    // Mutual recursion fanning out four ways per level stays small too.
    let mutual = json!({"$defs": {
        "a": {"properties": {"w": {"$ref": "#/$defs/b"}, "x": {"$ref": "#/$defs/b"},
                             "y": {"$ref": "#/$defs/b"}, "z": {"$ref": "#/$defs/b"}}},
        "b": {"properties": {"w": {"$ref": "#/$defs/a"}, "x": {"$ref": "#/$defs/a"},
                             "y": {"$ref": "#/$defs/a"}, "z": {"$ref": "#/$defs/a"}}}},
        "$ref": "#/$defs/a"});
    assert!(SchemaLimits::default().check(&mutual).is_ok());
    // A `$ref` inside `enum` or `const` is data; anchors and the root's `$id` are followed.
    let limits = SchemaLimits {
        max_ref_expansions: 2,
        ..SchemaLimits::default()
    };
    let schema = json!({"$id": "https://example.com/s", "enum": [{"$ref": "#"}, {"$ref": "#"}, {"$ref": "#"}],
        "$defs": {"n": {"$anchor": "num", "type": "number"}},
        "properties": {"a": {"$ref": "#num"}, "b": {"$ref": "https://example.com/s#/$defs/n"}}});
    assert_eq!(limits.check(&schema).unwrap().ref_expansions, 2);
    // A reference to another document is not followed here.
    let remote = json!({"$ref": "https://example.com/other.json"});
    assert_eq!(limits.check(&remote).unwrap().ref_expansions, 0);
}

/// The tool schemas of two coding agents (Claude Code's and Codex's, abridged to their structure) and a
/// `schemars`-style schema of nested types pass with room to spare.
#[test]
fn real_tool_schemas_pass_the_defaults() {
    let schemas = [
        json!({"type": "object", "properties": {
            "command": {"type": "string", "description": "The command to execute"},
            "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
            "description": {"type": "string"}, "run_in_background": {"type": "boolean"}},
            "required": ["command"], "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"}),
        json!({"type": "object", "properties": {
            "file_path": {"type": "string"},
            "edits": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                "old_string": {"type": "string"}, "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": false}},
                "required": ["old_string", "new_string"], "additionalProperties": false}}},
            "required": ["file_path", "edits"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object",
            "properties": {"content": {"type": "string", "minLength": 1},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                "activeForm": {"type": "string", "minLength": 1}},
            "required": ["content", "status", "activeForm"], "additionalProperties": false}}},
            "required": ["todos"], "additionalProperties": false}),
        json!({"type": "object", "properties": {
            "command": {"type": "array", "items": {"type": "string"}},
            "workdir": {"type": "string"}, "timeout_ms": {"type": "number"}},
            "required": ["command"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"explanation": {"type": "string"},
            "plan": {"type": "array", "items": {"type": "object", "properties": {
                "step": {"type": "string"}, "status": {"type": "string"}},
                "required": ["step", "status"], "additionalProperties": false}}},
            "required": ["plan"], "additionalProperties": false}),
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Order", "type": "object",
            "properties": {"customer": {"$ref": "#/$defs/Person"},
                "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
                "billing": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]}},
            "required": ["customer", "lines"],
            "$defs": {
                "Person": {"type": "object", "properties": {"name": {"type": "string"},
                    "home": {"$ref": "#/$defs/Address"}}, "required": ["name"]},
                "Address": {"type": "object", "properties": {"street": {"type": "string"},
                    "city": {"type": "string"}}, "required": ["street", "city"]},
                "Line": {"type": "object", "properties": {"sku": {"type": "string"},
                    "quantity": {"type": "integer", "format": "uint32", "minimum": 0}}}}}),
    ];
    for schema in schemas {
        let size = SchemaLimits::default()
            .check(&schema)
            .unwrap_or_else(|e| panic!("{e}: {schema}"));
        assert!(size.depth < 16 && size.expanded_nodes < 200, "{size:?}");
    }
}
