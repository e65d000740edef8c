//! One test per keyword (valid and invalid instances, the message and path of the violation), plus malformed
//! schemas and schemars output. The differential test against `jsonschema` is `tests/schema_differential.rs`.

use serde_json::{json, Value};

use super::*;

fn compiled(schema: Value) -> Schema {
    Schema::compile(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"))
}

/// The violations of `instance`, rendered as the tool error shows them (`/path: message`).
fn violations(schema: &Schema, instance: Value) -> Vec<String> {
    match schema.validate(&instance) {
        Ok(()) => Vec::new(),
        Err(found) => found.iter().map(ToString::to_string).collect(),
    }
}

#[track_caller]
fn accepts(schema: &Schema, instances: &[Value]) {
    for instance in instances {
        assert!(
            schema.is_valid(instance),
            "{instance} should be valid for {schema:?}"
        );
        assert_eq!(schema.validate(instance), Ok(()));
    }
}

#[track_caller]
fn rejects(schema: &Schema, instance: Value, expected: &[&str]) {
    assert!(!schema.is_valid(&instance), "{instance} should be invalid");
    assert_eq!(violations(schema, instance), expected);
}

#[track_caller]
fn malformed(schema: Value, expected: &str) {
    let error = Schema::compile(&schema).unwrap_err();
    assert_eq!(error.to_string(), expected, "{schema}");
}

#[test]
fn type_single_and_array_and_integer_means_no_fraction() {
    let integer = compiled(json!({"type": "integer"}));
    accepts(
        &integer,
        &[json!(1), json!(-7), json!(2.0), json!(u64::MAX)],
    );
    rejects(
        &integer,
        json!(1.5),
        &["/: expected integer, found number 1.5"],
    );
    rejects(
        &integer,
        json!("1"),
        &["/: expected integer, found string \"1\""],
    );
    let number = compiled(json!({"type": "number"}));
    accepts(&number, &[json!(1), json!(1.5)]);
    rejects(
        &number,
        json!(null),
        &["/: expected number, found null null"],
    );
    let either = compiled(json!({"type": ["string", "null"]}));
    accepts(&either, &[json!("x"), json!(null)]);
    rejects(
        &either,
        json!([]),
        &["/: expected string or null, found array []"],
    );
    let all = compiled(json!({"type": ["object", "array", "boolean"]}));
    accepts(&all, &[json!({}), json!([]), json!(false)]);
}

#[test]
fn properties_required_and_additional_properties() {
    let schema = compiled(json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": false
    }));
    accepts(
        &schema,
        &[json!({"city": "Oslo"}), json!({"city": "Oslo", "days": 2})],
    );
    rejects(
        &schema,
        json!({"days": "2", "unit": "C"}),
        &[
            "/days: expected integer, found string \"2\"",
            "/: property \"unit\" is not allowed",
            "/: missing required property \"city\"",
        ],
    );
    let typed_rest =
        compiled(json!({"properties": {"a": true}, "additionalProperties": {"type": "number"}}));
    accepts(
        &typed_rest,
        &[json!({"a": "x", "b": 1}), json!("not an object")],
    );
    rejects(
        &typed_rest,
        json!({"a": 1, "b": "x"}),
        &["/b: expected number, found string \"x\""],
    );
    // `properties: {x: false}` forbids the property.
    let forbidden = compiled(json!({"properties": {"x": false}}));
    rejects(
        &forbidden,
        json!({"x": 1}),
        &["/x: no value is allowed here"],
    );
}

#[test]
fn pattern_properties_property_names_and_counts() {
    let schema = compiled(json!({
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": false,
        "propertyNames": {"maxLength": 5},
        "minProperties": 1,
        "maxProperties": 2
    }));
    accepts(
        &schema,
        &[json!({"x-a": "1"}), json!({"x-a": "1", "x-b": "2"})],
    );
    rejects(
        &schema,
        json!({"x-a": 1}),
        &["/x-a: expected string, found integer 1"],
    );
    rejects(
        &schema,
        json!({"y": "1"}),
        &["/: property \"y\" is not allowed"],
    );
    rejects(
        &schema,
        json!({"x-long": "1"}),
        &["/: property name \"x-long\": expected at most 5 characters, found 6"],
    );
    rejects(
        &schema,
        json!({}),
        &["/: expected at least 1 properties, found 0"],
    );
    rejects(
        &schema,
        json!({"x-a": "", "x-b": "", "x-c": ""}),
        &["/: expected at most 2 properties, found 3"],
    );
}

