//! A policy compiled per stage, and how it judges one whole text (a request's message, a tool call's argument, a
//! tool result): the pattern checks first, then the whole-text checks on what they let through.

use std::sync::Arc;

use tower_chat::{
    ChatError, ErrorKind, GuardrailAction, GuardrailAudit, GuardrailStage, GuardrailVerdict,
    TextSpan,
};

use crate::check::{Check, Detector, Finding, TextCheck};
use crate::invisible::Stripped;
use crate::scan::{label, Budget, Hit, ScanRule, StreamScanner, OVER_BUDGET};

/// The checks of one stage.
#[derive(Clone, Debug, Default)]
pub(crate) struct StagePolicy {
    pub(crate) scan: Arc<[ScanRule]>,
    pub(crate) whole: Vec<WholeRule>,
}

impl StagePolicy {
    pub(crate) fn is_empty(&self) -> bool {
        self.scan.is_empty() && self.whole.is_empty()
    }
}

/// A whole-text check with its name and action.
#[derive(Clone)]
pub(crate) struct WholeRule {
    pub(crate) name: Arc<str>,
    pub(crate) action: GuardrailAction,
    pub(crate) check: Arc<dyn TextCheck>,
}

impl std::fmt::Debug for WholeRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeRule")
            .field("name", &self.name)
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

/// Every check, sorted by stage.
#[derive(Clone, Debug, Default)]
pub(crate) struct Policy {
    pub(crate) checks: Vec<Check>,
    pub(crate) request: StagePolicy,
    pub(crate) tool_call: StagePolicy,
    pub(crate) tool_result: StagePolicy,
    pub(crate) output: StagePolicy,
    pub(crate) block_message: Arc<str>,
    /// Candidate matches each pattern check may examine per stage of one request or answer (see [`Budget`]).
    pub(crate) max_candidates: usize,
}

/// The default of [`Policy::max_candidates`]: far above what prose, code or a table of contacts holds (a
/// candidate is a whole email, number or key shape), and a few milliseconds of validation at most.
pub(crate) const DEFAULT_MAX_CANDIDATES: usize = 100_000;

/// The work budgets of one request or answer, one per stage.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    request: Budget,
    tool_call: Budget,
    tool_result: Budget,
    pub(crate) output: Budget,
}

impl Budgets {
    pub(crate) fn new(policy: &Policy) -> Self {
        let budget = || Budget::new(policy.max_candidates);
        Budgets {
            request: budget(),
            tool_call: budget(),
            tool_result: budget(),
            output: budget(),
        }
    }

    pub(crate) fn stage(&mut self, stage: GuardrailStage) -> &mut Budget {
        match stage {
            GuardrailStage::Request => &mut self.request,
            GuardrailStage::ToolCall => &mut self.tool_call,
            GuardrailStage::ToolResult => &mut self.tool_result,
            GuardrailStage::Output => &mut self.output,
        }
    }
}

/// What the default block message says; `{check}` is replaced by the check's name.
pub(crate) const DEFAULT_BLOCK_MESSAGE: &str =
    "[The rest of this answer was withheld by the content policy (check `{check}`).]";

impl Policy {
    pub(crate) fn new(checks: Vec<Check>, block_message: Arc<str>, max_candidates: usize) -> Self {
        let stage = |stage: GuardrailStage| {
            let mut scan = Vec::new();
            let mut whole = Vec::new();
            for check in checks.iter().filter(|c| c.stages.contains(&stage)) {
                match &check.detector {
                    Detector::Scan(finders) => scan.push(ScanRule {
                        name: check.name.clone(),
                        action: check.action,
                        finders: finders.clone(),
                    }),
                    Detector::Whole(judge) => whole.push(WholeRule {
                        name: check.name.clone(),
                        action: check.action,
                        check: judge.clone(),
                    }),
                }
            }
            StagePolicy {
                scan: scan.into(),
                whole,
            }
        };
        Policy {
            request: stage(GuardrailStage::Request),
            tool_call: stage(GuardrailStage::ToolCall),
            tool_result: stage(GuardrailStage::ToolResult),
            output: stage(GuardrailStage::Output),
            checks,
            block_message,
            max_candidates,
        }
    }

    pub(crate) fn stage(&self, stage: GuardrailStage) -> &StagePolicy {
        match stage {
            GuardrailStage::Request => &self.request,
            GuardrailStage::ToolCall => &self.tool_call,
            GuardrailStage::ToolResult => &self.tool_result,
            GuardrailStage::Output => &self.output,
        }
    }

    /// The message that ends a blocked answer.
    pub(crate) fn block_notice(&self, check: &str) -> String {
        self.block_message.replace("{check}", check)
    }
}

