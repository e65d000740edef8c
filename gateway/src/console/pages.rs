//! The approvals inbox and the conversations list; a conversation's timeline is [`super::timeline`].

use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use http::StatusCode;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::json;
use tower_chat::ToolArguments;
use tower_chat_persistence::ConversationQuery;

use super::format::{dollars, span, url_encode, utc};
use super::session::Session;
use super::{check_csrf, error_page, html_response, layout, see_other, ConsoleState, Nav};
use crate::extract::{PageForm, PageQuery};
use crate::operator::{self, Listed, Operator};

/// Conversations per page of the list.
const PAGE_SIZE: u32 = 50;

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

/// JSON shown to a person: pretty, as text (the template escapes it like anything else).
pub(crate) fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

pub(crate) fn arguments_text(arguments: &ToolArguments) -> String {
    match arguments {
        ToolArguments::Json(value) => pretty(value),
        ToolArguments::Invalid { raw, .. } => raw.clone(),
    }
}

fn conversation_link(conversation: &str) -> Markup {
    let href = format!("/console/conversation?id={}", url_encode(conversation));
    html! { a href=(href) class="conversation" { (conversation) } }
}

/// The wall clock (ages and "… ago").
pub(crate) fn now() -> SystemTime {
    SystemTime::now()
}

/// One row of the inbox; `console.js` builds the same rows from `/console/api/approvals`.
fn approval_row(listed: &Listed, csrf: &str) -> Markup {
    let p = &listed.paused;
    let id = p.notice.id.as_str();
    let age = now().duration_since(p.paused_at).unwrap_or_default();
    html! {
        tr data-id=(id) data-status=(listed.status) {
            td class="tool" data-label="Tool" { (p.notice.tool) }
            td class="arguments" data-label="Arguments" { pre { (pretty(&p.notice.arguments)) } }
            td class="reason" data-label="Policy's reason" { (p.notice.reason.as_deref().unwrap_or("—")) }
            td class="caller" data-label="Caller" { (p.caller.as_ref().map_or("(no key)", |c| c.as_str())) }
            td data-label="Conversation" { (conversation_link(p.conversation.as_str())) }
            td class="age" data-label="Age" { (span(age)) }
            td class="expires" data-label="Expires in" { (span(p.expires_in)) }
            td class="status" data-label="Status" { (listed.status) }
            td class="actions" {
                @if listed.status == "pending" {
                    form method="post" action=(format!("/console/approvals/{}/decision", url_encode(id))) class="decide" {
                        input type="hidden" name="csrf" value=(csrf);
                        input type="text" name="reason" placeholder="reason" maxlength="4096" aria-label="reason";
                        button type="submit" name="decision" value="approve" class="approve" { "Approve" }
                        button type="submit" name="decision" value="deny" class="deny" { "Deny" }
                    }
                } @else {
                    span class="waiting" { "waiting for the client to resume" }
                }
            }
        }
    }
}

/// The approvals table; `live` marks the inbox's (the one `console.js` keeps current, found by its ids).
pub(crate) fn approvals_table(listed: &[Listed], csrf: &str, live: bool) -> Markup {
    html! {
        p id=[live.then_some("no-approvals")] class=(if listed.is_empty() { "empty" } else { "empty hidden" }) {
            "Nothing waits for a decision."
        }
        table id=[live.then_some("approvals")] class=(if listed.is_empty() { "approvals hidden" } else { "approvals" }) {
            thead {
                tr {
                    th { "Tool" } th { "Arguments" } th { "Policy's reason" } th { "Caller" } th { "Conversation" }
                    th { "Age" } th { "Expires in" } th { "Status" } th { "Decision" }
                }
            }
            tbody {
                @for entry in listed { (approval_row(entry, csrf)) }
            }
        }
    }
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
    let hint = if state.operators.approval_store.is_some() {
        "Calls paused by every gateway process on this database wait here for an operator. The list refreshes \
         by itself."
    } else {
        "Calls paused in this gateway process wait here for an operator. The list refreshes by itself."
    };
    let main = html! {
        @if let (Some(done), Some(id)) = (&decided.done, &decided.id) {
            p class="notice" id="decided" {
                (id) ": " (done) ". The client's waiting turn resumes when it resends."
            }
        }
        p class="hint" { (hint) }
        p id="more-approvals" class=(if page_of.next.is_some() { "hint" } else { "hint hidden" }) {
            "Showing the oldest " (operator::MAX_LIST) " pending approvals; more wait behind them."
        }
        (approvals_table(&page_of.listed, &session.csrf, true))
    };
    html_response(
        StatusCode::OK,
        layout("Pending approvals", Nav::Inbox, Some(&session), main),
    )
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
    let now = now();
    let main = html! {
        @if listed.is_empty() {
            p class="empty" { "No conversation recorded yet." }
        }
        table id="conversations" class="conversations" {
            thead {
                tr {
                    th { "Conversation" } th { "Caller" } th { "Last activity" } th { "Model calls" }
                    th { "Input tokens" } th { "Output tokens" } th { "Cost" }
                }
            }
            tbody {
                @for c in listed.iter().take(PAGE_SIZE as usize) {
                    @let cost = if c.unpriced_calls == c.calls {
                        "—".to_owned()
                    } else if c.unpriced_calls > 0 {
                        format!("{} + {} unpriced", dollars(c.cost), c.unpriced_calls)
                    } else {
                        dollars(c.cost)
                    };
                    tr {
                        td { (conversation_link(c.conversation_id.as_str())) }
                        td { (c.caller.as_ref().map_or("(no key)", |c| c.as_str())) }
                        td title=(utc(c.last_started_at)) {
                            (span(now.duration_since(c.last_started_at).unwrap_or_default())) " ago"
                        }
                        td class="number" { (c.calls) }
                        td class="number" { (c.input_tokens) }
                        td class="number" { (c.output_tokens) }
                        td class="number" { (cost) }
                    }
                }
            }
        }
        p class="pager" {
            @if number > 0 {
                a href=(format!("/console/conversations?page={}", number - 1)) { "← newer" }
            }
            @if more {
                a href=(format!("/console/conversations?page={}", number + 1)) { "older →" }
            }
        }
    };
    html_response(
        StatusCode::OK,
        layout("Conversations", Nav::Conversations, Some(&session), main),
    )
}
