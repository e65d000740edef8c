//! What a content policy (a guardrail layer) decided about a call, in a form the recording layers share:
//! [`GuardrailVerdict`]s collected in a [`GuardrailAudit`] that travels in the request's extensions.
//!
//! A verdict names the check, what was done (block, redact, flag), where the text was (the request, a tool call's
//! arguments, a tool result, the model's output) and the byte offsets of the span that triggered it — never the
//! matched text, so that a record of a leaked secret does not hold the secret.
//!
//! A recording layer (persistence, telemetry) puts a fresh audit into the request before calling its inner
//! service and reads it when it writes the call's record; the guardrail layer inside adds its verdicts to every
//! audit it finds. An audit made with [`GuardrailAudit::nested`] also passes its verdicts to the one it was made
//! from, so an outer recorder of a turn and an inner recorder of each round both see them.
//!
//! ```
//! use tower_chat::{ChatRequest, GuardrailAction, GuardrailAudit, GuardrailStage, GuardrailVerdict, Message};
//!
//! let audit = GuardrailAudit::new();
//! let request = ChatRequest::new(vec![Message::user("mail me at a@b.io")]).with_extension(audit.clone());
//! // In the guardrail layer:
//! if let Some(slot) = request.extensions.get::<GuardrailAudit>() {
//!     slot.push(GuardrailVerdict {
//!         check: "personal_data".into(),
//!         action: GuardrailAction::Redact,
//!         stage: GuardrailStage::Request,
//!         location: "messages[0]".into(),
//!         span: Some(tower_chat::TextSpan { start: 11, end: 17 }),
//!         detail: Some("email".into()),
//!     });
//! }
//! assert_eq!(audit.verdicts()[0].action, GuardrailAction::Redact);
//! ```

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::request::Shared;

/// Where in a call a check looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailStage {
    /// The request's system, user and assistant text, before the model is called.
    Request,
    /// A tool call's arguments, as the model produced them.
    ToolCall,
    /// A tool's result: a tool message of the request, or a tool loop's result event.
    ToolResult,
    /// The model's answer text.
    Output,
}

impl GuardrailStage {
    /// The snake_case name (a metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            GuardrailStage::Request => "request",
            GuardrailStage::ToolCall => "tool_call",
            GuardrailStage::ToolResult => "tool_result",
            GuardrailStage::Output => "output",
        }
    }
}

/// What a verdict did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailAction {
    /// The request was refused, or the answer ended with a `content_filter` finish.
    Block,
    /// The span was replaced by a label before it went on.
    Redact,
    /// The text went on as it was; the verdict only annotates the call.
    Flag,
}

impl GuardrailAction {
    /// The snake_case name (a metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            GuardrailAction::Block => "block",
            GuardrailAction::Redact => "redact",
            GuardrailAction::Flag => "flag",
        }
    }
}

impl fmt::Display for GuardrailAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Byte offsets `[start, end)` of a span in the text a verdict names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TextSpan {
    /// The first byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// One decision of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardrailVerdict {
    /// The check's name, as the policy names it.
    pub check: String,
    /// What was done.
    pub action: GuardrailAction,
    /// Where in the call.
    pub stage: GuardrailStage,
    /// Which text: `messages[2]` (its text parts joined by newlines), `tool_call:<id>/<json pointer>`,
    /// `tool_result:<call id>`, `output`.
    pub location: String,
    /// The span that triggered the verdict, in bytes of that text; `None` when the check judged the whole text
    /// (a moderation call, a schema, a check of your own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<TextSpan>,
    /// What the check found, by kind (`email`, `openai_key`, a moderation category), never the matched text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The verdicts of one call, shared by its clones (see the [module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct GuardrailAudit(Arc<AuditInner>);

#[derive(Debug, Default)]
struct AuditInner {
    verdicts: Mutex<Vec<GuardrailVerdict>>,
    /// The messages the guardrail sent on after redacting them.
    sent: Mutex<Option<Shared<Vec<Message>>>>,
    parent: Option<GuardrailAudit>,
}

impl GuardrailAudit {
    /// An empty audit.
    pub fn new() -> Self {
        GuardrailAudit::default()
    }

    /// An empty audit that also passes what it is given to `parent`.
    pub fn nested(parent: GuardrailAudit) -> Self {
        GuardrailAudit(Arc::new(AuditInner {
            parent: Some(parent),
            ..AuditInner::default()
        }))
    }

    /// Add a verdict.
    pub fn push(&self, verdict: GuardrailVerdict) {
        if let Some(parent) = &self.0.parent {
            parent.push(verdict.clone());
        }
        self.0
            .verdicts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(verdict);
    }

    /// The verdicts so far, in the order they were made.
    pub fn verdicts(&self) -> Vec<GuardrailVerdict> {
        self.0
            .verdicts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Leave the messages that were sent on in place of the request's, because a check redacted them: a
    /// recorder stores those, so a redacted secret is not kept in its records either.
    pub fn set_sent_messages(&self, messages: Shared<Vec<Message>>) {
        if let Some(parent) = &self.0.parent {
            parent.set_sent_messages(messages.clone());
        }
        *self.0.sent.lock().unwrap_or_else(PoisonError::into_inner) = Some(messages);
    }

    /// The messages sent on after redaction, if a check redacted the request.
    pub fn sent_messages(&self) -> Option<Shared<Vec<Message>>> {
        self.0
            .sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(check: &str) -> GuardrailVerdict {
        GuardrailVerdict {
            check: check.into(),
            action: GuardrailAction::Flag,
            stage: GuardrailStage::Output,
            location: "output".into(),
            span: None,
            detail: None,
        }
    }

    #[test]
    fn a_nested_audit_passes_verdicts_and_sent_messages_to_its_parent() {
        let outer = GuardrailAudit::new();
        let inner = GuardrailAudit::nested(outer.clone());
        inner.push(verdict("a"));
        outer.push(verdict("b"));
        inner.set_sent_messages(Shared::new(vec![Message::user("x")]));
        assert_eq!(inner.verdicts(), vec![verdict("a")]);
        assert_eq!(outer.verdicts(), vec![verdict("a"), verdict("b")]);
        assert_eq!(outer.sent_messages().map(|m| m.len()), Some(1));
    }

    #[test]
    fn verdicts_serialize_without_empty_fields() {
        let text = serde_json::to_string(&verdict("secrets")).unwrap();
        assert_eq!(
            text,
            r#"{"check":"secrets","action":"flag","stage":"output","location":"output"}"#
        );
    }
}
