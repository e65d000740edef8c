//! [`PartialAnswers`]: the answer parsed so far, as [`tower_chat::ChatEvent::PartialAnswer`] events on the
//! checked stream, and when each one is due.

use serde_json::Value;

use crate::partial::PartialJson;

/// Below this many bytes of answer text, every delta that changes the value sends it.
pub const EVERY_DELTA_BELOW: usize = 1024;

/// Beyond [`EVERY_DELTA_BELOW`], a value goes out once the text has grown by `1 / GROWTH_DIVISOR` of its length at
/// the previous value.
pub const GROWTH_DIVISOR: usize = 8;

/// Asks a [`crate::StructuredOutputLayer`] for [`tower_chat::ChatEvent::PartialAnswer`] events on one request
/// (a request extension), as [`crate::StructuredOutputLayer::partial_answers`] does for all of them.
///
/// The layer reads each attempt's text deltas with one [`PartialJson`] kept across them (nothing is read twice).
/// Each event carries the whole value so far, a copy of it; copying after every delta would make the total work
/// quadratic in the answer's length (a 1 MB answer in 32-byte deltas would copy ~16 GB). So a value goes out
/// after a delta that changed it:
///
/// - after every such delta while the answer text at the previous value was under [`EVERY_DELTA_BELOW`] bytes
///   (small answers, the usual case, grow delta by delta);
/// - beyond that, once the text has grown by [`GROWTH_DIVISOR`]ths (an eighth) since the previous value: the
///   sizes copied grow geometrically, so all the copies of an `n`-byte answer add up to at most about
///   `9 n` bytes, plus at most 1 KiB per delta of the first kilobyte — linear in the answer.
///
/// At the end of an attempt whose answer matched, the validated value goes out unless the last value already was
/// it: the last `PartialAnswer` before `Finish` is always the whole answer (also when the text was not readable
/// as it streamed, e.g. inside a Markdown code fence, which shows no values before that one).
///
/// ```
/// use tower_chat::{ChatRequest, Message};
/// use tower_chat_structured_output::PartialAnswers;
///
/// let request = ChatRequest::new(vec![Message::user("Norway's capital?")]).with_extension(PartialAnswers);
/// # assert!(request.extensions.get::<PartialAnswers>().is_some());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartialAnswers;

/// One attempt's answer as it grows, and what of it went out.
#[derive(Debug, Default)]
pub(crate) struct AnswerSoFar {
    parser: PartialJson,
    /// Whether the text so far stopped reading as JSON (a code fence around it, prose before it).
    unreadable: bool,
    /// Bytes of answer text read in this attempt.
    read: usize,
    /// `read` when the previous value went out (`None`: none yet in this attempt).
    sent_at: Option<usize>,
    /// The parser's change count when the previous value went out.
    sent_changes: u64,
}

impl AnswerSoFar {
    /// Read one text delta: the value to send, if the delta changed it and a value is due.
    pub(crate) fn push(&mut self, text: &str) -> Option<Value> {
        self.read += text.len();
        if self.unreadable {
            return None;
        }
        if self.parser.push(text).is_err() {
            self.unreadable = true;
            return None;
        }
        if self.parser.changes() == self.sent_changes {
            return None;
        }
        if let Some(at) = self.sent_at {
            if at >= EVERY_DELTA_BELOW && self.read - at < at / GROWTH_DIVISOR {
                return None;
            }
        }
        let value = self.parser.value()?.clone();
        self.sent_at = Some(self.read);
        self.sent_changes = self.parser.changes();
        Some(value)
    }

    /// The attempt's answer matched as `validated`: it goes out unless the previous value already was it.
    pub(crate) fn last(&self, validated: Value) -> Option<Value> {
        let sent_whole = !self.unreadable
            && self.parser.is_complete()
            && self.sent_at.is_some()
            && self.parser.changes() == self.sent_changes;
        (!sent_whole).then_some(validated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_answers_send_every_delta_that_changes_the_value() {
        let mut answer = AnswerSoFar::default();
        let sent: Vec<Option<Value>> =
            [r#"{"name""#, r#": "Os"#, "lo", r#"", "pop": 7"#, "09", "}"]
                .iter()
                .map(|delta| answer.push(delta))
                .collect();
        assert_eq!(
            sent,
            [
                Some(json!({})),
                Some(json!({"name": "Os"})),
                Some(json!({"name": "Oslo"})),
                None,
                None,
                Some(json!({"name": "Oslo", "pop": 709})),
            ]
        );
        // The last value sent is the whole answer: not sent again.
        assert_eq!(answer.last(json!({"name": "Oslo", "pop": 709})), None);
    }

    #[test]
    fn large_answers_send_values_geometrically_and_the_whole_answer_last() {
        let text = serde_json::to_string(&json!({"items": vec!["x".repeat(20); 5000]})).unwrap();
        let mut answer = AnswerSoFar::default();
        let mut sent_at = Vec::new();
        let mut read = 0;
        for delta in text.as_bytes().chunks(32) {
            read += delta.len();
            if answer.push(std::str::from_utf8(delta).unwrap()).is_some() {
                sent_at.push(read);
            }
        }
        let copied: usize = sent_at.iter().sum();
        assert!(
            copied <= 9 * text.len() + 32 * EVERY_DELTA_BELOW,
            "{copied} bytes copied for {} bytes",
            text.len()
        );
        for pair in sent_at.windows(2) {
            assert!(pair[0] < EVERY_DELTA_BELOW || pair[1] - pair[0] >= pair[0] / GROWTH_DIVISOR);
        }
        // The text ended between two due values: the validated answer goes out once more.
        assert!(*sent_at.last().unwrap() < text.len());
        let whole: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(answer.last(whole.clone()), Some(whole));
    }

    #[test]
    fn fenced_or_scalar_answers_show_only_the_validated_value() {
        let mut answer = AnswerSoFar::default();
        assert_eq!(answer.push("```json\n{\"a\": 1}\n```"), None);
        assert_eq!(answer.last(json!({"a": 1})), Some(json!({"a": 1})));
        // A top-level number is complete only when the text ends.
        let mut answer = AnswerSoFar::default();
        assert_eq!(answer.push("42"), None);
        assert_eq!(answer.last(json!(42)), Some(json!(42)));
    }
}
