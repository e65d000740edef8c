//! The inbox, the conversations list and one conversation's timeline.

use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use tower_chat::{ConversationId, Cost, Message, ToolArguments};
use tower_chat_persistence::{CallRecord, ConversationQuery};

use super::html::{url_encode, Html};
use super::media::{content_parts, MessageAt};
use super::session::Session;
use super::{
    check_csrf, error_page, html_response, page_end, page_start, see_other, ConsoleState, Nav,
};
use crate::extract::{PageForm, PageQuery};
use crate::operator::{self, Listed, Operator};

/// Conversations per page of the list.
const PAGE_SIZE: u32 = 50;

/// `YYYY-MM-DD HH:MM:SS` UTC.
pub(crate) fn utc(time: SystemTime) -> String {
    let secs = operator::unix(time);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `3 s`, `4 min`, `2 h 5 min`, `3 d`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Milliseconds, for latencies.
pub(crate) fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Dollars with enough digits for a cheap call.
pub(crate) fn dollars(cost: Cost) -> String {
    let usd = cost.as_usd();
    if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.6}")
    }
}

/// The inbox's query after a decision: what was decided (`done`) on which approval (`id`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DecidedParams {
    done: Option<String>,
    id: Option<String>,
}

/// The decision form: the CSRF token, `decision` = `approve` | `deny`, an optional reason.
#[derive(Debug, Deserialize)]
pub(crate) struct DecisionForm {
    csrf: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
}

/// A list's page number (`page`, from 0).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageNumber {
    page: Option<u32>,
}

/// A conversation's id (`id`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConversationParams {
    id: Option<String>,
}

/// JSON shown to a person: pretty, as text (escaped by the builder like anything else).
fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn arguments_text(arguments: &ToolArguments) -> String {
    match arguments {
        ToolArguments::Json(value) => pretty(value),
        ToolArguments::Invalid { raw, .. } => raw.clone(),
    }
}

fn conversation_link(page: &mut Html, conversation: &str) {
    let href = format!("/console/conversation?id={}", url_encode(conversation));
    page.element(
        "a",
        &[("href", &href), ("class", "conversation")],
        conversation,
    );
}

/// The wall clock (ages and "… ago").
fn now() -> SystemTime {
    SystemTime::now()
}

/// One row of the inbox; `console.js` builds the same rows from `/console/api/approvals`.
fn approval_row(page: &mut Html, listed: &Listed, csrf: &str) {
    let p = &listed.paused;
    let id = p.notice.id.as_str();
    page.open("tr", &[("data-id", id), ("data-status", listed.status)]);
    page.element("td", &[("class", "tool")], &p.notice.tool);
    page.open("td", &[("class", "arguments")]);
    page.element("pre", &[], &pretty(&p.notice.arguments));
    page.close("td");
    page.element(
        "td",
        &[("class", "reason")],
        p.notice.reason.as_deref().unwrap_or("—"),
    );
    page.element(
        "td",
        &[("class", "caller")],
        p.caller.as_ref().map_or("(no key)", |c| c.as_str()),
    );
    page.open("td", &[]);
    conversation_link(page, p.conversation.as_str());
    page.close("td");
    let age = now().duration_since(p.paused_at).unwrap_or_default();
    page.element("td", &[("class", "age")], &span(age));
    page.element("td", &[("class", "expires")], &span(p.expires_in));
    page.element("td", &[("class", "status")], listed.status);
    page.open("td", &[("class", "actions")]);
    if listed.status == "pending" {
        let action = format!("/console/approvals/{}/decision", url_encode(id));
        page.open(
            "form",
            &[("method", "post"), ("action", &action), ("class", "decide")],
        );
        page.void(
            "input",
            &[("type", "hidden"), ("name", "csrf"), ("value", csrf)],
        );
        page.void(
            "input",
            &[
                ("type", "text"),
                ("name", "reason"),
                ("placeholder", "reason"),
                ("maxlength", "4096"),
                ("aria-label", "reason"),
            ],
        );
        page.element(
            "button",
            &[
                ("type", "submit"),
                ("name", "decision"),
                ("value", "approve"),
                ("class", "approve"),
            ],
            "Approve",
        );
        page.element(
            "button",
            &[
                ("type", "submit"),
                ("name", "decision"),
                ("value", "deny"),
                ("class", "deny"),
            ],
            "Deny",
        );
        page.close("form");
    } else {
        page.element(
            "span",
            &[("class", "waiting")],
            "waiting for the client to resume",
        );
    }
    page.close("td");
    page.close("tr");
}

