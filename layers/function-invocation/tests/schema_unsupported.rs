//! What `schema::Schema` does not implement is a compile error naming the keyword, never a keyword silently
//! ignored: `unevaluatedProperties`/`unevaluatedItems` beside in-place applicators, references inside an
//! embedded schema resource (`$id`: base URI changes, dynamic scopes), ambiguous anchors. Where the answer is
//! known when compiling, the keyword works.

use serde_json::{json, Value};
use tower_chat_function_invocation::schema::{Schema, SchemaError};

fn refused(schema: Value) -> SchemaError {
    Schema::compile(&schema).expect_err("refused at compile")
}

#[test]
fn unevaluated_properties_without_in_place_applicators_is_additional_properties() {
    let schema = Schema::compile(&json!({
        "properties": {"a": {"type": "string"}},
        "patternProperties": {"^x-": true},
        "unevaluatedProperties": {"type": "integer"},
    }))
    .unwrap();
    assert!(schema.is_valid(&json!({"a": "s", "x-tag": null, "n": 1})));
    let lines: Vec<String> = schema
        .validate(&json!({"a": "s", "n": "one"}))
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(lines, ["/n: expected integer, found string \"one\""]);
    // `true` and `{}` assert nothing, beside anything.
    for nothing in [json!(true), json!({})] {
        let schema =
            json!({"allOf": [{"properties": {"a": true}}], "unevaluatedProperties": nothing});
        assert!(Schema::compile(&schema).unwrap().is_valid(&json!({"b": 1})));
    }
    // Draft 7 has no such keyword: an annotation there.
    let draft7 = json!({"$schema": "http://json-schema.org/draft-07/schema#",
                        "allOf": [true], "unevaluatedProperties": false});
    assert!(Schema::compile(&draft7).unwrap().is_valid(&json!({"b": 1})));
}

#[test]
fn unevaluated_keywords_beside_in_place_applicators_are_refused() {
    let error = refused(json!({
        "properties": {"outer": {
            "allOf": [{"properties": {"a": true}}],
            "unevaluatedProperties": false,
        }},
    }));
    assert_eq!(error.keyword(), "unevaluatedProperties");
    assert_eq!(error.pointer(), "#/properties/outer");
    assert!(error.reason().contains("beside `allOf`"), "{error}");
    for applicator in ["anyOf", "oneOf"] {
        let error = refused(json!({applicator: [true], "unevaluatedProperties": false}));
        assert!(error.reason().contains(applicator), "{error}");
    }
    let error =
        refused(json!({"$defs": {"d": true}, "$ref": "#/$defs/d", "unevaluatedItems": false}));
    assert_eq!(error.keyword(), "unevaluatedItems");
    // `contains` marks the items it matched as evaluated.
    let error = refused(json!({"contains": {"type": "string"}, "unevaluatedItems": false}));
    assert!(error.reason().contains("beside `contains`"), "{error}");
}

#[test]
fn unevaluated_items_without_in_place_applicators_applies_after_the_prefix() {
    let schema = Schema::compile(&json!({
        "prefixItems": [{"type": "string"}],
        "unevaluatedItems": {"type": "integer"},
    }))
    .unwrap();
    assert!(schema.is_valid(&json!(["a", 1, 2])));
    assert!(!schema.is_valid(&json!(["a", 1, "b"])));
    // Beside `items` every item is evaluated already.
    let schema = Schema::compile(&json!({"items": true, "unevaluatedItems": false})).unwrap();
    assert!(schema.is_valid(&json!([1, 2])));
}

#[test]
fn dynamic_anchors_in_one_resource_resolve_like_anchors() {
    let schema = Schema::compile(&json!({
        "type": "array",
        "items": {"$dynamicRef": "#item"},
        "$defs": {"item": {"$dynamicAnchor": "item", "type": "string"}},
    }))
    .unwrap();
    assert!(schema.is_valid(&json!(["a", "b"])));
    assert!(!schema.is_valid(&json!(["a", 1])));
}

#[test]
fn references_inside_an_embedded_resource_are_refused() {
    // Inside `list`, `#item` means list's own anchor and the dynamic scope starts at the root.
    let error = refused(json!({
        "$id": "https://example.com/root",
        "$ref": "list",
        "$defs": {
            "item": {"$dynamicAnchor": "item", "type": "string"},
            "list": {"$id": "list", "items": {"$dynamicRef": "#item"},
                     "$defs": {"own": {"$dynamicAnchor": "item", "type": "number"}}},
        },
    }));
    assert_eq!(
        (error.keyword(), error.pointer()),
        ("$dynamicRef", "#/$defs/list/items")
    );
    assert!(
        error.reason().contains("inside the schema resource `list`"),
        "{error}"
    );
    let error = refused(json!({
        "$ref": "#/$defs/list",
        "$defs": {"list": {"$id": "https://example.com/list", "items": {"$ref": "#/$defs/item"},
                           "$defs": {"item": {"type": "number"}}}},
    }));
    assert_eq!(
        (error.keyword(), error.pointer()),
        ("$ref", "#/$defs/list/items")
    );
    assert!(
        error
            .reason()
            .contains("inside the schema resource `https://example.com/list`"),
        "{error}"
    );
}

#[test]
fn anchors_belong_to_their_resource_and_must_be_unique() {
    // An anchor inside an embedded resource is that resource's, not the root's.
    let error = refused(json!({
        "$ref": "#inner",
        "$defs": {"other": {"$id": "https://example.com/other", "$anchor": "inner"}},
    }));
    assert!(
        error
            .reason()
            .contains("no schema declares the anchor `inner`"),
        "{error}"
    );
    let error = refused(json!({
        "$ref": "#twice",
        "$defs": {"a": {"$anchor": "twice"}, "b": {"$dynamicAnchor": "twice"}},
    }));
    assert!(
        error
            .reason()
            .contains("declared more than once (#/$defs/a, #/$defs/b)"),
        "{error}"
    );
}

#[test]
fn a_quotient_beyond_f64_is_not_a_multiple() {
    let schema = Schema::compile(&json!({"multipleOf": 0.123456789})).unwrap();
    assert!(!schema.is_valid(&json!(1e308)));
}
