//! A text of the answer judged whole (moderation, a schema, a check of your own), once per call.
//!
//! A recorder inside the layer holds a text until it ends and has it judged before it lets the event that ended
//! it by (`PolicyScreens::judge_text`); the answer's guard reaches the same text only after that event, and
//! takes the judgement made for it ([`Judged::take`]) rather than asking the checks again, so an external
//! service is asked once, and the record and the client get the same decision. Without a recorder inside, the
//! guard finds none and judges the text itself.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tower_chat::{ChatError, GuardrailAction, GuardrailStage, GuardrailVerdict};

use crate::policy::{redact_findings, StagePolicy};

/// What the whole-text checks decided about one text.
#[derive(Debug)]
pub(crate) struct Judgement {
    /// Every verdict given, up to the block or the failure.
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    /// What goes on, or the check's error (the answer ends with it).
    pub(crate) decided: Result<Decided, ChatError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decided {
    /// The text goes on, redacted where a check redacted.
    Sent(String),
    /// A check blocked it: the answer ends with that check's notice.
    Blocked(Arc<str>),
}

impl Judgement {
    /// A copy for a recorder: a check's error keeps its kind and message only (a recorder keeps nothing of a
    /// text whose check failed; the guard, which answers with the error, takes the original).
    pub(crate) fn copy(&self) -> Judgement {
        Judgement {
            verdicts: self.verdicts.clone(),
            decided: match &self.decided {
                Ok(decided) => Ok(decided.clone()),
                Err(error) => Err(ChatError::new(error.kind().clone(), error.message())),
            },
        }
    }
}

/// Judge `text`, a complete text of the answer as the pattern checks let it through, with the output's
/// whole-text checks, in the policy's order: a redaction is what the next check sees, a block ends the judging.
pub(crate) async fn judge_segment(policy: &StagePolicy, mut text: String) -> Judgement {
    let mut verdicts = Vec::new();
    for rule in &policy.whole {
        let findings = match rule.check.check(text.clone(), GuardrailStage::Output).await {
            Ok(findings) => findings,
            Err(error) => {
                return Judgement {
                    verdicts,
                    decided: Err(error),
                }
            }
        };
        if findings.is_empty() {
            continue;
        }
        verdicts.extend(findings.iter().map(|finding| GuardrailVerdict {
            check: rule.name.to_string(),
            action: rule.action,
            stage: GuardrailStage::Output,
            location: "output".into(),
            span: finding.span,
            detail: finding.detail.clone(),
        }));
        match rule.action {
            GuardrailAction::Block => {
                return Judgement {
                    verdicts,
                    decided: Ok(Decided::Blocked(rule.name.clone())),
                }
            }
            GuardrailAction::Redact => text = redact_findings(&text, &rule.name, &findings),
            GuardrailAction::Flag => {}
        }
    }
    Judgement {
        verdicts,
        decided: Ok(Decided::Sent(text)),
    }
}

/// Judgements made inside for texts the guard has not reached yet, oldest first: the guard takes each as it
/// reaches its text, so normally one is held, and never more than [`KEPT`] (a layer between that dropped a text
/// leaves its judgement behind).
#[derive(Debug, Default)]
pub(crate) struct Judged(Mutex<VecDeque<(String, Judgement)>>);

const KEPT: usize = 4;

impl Judged {
    /// The judgement already made for `text` (a second recorder inside the first takes it too).
    pub(crate) fn find(&self, text: &str) -> Option<Judgement> {
        let judged = self.0.lock().expect("judged lock");
        judged
            .iter()
            .find(|(judged, _)| judged == text)
            .map(|(_, judgement)| judgement.copy())
    }

    pub(crate) fn keep(&self, text: String, judgement: Judgement) {
        let mut judged = self.0.lock().expect("judged lock");
        if judged.len() == KEPT {
            judged.pop_front();
        }
        judged.push_back((text, judgement));
    }

    /// The judgement made for `text`, for the guard: it and those before it (texts the guard never got) are
    /// forgotten.
    pub(crate) fn take(&self, text: &str) -> Option<Judgement> {
        let mut judged = self.0.lock().expect("judged lock");
        let at = judged.iter().position(|(judged, _)| judged == text)?;
        judged.drain(..at);
        judged.pop_front().map(|(_, judgement)| judgement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(text: &str) -> Judgement {
        Judgement {
            verdicts: Vec::new(),
            decided: Ok(Decided::Sent(text.into())),
        }
    }

    #[test]
    fn the_guard_takes_a_judgement_once_and_forgets_those_before_it() {
        let judged = Judged::default();
        judged.keep("one".into(), sent("one"));
        judged.keep("two".into(), sent("2"));
        assert!(judged.find("two").is_some());
        let taken = judged.take("two").unwrap();
        assert_eq!(taken.decided.unwrap(), Decided::Sent("2".into()));
        assert!(judged.take("two").is_none());
        assert!(judged.find("one").is_none(), "skipped by the guard");
        for n in 0..=KEPT {
            judged.keep(n.to_string(), sent(""));
        }
        assert!(judged.find("0").is_none(), "at most {KEPT} kept");
        assert!(judged.find(&KEPT.to_string()).is_some());
    }
}
