//! JSON Schemas built to cost more than their size, for the tests that prove they are refused or stay cheap:
//! a chain of `$ref`s, levels of `$ref`s to the level below (`allOf`/`anyOf` DAGs, and Gemini's "billion
//! laughs" of properties).

use serde_json::{json, Map, Value};

/// `{"$ref": "#/$defs/a0"}` where `a0` refers to `a1`, … and the last of `n` is `last`: `n` references in a
/// row.
pub fn ref_chain(n: usize, last: Value) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        let next = if i + 1 == n {
            last.clone()
        } else {
            json!({"$ref": format!("#/$defs/a{}", i + 1)})
        };
        defs.insert(format!("a{i}"), next);
    }
    json!({"$defs": defs, "$ref": "#/$defs/a0"})
}

/// Levels `l1..=l<depth>` over `l0` = `bottom`, each an `applicator` (`allOf`, `anyOf`, `oneOf`) of `fanout`
/// references to the level below; the root refers to the top level.
pub fn ref_dag(applicator: &str, depth: usize, fanout: usize, bottom: Value) -> Value {
    ref_levels(
        depth,
        bottom,
        |below| json!({applicator: vec![below; fanout]}),
    )
}

/// Gemini's billion laughs: levels `d1..=d<depth>` over a string, each an object of `fanout` properties
/// referring to the level below; the root is an object whose property `x` refers to the top level.
pub fn ref_laughs(depth: usize, fanout: usize) -> Value {
    let mut schema = ref_levels(depth, json!({"type": "string"}), |below| {
        let properties: Map<String, Value> = (0..fanout)
            .map(|i| (property_name(i), below.clone()))
            .collect();
        json!({"type": "object", "properties": properties})
    });
    let top = schema["$ref"].take();
    schema["type"] = json!("object");
    schema["properties"] = json!({"x": {"$ref": top}});
    schema.as_object_mut().map(|root| root.remove("$ref"));
    schema
}

/// `a`, `b`, … `z`, then `p26`, `p27`, …
fn property_name(i: usize) -> String {
    match u8::try_from(i) {
        Ok(i) if i < 26 => char::from(b'a' + i).to_string(),
        _ => format!("p{i}"),
    }
}

/// `$defs` of `l0` = `bottom` and levels built by `level` from a `{"$ref"}` to the level below; the root refers to
/// the top one.
fn ref_levels(depth: usize, bottom: Value, level: impl Fn(Value) -> Value) -> Value {
    let mut defs = Map::new();
    defs.insert("l0".into(), bottom);
    for n in 1..=depth {
        let below = json!({"$ref": format!("#/$defs/l{}", n - 1)});
        defs.insert(format!("l{n}"), level(below));
    }
    json!({"$defs": defs, "$ref": format!("#/$defs/l{depth}")})
}
