use super::*;
use serde_json::json;

/// A schema as `schemars` writes one for a struct with an optional field, an optional enum, a nested struct
/// and a recursive list of itself through `$defs`.
fn tree() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Node",
        "type": "object",
        "properties": {
            "label": {"type": "string", "description": "What the node is.", "default": "leaf"},
            "note": {"type": ["string", "null"]},
            "colour": {"anyOf": [{"$ref": "#/$defs/Colour"}, {"type": "null"}]},
            "size": {"$ref": "#/$defs/Size"},
            "weight": {"type": "integer", "format": "uint32", "minimum": 0},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "uniqueItems": true}
        },
        "required": ["label", "size", "children"],
        "$defs": {
            "Colour": {"type": "string", "enum": ["red", "green"]},
            "Size": {"oneOf": [{"type": "string", "const": "small"}, {"type": "object",
                     "properties": {"cm": {"type": "number"}}, "required": ["cm"]}]},
            "Node": {"$ref": "#"}
        }
    })
}

fn sorted(names: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort();
    names
}

#[test]
fn strict_mode_requires_every_property_and_makes_the_optional_ones_null_unions() {
    let out = rewrite(&tree(), SchemaDialect::OpenAiStrict).unwrap();
    let s = &out.schema;
    assert!(s.get("$schema").is_none());
    assert_eq!(
        sorted(&s["required"]),
        ["children", "colour", "label", "note", "size", "weight"]
    );
    assert_eq!(s["additionalProperties"], false);
    // Already nullable: unchanged.
    assert_eq!(s["properties"]["note"], json!({"type": ["string", "null"]}));
    assert_eq!(
        s["properties"]["colour"],
        json!({"anyOf": [{"$ref": "#/$defs/Colour"}, {"type": "null"}]})
    );
    // Optional and not nullable: widened to null; a format strict mode does not know moved into the description.
    assert_eq!(
        s["properties"]["weight"],
        json!({"type": ["integer", "null"], "minimum": 0, "description": "format: \"uint32\""})
    );
    assert_eq!(
        s["properties"]["label"],
        json!({"type": "string", "description": "What the node is.\ndefault: \"leaf\""})
    );
    // Required stays non-null; `$defs` kept and rewritten too, `oneOf` as `anyOf`.
    assert_eq!(s["properties"]["size"], json!({"$ref": "#/$defs/Size"}));
    assert_eq!(
        s["$defs"]["Size"]["anyOf"][1],
        json!({"type": "object", "properties": {"cm": {"type": "number"}}, "required": ["cm"],
               "additionalProperties": false})
    );
    assert_eq!(s["$defs"]["Node"], json!({"$ref": "#"}));
    assert_eq!(
        s["properties"]["children"],
        json!({"type": "array", "items": {"$ref": "#/$defs/Node"}, "description": "uniqueItems: true"})
    );
    let mut moved = out.moved.clone();
    moved.sort();
    assert_eq!(
        moved,
        [
            "/$defs/Size/oneOf",
            "/properties/children/uniqueItems",
            "/properties/label/default",
            "/properties/weight/format",
        ]
    );
}

#[test]
fn an_optional_enum_and_an_optional_reference_accept_null() {
    let schema = json!({"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["C", "F"]},
        "place": {"$ref": "#/$defs/Place", "description": "Where."}},
        "$defs": {"Place": {"type": "object", "properties": {"name": {"type": "string"}}}}});
    let s = rewrite(&schema, SchemaDialect::OpenAiStrict)
        .unwrap()
        .schema;
    assert_eq!(
        s["properties"]["unit"],
        json!({"type": ["string", "null"], "enum": ["C", "F", null]})
    );
    assert_eq!(
        s["properties"]["place"],
        json!({"anyOf": [{"$ref": "#/$defs/Place"}, {"type": "null"}], "description": "Where."})
    );
    assert_eq!(
        s["$defs"]["Place"]["properties"]["name"]["type"],
        json!(["string", "null"])
    );
}

#[test]
fn a_map_is_closed_and_reported() {
    let schema = json!({"type": "object", "additionalProperties": {"type": "integer"}});
    let out = rewrite(&schema, SchemaDialect::OpenAiStrict).unwrap();
    assert_eq!(
        out.schema,
        json!({"type": "object", "additionalProperties": false, "properties": {}, "required": [],
               "description": "additionalProperties: {\"type\":\"integer\"}"})
    );
    assert_eq!(out.moved, ["/additionalProperties"]);
}

#[test]
fn anthropic_keeps_optional_properties_and_moves_bounds() {
    let out = rewrite(&tree(), SchemaDialect::Anthropic).unwrap();
    let s = &out.schema;
    assert_eq!(sorted(&s["required"]), ["children", "label", "size"]);
    assert_eq!(s["additionalProperties"], false);
    assert_eq!(
        s["properties"]["weight"],
        json!({"type": "integer", "description": "format: \"uint32\"\nminimum: 0"})
    );
    assert!(out.moved.contains(&"/$defs/Size/oneOf".to_owned()));
}

#[test]
fn gemini_keeps_what_it_documents_and_leaves_objects_open() {
    let out = rewrite(&tree(), SchemaDialect::GeminiJson).unwrap();
    let s = &out.schema;
    assert!(s.get("additionalProperties").is_none());
    assert_eq!(sorted(&s["required"]), ["children", "label", "size"]);
    assert_eq!(
        s["properties"]["weight"],
        json!({"type": "integer", "format": "uint32", "minimum": 0})
    );
    assert_eq!(
        s["properties"]["label"]["description"],
        "What the node is.\ndefault: \"leaf\""
    );
    assert!(s["$defs"]["Size"]["oneOf"].is_array());
}

#[test]
fn the_cache_answers_equal_schemas_with_one_allocation_and_tells_dialects_apart() {
    let first = normalise(&tree(), SchemaDialect::OpenAiStrict).unwrap();
    let again = normalise(&tree(), SchemaDialect::OpenAiStrict).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    let anthropic = normalise(&tree(), SchemaDialect::Anthropic).unwrap();
    assert_ne!(first.schema, anthropic.schema);
    let mut other = tree();
    other["properties"]["label"]["description"] = json!("Another text.");
    let changed = normalise(&other, SchemaDialect::OpenAiStrict).unwrap();
    assert!(!Arc::ptr_eq(&first, &changed));
    assert_eq!(
        changed.schema["properties"]["label"]["description"],
        "Another text.\ndefault: \"leaf\""
    );
}

#[test]
fn a_moved_keyword_is_reported_at_a_json_pointer_with_names_escaped() {
    let schema = json!({
        "type": "object",
        "properties": {"a/b~c": {"type": "string", "minLength": 2}, "plain": {"type": "integer"}},
        "required": ["a/b~c", "plain"],
        "additionalProperties": false
    });
    let rewritten = rewrite(&schema, SchemaDialect::OpenAiStrict).unwrap();
    assert!(
        rewritten
            .moved
            .iter()
            .any(|at| at == "/properties/a~1b~0c/minLength"),
        "{:?}",
        rewritten.moved
    );
}