#[test]
fn items_prefix_items_and_additional_items() {
    let list = compiled(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}),
    );
    accepts(&list, &[json!([1]), json!([1, 2, 3])]);
    rejects(
        &list,
        json!([1, "2"]),
        &["/1: expected integer, found string \"2\""],
    );
    rejects(&list, json!([]), &["/: expected at least 1 items, found 0"]);
    rejects(
        &list,
        json!([1, 2, 3, 4]),
        &["/: expected at most 3 items, found 4"],
    );
    let tuple =
        compiled(json!({"prefixItems": [{"type": "string"}, {"type": "number"}], "items": false}));
    accepts(&tuple, &[json!([]), json!(["a"]), json!(["a", 1])]);
    rejects(
        &tuple,
        json!([1]),
        &["/0: expected string, found integer 1"],
    );
    rejects(
        &tuple,
        json!(["a", 1, null]),
        &["/: expected at most 2 items, found 3"],
    );
    // Draft 7's array form, with `additionalItems`.
    let draft7 = compiled(json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "items": [{"type": "string"}],
        "additionalItems": {"type": "boolean"},
        "prefixItems": [{"type": "null"}]
    }));
    accepts(&draft7, &[json!(["a", true, false])]);
    rejects(
        &draft7,
        json!(["a", 1]),
        &["/1: expected boolean, found integer 1"],
    );
    // In 2020-12 `additionalItems` means nothing beside a schema `items`.
    let modern = compiled(json!({"items": {"type": "string"}, "additionalItems": false}));
    accepts(&modern, &[json!(["a", "b"])]);
}

#[test]
fn contains_and_unique_items() {
    let schema = compiled(json!({"contains": {"const": "x"}, "uniqueItems": true}));
    accepts(
        &schema,
        &[json!(["x"]), json!(["a", "x"]), json!({"not": "an array"})],
    );
    rejects(
        &schema,
        json!(["a"]),
        &["/: no item matches the `contains` schema"],
    );
    rejects(
        &schema,
        json!(["x", {"a": 1}, {"a": 1.0}]),
        &["/: items 1 and 2 are equal, expected unique items"],
    );
    let counted =
        compiled(json!({"contains": {"type": "integer"}, "minContains": 2, "maxContains": 3}));
    accepts(&counted, &[json!([1, 2]), json!([1, "a", 2, 3])]);
    rejects(
        &counted,
        json!([1]),
        &["/: expected at least 2 items matching `contains`, found 1"],
    );
    rejects(
        &counted,
        json!([1, 2, 3, 4]),
        &["/: expected at most 3 items matching `contains`, found 4"],
    );
    let zero = compiled(json!({"contains": {"type": "integer"}, "minContains": 0}));
    accepts(&zero, &[json!([]), json!(["a"])]);
    let not_unique = compiled(json!({"uniqueItems": false}));
    accepts(&not_unique, &[json!([1, 1])]);
}

#[test]
fn enum_and_const_compare_json_values() {
    let unit = compiled(json!({"enum": ["celsius", "fahrenheit", 1, null, {"a": [1]}]}));
    accepts(
        &unit,
        &[
            json!("celsius"),
            json!(1.0),
            json!(null),
            json!({"a": [1.0]}),
        ],
    );
    rejects(
        &unit,
        json!("kelvin"),
        &["/: expected one of \"celsius\", \"fahrenheit\", 1, null, {\"a\":[1]}, found \"kelvin\""],
    );
    let constant = compiled(json!({"const": 2}));
    accepts(&constant, &[json!(2), json!(2.0)]);
    rejects(&constant, json!("2"), &["/: expected 2, found \"2\""]);
    let null = compiled(json!({"const": null}));
    rejects(&null, json!(false), &["/: expected null, found false"]);
}