/// What judging one whole text decided.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// The text to send on, when a check changed it.
    pub(crate) redacted: Option<String>,
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    /// The verdict that blocks, if one does.
    pub(crate) block: Option<GuardrailVerdict>,
}

/// The verdict of a pattern hit.
pub(crate) fn verdict_of_hit(
    hit: &Hit,
    stage: GuardrailStage,
    location: &str,
    offset: usize,
) -> GuardrailVerdict {
    GuardrailVerdict {
        check: hit.name.to_string(),
        action: hit.action,
        stage,
        location: location.to_owned(),
        span: Some(TextSpan {
            start: hit.span.start + offset,
            end: hit.span.end + offset,
        }),
        detail: (!hit.kind.is_empty()).then(|| hit.kind.to_owned()),
    }
}

/// What the pattern checks found in a text that comes as adjacent pieces (a message's text parts, Anthropic
/// text blocks): the pieces are scanned as one text, so a match split between two is found.
#[derive(Debug, Default)]
pub(crate) struct ScannedPieces {
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    pub(crate) block: Option<GuardrailVerdict>,
    /// Each piece as it goes on, when a redaction changed it (a match split between pieces is replaced in
    /// each by its label).
    pub(crate) pieces: Vec<Option<String>>,
}

/// Scan `pieces` as one text with the pattern checks of `stage`, invisible characters removed first (see
/// [`crate::invisible`]); verdict spans count bytes of the pieces joined.
pub(crate) fn scan_pieces(
    policy: &StagePolicy,
    stage: GuardrailStage,
    location: &str,
    pieces: &[&str],
    budget: &mut Budget,
) -> ScannedPieces {
    let mut scanned = ScannedPieces {
        pieces: vec![None; pieces.len()],
        ..ScannedPieces::default()
    };
    if policy.scan.is_empty() {
        return scanned;
    }
    let joined = match pieces {
        [one] => std::borrow::Cow::Borrowed(*one),
        _ => std::borrow::Cow::Owned(pieces.concat()),
    };
    let stripped = Stripped::new(&joined);
    let step = StreamScanner::scan_whole(policy.scan.clone(), stripped.text(), budget);
    let original = |hit: &Hit| {
        let (start, end) = stripped.original(hit.span.start, hit.span.end);
        Hit {
            span: TextSpan { start, end },
            ..hit.clone()
        }
    };
    let hits: Vec<Hit> = step.hits.iter().map(original).collect();
    scanned.verdicts = hits
        .iter()
        .map(|hit| verdict_of_hit(hit, stage, location, 0))
        .collect();
    if let Some(block) = &step.block {
        scanned.block = Some(verdict_of_hit(&original(block), stage, location, 0));
        return scanned;
    }
    let redactions = merged_redactions(&hits);
    if redactions.is_empty() {
        return scanned;
    }
    let mut at = 0;
    for (piece, slot) in pieces.iter().zip(&mut scanned.pieces) {
        let range = at..at + piece.len();
        at = range.end;
        let mut out = String::new();
        let mut copied = range.start;
        for (span, label) in &redactions {
            let (start, end) = (span.start.max(range.start), span.end.min(range.end));
            if start >= end {
                continue;
            }
            out.push_str(&joined[copied..start]);
            out.push_str("[REDACTED:");
            out.push_str(label);
            out.push(']');
            copied = end;
        }
        if copied > range.start {
            out.push_str(&joined[copied..range.end]);
            *slot = Some(out);
        }
    }
    scanned
}

/// The redaction spans of `hits`, overlapping ones merged under the first one's label, in text order.
fn merged_redactions(hits: &[Hit]) -> Vec<(TextSpan, &str)> {
    let mut spans: Vec<&Hit> = hits
        .iter()
        .filter(|hit| hit.action == GuardrailAction::Redact)
        .collect();
    spans.sort_by_key(|hit| (hit.span.start, hit.rule));
    let mut merged: Vec<(TextSpan, &str)> = Vec::new();
    for hit in spans {
        match merged.last_mut() {
            Some((span, _)) if hit.span.start < span.end => span.end = span.end.max(hit.span.end),
            _ => merged.push((hit.span, label(hit))),
        }
    }
    merged
}

