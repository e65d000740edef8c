//! JSON value helpers the keywords share: equality with numbers compared by value, exact number ordering, and
//! short descriptions of values for messages.

use std::cmp::Ordering;
use std::fmt::Write;

use serde_json::{Number, Value};

/// JSON equality as the spec defines it for `enum`, `const` and `uniqueItems`: numbers are equal when their
/// values are (`1 == 1.0`), objects regardless of key order, arrays element by element.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| json_equal(a, b)))
        }
        _ => a == b,
    }
}

/// A JSON number as exact as serde_json keeps it.
#[derive(Clone, Copy, Debug)]
enum Exact {
    Int(i128),
    Float(f64),
}

fn exact(number: &Number) -> Exact {
    if let Some(i) = number.as_i64() {
        Exact::Int(i128::from(i))
    } else if let Some(u) = number.as_u64() {
        Exact::Int(i128::from(u))
    } else {
        // Without `arbitrary_precision` every other number is a finite f64.
        Exact::Float(number.as_f64().unwrap_or(f64::NAN))
    }
}

/// Order two numbers by value, exactly: integers beyond 2^53 are not rounded through f64.
pub(crate) fn compare_numbers(a: &Number, b: &Number) -> Ordering {
    compare_exact(exact(a), exact(b))
}

fn compare_exact(a: Exact, b: Exact) -> Ordering {
    match (a, b) {
        (Exact::Int(x), Exact::Int(y)) => x.cmp(&y),
        (Exact::Float(x), Exact::Float(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Exact::Int(x), Exact::Float(y)) => compare_int_float(x, y),
        (Exact::Float(x), Exact::Int(y)) => compare_int_float(y, x).reverse(),
    }
}

/// `int` against `float` without losing precision: when the rounded integer equals the float, the float is
/// integral and within i128's range, so the comparison can be finished in integers.
fn compare_int_float(int: i128, float: f64) -> Ordering {
    let rounded = int as f64;
    match rounded.partial_cmp(&float) {
        Some(Ordering::Equal) => int.cmp(&(float as i128)),
        Some(order) => order,
        None => Ordering::Equal,
    }
}

/// Whether a number has no fractional part (the spec's "integer": `1.0` is one).
pub(crate) fn is_integer(number: &Number) -> bool {
    match exact(number) {
        Exact::Int(_) => true,
        Exact::Float(f) => f.fract() == 0.0,
    }
}

/// Whether `number` is a multiple of `divisor` (> 0): exact for integers, and for other numbers the quotient
/// must be integral. A quotient that overflows f64 is not: the official test suite calls such a value "always
/// invalid" (`1e308` against `0.123456789`), and no division showed it to be a multiple.
pub(crate) fn is_multiple_of(number: &Number, divisor: &Number) -> bool {
    match (exact(number), exact(divisor)) {
        (Exact::Int(n), Exact::Int(d)) => n % d == 0,
        (Exact::Int(n), Exact::Float(d)) => float_multiple(n as f64, d),
        (Exact::Float(n), Exact::Int(d)) => float_multiple(n, d as f64),
        (Exact::Float(n), Exact::Float(d)) => float_multiple(n, d),
    }
}

fn float_multiple(number: f64, divisor: f64) -> bool {
    let quotient = number / divisor;
    quotient.is_finite() && quotient.fract() == 0.0
}

/// The JSON type of a value, as messages name it (`integer` for numbers without a fraction).
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integer(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The longest rendering of a value inside a message; longer ones are cut (a message must stay readable for the
/// model even when it sent a page of text where a number belongs).
const SHOWN_VALUE_CHARS: usize = 60;

/// A value as JSON text, cut at [`SHOWN_VALUE_CHARS`] characters.
pub(crate) fn show(value: &Value) -> String {
    let mut text = String::new();
    let _ = write!(text, "{value}");
    cut(text)
}

/// `text` cut at [`SHOWN_VALUE_CHARS`] characters, with `…` where it was cut.
pub(crate) fn cut(text: String) -> String {
    cut_at(text, SHOWN_VALUE_CHARS)
}

/// `text` cut at `chars` characters, with `…` where it was cut.
pub(crate) fn cut_at(mut text: String, chars: usize) -> String {
    if let Some((at, _)) = text.char_indices().nth(chars) {
        text.truncate(at);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n(v: Value) -> Number {
        match v {
            Value::Number(n) => n,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn numbers_compare_by_value_and_exactly() {
        assert!(json_equal(&json!(1), &json!(1.0)));
        assert!(json_equal(&json!([1, {"a": 2.0}]), &json!([1.0, {"a": 2}])));
        assert!(!json_equal(&json!(1), &json!(true)));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        // 2^53 + 1 is not representable as f64: a naive comparison would call them equal.
        let big = n(json!(9_007_199_254_740_993_i64));
        let rounded = n(json!(9_007_199_254_740_992.0));
        assert_eq!(compare_numbers(&big, &rounded), Ordering::Greater);
        assert_eq!(
            compare_numbers(&n(json!(u64::MAX)), &n(json!(-1))),
            Ordering::Greater
        );
        assert_eq!(
            compare_numbers(&n(json!(-1.5)), &n(json!(-1))),
            Ordering::Less
        );
    }

    #[test]
    fn integers_and_multiples() {
        assert!(is_integer(&n(json!(2.0))));
        assert!(!is_integer(&n(json!(2.5))));
        assert!(is_multiple_of(&n(json!(7.5)), &n(json!(2.5))));
        assert!(!is_multiple_of(&n(json!(7)), &n(json!(2))));
        assert!(is_multiple_of(&n(json!(i64::MIN)), &n(json!(2))));
        assert!(!is_multiple_of(&n(json!(0.3)), &n(json!(0.2))));
    }

    #[test]
    fn shown_values_are_cut() {
        let long = Value::String("x".repeat(200));
        let shown = show(&long);
        assert_eq!(shown.chars().count(), SHOWN_VALUE_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(show(&json!({"a": 1})), r#"{"a":1}"#);
    }
}