#[test]
fn numeric_bounds_both_drafts_and_multiple_of() {
    let schema = compiled(json!({"minimum": 1, "exclusiveMaximum": 10, "multipleOf": 0.5}));
    accepts(&schema, &[json!(1), json!(9.5), json!(2.0)]);
    rejects(
        &schema,
        json!(0.5),
        &["/: expected a number >= 1, found 0.5"],
    );
    rejects(&schema, json!(10), &["/: expected a number < 10, found 10"]);
    rejects(
        &schema,
        json!(1.25),
        &["/: expected a multiple of 0.5, found 1.25"],
    );
    let draft4 = compiled(
        json!({"minimum": 0, "exclusiveMinimum": true, "maximum": 5, "exclusiveMaximum": false}),
    );
    accepts(&draft4, &[json!(0.1), json!(5)]);
    rejects(&draft4, json!(0), &["/: expected a number > 0, found 0"]);
    let exclusive = compiled(json!({"exclusiveMinimum": 0, "maximum": 1}));
    rejects(&exclusive, json!(0), &["/: expected a number > 0, found 0"]);
    rejects(
        &exclusive,
        json!(1.5),
        &["/: expected a number <= 1, found 1.5"],
    );
    // Exact integer comparison: 2^53 + 1 > 2^53.
    let big = compiled(json!({"maximum": 9_007_199_254_740_992_u64}));
    rejects(
        &big,
        json!(9_007_199_254_740_993_u64),
        &["/: expected a number <= 9007199254740992, found 9007199254740993"],
    );
    accepts(
        &compiled(json!({"multipleOf": 3})),
        &[json!(9), json!(-3), json!(0), json!("nine")],
    );
}

#[test]
fn string_lengths_count_code_points_and_patterns_search() {
    let schema = compiled(json!({"minLength": 2, "maxLength": 3, "pattern": "[0-9]"}));
    // "é1" is 3 bytes but 2 code points; "日本1" 7 bytes, 3 code points.
    accepts(&schema, &[json!("é1"), json!("日本1"), json!(12)]);
    rejects(
        &schema,
        json!("1"),
        &["/: expected at least 2 characters, found 1"],
    );
    rejects(
        &schema,
        json!("日本語1"),
        &["/: expected at most 3 characters, found 4"],
    );
    rejects(
        &schema,
        json!("ab"),
        &["/: expected a string matching `[0-9]`, found \"ab\""],
    );
    let anchored = compiled(json!({"pattern": "^[a-z]+$"}));
    accepts(&anchored, &[json!("abc")]);
    assert!(!anchored.is_valid(&json!("abc1")));
}

#[test]
fn format_is_an_annotation_and_unknown_keywords_are_ignored() {
    let schema = compiled(json!({
        "type": "string",
        "format": "email",
        "x-vendor": {"anything": [1, 2]},
        "description": "an address",
        "default": "a@b.c",
        "examples": ["x"]
    }));
    accepts(&schema, &[json!("not an email"), json!("")]);
}

#[test]
fn all_any_one_of_and_not() {
    let all = compiled(json!({"allOf": [{"type": "integer"}, {"minimum": 3}]}));
    accepts(&all, &[json!(3)]);
    rejects(
        &all,
        json!(2.5),
        &[
            "/: expected integer, found number 2.5",
            "/: expected a number >= 3, found 2.5",
        ],
    );
    let any = compiled(json!({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}));
    accepts(&any, &[json!("a"), json!(1)]);
    rejects(
        &any,
        json!(-1),
        &["/: matches none of the `anyOf` alternatives (0: expected string, found integer -1; 1: expected a number >= 0, found -1)"],
    );
    let one = compiled(json!({"oneOf": [{"type": "integer"}, {"minimum": 2}]}));
    accepts(&one, &[json!(1), json!(2.5)]);
    rejects(
        &one,
        json!(3),
        &["/: matches 2 of the `oneOf` alternatives (0, 1), expected exactly one"],
    );
    rejects(
        &one,
        json!(1.5),
        &["/: matches none of the `oneOf` alternatives (0: expected integer, found number 1.5; 1: expected a number >= 2, found 1.5)"],
    );
    let not = compiled(json!({"not": {"type": "null"}}));
    accepts(&not, &[json!(0)]);
    rejects(
        &not,
        json!(null),
        &["/: null matches the schema in `not`, which it must not"],
    );
}

