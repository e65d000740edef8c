//! [`PolicyScreens`]: the policy's scanned checks as [`CallScreens`], handed to the recorders inside the layer
//! (in a [`tower_chat::GuardedCall`]) so that they keep of an answer what the client was let see.
//!
//! They decide as the answer's guard does (`stream.rs`): invisible characters removed, the same scanner holding
//! back only what a match may still be completing, each text going on from the last bytes of the texts before
//! it in the call (so a key split by a tool call, or between two rounds of a tool loop, is found in the record
//! as it is for the client), a block ending the text with the same notice; tool calls' arguments and tool
//! results judged whole with the same pattern checks. A recorder sees each piece before the guard outside it,
//! and hands it here before keeping it, so a withheld span is never part of what it keeps. The output's
//! whole-text checks (moderation, a schema, a check of your own) judge each text once the recorder holds all of
//! it ([`CallScreens::judge_text`]); the guard takes that judgement for the same text (`segment.rs`). Tool calls
//! and results are screened with the pattern checks only: their whole-text checks may wait on a service, and
//! judging them here would ask it a second time.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use tower_chat::{
    AnswerScreen, CallScreens, GuardrailStage, JudgedText, JudgedToolCall, JudgedToolResult,
    Screened, ToolArguments, ToolCall, ToolMessage,
};

use crate::content::judge_parts;
use crate::invisible::strip;
use crate::json::judge_json;
use crate::policy::{judge, verdict_of_hit, Policy, StagePolicy};
use crate::scan::{Budget, Step, StreamScanner};
use crate::segment::{
    judge_call, judge_result, judge_segment, Decided, Judged, Judgement, Shared, ToolJudgement,
};

/// The screens of one call under a policy.
#[derive(Debug)]
pub(crate) struct PolicyScreens {
    policy: Arc<Policy>,
    /// The last bytes of the call's answer text so far, shared by its text screens (see
    /// `OutputGuard::keep_tail`).
    tail: Arc<Mutex<String>>,
    /// The longest match of an output check that may span texts: how much of the tail is kept.
    longest: usize,
    /// The scanned checks of the tool stages, without the whole-text ones (judging with these never waits).
    tool_call: StagePolicy,
    tool_result: StagePolicy,
    /// The latest whole-text judgements of the answer's texts, made for a recorder, read by the guard and by
    /// the recorders of later rounds.
    judged: Arc<Judged<String, Judgement>>,
    /// The same for tool calls and results, when their stages have whole-text checks.
    calls: Arc<Judged<ToolCall, ToolJudgement<ToolCall>>>,
    results: Arc<Judged<ToolMessage, ToolJudgement<ToolMessage>>>,
}

impl PolicyScreens {
    /// The screens of one call under `policy`, when it has checks a recorder can apply.
    pub(crate) fn of(policy: &Arc<Policy>) -> Option<Arc<Self>> {
        let scanned = |stage: &StagePolicy| StagePolicy {
            scan: stage.scan.clone(),
            whole: Vec::new(),
        };
        let screens = PolicyScreens {
            policy: policy.clone(),
            tail: Arc::default(),
            longest: policy
                .output
                .scan
                .iter()
                .flat_map(|rule| rule.finders.iter())
                .filter(|finder| finder.spans_segments())
                .map(|finder| finder.max_len())
                .max()
                .unwrap_or(0),
            tool_call: scanned(&policy.tool_call),
            tool_result: scanned(&policy.tool_result),
            judged: Arc::default(),
            calls: Arc::default(),
            results: Arc::default(),
        };
        if policy.output.is_empty() && policy.tool_call.is_empty() && policy.tool_result.is_empty()
        {
            return None;
        }
        Some(Arc::new(screens))
    }

    /// The judgement a recorder had made for the answer text `text`, for the guard (see `segment.rs`). Kept after
    /// the guard reads it: a later round's request carries the text again.
    pub(crate) fn judged_text(&self, text: &str) -> Option<Judgement> {
        self.judged.find(text)
    }

    /// The judgement made for the tool call `call`, by a recorder or the guard. Kept after the guard reads it:
    /// the next round's request carries the call, and its recorder keeps it as the client was sent it.
    pub(crate) fn judged_tool_call(&self, call: &ToolCall) -> Option<ToolJudgement<ToolCall>> {
        self.calls.find(call)
    }