/// Judge `text` with the checks of `stage`; `whole` says whether the whole-text checks run too.
pub(crate) async fn judge(
    policy: &StagePolicy,
    stage: GuardrailStage,
    location: &str,
    text: &str,
    whole: bool,
    budget: &mut Budget,
) -> Result<Judged, ChatError> {
    let scanned = scan_pieces(policy, stage, location, &[text], budget);
    let mut judged = Judged {
        verdicts: scanned.verdicts,
        block: scanned.block,
        redacted: None,
    };
    if judged.block.is_some() {
        return Ok(judged);
    }
    let current = scanned.pieces.into_iter().next().flatten();
    judged.redacted =
        judge_whole(policy, stage, location, text, current, whole, &mut judged).await?;
    Ok(judged)
}

/// The whole-text checks (when `whole`) over `text` as the pattern checks left it (`current`, when they changed
/// it): the text to send on when changed, verdicts and any block added to `judged`.
pub(crate) async fn judge_whole(
    policy: &StagePolicy,
    stage: GuardrailStage,
    location: &str,
    text: &str,
    mut current: Option<String>,
    whole: bool,
    judged: &mut Judged,
) -> Result<Option<String>, ChatError> {
    if !whole {
        return Ok(current);
    }
    for rule in &policy.whole {
        let given = current.as_deref().unwrap_or(text).to_owned();
        let findings = rule.check.check(given.clone(), stage).await?;
        if findings.is_empty() {
            continue;
        }
        let verdicts: Vec<GuardrailVerdict> = findings
            .iter()
            .map(|finding| GuardrailVerdict {
                check: rule.name.to_string(),
                action: rule.action,
                stage,
                location: location.to_owned(),
                span: finding.span,
                detail: finding.detail.clone(),
            })
            .collect();
        let first = verdicts[0].clone();
        judged.verdicts.extend(verdicts);
        match rule.action {
            GuardrailAction::Block => {
                judged.block = Some(first);
                return Ok(None);
            }
            GuardrailAction::Redact => {
                current = Some(redact_findings(&given, &rule.name, &findings))
            }
            GuardrailAction::Flag => {}
        }
    }
    Ok(current)
}

/// `text` with each finding's span (or all of it) replaced by `[REDACTED:<detail or check>]`.
pub(crate) fn redact_findings(text: &str, check: &str, findings: &[Finding]) -> String {
    let label =
        |finding: &Finding| format!("[REDACTED:{}]", finding.detail.as_deref().unwrap_or(check));
    if let Some(whole) = findings.iter().find(|f| f.span.is_none()) {
        return label(whole);
    }
    let mut spans: Vec<&Finding> = findings.iter().collect();
    spans.sort_by_key(|f| f.span.map(|s| s.start));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for finding in spans {
        let Some(span) = finding.span else { continue };
        let (start, end) = (span.start.max(at).min(text.len()), span.end.min(text.len()));
        if start >= end || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(&label(finding));
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// Record verdicts: into the call's audit, and as `tracing` events (inside the caller's span, so a telemetry
/// layer outside sees them on its span). The `monotonic_counter.` field makes each event a counter increment for
/// a metrics bridge that follows that convention (`tracing-opentelemetry`'s `MetricsLayer`), with the event's
/// other fields as attributes.
pub(crate) fn record(audit: Option<&GuardrailAudit>, verdicts: &[GuardrailVerdict]) {
    for verdict in verdicts {
        tracing::info!(
            target: "tower_chat_guardrail",
            check = %verdict.check,
            action = verdict.action.as_str(),
            stage = verdict.stage.as_str(),
            location = %verdict.location,
            span.start = verdict.span.map(|s| s.start),
            span.end = verdict.span.map(|s| s.end),
            detail = verdict.detail.as_deref(),
            "monotonic_counter.tower_chat.guardrail.verdicts" = 1u64,
            "guardrail verdict"
        );
        if let Some(audit) = audit {
            audit.push(verdict.clone());
        }
    }
}

/// The error of a blocked request; `max_candidates` names the budget when a check ran out of it.
pub(crate) fn blocked(verdict: &GuardrailVerdict, max_candidates: usize) -> ChatError {
    if verdict.detail.as_deref() == Some(OVER_BUDGET) {
        return ChatError::new(
            ErrorKind::PolicyBlocked {
                check: verdict.check.clone(),
            },
            format!(
                "the content policy's check `{}` examined its limit of {max_candidates} candidate matches \
                 (max_candidates) in {} before it could finish; the request is refused rather than sent \
                 unchecked (send less text of that shape, or raise the policy's max_candidates)",
                verdict.check, verdict.location
            ),
        )
        .refused_before_sending();
    }
    let what = verdict
        .detail
        .as_deref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    ChatError::new(
        ErrorKind::PolicyBlocked {
            check: verdict.check.clone(),
        },
        format!(
            "the content policy's check `{}` blocked the request{what} in {}",
            verdict.check, verdict.location
        ),
    )
    .refused_before_sending()
}
