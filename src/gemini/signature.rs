//! Gemini's `thoughtSignature`s kept between turns. Gemini signs the part that ends a stretch of thinking — the
//! first `functionCall` of a turn, or its last text part — and refuses a function-calling continuation whose
//! calls come back without their signatures. A signature travels in the assistant message as a
//! [`Continuation::Other`] of provider `gemini`: `{"thoughtSignature": …, "callId": …}` for a call,
//! `{"thoughtSignature": …}` for text. Other leaves leave it out; this one puts it back on the same part.

use serde_json::{json, Value};

use crate::message::AssistantMessage;
use crate::reasoning::Continuation;

/// The provider family of Gemini's continuations and parts.
pub(crate) const GEMINI: &str = "gemini";

/// The continuation of a signature on the function call `call_id`.
pub(crate) fn on_call(signature: &str, call_id: &str) -> Continuation {
    Continuation::Other {
        provider: GEMINI.to_owned(),
        value: json!({"thoughtSignature": signature, "callId": call_id}),
    }
}

/// The continuation of a signature on a text (or thought) part.
pub(crate) fn on_text(signature: &str) -> Continuation {
    Continuation::Other {
        provider: GEMINI.to_owned(),
        value: json!({ "thoughtSignature": signature }),
    }
}

/// The signatures of one assistant message, by the part they go back on.
#[derive(Default)]
pub(crate) struct Signatures<'a> {
    pub(crate) text: Option<&'a str>,
    calls: Vec<(&'a str, &'a str)>,
}

impl<'a> Signatures<'a> {
    /// The signature of the call `id`, if it had one.
    pub(crate) fn call(&self, id: &str) -> Option<&'a str> {
        self.calls
            .iter()
            .find(|(call, _)| *call == id)
            .map(|(_, s)| *s)
    }
}

/// The Gemini signatures among `message`'s reasoning (another provider's reasoning is left out: Gemini cannot
/// take it).
pub(crate) fn of_message(message: &AssistantMessage) -> Signatures<'_> {
    let mut signatures = Signatures::default();
    for part in &message.reasoning {
        match &part.continuation {
            Some(Continuation::Other { provider, value }) if provider == GEMINI => {
                let Some(signature) = value.get("thoughtSignature").and_then(Value::as_str) else {
                    continue;
                };
                match value.get("callId").and_then(Value::as_str) {
                    Some(call) => signatures.calls.push((call, signature)),
                    None => signatures.text = Some(signature),
                }
            }
            Some(other) => tracing::debug!(
                from = other.provider(),
                "another provider's reasoning left out of a Gemini request"
            ),
            None => {}
        }
    }
    signatures
}