fn approvals_table(page: &mut Html, listed: &[Listed], csrf: &str, live: bool) {
    let empty_class = if listed.is_empty() {
        "empty"
    } else {
        "empty hidden"
    };
    page.element(
        "p",
        &[
            ("id", if live { "no-approvals" } else { "" }),
            ("class", empty_class),
        ],
        "Nothing waits for a decision.",
    );
    let table_class = if listed.is_empty() {
        "approvals hidden"
    } else {
        "approvals"
    };
    page.open(
        "table",
        &[
            ("id", if live { "approvals" } else { "" }),
            ("class", table_class),
        ],
    );
    page.markup(
        "<thead><tr><th>Tool</th><th>Arguments</th><th>Reason</th><th>Caller</th><th>Conversation</th>\
         <th>Age</th><th>Expires in</th><th>Status</th><th>Decision</th></tr></thead><tbody>",
    );
    for entry in listed {
        approval_row(page, entry, csrf);
    }
    page.markup("</tbody></table>");
}

/// `GET /console`: the approvals inbox.
pub(crate) async fn inbox(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(decided): PageQuery<DecidedParams>,
) -> Response {
    let page_of = match operator::pending_page(&state.operators, None, operator::MAX_LIST).await {
        Ok(page) => page,
        Err(error) => {
            return error_page(
                error.status,
                &format!("Reading the pending approvals failed: {}", error.message),
            )
        }
    };
    let mut page = page_start("Pending approvals", Nav::Inbox, Some(&session));
    if let (Some(done), Some(id)) = (decided.done, decided.id) {
        let text = format!("{id}: {done}. The client's waiting turn resumes when it resends.");
        page.element("p", &[("class", "notice"), ("id", "decided")], &text);
    }
    let hint = if state.operators.approval_store.is_some() {
        "Calls paused by every gateway process on this database wait here for an operator. The list refreshes \
         by itself."
    } else {
        "Calls paused in this gateway process wait here for an operator. The list refreshes by itself."
    };
    page.element("p", &[("class", "hint")], hint);
    let more_class = if page_of.next.is_some() {
        "hint"
    } else {
        "hint hidden"
    };
    let more = format!(
        "Showing the oldest {} pending approvals; more wait behind them.",
        operator::MAX_LIST
    );
    page.element(
        "p",
        &[("id", "more-approvals"), ("class", more_class)],
        &more,
    );
    approvals_table(&mut page, &page_of.listed, &session.csrf, true);
    html_response(StatusCode::OK, page_end(page))
}

/// `GET /console/api/approvals`: what the inbox script polls (the oldest page).
pub(crate) async fn approvals_json(State(state): State<ConsoleState>) -> Response {
    match operator::pending_page(&state.operators, None, operator::MAX_LIST).await {
        Ok(page) => {
            let data: Vec<serde_json::Value> =
                page.listed.iter().map(operator::listed_json).collect();
            crate::error::json_response(
                StatusCode::OK,
                &json!({"now": operator::unix(now()), "data": data, "has_more": page.next.is_some()}),
            )
        }
        Err(error) => error.into_response(),
    }
}

/// `POST /console/approvals/{id}/decision` (form: `csrf`, `decision` = `approve` | `deny`, `reason`).
pub(crate) async fn decide(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageForm(form): PageForm<DecisionForm>,
) -> Response {
    if let Err(refused) = check_csrf(&session, form.csrf.as_deref()) {
        return *refused;
    }
    let approved = match form.decision.as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => return error_page(StatusCode::BAD_REQUEST, "Choose Approve or Deny."),
    };
    let reason = form
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let operator = Operator::named(&session.operator);
    match operator::record_decision(&state.operators, &operator, &id, approved, reason).await {
        Ok(()) => see_other(&format!(
            "/console?done={}&id={}",
            if approved { "approved" } else { "denied" },
            url_encode(&id)
        )),
        Err(error) => error_page(error.status, &error.message),
    }
}

