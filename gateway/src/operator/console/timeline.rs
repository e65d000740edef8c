//! One conversation's timeline: its messages, every recorded model call with its facts, the tool calls and
//! results between them, and the approvals beside the calls they decided. Each turn is a `<details>` whose
//! summary is one line (number, time, prompt, calls, latency, tokens; a prompt repeated word for word names the
//! turn it repeats); a long conversation opens its last turn only and has an index of its turns to jump to.
//! An id nothing was recorded for is a 404 page.
//!
//! Each message appears once, where it entered the conversation. Clients resend their history every turn, but
//! not the tool rounds the gateway ran for them, so a call's request is rarely a plain continuation of the
//! previous call's history: the timeline keeps the conversation it has shown and, for each call, picks up its
//! request where it follows that conversation, skipping only tool rounds the client left out ([`Shown`]). What
//! is left of the request (the new user message, the last round's tool results) is shown before the call; a
//! client that edited an earlier message branches the conversation there, and the edit is shown as new.

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::{html, Markup};
use serde::Deserialize;
use tower_chat::{ConversationId, Cost, FinishReason, GuardrailVerdict, Message};
use tower_chat_persistence::CallRecord;

use super::card;
use super::extract::PageQuery;
use super::format::{count, dollars, finish_label, millis, utc};
use super::highlight::marked;
use super::layout::{error_page, html_response, layout, Nav};
use super::media::{content_parts, MessageAt};
use super::outcome::AskedForTools;
use super::pages::arguments_text;
use super::session::Session;
use super::state::ConsoleState;
use super::turns::{turn_index, turn_lines, turn_summary, turns, OPEN_TURNS};
use crate::operator::{self, Listed};

/// A conversation's id (`id`); from a call log search, its words (`q`) and the message it found (`hit`, the
/// message's element id, which the link's fragment scrolls to), marked on the timeline.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConversationParams {
    id: Option<String>,
    #[serde(default)]
    q: String,
    hit: Option<String>,
}

/// The message a call log search found: its anchor, and the words to mark in it.
struct Found {
    anchor: Option<String>,
    prefixes: Vec<String>,
}

impl Found {
    /// The words to mark in the message at `at`: the search's, if it is the one found.
    fn marks(&self, at: MessageAt<'_>) -> &[String] {
        match &self.anchor {
            Some(anchor) if *anchor == at.anchor() => &self.prefixes,
            _ => &[],
        }
    }
}

/// Approval decisions by the id of the tool call they decided on (the audit log's, for the timeline).
type Decided<'a> = std::collections::HashMap<&'a str, Vec<&'a tower_chat_approval::AuditRecord>>;

/// The conversation's approvals: those listed (paused at, status) and the audit's decisions.
struct Approvals<'a> {
    listed: Vec<&'a Listed>,
    audit: Vec<&'a tower_chat_approval::AuditRecord>,
}