#[test]
fn if_then_else() {
    let schema = compiled(json!({
        "if": {"properties": {"unit": {"const": "imperial"}}, "required": ["unit"]},
        "then": {"properties": {"distance": {"maximum": 100}}},
        "else": {"properties": {"distance": {"maximum": 160}}}
    }));
    accepts(
        &schema,
        &[
            json!({"unit": "imperial", "distance": 90}),
            json!({"distance": 150}),
        ],
    );
    rejects(
        &schema,
        json!({"unit": "imperial", "distance": 150}),
        &["/distance: expected a number <= 100, found 150"],
    );
    rejects(
        &schema,
        json!({"distance": 170}),
        &["/distance: expected a number <= 160, found 170"],
    );
    let then_only = compiled(json!({"if": {"type": "string"}, "then": {"minLength": 2}}));
    accepts(&then_only, &[json!(1), json!("ab")]);
}

#[test]
fn dependent_required_and_dependencies() {
    let modern = compiled(json!({
        "dependentRequired": {"card": ["billing"]},
        "dependentSchemas": {"vip": {"required": ["level"]}}
    }));
    accepts(
        &modern,
        &[
            json!({}),
            json!({"card": 1, "billing": 2}),
            json!({"vip": true, "level": 1}),
        ],
    );
    rejects(
        &modern,
        json!({"card": 1}),
        &["/: property \"card\" requires property \"billing\""],
    );
    rejects(
        &modern,
        json!({"vip": true}),
        &["/: missing required property \"level\""],
    );
    let draft7 = compiled(json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "dependencies": {"card": ["billing"], "vip": {"required": ["level"]}},
        "dependentRequired": {"x": ["y"]}
    }));
    rejects(
        &draft7,
        json!({"card": 1}),
        &["/: property \"card\" requires property \"billing\""],
    );
    rejects(
        &draft7,
        json!({"vip": 1}),
        &["/: missing required property \"level\""],
    );
    // `dependentRequired` is not a draft-7 keyword.
    accepts(&draft7, &[json!({"x": 1})]);
}

#[test]
fn refs_to_defs_definitions_pointers_anchors_and_recursion() {
    let schema = compiled(json!({
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"$ref": "#/definitions/name"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
                },
                "required": ["name"]
            },
            "odd key/with~chars": {"const": 1},
            "anchored": {"$anchor": "small", "maximum": 3}
        },
        "definitions": {"name": {"type": "string", "minLength": 1}},
        "properties": {
            "tree": {"$ref": "#/$defs/node"},
            "escaped": {"$ref": "#/$defs/odd%20key~1with~0chars"},
            "size": {"$ref": "#small"},
            "again": {"$ref": "#/properties/size"}
        }
    }));
    assert!(schema
        .is_valid(&json!({"tree": {"name": "a", "children": [{"name": "b", "children": []}]}})));
    rejects(
        &schema,
        json!({"tree": {"name": "a", "children": [{"name": "b", "children": [{"name": ""}]}]}}),
        &["/tree/children/0/children/0/name: expected at least 1 characters, found 0"],
    );
    rejects(
        &schema,
        json!({"size": 4}),
        &["/size: expected a number <= 3, found 4"],
    );
    rejects(
        &schema,
        json!({"again": 4}),
        &["/again: expected a number <= 3, found 4"],
    );
    rejects(
        &schema,
        json!({"escaped": 2}),
        &["/escaped: expected 1, found 2"],
    );
    // The root itself.
    let list = compiled(json!({"type": ["array", "integer"], "items": {"$ref": "#"}}));
    accepts(&list, &[json!([1, [2, [3]]])]);
    rejects(
        &list,
        json!([1, ["x"]]),
        &["/1/0: expected integer or array, found string \"x\""],
    );
    // A reference naming the root's own `$id` is local.
    let with_id = compiled(
        json!({"$id": "https://example.com/s.json", "$defs": {"a": {"type": "null"}},
        "properties": {"a": {"$ref": "https://example.com/s.json#/$defs/a"}}}),
    );
    rejects(
        &with_id,
        json!({"a": 1}),
        &["/a: expected null, found integer 1"],
    );
}