/// `GET /console/conversations?page=N`.
pub(crate) async fn conversations(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(params): PageQuery<PageNumber>,
) -> Response {
    let Some(records) = &state.records else {
        return error_page(StatusCode::NOT_FOUND, "This gateway keeps no call records.");
    };
    let number = params.page.unwrap_or(0).min(100_000);
    let listed = match records
        .list_conversations(
            &ConversationQuery::new()
                .limit(PAGE_SIZE + 1)
                .offset(number * PAGE_SIZE),
        )
        .await
    {
        Ok(listed) => listed,
        Err(e) => {
            return error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Reading the store failed: {e}"),
            )
        }
    };
    let more = listed.len() > PAGE_SIZE as usize;
    let mut page = page_start("Conversations", Nav::Conversations, Some(&session));
    if listed.is_empty() {
        page.element("p", &[("class", "empty")], "No conversation recorded yet.");
    }
    page.open(
        "table",
        &[("id", "conversations"), ("class", "conversations")],
    );
    page.markup(
        "<thead><tr><th>Conversation</th><th>Caller</th><th>Last activity</th><th>Calls</th>\
         <th>Input tokens</th><th>Output tokens</th><th>Cost</th></tr></thead><tbody>",
    );
    let now = now();
    for c in listed.iter().take(PAGE_SIZE as usize) {
        page.open("tr", &[]);
        page.open("td", &[]);
        conversation_link(&mut page, c.conversation_id.as_str());
        page.close("td");
        page.element(
            "td",
            &[],
            c.caller.as_ref().map_or("(no key)", |c| c.as_str()),
        );
        let ago = span(now.duration_since(c.last_started_at).unwrap_or_default());
        page.element(
            "td",
            &[("title", &utc(c.last_started_at))],
            &format!("{ago} ago"),
        );
        page.element("td", &[("class", "number")], &c.calls.to_string());
        page.element("td", &[("class", "number")], &c.input_tokens.to_string());
        page.element("td", &[("class", "number")], &c.output_tokens.to_string());
        let cost = if c.unpriced_calls == c.calls {
            "—".to_owned()
        } else if c.unpriced_calls > 0 {
            format!("{} + {} unpriced", dollars(c.cost), c.unpriced_calls)
        } else {
            dollars(c.cost)
        };
        page.element("td", &[("class", "number")], &cost);
        page.close("tr");
    }
    page.markup("</tbody></table><p class=\"pager\">");
    if number > 0 {
        let href = format!("/console/conversations?page={}", number - 1);
        page.element("a", &[("href", &href)], "← newer");
    }
    if more {
        let href = format!("/console/conversations?page={}", number + 1);
        page.element("a", &[("href", &href)], "older →");
    }
    page.markup("</p>");
    html_response(StatusCode::OK, page_end(page))
}

/// Approval decisions by the id of the tool call they decided on (the audit log's, for the timeline).
type Decided<'a> = std::collections::HashMap<&'a str, Vec<&'a tower_chat_approval::AuditRecord>>;

fn message(page: &mut Html, message: &Message, at: MessageAt<'_>, decided: &Decided<'_>) {
    match message {
        Message::System { content } => text_message(page, "system", content, at),
        Message::User { content } => text_message(page, "user", content, at),
        Message::Assistant(a) => {
            page.open("div", &[("class", "message assistant")]);
            page.element("span", &[("class", "role")], "assistant");
            if let Some(reasoning) = a.reasoning_text() {
                page.element("pre", &[("class", "reasoning")], &reasoning);
            }
            if !a.content.is_empty() {
                page.element("pre", &[("class", "content")], &a.content);
            }
            for call in &a.tool_calls {
                page.open("div", &[("class", "tool-call"), ("data-call-id", &call.id)]);
                page.element("span", &[("class", "label")], "tool call");
                page.element("code", &[("class", "tool")], &call.name);
                page.element(
                    "pre",
                    &[("class", "arguments")],
                    &arguments_text(&call.arguments),
                );
                // The approval layer sits outside the rounds: its decisions on this call, from the audit log.
                for record in decided.get(call.id.as_str()).into_iter().flatten() {
                    page.element(
                        "p",
                        &[
                            ("class", "call-approval"),
                            ("data-approval-id", &record.approval_id),
                            ("data-outcome", record.outcome.as_str()),
                        ],
                        &format!(
                            "approval {}: {} by {}",
                            record.approval_id,
                            record.outcome.as_str(),
                            record.approver.as_deref().unwrap_or("—")
                        ),
                    );
                }
                page.close("div");
            }
            page.close("div");
        }
        Message::Tool(t) => {
            let class = if t.is_error {
                "message tool error"
            } else {
                "message tool"
            };
            page.open("div", &[("class", class), ("data-call-id", &t.call_id)]);
            page.element("span", &[("class", "role")], "tool result");
            page.element("code", &[("class", "tool")], &t.name);
            content_parts(page, &t.content, at);
            page.close("div");
        }
    }
}

