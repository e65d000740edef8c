//! How a call ended, in the words the call log and the timeline share: a refusal that never reached a provider
//! is not an upstream error, and an answer a content policy cut short is neither an error nor a cancellation.

use tower_chat_persistence::CallOutcome;

/// A call's outcome as the pages show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The `data-status` of its row: the stored status, or `refused` for a call refused before sending.
    pub(crate) status: &'static str,
    /// The outcome in words.
    pub(crate) text: String,
    /// Whether it is an error (shown as one, counted in the error charts).
    pub(crate) is_error: bool,
    /// Who answered: the upstream, or nobody (refused before sending).
    pub(crate) answered_by: &'static str,
}

/// The outcome of a call that ended `outcome`; `refused_before_sending` when a layer refused it before it
/// reached any provider (the record keeps its size instead of its request).
pub(crate) fn shown(outcome: &CallOutcome, refused_before_sending: bool) -> Shown {
    let status = outcome.as_str();
    match outcome {
        CallOutcome::Failed { error } if refused_before_sending => {
            let by = match error.kind.as_str() {
                "policy_blocked" => "refused by guardrail, not sent",
                "rate_limited" => "refused by limits, not sent",
                _ => "refused before sending",
            };
            Shown {
                status: "refused",
                text: format!("{by}: {}", error.message),
                is_error: false,
                answered_by: "nobody (not sent)",
            }
        }
        CallOutcome::Blocked => Shown {
            status,
            text: "blocked by guardrail (the rest of the answer was withheld)".into(),
            is_error: false,
            answered_by: "upstream",
        },
        _ => match outcome.error() {
            Some(error) => Shown {
                status,
                text: format!("Error: {status} ({}: {})", error.kind, error.message),
                is_error: true,
                answered_by: "upstream",
            },
            None => Shown {
                status,
                text: status.replace('_', " "),
                is_error: matches!(outcome, CallOutcome::Failed { .. }),
                answered_by: "upstream",
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat_persistence::RecordedError;

    fn failed(kind: &str) -> CallOutcome {
        CallOutcome::Failed {
            error: RecordedError {
                kind: kind.into(),
                message: "why".into(),
            },
        }
    }

    #[test]
    fn refusals_are_not_upstream_errors_and_blocks_are_not_cancellations() {
        let limits = shown(&failed("rate_limited"), true);
        assert_eq!(limits.text, "refused by limits, not sent: why");
        assert_eq!(
            (limits.status, limits.is_error, limits.answered_by),
            ("refused", false, "nobody (not sent)")
        );
        assert_eq!(
            shown(&failed("policy_blocked"), true).text,
            "refused by guardrail, not sent: why"
        );
        // The same kind from a provider is its error.
        let upstream = shown(&failed("rate_limited"), false);
        assert_eq!(
            (
                upstream.text.as_str(),
                upstream.is_error,
                upstream.answered_by
            ),
            ("Error: failed (rate_limited: why)", true, "upstream")
        );
        let blocked = shown(&CallOutcome::Blocked, false);
        assert_eq!((blocked.status, blocked.is_error), ("blocked", false));
        assert!(blocked.text.starts_with("blocked by guardrail"));
    }
}