#[test]
fn ref_siblings_apply_in_2020_12_and_not_in_draft_7() {
    let defs = json!({"positive": {"minimum": 0}});
    let modern = compiled(json!({"$defs": defs, "$ref": "#/$defs/positive", "maximum": 10}));
    rejects(
        &modern,
        json!(11),
        &["/: expected a number <= 10, found 11"],
    );
    rejects(&modern, json!(-1), &["/: expected a number >= 0, found -1"]);
    let draft7 = compiled(json!({"$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": defs, "$ref": "#/definitions/positive", "maximum": 10}));
    accepts(&draft7, &[json!(11)]);
    rejects(&draft7, json!(-1), &["/: expected a number >= 0, found -1"]);
}

#[test]
fn malformed_schemas_name_the_keyword_and_pointer() {
    malformed(json!({"type": 12}), "`type` at #: expected one of \"null\", \"boolean\", \"integer\", \"number\", \"string\", \"array\", \"object\" (or an array of them), found integer 12");
    malformed(json!({"type": ["string", "text"]}), "`type` at #: expected one of \"null\", \"boolean\", \"integer\", \"number\", \"string\", \"array\", \"object\" (or an array of them), found string \"text\"");
    malformed(
        json!({"properties": {"a": {"required": "a"}}}),
        "`required` at #/properties/a: expected an array of strings, found string \"a\"",
    );
    malformed(
        json!({"properties": {"a": 3}}),
        "#/properties/a: a schema must be an object or a boolean, found integer 3",
    );
    malformed(
        json!({"properties": []}),
        "`properties` at #: expected an object, found array []",
    );
    malformed(
        json!({"items": [{"minItems": -1}]}),
        "`minItems` at #/items/0: expected a non-negative integer, found integer -1",
    );
    malformed(
        json!({"maxLength": 1.5}),
        "`maxLength` at #: expected a non-negative integer, found number 1.5",
    );
    malformed(
        json!({"multipleOf": 0}),
        "`multipleOf` at #: expected a number greater than 0, found 0",
    );
    malformed(json!({"pattern": "(unclosed"}), "`pattern` at #: `(unclosed` is not a supported regular expression: found open group without closing ')'");
    malformed(
        json!({"anyOf": []}),
        "`anyOf` at #: expected at least one schema, found an empty array",
    );
    malformed(
        json!({"enum": "a"}),
        "`enum` at #: expected an array, found string \"a\"",
    );
    malformed(
        json!({"uniqueItems": "yes"}),
        "`uniqueItems` at #: expected a boolean, found string \"yes\"",
    );
    malformed(
        json!({"$ref": "#/$defs/missing"}),
        "`$ref` at #: `#/$defs/missing` does not point at anything in this schema",
    );
    malformed(json!({"properties": {"a": {"$ref": "other.json#/x"}}}), "`$ref` at #/properties/a: `other.json#/x` is not a local reference (only `#...` within this schema is resolved)");
    malformed(json!({"$ref": "https://example.com/schema"}), "`$ref` at #: `https://example.com/schema` is not a local reference (only `#...` within this schema is resolved)");
    malformed(
        json!({"$ref": "#nowhere"}),
        "`$ref` at #: `#nowhere`: no schema declares the anchor `nowhere`",
    );
    malformed(json!({"$ref": "#"}), "`$ref` at #: the schema refers to itself without descending into a property or item, so validation would never end");
    malformed(json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}),
        "`$ref` at #/$defs/a: the schema refers to itself without descending into a property or item, so validation would never end");
    // Unused definitions are checked too.
    malformed(
        json!({"$defs": {"unused": {"maxItems": "2"}}}),
        "`maxItems` at #/$defs/unused: expected a non-negative integer, found string \"2\"",
    );
    malformed(
        json!({"definitions": []}),
        "`definitions` at #: expected an object, found array []",
    );
    malformed(
        json!(3),
        "#: a schema must be an object or a boolean, found integer 3",
    );
}