fn text_message(
    page: &mut Html,
    role: &'static str,
    content: &tower_chat::Content,
    at: MessageAt<'_>,
) {
    let class = match role {
        "system" => "message system",
        _ => "message user",
    };
    page.open("div", &[("class", class)]);
    page.element("span", &[("class", "role")], role);
    content_parts(page, content, at);
    page.close("div");
}

/// One model call: what it was sent that the timeline has not shown yet (the user's message, the results of the
/// tools the loop ran after the previous round), then the call with its facts and what it answered.
fn call_section(
    page: &mut Html,
    call: &CallRecord,
    shown: &mut Vec<Message>,
    decided: &Decided<'_>,
) {
    let request = call.request.messages.as_slice();
    let first_new = if request.starts_with(shown) {
        shown.len()
    } else {
        0
    };
    let at = |index| MessageAt {
        call: call.call_id.as_str(),
        index,
    };
    for (index, m) in request.iter().enumerate().skip(first_new) {
        message(page, m, at(index), decided);
    }
    let round = call.round_index.to_string();
    page.open(
        "section",
        &[
            ("class", "call"),
            ("data-call-id", call.call_id.as_str()),
            ("data-round", &round),
        ],
    );
    page.open("dl", &[("class", "call-facts")]);
    let latency = call
        .ended_at
        .duration_since(call.started_at)
        .unwrap_or_default();
    let ttft = call
        .first_token_at
        .map(|t| millis(t.duration_since(call.started_at).unwrap_or_default()));
    let usage = call.usage();
    let outcome = match call.outcome.error() {
        Some(error) => format!(
            "{} ({}: {})",
            call.outcome.as_str(),
            error.kind,
            error.message
        ),
        None => call.outcome.as_str().to_owned(),
    };
    let facts: [(&'static str, String); 10] = [
        (
            "model call",
            format!("round {} of the turn", call.round_index + 1),
        ),
        ("started", utc(call.started_at)),
        ("model", call.model.clone().unwrap_or_else(|| "—".into())),
        ("latency", millis(latency)),
        ("time to first token", ttft.unwrap_or_else(|| "—".into())),
        ("input tokens", usage.input_tokens.to_string()),
        ("output tokens", usage.output_tokens.to_string()),
        ("cost", call.cost.map_or_else(|| "—".into(), dollars)),
        ("outcome", outcome),
        (
            "finish",
            call.finish_reason()
                .map_or_else(|| "—".into(), |f| format!("{f:?}")),
        ),
    ];
    for (name, value) in &facts {
        page.element("dt", &[], name);
        page.element("dd", &[("class", "fact")], value);
    }
    page.close("dl");
    for (index, m) in call.response.messages.iter().enumerate() {
        message(page, m, at(request.len() + index), decided);
    }
    for approval in &call.response.approval_requests {
        page.open(
            "div",
            &[
                ("class", "approval-request"),
                ("data-approval-id", &approval.id),
            ],
        );
        page.element("span", &[("class", "label")], "approval requested");
        page.element("code", &[("class", "tool")], &approval.call.name);
        page.element(
            "pre",
            &[("class", "arguments")],
            &arguments_text(&approval.call.arguments),
        );
        if let Some(reason) = &approval.reason {
            page.element("p", &[("class", "reason")], reason);
        }
        page.element("code", &[("class", "approval-id")], &approval.id);
        page.close("div");
    }
    *shown = call.history();
    page.close("section");
}

/// The calls grouped by turn: a turn begins with a first round (round index 0); a resumed turn's rounds (a
/// paused turn continued after its approval) stay in the turn they continue.
fn turns(calls: &[CallRecord]) -> impl Iterator<Item = &[CallRecord]> {
    let mut rest = calls;
    std::iter::from_fn(move || {
        let (_, later) = rest.split_first()?;
        let len = 1 + later.iter().take_while(|c| c.round_index > 0).count();
        let (turn, after) = rest.split_at(len);
        rest = after;
        Some(turn)
    })
}

/// A turn's heading: how many model calls it made, their summed latency and tokens.
fn turn_heading(page: &mut Html, turn: &[CallRecord]) {
    let (Some(first), Some(last)) = (turn.first(), turn.last()) else {
        return;
    };
    let (input, output) = turn.iter().fold((0, 0), |(i, o), c| {
        (i + c.usage().input_tokens, o + c.usage().output_tokens)
    });
    let calls = turn.len();
    page.element(
        "h3",
        &[("class", "turn")],
        &format!(
            "Turn at {} · {calls} model call{} · {} · {input} input and {output} output tokens",
            utc(first.started_at),
            if calls == 1 { "" } else { "s" },
            millis(
                last.ended_at
                    .duration_since(first.started_at)
                    .unwrap_or_default()
            ),
        ),
    );
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
    let mut page = page_start("Conversation", Nav::Conversations, Some(&session));
    page.element(
        "p",
        &[("class", "conversation-id"), ("id", "conversation-id")],
        &id,
    );
    if calls.is_empty() && audit.is_empty() && pending.is_empty() {
        page.element(
            "p",
            &[("class", "empty")],
            "Nothing recorded for this conversation.",
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
    page.element(
        "p",
        &[("class", "summary")],
        &format!(
            "Caller {caller} · {} calls · {input} input and {output} output tokens · {}",
            calls.len(),
            cost
        ),
    );
    if !pending.is_empty() {
        page.element("h2", &[], "Waiting for a decision");
        approvals_table(&mut page, &pending, &session.csrf, false);
    }
    page.element("h2", &[], "Timeline");
    let mut decided = Decided::new();
    for record in &audit {
        if let Some(call) = &record.call {
            decided.entry(call.id.as_str()).or_default().push(record);
        }
    }
    let mut shown = Vec::new();
    for turn in turns(&calls) {
        turn_heading(&mut page, turn);
        for call in turn {
            call_section(&mut page, call, &mut shown, &decided);
        }
    }
    page.element("h2", &[], "Approvals and audit");
    if audit.is_empty() {
        page.element("p", &[("class", "empty")], "No decision recorded.");
    } else {
        page.open("table", &[("id", "audit"), ("class", "audit")]);
        page.markup(
            "<thead><tr><th>Decided</th><th>Approval</th><th>Tool</th><th>Arguments</th><th>Outcome</th>\
             <th>Approver</th><th>Caller</th><th>Reason</th></tr></thead><tbody>",
        );
        for record in &audit {
            page.open(
                "tr",
                &[
                    ("data-approval-id", &record.approval_id),
                    ("data-outcome", record.outcome.as_str()),
                ],
            );
            page.element("td", &[], &utc(record.decided_at));
            page.element("td", &[], &record.approval_id);
            let (tool, arguments) = record
                .call
                .as_ref()
                .map_or(("—".to_owned(), String::new()), |c| {
                    (c.name.clone(), arguments_text(&c.arguments))
                });
            page.element("td", &[], &tool);
            page.open("td", &[]);
            page.element("pre", &[], &arguments);
            page.close("td");
            page.element("td", &[("class", "outcome")], record.outcome.as_str());
            page.element(
                "td",
                &[("class", "approver")],
                record.approver.as_deref().unwrap_or("—"),
            );
            page.element(
                "td",
                &[],
                record.caller.as_ref().map_or("—", |c| c.as_str()),
            );
            page.element(
                "td",
                &[("class", "reason")],
                record.reason.as_deref().unwrap_or("—"),
            );
            page.close("tr");
        }
        page.markup("</tbody></table>");
    }
    html_response(StatusCode::OK, page_end(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_spans_read_as_people_write_them() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_067_050);
        assert_eq!(utc(t), "2026-11-30 19:30:50");
        assert_eq!(utc(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00");
        assert_eq!(
            utc(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00"
        );
        assert_eq!(span(Duration::from_secs(59)), "59 s");
        assert_eq!(span(Duration::from_secs(3 * 3600 + 120)), "3 h 2 min");
        assert_eq!(millis(Duration::from_micros(2500)), "2.5 ms");
        assert_eq!(dollars(Cost::from_nanos(18_000)), "$0.000018");
    }
}
