//! The answer's event stream under the policy: text deltas scanned as they come (held back only as much as a
//! pattern may still need), tool calls and tool results judged whole, a block turned into a clean end.
//!
//! ```text
//!            TextDelta ──► scanner ──► decided text (redacted) ──► out
//!                             │ block decided
//!                             ▼
//!        text before the match, notice, Finish(ContentFilter) ──► out, inner stream dropped
//!
//!   any other event ──► the text segment ends: the rest of the text decided (and, with whole-text checks,
//!                       judged whole) ──► out, then the event (a tool call or result judged first)
//! ```
//!
//! Reasoning is model output too: with scanned output checks (patterns, deny-lists, personal data, secrets), a
//! reasoning block's deltas are held until the block ends and scanned whole (location `reasoning`). A block stops the answer as for text; a redaction sends the block's
//! redacted text without its `ReasoningEnd`, since the provider's signature or encrypted item no longer matches
//! the text (the next turn goes without that block rather than with one its provider would refuse).
//!
//! Text offsets in verdicts count bytes of the model's answer text over the whole stream (every text delta,
//! before redaction, zero-width characters removed). Each new text segment (the next round behind a tool loop)
//! is scanned from the last bytes of the one before, so a match split by a tool call is still found. With whole-text checks on the output, a segment's text is held until the segment ends.
//! While tool calls are checked, their argument fragments are held back and sent as one fragment (redacted)
//! right before the complete call. A text, tool call or result a recorder inside already had judged whole is
//! not judged again: the guard takes that judgement (`segment.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::StreamExt;
use tower_chat::{
    ChatError, ChatEvent, ChatStream, Continuation, FinishReason, GuardrailAudit, GuardrailStage,
    GuardrailVerdict, ToolCall, ToolMessage,
};

use crate::invisible::strip;
use crate::policy::{blocked, judge, record, verdict_of_hit, Budgets, Policy, StagePolicy};
use crate::scan::{Step, StreamScanner, OVER_BUDGET};
use crate::screen::PolicyScreens;
use crate::segment::{judge_call, judge_result, judge_segment, Decided, ToolJudgement};

/// The state of a guarded answer.
pub(crate) struct OutputGuard {
    inner: Option<ChatStream>,
    policy: Arc<Policy>,
    audit: Option<GuardrailAudit>,
    /// The call's screens, which hold the judgements recorders inside made of texts, tool calls and results
    /// judged whole (see `segment.rs`).
    screens: Option<Arc<PolicyScreens>>,
    /// The current text segment's scanner.
    scanner: StreamScanner,
    /// Output offset of the current segment's first byte.
    segment_base: usize,
    /// Bytes of the current segment received.
    segment_len: usize,
    /// Whether any text of the current segment went out.
    segment_sent: bool,
    /// The last bytes of the answer's text so far (up to the longest match of an output check): the next
    /// segment's scanner starts from them, so a match split by a tool call between two rounds is found.
    tail: String,
    /// Bytes of `tail` the current segment's scanner started from.
    carried: usize,
    /// The work budgets of this answer.
    budgets: Budgets,
    /// Decided text held for the whole-text checks (only when the output has some).
    held: String,
    /// The current reasoning block's text, held until the block ends (only when the output has checks).
    reasoning: String,
    out: VecDeque<Result<ChatEvent, ChatError>>,
    /// The answer ended (a block, an error, the inner stream's end): nothing more is read.
    done: bool,
}

impl OutputGuard {
    pub(crate) fn new(
        inner: ChatStream,
        policy: Arc<Policy>,
        audit: Option<GuardrailAudit>,
        screens: Option<Arc<PolicyScreens>>,
    ) -> Self {
        let mut budgets = Budgets::new(&policy);
        OutputGuard {
            scanner: StreamScanner::new(
                policy.output.scan.clone(),
                std::mem::take(&mut budgets.output),
            ),
            inner: Some(inner),
            policy,
            audit,
            screens,
            segment_base: 0,
            segment_len: 0,
            segment_sent: false,
            tail: String::new(),
            carried: 0,
            budgets,
            held: String::new(),
            reasoning: String::new(),
            out: VecDeque::new(),
            done: false,
        }
    }

