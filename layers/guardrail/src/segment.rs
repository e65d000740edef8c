//! A text of the answer judged whole (moderation, a schema, a check of your own), once per call; and a tool
//! call or result judged with its stage's whole-text checks, likewise.
//!
//! A recorder inside the layer holds a text until it ends and has it judged before it lets the event that ended
//! it by (`PolicyScreens::judge_text`); the answer's guard reaches the same text only after that event, and
//! takes the judgement made for it ([`Judged::find`]) rather than asking the checks again, so an external
//! service is asked once, and the record and the client get the same decision. Without a recorder inside, the
//! guard finds none and judges the text itself. A tool call or result is judged the same way, by the recorder
//! that holds it complete, or by the guard.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tower_chat::{
    ChatError, GuardrailAction, GuardrailStage, GuardrailVerdict, ToolArguments, ToolCall,
    ToolMessage,
};

use crate::content::judge_parts;
use crate::json::judge_json;
use crate::policy::{judge, redact_findings, StagePolicy};
use crate::scan::Budget;

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

/// A judgement the recorders and the guard share, each reading a copy.
pub(crate) trait Shared {
    fn copy(&self) -> Self;
}

impl Shared for Judgement {
    /// A check's error keeps its kind and message (what the guard answers with; a recorder keeps nothing of a
    /// text whose check failed).
    fn copy(&self) -> Self {
        Judgement {
            verdicts: self.verdicts.clone(),
            decided: match &self.decided {
                Ok(decided) => Ok(decided.clone()),
                Err(error) => Err(copy_error(error)),
            },
        }
    }
}

impl<T: Clone> Shared for ToolJudgement<T> {
    fn copy(&self) -> Self {
        ToolJudgement {
            verdicts: self.verdicts.clone(),
            decided: match &self.decided {
                Ok(decided) => Ok(decided.clone()),
                Err(error) => Err(copy_error(error)),
            },
        }
    }
}

fn copy_error(error: &ChatError) -> ChatError {
    let copy = ChatError::new(error.kind().clone(), error.message());
    match error.status() {
        Some(status) => copy.with_status(status),
        None => copy,
    }
}

/// The latest judgements of texts (or tool calls, or results), oldest first, at most [`KEPT`]: the guard reads
/// the one a recorder made before it reaches the same item, and the recorder of a later round of a tool loop
/// the ones of the items its request carries again.
#[derive(Debug)]
pub(crate) struct Judged<K, V>(Mutex<VecDeque<(K, V)>>);

impl<K, V> Default for Judged<K, V> {
    fn default() -> Self {
        Judged(Mutex::new(VecDeque::new()))
    }
}

const KEPT: usize = 4;

impl<K, V: Shared> Judged<K, V> {
    /// The judgement already made for `item`.
    pub(crate) fn find<Q: ?Sized>(&self, item: &Q) -> Option<V>
    where
        K: PartialEq<Q>,
    {
        let judged = self.0.lock().expect("judged lock");
        judged
            .iter()
            .find(|(judged, _)| judged == item)
            .map(|(_, judgement)| judgement.copy())
    }

    pub(crate) fn keep(&self, item: K, judgement: V) {
        let mut judged = self.0.lock().expect("judged lock");
        if judged.len() == KEPT {
            judged.pop_front();
        }
        judged.push_back((item, judgement));
    }
}

/// What every check of a tool stage decided about one complete tool call or result.
#[derive(Debug)]
pub(crate) struct ToolJudgement<T> {
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    /// The item as it goes on (redacted where a check redacted), the verdict that blocked it, or the check's
    /// error.
    pub(crate) decided: Result<Result<T, GuardrailVerdict>, ChatError>,
}

impl<T> ToolJudgement<T> {
    fn of(
        item: T,
        judged: Result<(Vec<GuardrailVerdict>, Option<GuardrailVerdict>), ChatError>,
    ) -> Self {
        match judged {
            Ok((verdicts, None)) => ToolJudgement {
                verdicts,
                decided: Ok(Ok(item)),
            },
            Ok((verdicts, Some(block))) => ToolJudgement {
                verdicts,
                decided: Ok(Err(block)),
            },
            Err(error) => ToolJudgement {
                verdicts: Vec::new(),
                decided: Err(error),
            },
        }
    }
}

/// Judge a complete tool call's arguments (each string of its JSON, or its raw text when it is not JSON) with
/// every check of the tool-call stage.
pub(crate) async fn judge_call(
    policy: &StagePolicy,
    mut call: ToolCall,
    budget: &mut Budget,
) -> ToolJudgement<ToolCall> {
    let location = format!("tool_call:{}", call.id);
    let stage = GuardrailStage::ToolCall;
    let judged = match &mut call.arguments {
        ToolArguments::Json(value) => judge_json(policy, stage, &location, value, true, budget)
            .await
            .map(|judged| {
                if let (None, Some(redacted)) = (&judged.block, judged.redacted) {
                    *value = redacted;
                }
                (judged.verdicts, judged.block)
            }),
        ToolArguments::Invalid { raw, .. } => judge(policy, stage, &location, raw, true, budget)
            .await
            .map(|judged| {
                if let (None, Some(redacted)) = (&judged.block, judged.redacted) {
                    *raw = redacted;
                }
                (judged.verdicts, judged.block)
            }),
    };
    ToolJudgement::of(call, judged)
}

/// Judge a tool result's content with every check of the tool-result stage.
pub(crate) async fn judge_result(
    policy: &StagePolicy,
    mut result: ToolMessage,
    budget: &mut Budget,
) -> ToolJudgement<ToolMessage> {
    let location = format!("tool_result:{}", result.call_id);
    let stage = GuardrailStage::ToolResult;
    let judged = judge_parts(
        policy,
        stage,
        &location,
        result.content.parts(),
        true,
        budget,
    )
    .await
    .map(|judged| {
        if judged.block.is_none() {
            for (index, part) in judged.changed {
                if let Some(slot) = result.content.parts_mut().get_mut(index) {
                    *slot = part;
                }
            }
        }
        (judged.verdicts, judged.block)
    });
    ToolJudgement::of(result, judged)
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
    fn the_latest_judgements_are_kept() {
        let judged = Judged::<String, Judgement>::default();
        judged.keep("one".into(), sent("1"));
        assert_eq!(
            judged.find("one").unwrap().decided.unwrap(),
            Decided::Sent("1".into())
        );
        assert!(judged.find("one").is_some(), "kept after it was read");
        assert!(judged.find("two").is_none());
        for n in 0..KEPT {
            judged.keep(n.to_string(), sent(""));
        }
        assert!(judged.find("one").is_none(), "at most {KEPT} kept");
        assert!(judged.find("0").is_some());
    }
}