    /// Keep the guard's judgement of `call` for the recorders of the rounds after it.
    pub(crate) fn keep_tool_call(&self, call: ToolCall, judgement: &ToolJudgement<ToolCall>) {
        self.calls.keep(call, judgement.copy());
    }

    /// The judgement made for the tool result `result`, as for a call.
    pub(crate) fn judged_tool_result(
        &self,
        result: &ToolMessage,
    ) -> Option<ToolJudgement<ToolMessage>> {
        self.results.find(result)
    }

    /// Keep the guard's judgement of `result` (a tool loop inside this layer and outside the recorders ran the
    /// tool: the next round's request carries the result, and its recorder keeps it as the client saw it).
    pub(crate) fn keep_tool_result(
        &self,
        result: ToolMessage,
        judgement: &ToolJudgement<ToolMessage>,
    ) {
        self.results.keep(result, judgement.copy());
    }

    fn budget(&self) -> Budget {
        Budget::new(self.policy.max_candidates)
    }

    /// A block's notice, as the guard ends the answer with it after a tool call or result.
    fn blocked(&self, verdicts: Vec<tower_chat::GuardrailVerdict>, check: &str) -> Screened {
        Screened {
            text: self.policy.block_notice(check),
            verdicts,
            withheld: Some(check.to_owned()),
        }
    }
}

impl CallScreens for PolicyScreens {
    fn text(&self) -> Box<dyn AnswerScreen> {
        let tail = self.tail.lock().expect("tail lock").clone();
        Box::new(PolicyScreen {
            scanner: StreamScanner::continuing(
                self.policy.output.scan.clone(),
                &tail,
                self.budget(),
            ),
            carried: tail.len(),
            tail: (self.longest > 0).then(|| (self.tail.clone(), self.longest)),
            policy: self.policy.clone(),
            sent: false,
            withheld: false,
        })
    }

    fn reasoning(&self) -> Box<dyn AnswerScreen> {
        Box::new(PolicyScreen {
            scanner: StreamScanner::new(self.policy.output.scan.clone(), self.budget()),
            carried: 0,
            tail: None,
            policy: self.policy.clone(),
            sent: false,
            withheld: false,
        })
    }

    fn tool_call(&self, call: &mut ToolCall) -> Screened {
        if !self.policy.tool_call.whole.is_empty() {
            if let Some(judgement) = self.calls.find(call) {
                let (sent, screened) = screened_tool(&self.policy, judgement);
                if let Some(sent) = sent {
                    *call = sent;
                }
                return screened;
            }
        }
        if self.tool_call.is_empty() {
            return Screened::default();
        }
        let location = format!("tool_call:{}", call.id);
        let stage = GuardrailStage::ToolCall;
        let mut budget = self.budget();
        let judged = match &mut call.arguments {
            ToolArguments::Json(value) => {
                judge_json(&self.tool_call, stage, &location, value, false, &mut budget)
                    .now_or_never()
                    .and_then(Result::ok)
                    .map(|judged| {
                        if let (None, Some(redacted)) = (&judged.block, judged.redacted) {
                            *value = redacted;
                        }
                        (judged.verdicts, judged.block)
                    })
            }
            ToolArguments::Invalid { raw, .. } => {
                judge(&self.tool_call, stage, &location, raw, false, &mut budget)
                    .now_or_never()
                    .and_then(Result::ok)
                    .map(|judged| {
                        if let (None, Some(redacted)) = (&judged.block, judged.redacted) {
                            *raw = redacted;
                        }
                        (judged.verdicts, judged.block)
                    })
            }
        };
        self.decided(judged)
    }

    fn tool_result(&self, result: &mut ToolMessage) -> Screened {
        if !self.policy.tool_result.whole.is_empty() {
            if let Some(judgement) = self.results.find(result) {
                let (sent, screened) = screened_tool(&self.policy, judgement);
                if let Some(sent) = sent {
                    *result = sent;
                }
                return screened;
            }
        }
        if self.tool_result.is_empty() {
            return Screened::default();
        }
        let location = format!("tool_result:{}", result.call_id);
        let stage = GuardrailStage::ToolResult;
        let mut budget = self.budget();
        let judged = judge_parts(
            &self.tool_result,
            stage,
            &location,
            result.content.parts(),
            false,
            &mut budget,
        )
        .now_or_never()
        .and_then(Result::ok)
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
        self.decided(judged)
    }

    fn judges_text_whole(&self) -> bool {
        !self.policy.output.whole.is_empty()
    }

