//! Checks on the `PartialAnswer` events of a checked stream, shared by the layer and provider tests.

use serde_json::Value;
use tower_chat::{ChatEvent, FinishReason};

/// Whether `after` is `before` grown: no property gone, strings only longer, arrays only longer, the rest equal.
pub fn grows(before: &Value, after: &Value) -> bool {
    match (before, after) {
        (Value::Object(before), Value::Object(after)) => before
            .iter()
            .all(|(key, value)| after.get(key).is_some_and(|now| grows(value, now))),
        (Value::Array(before), Value::Array(after)) => {
            before.len() <= after.len() && before.iter().zip(after).all(|(b, a)| grows(b, a))
        }
        (Value::String(before), Value::String(after)) => after.starts_with(before.as_str()),
        (before, after) => before == after,
    }
}

/// The attempts of a stream (split at each `AnswerRejected`), each as its `PartialAnswer` values in order. Panics
/// unless each value comes right after a text delta, or right before the `Finish` that ends an answer.
pub fn attempts(events: &[ChatEvent]) -> Vec<Vec<Value>> {
    let mut attempts = vec![Vec::new()];
    for (at, event) in events.iter().enumerate() {
        match event {
            ChatEvent::PartialAnswer { value } => {
                let after_text = matches!(events[at - 1], ChatEvent::TextDelta { .. });
                let before_finish = matches!(
                    events.get(at + 1),
                    Some(ChatEvent::Finish {
                        reason: FinishReason::Stop
                    })
                );
                assert!(
                    after_text || before_finish,
                    "out of place at {at}: {events:?}"
                );
                attempts.last_mut().unwrap().push(value.clone());
            }
            ChatEvent::AnswerRejected { .. } => attempts.push(Vec::new()),
            _ => {}
        }
    }
    attempts
}

/// Asserts that each attempt's values only grow, and that the last value of the stream is `answer`, sent before the
/// `Finish` that ends the stream.
pub fn assert_grows_to(events: &[ChatEvent], answer: &Value) {
    for values in attempts(events) {
        for pair in values.windows(2) {
            assert!(grows(&pair[0], &pair[1]), "{} then {}", pair[0], pair[1]);
        }
    }
    assert!(
        matches!(events.last(), Some(ChatEvent::Finish { .. })),
        "{events:?}"
    );
    let last = events.iter().rev().find_map(|event| match event {
        ChatEvent::PartialAnswer { value } => Some(value),
        _ => None,
    });
    assert_eq!(last, Some(answer), "{events:?}");
}
