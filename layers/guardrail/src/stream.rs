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
//! before redaction). With whole-text checks on the output, a segment's text is held until the segment ends.
//! While tool calls are checked, their argument fragments are held back and sent as one fragment (redacted)
//! right before the complete call.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::StreamExt;
use tower_chat::{
    ChatError, ChatEvent, ChatStream, Continuation, FinishReason, GuardrailAudit, GuardrailStage,
    GuardrailVerdict, Part, ToolArguments, ToolCall,
};

use crate::policy::{judge, record, redact_findings, verdict_of_hit, Policy};
use crate::scan::{Step, StreamScanner};

/// The state of a guarded answer.
pub(crate) struct OutputGuard {
    inner: Option<ChatStream>,
    policy: Arc<Policy>,
    audit: Option<GuardrailAudit>,
    /// The current text segment's scanner.
    scanner: StreamScanner,
    /// Output offset of the current segment's first byte.
    segment_base: usize,
    /// Bytes of the current segment received.
    segment_len: usize,
    /// Whether any text of the current segment went out.
    segment_sent: bool,
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
    ) -> Self {
        OutputGuard {
            scanner: StreamScanner::new(policy.output.scan.clone()),
            inner: Some(inner),
            policy,
            audit,
            segment_base: 0,
            segment_len: 0,
            segment_sent: false,
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
                    self.reasoning.push_str(&text);
                }
                Some(Ok(ChatEvent::ReasoningEnd { continuation })) if checks_reasoning => {
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
                Some(Ok(ChatEvent::ToolResult { mut result })) => {
                    self.end_segment().await;
                    let location = format!("tool_result:{}", result.call_id);
                    if self
                        .judge_parts(
                            GuardrailStage::ToolResult,
                            &location,
                            result.content.parts_mut(),
                        )
                        .await
                    {
                        self.out.push_back(Ok(ChatEvent::ToolResult { result }));
                    }
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
        self.segment_len += text.len();
        let step = self.scanner.push(text);
        self.take_step(step);
    }

    /// Send on what the scanner decided (or hold it for the whole-text checks); end the answer on a block.
    fn take_step(&mut self, step: Step) {
        let verdicts: Vec<GuardrailVerdict> = step
            .hits
            .iter()
            .map(|hit| verdict_of_hit(hit, GuardrailStage::Output, "output", self.segment_base))
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
            self.end_blocked(&block.name);
        }
    }

    fn send_text(&mut self, text: String) {
        if !text.is_empty() {
            self.segment_sent = true;
            self.out.push_back(Ok(ChatEvent::TextDelta { text }));
        }
    }

    /// End the answer for a block: the notice as text, then a `content_filter` finish.
    fn end_blocked(&mut self, check: &str) {
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

    /// The text segment is complete: decide the rest of it, and judge it whole if the output has such checks.
    async fn end_segment(&mut self) {
        if self.done || self.segment_len == 0 {
            return;
        }
        let step = self.scanner.finish();
        self.take_step(step);
        if !self.done && !self.policy.output.whole.is_empty() {
            let held = std::mem::take(&mut self.held);
            let policy = self.policy.clone();
            let mut text = held;
            for rule in &policy.output.whole {
                let findings = match rule.check.check(text.clone(), GuardrailStage::Output).await {
                    Ok(findings) => findings,
                    Err(error) => {
                        self.out.push_back(Err(error));
                        self.stop();
                        return;
                    }
                };
                if findings.is_empty() {
                    continue;
                }
                let verdicts: Vec<GuardrailVerdict> = findings
                    .iter()
                    .map(|finding| GuardrailVerdict {
                        check: rule.name.to_string(),
                        action: rule.action,
                        stage: GuardrailStage::Output,
                        location: "output".into(),
                        span: finding.span,
                        detail: finding.detail.clone(),
                    })
                    .collect();
                record(self.audit.as_ref(), &verdicts);
                match rule.action {
                    tower_chat::GuardrailAction::Block => {
                        self.end_blocked(&rule.name);
                        return;
                    }
                    tower_chat::GuardrailAction::Redact => {
                        text = redact_findings(&text, &rule.name, &findings)
                    }
                    tower_chat::GuardrailAction::Flag => {}
                }
            }
            self.send_text(text);
        }
        self.segment_base += self.segment_len;
        self.segment_len = 0;
        self.segment_sent = false;
        self.scanner = StreamScanner::new(self.policy.output.scan.clone());
    }

    /// Judge a complete tool call's arguments (each string of its JSON, or its raw text when it is not JSON).
    async fn on_tool_call(&mut self, index: usize, mut call: ToolCall) {
        if self.done {
            return;
        }
        let checked = !self.policy.tool_call.is_empty();
        if checked {
            let location = format!("tool_call:{}", call.id);
            let passed = match &mut call.arguments {
                ToolArguments::Json(value) => {
                    let mut strings = Vec::new();
                    collect_strings(value, String::new(), &mut strings);
                    let mut passed = true;
                    for (pointer, text) in strings {
                        let location = format!("{location}{pointer}");
                        match self
                            .judge_text(GuardrailStage::ToolCall, &location, &text)
                            .await
                        {
                            Some(Some(redacted)) => {
                                if let Some(slot) = value.pointer_mut(&pointer) {
                                    *slot = serde_json::Value::String(redacted);
                                }
                            }
                            Some(None) => {}
                            None => {
                                passed = false;
                                break;
                            }
                        }
                    }
                    passed
                }
                ToolArguments::Invalid { raw, .. } => {
                    let text = std::mem::take(raw);
                    match self
                        .judge_text(GuardrailStage::ToolCall, &location, &text)
                        .await
                    {
                        Some(redacted) => {
                            *raw = redacted.unwrap_or(text);
                            true
                        }
                        None => false,
                    }
                }
            };
            if !passed {
                return;
            }
            // The fragments were held back: the (redacted) arguments go out as one.
            self.out.push_back(Ok(ChatEvent::ToolCallDelta {
                index,
                arguments: call.arguments.to_wire_string(),
            }));
        }
        self.out
            .push_back(Ok(ChatEvent::ToolCallEnd { index, call }));
    }

    /// Judge the text parts of a tool result in place; `false` when a check blocked (the answer ended).
    async fn judge_parts(
        &mut self,
        stage: GuardrailStage,
        location: &str,
        parts: &mut [Part],
    ) -> bool {
        if self.policy.stage(stage).is_empty() {
            return true;
        }
        for part in parts {
            let Part::Text(text) = part else { continue };
            match self.judge_text(stage, location, &text.text).await {
                Some(Some(redacted)) => text.text = redacted,
                Some(None) => {}
                None => return false,
            }
        }
        true
    }

    /// Judge one whole text: `Some(redacted text if changed)`, or `None` when a check blocked or failed (the answer
    /// ended).
    async fn judge_text(
        &mut self,
        stage: GuardrailStage,
        location: &str,
        text: &str,
    ) -> Option<Option<String>> {
        self.judge_with(stage, location, text, true).await
    }

    /// [`OutputGuard::judge_text`], with the stage's whole-text checks too when `whole`.
    async fn judge_with(
        &mut self,
        stage: GuardrailStage,
        location: &str,
        text: &str,
        whole: bool,
    ) -> Option<Option<String>> {
        let policy = self.policy.clone();
        match judge(policy.stage(stage), stage, location, text, whole).await {
            Ok(judged) => {
                record(self.audit.as_ref(), &judged.verdicts);
                if let Some(block) = judged.block {
                    self.end_blocked(&block.check);
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

/// Every string of a JSON value with its JSON pointer.
fn collect_strings(value: &serde_json::Value, pointer: String, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::String(text) => out.push((pointer, text.clone())),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_strings(item, format!("{pointer}/{i}"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                collect_strings(item, format!("{pointer}/{key}"), out);
            }
        }
        _ => {}
    }
}