#[test]
fn pattern_errors_say_what_regex_lite_lacks() {
    let error = Schema::compile(&json!({"pattern": "^(?=a)"})).unwrap_err();
    assert_eq!(error.keyword(), "pattern");
    assert_eq!(error.pointer(), "#");
    assert!(error.reason().contains("look-around"), "{error}");
}

#[test]
fn boolean_schemas() {
    accepts(&compiled(json!(true)), &[json!(1), json!(null)]);
    rejects(
        &compiled(json!(false)),
        json!(1),
        &["/: no value is allowed here"],
    );
    accepts(&compiled(json!({})), &[json!({"a": 1})]);
}

#[test]
fn nested_paths_escape_and_long_values_are_cut() {
    let schema = compiled(json!({"properties": {"a/b~c": {"items": {"type": "integer"}}}}));
    rejects(
        &schema,
        json!({"a/b~c": [1, "x"]}),
        &["/a~1b~0c/1: expected integer, found string \"x\""],
    );
    let short = compiled(json!({"type": "integer"}));
    let long = "y".repeat(100);
    let message = &violations(&short, json!(long))[0];
    assert!(message.ends_with("…"), "{message}");
    assert!(message.len() < 120, "{message}");
}

mod schemars_output {
    use super::*;
    use schemars::JsonSchema;

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    enum Unit {
        Celsius,
        Fahrenheit,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Place {
        City { name: String, unit: Option<Unit> },
        Coordinates { lat: f64, lon: f64 },
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    struct Forecast {
        place: Place,
        days: Option<u8>,
        units: Vec<Unit>,
        /// Nested structs reference each other through `$defs`.
        window: Option<Window>,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    struct Window {
        from: u32,
        to: u32,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    struct Comment {
        text: String,
        replies: Vec<Comment>,
    }

    #[test]
    fn derived_schemas_with_defs_and_nested_enums() {
        let value = schemars::schema_for!(Forecast).to_value();
        assert!(value["$defs"].is_object(), "{value}");
        let schema = compiled(value);
        accepts(
            &schema,
            &[
                json!({"place": {"kind": "city", "name": "Oslo"}, "units": []}),
                json!({"place": {"kind": "city", "name": "Oslo", "unit": "Celsius"}, "days": 3,
                       "units": ["Fahrenheit"], "window": {"from": 1, "to": 2}}),
                json!({"place": {"kind": "coordinates", "lat": 59.9, "lon": 10.7}, "units": [], "window": null}),
            ],
        );
        let found = violations(
            &schema,
            json!({"place": {"kind": "city", "name": "Oslo", "unit": "Kelvin"}, "days": 300,
                   "units": ["Celsius", "kelvin"], "window": {"from": -1, "to": 2}}),
        );
        let text = found.join("\n");
        assert!(
            text.contains(
                "/units/1: expected one of \"Celsius\", \"Fahrenheit\", found \"kelvin\""
            ),
            "{text}"
        );
        assert!(
            text.contains("/days: expected a number <= 255, found 300"),
            "{text}"
        );
        assert!(
            text.contains("/place: matches none of the `oneOf` alternatives"),
            "{text}"
        );
        assert!(text.contains("at /place/unit"), "{text}");
        assert!(
            text.contains("/window: matches none of the `anyOf` alternatives"),
            "{text}"
        );
        assert!(
            text.contains("at /window/from: expected a number >= 0, found -1"),
            "{text}"
        );
        rejects(
            &schema,
            json!({"units": []}),
            &["/: missing required property \"place\""],
        );
    }

    #[test]
    fn recursive_derived_schema() {
        let schema = compiled(schemars::schema_for!(Comment).to_value());
        accepts(
            &schema,
            &[json!({"text": "a", "replies": [{"text": "b", "replies": []}]})],
        );
        rejects(
            &schema,
            json!({"text": "a", "replies": [{"text": 1, "replies": []}]}),
            &["/replies/0/text: expected string, found integer 1"],
        );
    }
}
