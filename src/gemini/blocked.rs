//! A prompt Gemini refused to answer (`promptFeedback.blockReason`, in an HTTP 200 response without
//! candidates) as a typed error detail.

use std::fmt;

use serde_json::Value;

use crate::error::{ChatError, ErrorKind};

/// One safety rating of a refused prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetyRating {
    /// The harm category (`HARM_CATEGORY_HARASSMENT`, …).
    pub category: String,
    /// How likely the harm is (`NEGLIGIBLE`, `LOW`, `MEDIUM`, `HIGH`).
    pub probability: Option<String>,
    /// Whether this rating blocked the prompt.
    pub blocked: bool,
}

/// Why Gemini refused a prompt: the source of the [`ChatError`] (of kind
/// [`ErrorKind::InvalidRequest`]: the same prompt is refused again). Find it with [`PromptBlocked::of`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptBlocked {
    /// The `blockReason` (`SAFETY`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `IMAGE_SAFETY`, `OTHER`, …).
    pub reason: String,
    /// Gemini's explanation, where it gave one (`blockReasonMessage`, Vertex AI).
    pub message: Option<String>,
    /// The prompt's safety ratings.
    pub safety_ratings: Vec<SafetyRating>,
}

impl PromptBlocked {
    /// The refusal detail of `error`, if a blocked prompt caused it.
    pub fn of(error: &ChatError) -> Option<&PromptBlocked> {
        std::error::Error::source(error)?.downcast_ref()
    }

    /// The refusal in a `promptFeedback` object, if it names a `blockReason`.
    pub(crate) fn from_feedback(feedback: &Value) -> Option<Self> {
        let reason = feedback.get("blockReason")?.as_str()?.to_owned();
        let safety_ratings = feedback
            .get("safetyRatings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|rating| {
                Some(SafetyRating {
                    category: rating.get("category")?.as_str()?.to_owned(),
                    probability: rating
                        .get("probability")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    blocked: rating
                        .get("blocked")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
            })
            .collect();
        Some(PromptBlocked {
            reason,
            message: feedback
                .get("blockReasonMessage")
                .and_then(Value::as_str)
                .map(str::to_owned),
            safety_ratings,
        })
    }

    pub(crate) fn into_error(self) -> ChatError {
        ChatError::new(ErrorKind::InvalidRequest, self.to_string()).with_source(self)
    }
}

impl fmt::Display for PromptBlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gemini blocked the prompt ({})", self.reason)?;
        if let Some(message) = &self.message {
            write!(f, ": {message}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PromptBlocked {}
