//! [`StructuredError`]: why no valid answer came back.

use std::fmt;

use tower_chat::{ChatError, ErrorKind, FinishReason};

/// Why a structured call gave no valid answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum StructuredError {
    /// The model declined to answer: a refusal or its provider's content filter (a safety stop). Not repaired:
    /// asking again gets the same refusal.
    Refused {
        /// How the response ended (`content_filter`, or the provider's own reason).
        reason: FinishReason,
        /// The text it gave instead of an answer, if any.
        text: String,
    },
    /// The last answer (after every repair) was not JSON matching the schema.
    Invalid {
        /// The model's last output, as it came.
        raw: String,
        /// What is wrong with it: a JSON syntax error, or one line per schema violation.
        violations: Vec<String>,
        /// How many model calls were made (the first one and the repairs).
        attempts: usize,
    },
    /// The answer matched the schema but not the Rust type it was read into (a schema that does not describe
    /// the type, such as a hand-written one).
    Type {
        /// The answer.
        raw: String,
        /// serde's message.
        message: String,
    },
    /// The schema could not be used (not a valid JSON Schema), or the call itself failed.
    Chat(ChatError),
}

impl StructuredError {
    /// The model's last output, where there was one.
    pub fn raw(&self) -> Option<&str> {
        match self {
            StructuredError::Refused { text, .. } => Some(text),
            StructuredError::Invalid { raw, .. } | StructuredError::Type { raw, .. } => Some(raw),
            StructuredError::Chat(_) => None,
        }
    }

    /// The violations of the last output (empty unless [`StructuredError::Invalid`]).
    pub fn violations(&self) -> &[String] {
        match self {
            StructuredError::Invalid { violations, .. } => violations,
            _ => &[],
        }
    }

    /// The structured error inside a [`ChatError`] from the [`StructuredOutputLayer`](crate::StructuredOutputLayer)
    /// (its source), if it is one.
    pub fn from_chat(error: &ChatError) -> Option<&StructuredError> {
        std::error::Error::source(error)?.downcast_ref()
    }

    /// This error as a [`ChatError`] (what the layer's stream yields): a refusal is
    /// [`ErrorKind::InvalidRequest`] (the request was declined), an answer that stays invalid
    /// [`ErrorKind::Protocol`] (the model did not produce the format asked for); the structured error is the
    /// source, see [`StructuredError::from_chat`].
    pub fn into_chat(self) -> ChatError {
        let kind = match &self {
            StructuredError::Chat(_) => {
                let StructuredError::Chat(error) = self else {
                    unreachable!()
                };
                return error;
            }
            StructuredError::Refused { .. } => ErrorKind::InvalidRequest,
            StructuredError::Invalid { .. } | StructuredError::Type { .. } => ErrorKind::Protocol,
        };
        ChatError::new(kind, self.to_string()).with_source(self)
    }
}

impl fmt::Display for StructuredError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StructuredError::Refused { reason, .. } => {
                write!(f, "the model declined to answer ({reason})")
            }
            StructuredError::Invalid {
                violations,
                attempts,
                ..
            } => write!(
                f,
                "no answer matched the schema after {attempts} attempt(s): {}",
                violations.join("; ")
            ),
            StructuredError::Type { message, .. } => {
                write!(f, "the answer does not fit the type: {message}")
            }
            StructuredError::Chat(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for StructuredError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StructuredError::Chat(error) => Some(error),
            _ => None,
        }
    }
}

impl From<ChatError> for StructuredError {
    fn from(error: ChatError) -> Self {
        // The layer's own errors come back as they were.
        match std::error::Error::source(&error).and_then(|s| s.downcast_ref::<StructuredError>()) {
            Some(StructuredError::Refused { reason, text }) => StructuredError::Refused {
                reason: reason.clone(),
                text: text.clone(),
            },
            Some(StructuredError::Invalid {
                raw,
                violations,
                attempts,
            }) => StructuredError::Invalid {
                raw: raw.clone(),
                violations: violations.clone(),
                attempts: *attempts,
            },
            _ => StructuredError::Chat(error),
        }
    }
}