/// One message; the message a search found is marked as the hit, its matching words in `<mark>`, its element id
/// naming the call and its index there (what the search result links to).
fn message(message: &Message, at: MessageAt<'_>, decided: &Decided<'_>, found: &Found) -> Markup {
    let marks = found.marks(at);
    let hit = if marks.is_empty() { "" } else { " hit" };
    // Only the found message needs an element id (the link's fragment): ids on every message would weigh a long
    // timeline down.
    let id = (!marks.is_empty()).then(|| at.anchor());
    match message {
        Message::System { content } => html! {
            div class={ "message system" (hit) } id=[id] { span class="role" { "system" } (content_parts(content, at, marks)) }
        },
        Message::User { content } => html! {
            div class={ "message user" (hit) } id=[id] { span class="role" { "user" } (content_parts(content, at, marks)) }
        },
        Message::Assistant(a) => html! {
            div class={ "message assistant" (hit) } id=[id] {
                span class="role" { "assistant" }
                @if let Some(reasoning) = a.reasoning_text() {
                    pre class="reasoning" { (reasoning) }
                }
                @if !a.content.is_empty() {
                    pre class="content" { (marked(&a.content, marks)) }
                }
                @for call in &a.tool_calls {
                    div class="tool-call" data-call-id=(call.id) {
                        span class="label" { "tool call" }
                        code class="tool" { (call.name) }
                        pre class="arguments" { (arguments_text(&call.arguments)) }
                        // The approval layer sits outside the rounds: its decisions on this call, from the audit log.
                        @for record in decided.get(call.id.as_str()).into_iter().flatten() {
                            p class="call-approval" data-approval-id=(record.approval_id) data-outcome=(record.outcome.as_str()) {
                                "approval " (record.approval_id) ": " (record.outcome.as_str()) " by "
                                (record.approver.as_deref().unwrap_or("—"))
                            }
                        }
                    }
                }
            }
        },
        Message::Tool(t) => html! {
            div class={ (if t.is_error { "message tool error" } else { "message tool" }) (hit) } data-call-id=(t.call_id) id=[id] {
                span class="role" { "tool result" }
                code class="tool" { (t.name) }
                (content_parts(&t.content, at, marks))
            }
        },
    }
}

/// Whether a request's message is one the timeline shows already: the same role and what the page shows of
/// it. A resent answer is the same message even when the client dropped what it does not echo (reasoning,
/// provider ids).
fn same_message(shown: &Message, sent: &Message) -> bool {
    match (shown, sent) {
        (Message::Assistant(a), Message::Assistant(b)) => {
            a.content == b.content
                && a.tool_calls.len() == b.tool_calls.len()
                && a.tool_calls
                    .iter()
                    .zip(&b.tool_calls)
                    .all(|(x, y)| x.id == y.id)
        }
        _ => shown == sent,
    }
}

/// The messages of a conversation a client may leave out when it resends its history: the tool rounds the
/// gateway ran for it (results and the calls that asked for them).
fn server_side(message: &Message) -> bool {
    match message {
        Message::Tool(_) => true,
        Message::Assistant(a) => !a.tool_calls.is_empty(),
        _ => false,
    }
}

/// The conversation as the timeline has shown it so far, and where each call's request picks it up.
#[derive(Debug, Default)]
struct Shown<'a> {
    messages: Vec<&'a Message>,
}

impl<'a> Shown<'a> {
    /// How many of `request`'s messages were shown already: its longest prefix that follows the shown
    /// conversation, skipping only the tool rounds the client left out. Keeps the shown conversation up to
    /// where that prefix ends (a client that edited an earlier message branches there).
    fn pick_up(&mut self, request: &[Message]) -> usize {
        let mut at = 0;
        let mut matched = 0;
        'request: for sent in request {
            for (offset, shown) in self.messages[at..].iter().enumerate() {
                if same_message(shown, sent) {
                    at += offset + 1;
                    matched += 1;
                    continue 'request;
                }
                if !server_side(shown) {
                    break;
                }
            }
            break;
        }
        self.messages.truncate(at);
        matched
    }
}

