//! Schemas and values built to cost more than their size: refused by the limits before compiling, or, within
//! raised limits, validated in work linear in the schema (counted, not timed) and stack bounded by the walk's
//! depth cap.

use serde_json::{json, Value};
use tower_chat::schema_limits::SchemaLimit;
use tower_chat_testkit::{ref_chain, ref_dag};

use super::validate::{Walk, MAX_CHECK_DEPTH};
use super::*;

/// `n` references in a row, ending in a string.
fn chain(n: usize) -> Value {
    ref_chain(n, json!({"type": "string"}))
}

/// Levels of `applicator` holding two references to the level below; the bottom is `bottom`.
fn dag(applicator: &str, depth: usize, bottom: Value) -> Value {
    ref_dag(applicator, depth, 2, bottom)
}

/// Limits no schema here reaches: what the validator does on its own.
fn unbounded() -> SchemaLimits {
    SchemaLimits {
        max_depth: usize::MAX,
        max_nodes: usize::MAX,
        max_ref_expansions: usize::MAX,
        max_expanded_nodes: usize::MAX,
    }
}

/// How many schemas a quiet walk and a collecting walk check `instance` against.
fn checks(schema: &Schema, instance: &Value) -> (u64, u64) {
    let mut quiet = Walk::quiet();
    schema.tree.check(schema.tree.root, instance, &mut quiet);
    let mut collecting = Walk::collecting();
    schema
        .tree
        .check(schema.tree.root, instance, &mut collecting);
    (quiet.checks(), collecting.checks())
}

#[test]
fn a_ref_chain_over_the_depth_limit_is_refused_before_compiling() {
    let error = Schema::compile(&chain(1500)).unwrap_err();
    let limit = error.limit().expect("a limit");
    assert_eq!(limit.limit(), SchemaLimit::Depth);
    assert!(error.to_string().ends_with("(max_depth)"), "{error}");
    assert!(Schema::compile(&chain(30)).is_ok());
}

#[test]
fn references_doubling_per_level_are_refused_naming_the_expanded_size() {
    for schema in [
        dag("allOf", 27, json!({"type": "object"})),
        dag("anyOf", 22, json!({"type": "object"})),
    ] {
        let error = Schema::compile(&schema).unwrap_err();
        assert_eq!(
            error.limit().map(SchemaLimitError::limit),
            Some(SchemaLimit::ExpandedNodes),
            "{error}"
        );
    }
}

/// Within raised limits, a long chain compiles (its targets from a queue, not by recursion) and validates on a
/// thread with a small stack: the walk stops at its depth cap with a violation instead of overflowing.
#[test]
fn a_chain_within_raised_limits_compiles_iteratively_and_validation_is_depth_capped() {
    let handle = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            let schema = Schema::compile_with(&chain(5000), &unbounded()).expect("compiles");
            let violations = schema.validate(&json!("text")).unwrap_err();
            assert_eq!(violations.len(), 1, "{violations:?}");
            assert!(
                violations[0]
                    .to_string()
                    .contains(&format!("more than {MAX_CHECK_DEPTH} schemas deep")),
                "{violations:?}"
            );
            let short = Schema::compile_with(&chain(500), &unbounded()).expect("compiles");
            assert!(short.is_valid(&json!("text")));
            assert!(!short.is_valid(&json!(1)));
        })
        .unwrap();
    handle.join().expect("no overflow");
}

#[test]
fn a_dag_of_references_is_validated_in_work_linear_in_its_levels() {
    for applicator in ["allOf", "anyOf", "oneOf"] {
        let bottom = json!({"type": "object", "required": ["a"]});
        let schema = Schema::compile_with(&dag(applicator, 40, bottom), &unbounded()).unwrap();
        // Valid and invalid values, quiet and collecting walks: a few checks per level, not 2^40.
        for instance in [json!({"a": 1}), json!({"b": 1}), json!(7)] {
            let (quiet, collecting) = checks(&schema, &instance);
            assert!(
                quiet <= 4 * 42 && collecting <= 12 * 42,
                "{applicator} {instance}: {quiet} / {collecting}"
            );
        }
    }
    // The violations are said once each, not once per path.
    let schema =
        Schema::compile_with(&dag("allOf", 40, json!({"type": "string"})), &unbounded()).unwrap();
    let violations = schema.validate(&json!(3)).unwrap_err();
    assert!(violations.len() <= 2, "{violations:?}");
    assert_eq!(
        violations[0].to_string(),
        "/: expected string, found integer 3"
    );
    // `anyOf`'s explanation names each alternative's first violation, also below shared levels.
    let schema =
        Schema::compile_with(&dag("anyOf", 30, json!({"type": "string"})), &unbounded()).unwrap();
    let violations = schema.validate(&json!(3)).unwrap_err();
    assert_eq!(violations.len(), 1, "{violations:?}");
    let message = violations[0].to_string();
    assert!(
        message.starts_with("/: matches none of the `anyOf` alternatives (0: matches none"),
        "{message}"
    );
    // Each alternative's reason is cut, so nesting does not double the message per level.
    assert!(message.len() < 600, "{} bytes", message.len());
}

#[test]
fn property_names_under_a_shared_schema_are_checked_each_on_its_own() {
    let schema = compiled_shared_names();
    assert!(schema.is_valid(&json!({"ab": 1, "cd": 2})));
    let violations = schema
        .validate(&json!({"ab": 1, "toolong": 2}))
        .unwrap_err();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].to_string().contains("\"toolong\""),
        "{violations:?}"
    );
}

/// `propertyNames` through two references to one definition: the names are values built while validating.
fn compiled_shared_names() -> Schema {
    Schema::compile(&json!({
        "$defs": {"short": {"maxLength": 2}},
        "propertyNames": {"allOf": [{"$ref": "#/$defs/short"}, {"$ref": "#/$defs/short"}]}
    }))
    .unwrap()
}