    /// The guarded answer as a stream.
    pub(crate) fn into_stream(self) -> ChatStream {
        Box::pin(futures_util::stream::unfold(self, |mut guard| async move {
            guard.next().await.map(|item| (item, guard))
        }))
    }

    async fn next(&mut self) -> Option<Result<ChatEvent, ChatError>> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let inner = self.inner.as_mut()?;
            let event = inner.next().await;
            let checks_reasoning = !self.policy.output.scan.is_empty();
            match &event {
                Some(Ok(ChatEvent::ReasoningDelta { .. } | ChatEvent::ReasoningEnd { .. }))
                    if checks_reasoning => {}
                _ => self.end_reasoning(None).await,
            }
            match event {
                Some(Ok(ChatEvent::ReasoningDelta { text })) if checks_reasoning => {
                    // A text judged whole ends at any other event, as a recorder inside ends it.
                    self.end_whole_segment().await;
                    self.reasoning.push_str(&text);
                }
                Some(Ok(ChatEvent::ReasoningEnd { continuation })) if checks_reasoning => {
                    self.end_whole_segment().await;
                    self.end_reasoning(Some(continuation)).await;
                }
                None => {
                    self.end_segment().await;
                    self.stop();
                }
                Some(Err(error)) => {
                    self.end_segment().await;
                    if !self.done {
                        self.out.push_back(Err(error));
                    }
                    self.stop();
                }
                Some(Ok(ChatEvent::TextDelta { text })) => self.on_text(&text),
                // A value of the answer so far repeats text this guard may still redact, hold back or block:
                // passing it on would show what the guard withholds, so with output checks it stops here.
                Some(Ok(ChatEvent::PartialAnswer { .. })) if !self.policy.output.is_empty() => {}
                Some(Ok(ChatEvent::ToolCallDelta { .. })) if !self.policy.tool_call.is_empty() => {}
                Some(Ok(ChatEvent::ToolCallEnd { index, call })) => {
                    self.end_segment().await;
                    self.on_tool_call(index, call).await;
                }
                Some(Ok(ChatEvent::ToolResult { result })) => {
                    self.end_segment().await;
                    self.on_tool_result(result).await;
                }
                Some(Ok(event)) => {
                    self.end_segment().await;
                    if !self.done {
                        self.out.push_back(Ok(event));
                    }
                }
            }
        }
    }

    /// The reasoning block ended (with its provider's continuation, when it came): judge it whole and send it on.
    async fn end_reasoning(&mut self, continuation: Option<Continuation>) {
        if self.done {
            return;
        }
        let text = std::mem::take(&mut self.reasoning);
        let judged = if text.is_empty() {
            Some(None)
        } else {
            // The scanned checks only: whole-text ones (a length, an answer's schema, moderation) are about the
            // answer, not the reasoning before it.
            self.judge_with(GuardrailStage::Output, "reasoning", &text, false)
                .await
        };
        match judged {
            // Blocked or failed: the answer has ended.
            None => {}
            Some(Some(redacted)) => {
                self.out
                    .push_back(Ok(ChatEvent::ReasoningDelta { text: redacted }));
            }
            Some(None) => {
                if !text.is_empty() {
                    self.out.push_back(Ok(ChatEvent::ReasoningDelta { text }));
                }
                if let Some(continuation) = continuation {
                    self.out
                        .push_back(Ok(ChatEvent::ReasoningEnd { continuation }));
                }
            }
        }
    }

    /// Stop reading: the inner stream is dropped, which closes its connection.
    fn stop(&mut self) {
        self.done = true;
        self.inner = None;
    }

    fn on_text(&mut self, text: &str) {
        if self.done {
            return;
        }
        // Invisible characters would split a match; with output checks the answer goes on without them.
        let text = if self.policy.output.scan.is_empty() {
            std::borrow::Cow::Borrowed(text)
        } else {
            strip(text)
        };
        self.segment_len += text.len();
        self.keep_tail(&text);
        let step = self.scanner.push(&text);
        self.take_step(step);
    }

    /// Keep the last bytes of the text for the next segment: as many as the longest match of an output check.
    fn keep_tail(&mut self, text: &str) {
        let longest = self
            .policy
            .output
            .scan
            .iter()
            .flat_map(|rule| rule.finders.iter())
            .filter(|finder| finder.spans_segments())
            .map(|finder| finder.max_len())
            .max()
            .unwrap_or(0);
        if longest == 0 {
            return;
        }
        self.tail.push_str(text);
        if self.tail.len() > longest {
            let mut cut = self.tail.len() - longest;
            while !self.tail.is_char_boundary(cut) {
                cut += 1;
            }
            self.tail.drain(..cut);
        }
    }

    /// Send on what the scanner decided (or hold it for the whole-text checks); end the answer on a block.
    fn take_step(&mut self, step: Step) {
        let verdicts: Vec<GuardrailVerdict> = step
            .hits
            .iter()
            .map(|hit| {
                // Offsets count from the carried text, which ends where this segment begins.
                let mut verdict =
                    verdict_of_hit(hit, GuardrailStage::Output, "output", self.segment_base);
                if let Some(span) = &mut verdict.span {
                    span.start = span.start.saturating_sub(self.carried);
                    span.end = span.end.saturating_sub(self.carried);
                }
                verdict
            })
            .collect();
        record(self.audit.as_ref(), &verdicts);
        if self.policy.output.whole.is_empty() {
            self.send_text(step.text);
        } else {
            self.held.push_str(&step.text);
            if step.block.is_some() {
                let held = std::mem::take(&mut self.held);
                self.send_text(held);
            }
        }
        if let Some(block) = step.block {
            self.end_blocked(&block.name, block.kind);
        }
    }

    fn send_text(&mut self, text: String) {
        if !text.is_empty() {
            self.segment_sent = true;
            self.out.push_back(Ok(ChatEvent::TextDelta { text }));
        }
    }

    /// End the answer for a block: the notice as text, then a `content_filter` finish. A check out of its work
    /// budget (`detail` [`OVER_BUDGET`]) logs why, since the notice reads like any other block.
    fn end_blocked(&mut self, check: &str, detail: &str) {
        if detail == OVER_BUDGET {
            let verdict = tower_chat::GuardrailVerdict {
                check: check.to_owned(),
                action: tower_chat::GuardrailAction::Block,
                stage: GuardrailStage::Output,
                location: "output".into(),
                span: None,
                detail: Some(OVER_BUDGET.into()),
            };
            tracing::warn!(
                target: "tower_chat_guardrail",
                error = %blocked(&verdict, self.policy.max_candidates),
                "answer ended: a check ran out of its work budget"
            );
        }
        let notice = self.policy.block_notice(check);
        let text = if self.segment_sent {
            format!("\n\n{notice}")
        } else {
            notice
        };
        self.out.push_back(Ok(ChatEvent::TextDelta { text }));
        self.out
            .push_back(Ok(ChatEvent::finish(FinishReason::ContentFilter)));
        self.stop();
    }

    /// A reasoning event ends the text segment when the output has whole-text checks (a recorder inside ends its
    /// text there too, and the text must be the same for both to share one judgement); with pattern checks only,
    /// the segment goes on across it.
    async fn end_whole_segment(&mut self) {
        if !self.policy.output.whole.is_empty() {
            self.end_segment().await;
        }
    }

    /// The text segment is complete: decide the rest of it, and judge it whole if the output has such checks.
    async fn end_segment(&mut self) {
        if self.done || self.segment_len == 0 {
            return;
        }
        let step = self.scanner.finish();
        self.take_step(step);
        if !self.done && !self.policy.output.whole.is_empty() {
            let held = std::mem::take(&mut self.held);
            // A recorder inside judged this text before it let the event that ended it by.
            let judgement = match self.screens.as_ref().and_then(|s| s.judged_text(&held)) {
                Some(judgement) => judgement,
                None => judge_segment(&self.policy.output, held).await,
            };
            record(self.audit.as_ref(), &judgement.verdicts);
            match judgement.decided {
                Ok(Decided::Sent(text)) => self.send_text(text),
                Ok(Decided::Blocked(check)) => {
                    self.end_blocked(&check, "");
                    return;
                }
                Err(error) => {
                    self.out.push_back(Err(error));
                    self.stop();
                    return;
                }
            }
        }
        self.segment_base += self.segment_len;
        self.segment_len = 0;
        self.segment_sent = false;
        let budget = self.scanner.take_budget();
        self.carried = self.tail.len();
        self.scanner =
            StreamScanner::continuing(self.policy.output.scan.clone(), &self.tail, budget);
    }

    /// Judge a complete tool call's arguments (each string of its JSON, or its raw text when it is not JSON).
    async fn on_tool_call(&mut self, index: usize, call: ToolCall) {
        if self.done {
            return;
        }
        if self.policy.tool_call.is_empty() {
            self.out
                .push_back(Ok(ChatEvent::ToolCallEnd { index, call }));
            return;
        }
        // A recorder inside judged this call before it let it by; else the judgement is kept for the recorders
        // of later rounds, whose requests carry the call.
        let judgement = match self.judged(|s| s.judged_tool_call(&call)) {
            Some(judgement) => judgement,
            None => {
                let policy = self.policy.clone();
                let given = self.keeps(&policy.tool_call).then(|| call.clone());
                let budget = self.budgets.stage(GuardrailStage::ToolCall);
                let judgement = judge_call(&policy.tool_call, call, budget).await;
                if let (Some(screens), Some(given)) = (&self.screens, given) {
                    screens.keep_tool_call(given, &judgement);
                }
                judgement
            }
        };
        let Some(call) = self.sent(judgement) else {
            return;
        };
        // The fragments were held back: the (redacted) arguments go out as one.
        self.out.push_back(Ok(ChatEvent::ToolCallDelta {
            index,
            arguments: call.arguments.to_wire_string(),
        }));
        self.out
            .push_back(Ok(ChatEvent::ToolCallEnd { index, call }));
    }

    /// Judge a tool result's content.
    async fn on_tool_result(&mut self, result: ToolMessage) {
        if self.done {
            return;
        }
        let judgement = match self.judged(|s| s.judged_tool_result(&result)) {
            Some(judgement) => judgement,
            None => {
                let policy = self.policy.clone();
                let given = self.keeps(&policy.tool_result).then(|| result.clone());
                let budget = self.budgets.stage(GuardrailStage::ToolResult);
                let judgement = judge_result(&policy.tool_result, result, budget).await;
                if let (Some(screens), Some(given)) = (&self.screens, given) {
                    screens.keep_tool_result(given, &judgement);
                }
                judgement
            }
        };
        if let Some(result) = self.sent(judgement) {
            self.out.push_back(Ok(ChatEvent::ToolResult { result }));
        }
    }

    /// A judgement made for a tool call or result, when its stage has whole-text checks (with pattern checks
    /// only, a recorder decides alike on its own).
    fn judged<T>(&self, find: impl FnOnce(&PolicyScreens) -> Option<T>) -> Option<T> {
        self.screens.as_deref().and_then(find)
    }

    /// Whether this guard keeps its judgements of a tool stage for the recorders inside.
    fn keeps(&self, stage: &StagePolicy) -> bool {
        self.screens.is_some() && !stage.whole.is_empty()
    }

    /// Record a tool call's or result's verdicts: the item as it goes on, or `None` when a check blocked it or
    /// failed (the answer ended).
    fn sent<T>(&mut self, judgement: ToolJudgement<T>) -> Option<T> {
        record(self.audit.as_ref(), &judgement.verdicts);
        match judgement.decided {
            Ok(Ok(item)) => Some(item),
            Ok(Err(block)) => {
                self.end_blocked(&block.check, block.detail.as_deref().unwrap_or(""));
                None
            }
            Err(error) => {
                self.out.push_back(Err(error));
                self.stop();
                None
            }
        }
    }

    /// Judge one whole text with the stage's pattern checks, and its whole-text checks too when `whole`:
    /// `Some(redacted text if changed)`, or `None` when a check blocked or failed (the answer ended).
    async fn judge_with(
        &mut self,
        stage: GuardrailStage,
        location: &str,
        text: &str,
        whole: bool,
    ) -> Option<Option<String>> {
        let policy = self.policy.clone();
        let budget = self.budgets.stage(stage);
        match judge(policy.stage(stage), stage, location, text, whole, budget).await {
            Ok(judged) => {
                record(self.audit.as_ref(), &judged.verdicts);
                if let Some(block) = judged.block {
                    self.end_blocked(&block.check, block.detail.as_deref().unwrap_or(""));
                    return None;
                }
                Some(judged.redacted)
            }
            Err(error) => {
                self.out.push_back(Err(error));
                self.stop();
                None
            }
        }
    }
}