    fn judge_text(&self, text: String) -> JudgedText {
        let policy = self.policy.clone();
        if let Some(judgement) = self.judged.find(&text) {
            return Box::pin(std::future::ready(screened_whole(&policy, judgement)));
        }
        let judged = self.judged.clone();
        Box::pin(async move {
            let judgement = judge_segment(&policy.output, text.clone()).await;
            let kept = judgement.copy();
            judged.keep(text, judgement);
            screened_whole(&policy, kept)
        })
    }

    fn judged_text(&self, text: &str) -> Option<Screened> {
        let judgement = self.judged.find(text)?;
        Some(screened_whole(&self.policy, judgement))
    }

    fn judge_tool_call(&self, call: &ToolCall) -> Option<JudgedToolCall> {
        if self.policy.tool_call.whole.is_empty() {
            return None;
        }
        let policy = self.policy.clone();
        if let Some(judgement) = self.calls.find(call) {
            return Some(Box::pin(std::future::ready(screened_tool(
                &policy, judgement,
            ))));
        }
        let (calls, given, mut budget) = (self.calls.clone(), call.clone(), self.budget());
        Some(Box::pin(async move {
            let judgement = judge_call(&policy.tool_call, given.clone(), &mut budget).await;
            let kept = judgement.copy();
            calls.keep(given, judgement);
            screened_tool(&policy, kept)
        }))
    }

    fn judge_tool_result(&self, result: &ToolMessage) -> Option<JudgedToolResult> {
        if self.policy.tool_result.whole.is_empty() {
            return None;
        }
        let policy = self.policy.clone();
        if let Some(judgement) = self.results.find(result) {
            return Some(Box::pin(std::future::ready(screened_tool(
                &policy, judgement,
            ))));
        }
        let (results, given, mut budget) = (self.results.clone(), result.clone(), self.budget());
        Some(Box::pin(async move {
            let judgement = judge_result(&policy.tool_result, given.clone(), &mut budget).await;
            let kept = judgement.copy();
            results.keep(given, judgement);
            screened_tool(&policy, kept)
        }))
    }
}

/// What a recorder keeps of a tool call or result judged whole: the item as it goes on, or none (the notice when
/// a check blocked it, nothing when one failed).
fn screened_tool<T>(policy: &Policy, judgement: ToolJudgement<T>) -> (Option<T>, Screened) {
    let verdicts = judgement.verdicts;
    match judgement.decided {
        Ok(Ok(item)) => (
            Some(item),
            Screened {
                verdicts,
                ..Screened::default()
            },
        ),
        Ok(Err(block)) => (
            None,
            Screened {
                text: policy.block_notice(&block.check),
                verdicts,
                withheld: Some(block.check),
            },
        ),
        Err(_) => (
            None,
            Screened {
                verdicts,
                ..Screened::default()
            },
        ),
    }
}

/// What a recorder keeps of a text judged whole: the text as it goes on, or the notice alone (the guard holds the
/// whole text back until it is judged, so none of it went out before the notice); nothing when a check failed.
fn screened_whole(policy: &Policy, judgement: Judgement) -> Screened {
    let verdicts = judgement.verdicts;
    match judgement.decided {
        Ok(Decided::Sent(text)) => Screened {
            text,
            verdicts,
            withheld: None,
        },
        Ok(Decided::Blocked(check)) => Screened {
            text: policy.block_notice(&check),
            verdicts,
            withheld: Some(check.to_string()),
        },
        Err(_) => Screened {
            verdicts,
            ..Screened::default()
        },
    }
}

impl PolicyScreens {
    /// What judging a tool call or result decided. Pattern checks neither wait nor fail; were one ever to, the
    /// part is kept out of the record as withheld rather than kept as it came.
    fn decided(
        &self,
        judged: Option<(
            Vec<tower_chat::GuardrailVerdict>,
            Option<tower_chat::GuardrailVerdict>,
        )>,
    ) -> Screened {
        match judged {
            Some((verdicts, None)) => Screened {
                verdicts,
                ..Screened::default()
            },
            // The block is among the verdicts already.
            Some((verdicts, Some(block))) => self.blocked(verdicts, &block.check),
            None => self.blocked(Vec::new(), "guardrail"),
        }
    }
}

