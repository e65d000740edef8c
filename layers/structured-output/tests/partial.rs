//! The incremental JSON parser: the same final value whatever the chunking, values growing as they should.

use proptest::prelude::*;
use serde_json::{json, Value};
use tower_chat_structured_output::PartialJson;

fn read_in_chunks(text: &str, cuts: &[usize]) -> (Value, Vec<Value>) {
    let mut bounds: Vec<usize> = cuts
        .iter()
        .map(|c| c % (text.len() + 1))
        .filter(|&c| text.is_char_boundary(c))
        .collect();
    bounds.push(0);
    bounds.push(text.len());
    bounds.sort_unstable();
    bounds.dedup();
    let mut parser = PartialJson::new();
    let mut seen = Vec::new();
    for pair in bounds.windows(2) {
        parser.push(&text[pair[0]..pair[1]]).unwrap();
        if let Some(value) = parser.value() {
            seen.push(value.clone());
        }
    }
    parser.finish().unwrap();
    (parser.into_value().unwrap(), seen)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[a-zé\"\\\\\\n\u{1F600}/ ]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z\"]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_chunking_gives_the_value_serde_json_reads(
        value in json_value(),
        pretty in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..24),
    ) {
        let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) }
            .unwrap();
        let (read, _) = read_in_chunks(&text, &cuts);
        // serde_json's own reading of the text (its float parsing need not round-trip every f64 exactly).
        prop_assert_eq!(read, serde_json::from_str::<Value>(&text).unwrap());
    }

    #[test]
    fn escapes_split_anywhere_read_the_same(cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let text = r#"{"s": "a\"b\\c\/d\u00e9\ud83d\ude00\n\t end"}"#;
        let (read, _) = read_in_chunks(text, &cuts);
        prop_assert_eq!(read, serde_json::from_str::<Value>(text).unwrap());
    }
}

#[test]
fn the_object_grows_chunk_by_chunk() {
    let text =
        r#"{"name": "Oslo", "tags": ["a", "bc"], "size": 12.5, "ok": true, "sub": {"x": null}}"#;
    let cuts: Vec<usize> = (1..text.len()).collect();
    let (_, seen) = read_in_chunks(text, &cuts);
    // Optional fields are absent until their value starts; strings grow a character at a time.
    assert!(seen.contains(&json!({})));
    assert!(seen.contains(&json!({"name": ""})));
    assert!(seen.contains(&json!({"name": "Os"})));
    assert!(seen.contains(&json!({"name": "Oslo", "tags": ["a", "b"]})));
    // A number appears only once it ends: never `12` or `12.`.
    assert!(!seen.iter().any(|v| v.get("size") == Some(&json!(12))));
    assert!(seen.contains(&json!({"name": "Oslo", "tags": ["a", "bc"], "size": 12.5})));
    assert!(seen.contains(
        &json!({"name": "Oslo", "tags": ["a", "bc"], "size": 12.5, "ok": true, "sub": {}})
    ));
    // Every step is a prefix-grown version of the one before: no key ever disappears.
    for pair in seen.windows(2) {
        if let (Value::Object(before), Value::Object(after)) = (&pair[0], &pair[1]) {
            assert!(
                before.keys().all(|k| after.contains_key(k)),
                "{before:?} -> {after:?}"
            );
        }
    }
}

#[test]
fn malformed_text_is_an_error_with_its_offset_and_the_parser_stays_spent() {
    let mut parser = PartialJson::new();
    parser.push(r#"{"a": 1"#).unwrap();
    let error = parser.push(r#" "b""#).unwrap_err();
    assert_eq!(error.offset(), 8);
    assert!(error.to_string().contains("expected `,`"), "{error}");
    assert_eq!(parser.push(" ").unwrap_err(), error);

    for bad in [
        "{\"a\" 1}",
        "[1,]",
        "tru e",
        "\"\\x\"",
        "{\"a\": 01}",
        "\"\\udc00\"",
        "\"a\u{1}\"",
    ] {
        let mut parser = PartialJson::new();
        let result = parser.push(bad).and_then(|()| parser.finish());
        assert!(result.is_err(), "{bad:?} was read");
    }
    let mut unfinished = PartialJson::new();
    unfinished.push("{\"a\": [1").unwrap();
    assert!(unfinished.finish().is_err());
    assert_eq!(unfinished.value(), Some(&json!({"a": []})));
}

#[test]
fn a_top_level_scalar_completes_at_the_end() {
    let mut parser = PartialJson::new();
    parser.push("4").unwrap();
    parser.push("2").unwrap();
    assert_eq!(parser.value(), None);
    parser.finish().unwrap();
    assert_eq!(parser.value(), Some(&json!(42)));
}