/// One model call: what it was sent that the timeline has not shown yet (the user's message, the results of the
/// tools the loop ran after the previous round), then the call with its facts and what it answered.
fn call_section<'a>(
    call: &'a CallRecord,
    shown: &mut Shown<'a>,
    decided: &Decided<'_>,
    next_started: Option<std::time::SystemTime>,
    approvals: &Approvals<'_>,
    found: &Found,
) -> Markup {
    let request = call.request.messages.as_slice();
    let first_new = shown.pick_up(request);
    shown.messages.extend(&request[first_new..]);
    shown.messages.extend(call.response.messages.iter());
    let at = |index| MessageAt {
        call: call.call_id.as_str(),
        index,
    };
    // A replay from the response cache called no upstream: it has no upstream latency and cost nothing.
    let cached = call.from_response_cache();
    let latency = if cached {
        "— (answered from the response cache)".to_owned()
    } else {
        millis(
            call.ended_at
                .duration_since(call.started_at)
                .unwrap_or_default(),
        )
    };
    let ttft = call
        .first_token_at
        .filter(|_| !cached)
        .map(|t| millis(t.duration_since(call.started_at).unwrap_or_default()));
    let cost = if cached {
        format!("{} (cached)", dollars(Cost::ZERO))
    } else {
        call.cost.map_or_else(|| "—".into(), dollars)
    };
    let usage = call.usage();
    let asked = AskedForTools {
        started_at: call.started_at,
        ended_at: call.ended_at,
        next_started,
    };
    let held = (call.finish_reason() == Some(&FinishReason::ToolCalls))
        .then(|| super::outcome::held(asked, &approvals.listed, &approvals.audit))
        .flatten();
    let shown = match held {
        Some(approval) => super::outcome::paused(&approval),
        None => super::outcome::shown(&call.outcome, call.request.omitted.is_some()),
    };
    // Tokens no provider reported: what a layer charged the call, estimated from its request and the output seen.
    let estimated = if call.usage_estimated {
        " (estimated)"
    } else {
        ""
    };
    let facts: [(&'static str, String); 12] = [
        (
            "model call",
            format!("round {} of the turn", call.round_index + 1),
        ),
        ("started", utc(call.started_at)),
        (
            "request id",
            call.request_id
                .as_ref()
                .map_or_else(|| "—".into(), |id| id.as_str().to_owned()),
        ),
        ("model", call.model.clone().unwrap_or_else(|| "—".into())),
        (
            "answered by",
            if cached {
                "response cache"
            } else {
                shown.answered_by
            }
            .to_owned(),
        ),
        ("latency", latency),
        ("time to first token", ttft.unwrap_or_else(|| "—".into())),
        ("input tokens", format!("{}{estimated}", usage.input_tokens)),
        (
            "output tokens",
            format!("{}{estimated}", usage.output_tokens),
        ),
        ("cost", format!("{cost}{estimated}")),
        ("outcome", shown.text),
        (
            "finish",
            call.finish_reason()
                .map_or_else(|| "—".into(), finish_label),
        ),
    ];
    html! {
        @for (index, m) in request.iter().enumerate().skip(first_new) {
            (message(m, at(index), decided, found))
        }
        section class="call" id=(format!("call-{}", call.call_id.as_str())) data-call-id=(call.call_id.as_str()) data-round=(call.round_index) data-cached=[cached.then_some("true")] {
            dl class="call-facts" {
                @for (name, value) in &facts {
                    dt { (name) }
                    dd class="fact" { (value) }
                }
            }
            @if !call.guardrail.is_empty() {
                (verdicts(&call.guardrail))
            }
            @for (index, m) in call.response.messages.iter().enumerate() {
                (message(m, at(request.len() + index), decided, found))
            }
            @for approval in &call.response.approval_requests {
                div class="approval-request" data-approval-id=(approval.id) {
                    span class="label" { "approval requested" }
                    code class="tool" { (approval.call.name) }
                    pre class="arguments" { (arguments_text(&approval.call.arguments)) }
                    @if let Some(reason) = &approval.reason {
                        p class="reason" { (reason) }
                    }
                    code class="approval-id" { (approval.id) }
                }
            }
        }
    }
}

/// A call's guardrail verdicts: which check did what, where, and at which bytes of that text. What a check
/// matched is never shown (the verdicts do not carry it: that is the point of redacting it).
fn verdicts(verdicts: &[GuardrailVerdict]) -> Markup {
    html! {
        ul class="guardrail" {
            @for v in verdicts {
                li class="verdict" data-check=(v.check) data-action=(v.action.as_str()) {
                    "guardrail " code { (v.check) } ": " (v.action.as_str()) " at " (v.stage.as_str()) ", "
                    (v.location)
                    @if let Some(span) = &v.span {
                        ", bytes " (span.start) "–" (span.end)
                    }
                    @if let Some(detail) = &v.detail {
                        " (" (detail) ")"
                    }
                }
            }
        }
    }
}

/// When the conversation's next call after `call` started, if one did.
fn next_start(calls: &[CallRecord], call: &CallRecord) -> Option<std::time::SystemTime> {
    calls
        .iter()
        .map(|c| c.started_at)
        .filter(|at| *at > call.started_at)
        .min()
}

/// The audit log's table: every decision taken in the conversation.
fn audit_table(audit: &[tower_chat_approval::AuditRecord]) -> Markup {
    html! {
        table id="audit" class="audit" {
            thead {
                tr {
                    th { "Decided" } th { "Approval" } th { "Tool" } th { "Arguments" } th { "Outcome" }
                    th { "Approver" } th { "Caller" } th { "Reason" }
                }
            }
            tbody {
                @for record in audit {
                    tr data-approval-id=(record.approval_id) data-outcome=(record.outcome.as_str()) {
                        td data-label="Decided" { (utc(record.decided_at)) }
                        td class="id" data-label="Approval" { (record.approval_id) }
                        td data-label="Tool" { (record.call.as_ref().map_or("—", |c| c.name.as_str())) }
                        td class="arguments" data-label="Arguments" { pre { (record.call.as_ref().map(|c| arguments_text(&c.arguments)).unwrap_or_default()) } }
                        td class="outcome" data-label="Outcome" { (record.outcome.as_str()) }
                        td class="approver" data-label="Approver" { (record.approver.as_deref().unwrap_or("—")) }
                        td data-label="Caller" { (record.caller.as_ref().map_or("—", |c| c.as_str())) }
                        td class="reason" data-label="Reason" { (record.reason.as_deref().unwrap_or("—")) }
                    }
                }
            }
        }
    }
}

/// `GET /console/conversation?id=…`: one conversation's timeline.
pub(crate) async fn timeline(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(params): PageQuery<ConversationParams>,
) -> Response {
    let Some(id) = params.id else {
        return error_page(StatusCode::BAD_REQUEST, "Which conversation? (?id=…)");
    };
    let Some(records) = &state.records else {
        return error_page(StatusCode::NOT_FOUND, "This gateway keeps no call records.");
    };
    let conversation = ConversationId::new(id.clone());
    let calls = match records.conversation_calls(&conversation).await {
        Ok(calls) => calls,
        Err(e) => {
            return error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Reading the store failed: {e}"),
            )
        }
    };
    let audit = match &state.operators.approval_store {
        Some(store) => store.audit_log(&conversation).await.unwrap_or_default(),
        None => Vec::new(),
    };
    let pending: Vec<Listed> =
        match operator::pending_in_conversation(&state.operators, &conversation).await {
            Ok(pending) => pending,
            Err(e) => {
                return error_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("Reading the approval store failed: {}", e.message),
                )
            }
        };
    if calls.is_empty() && audit.is_empty() && pending.is_empty() {
        return error_page(
            StatusCode::NOT_FOUND,
            &format!("No conversation {id:?} is recorded: no call, approval or decision of it."),
        );
    }
    let (input, output): (u64, u64) = calls.iter().fold((0, 0), |(i, o), c| {
        (i + c.usage().input_tokens, o + c.usage().output_tokens)
    });
    let priced: Vec<Cost> = calls.iter().filter_map(|c| c.cost).collect();
    let cost = if priced.is_empty() {
        "cost unknown (no price for the model)".to_owned()
    } else {
        dollars(priced.into_iter().fold(Cost::ZERO, |a, b| a + b))
    };
    let caller = calls
        .iter()
        .find_map(|c| c.caller.as_ref())
        .map_or("(no key)", |c| c.as_str());
    let mut decided = Decided::new();
    for record in &audit {
        if let Some(call) = &record.call {
            decided.entry(call.id.as_str()).or_default().push(record);
        }
    }
    let approvals = Approvals {
        listed: pending.iter().collect(),
        audit: audit.iter().collect(),
    };
    let pending_cards = card::cards(
        state.operators.files.as_deref(),
        state.records.as_deref(),
        &pending,
    )
    .await;
    let found = Found {
        anchor: params.hit,
        prefixes: super::highlight::prefixes(&params.q),
    };
    let grouped: Vec<&[CallRecord]> = turns(&calls).collect();
    let lines = turn_lines(&grouped);
    let long = grouped.len() > OPEN_TURNS;
    // The turn holding the message a search found is open, so the link's fragment lands on it.
    let hit_turn = found.anchor.as_deref().and_then(|anchor| {
        grouped.iter().position(|turn| {
            turn.iter()
                .any(|c| anchor.starts_with(&format!("m-{}-", c.call_id.as_str())))
        })
    });
    let hit_turn = hit_turn.map(|i| i + 1);
    let mut shown = Shown::default();
    let main = html! {
        p class="conversation-id" id="conversation-id" { (id) }
        p class="summary" {
            "Caller " (caller) " · " (count(calls.len() as u64, "model call", "model calls")) " · " (input) " input and " (output) " output tokens · "
            (cost)
        }
        @if !pending.is_empty() {
            h2 { "Waiting for a decision" }
            (card::approvals_table(&pending_cards, &session.csrf, card::TableIds {
                table: None,
                empty: None,
                empty_text: "Nothing waits for a decision.",
            }))
        }
        h2 { "Timeline" }
        @if long {
            (turn_index(&lines))
        }
        @for (turn, line) in grouped.iter().zip(&lines) {
            details class="turn" id=(format!("turn-{}", line.number)) data-repeats=[line.repeats]
                open[!long || line.number == lines.len() || hit_turn == Some(line.number)] {
                (turn_summary(turn, line))
                @for call in turn.iter() {
                    (call_section(call, &mut shown, &decided, next_start(&calls, call), &approvals, &found))
                }
            }
        }
        h2 { "Approvals and audit" }
        @if audit.is_empty() {
            p class="empty" { "No decision recorded." }
        } @else {
            (audit_table(&audit))
        }
    };
    html_response(
        StatusCode::OK,
        layout("Conversation", Nav::Conversations, Some(&session), main),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::{AssistantMessage, ToolCall};

    fn user(text: &str) -> Message {
        Message::user(text)
    }

    fn answer(text: &str) -> Message {
        Message::assistant(text)
    }

    fn round(id: &str) -> [Message; 2] {
        [
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::new(id, "add", serde_json::json!({}))],
                ..AssistantMessage::default()
            }),
            Message::tool_result(id, "add", "5"),
        ]
    }

    #[test]
    fn a_resent_history_is_picked_up_past_the_tool_rounds_it_left_out() {
        let [call, result] = round("c1");
        let first = [user("q0"), call, result, answer("a0")];
        let mut shown = Shown::default();
        assert_eq!(shown.pick_up(&first[..1]), 0, "nothing shown yet");
        shown.messages.extend(&first);
        // The client resends its question and the answer, without the round, then asks again.
        let resent = [user("q0"), answer("a0"), user("q1")];
        assert_eq!(shown.pick_up(&resent), 2);
        assert_eq!(shown.messages.len(), 4, "the round stays shown");
    }

    #[test]
    fn an_edited_message_branches_the_conversation_there() {
        let mut shown = Shown::default();
        let first = [user("q0"), answer("a0"), user("q1"), answer("a1")];
        shown.messages.extend(&first);
        let edited = [user("q0"), answer("a0"), user("q1, edited")];
        assert_eq!(shown.pick_up(&edited), 2);
        assert_eq!(
            shown.messages.len(),
            2,
            "the shown conversation ends before the edit"
        );
        // A user message is never skipped to match a later one.
        let mut shown = Shown::default();
        shown.messages.extend(&first);
        assert_eq!(shown.pick_up(&[user("q0"), user("q1")]), 1);
    }
}