/// One text of an answer under the policy's scanned output checks.
#[derive(Debug)]
struct PolicyScreen {
    policy: Arc<Policy>,
    scanner: StreamScanner,
    /// Bytes of the texts before this one its scanner started from: hit offsets count from their start.
    carried: usize,
    /// The call's shared tail and how long it is kept, for an answer text (a reasoning block keeps none).
    tail: Option<(Arc<Mutex<String>>, usize)>,
    /// Whether any text was let through: a block notice after text starts on a new paragraph, as the guard's.
    sent: bool,
    withheld: bool,
}

impl PolicyScreen {
    fn screened(&mut self, step: Step) -> Screened {
        let carried = self.carried;
        let verdicts = step
            .hits
            .iter()
            .map(|hit| {
                let mut verdict = verdict_of_hit(hit, GuardrailStage::Output, "output", 0);
                if let Some(span) = &mut verdict.span {
                    span.start = span.start.saturating_sub(carried);
                    span.end = span.end.saturating_sub(carried);
                }
                verdict
            })
            .collect();
        let mut text = step.text;
        let withheld = step.block.map(|block| {
            self.withheld = true;
            let notice = self.policy.block_notice(&block.name);
            if self.sent || !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&notice);
            block.name.to_string()
        });
        self.sent |= !text.is_empty();
        Screened {
            text,
            verdicts,
            withheld,
        }
    }

    /// Keep the last bytes of the call's text for the texts after this one.
    fn keep_tail(&self, text: &str) {
        let Some((tail, longest)) = &self.tail else {
            return;
        };
        let mut tail = tail.lock().expect("tail lock");
        tail.push_str(text);
        if tail.len() > *longest {
            let mut cut = tail.len() - longest;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail.drain(..cut);
        }
    }
}

impl AnswerScreen for PolicyScreen {
    fn push(&mut self, piece: &str) -> Screened {
        if self.withheld {
            return Screened::default();
        }
        // As the guard: invisible characters are removed only when the answer is checked.
        let piece = if self.policy.output.scan.is_empty() {
            std::borrow::Cow::Borrowed(piece)
        } else {
            strip(piece)
        };
        self.keep_tail(&piece);
        let step = self.scanner.push(&piece);
        self.screened(step)
    }

    fn finish(&mut self) -> Screened {
        if self.withheld {
            return Screened::default();
        }
        let step = self.scanner.finish();
        self.screened(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Check;
    use crate::policy::DEFAULT_MAX_CANDIDATES;

    fn policy() -> Arc<Policy> {
        Arc::new(Policy::new(
            vec![Check::secrets(), Check::personal_data()],
            "[withheld: {check}]".into(),
            DEFAULT_MAX_CANDIDATES,
        ))
    }

    fn run(pieces: &[&str], finish: bool) -> (String, Vec<String>, Option<String>) {
        let mut screen = PolicyScreens::of(&policy()).unwrap().text();
        let mut all = Screened::default();
        let mut steps: Vec<_> = pieces.iter().map(|piece| screen.push(piece)).collect();
        if finish {
            steps.push(screen.finish());
        }
        for step in steps {
            all.text.push_str(&step.text);
            all.verdicts.extend(step.verdicts);
            all.withheld = all.withheld.or(step.withheld);
        }
        let details = all
            .verdicts
            .iter()
            .map(|v| format!("{}:{}", v.action, v.detail.as_deref().unwrap_or("")))
            .collect();
        (all.text, details, all.withheld)
    }

    #[test]
    fn a_redaction_is_kept_redacted_and_a_block_keeps_only_the_text_before_it() {
        let (text, verdicts, withheld) = run(&["mail ann@exam", "ple.net now"], true);
        assert_eq!(text, "mail [REDACTED:email] now");
        assert_eq!(verdicts, ["redact:email"]);
        assert_eq!(withheld, None);

        let (text, verdicts, withheld) =
            run(&["the key is AKIAIOSF", "ODNN7EXAMPLE and more"], true);
        assert_eq!(text, "the key is \n\n[withheld: secrets]");
        assert_eq!(verdicts, ["block:aws_access_key"]);
        assert_eq!(withheld.as_deref(), Some("secrets"));
    }

    #[test]
    fn what_is_held_back_when_the_text_is_cut_is_not_let_through() {
        // The client's stream was dropped here: the start of a key it never saw is not kept either.
        let (text, _, withheld) = run(&["the key is AKIAIOSF"], false);
        assert!(!text.contains("AKIA"), "{text}");
        assert_eq!(withheld, None);
    }
}
