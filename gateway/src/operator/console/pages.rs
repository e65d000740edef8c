//! The approvals inbox and the conversations list; a conversation's timeline is [`super::timeline`].

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use http::StatusCode;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::json;
use tower_chat::ToolArguments;
use tower_chat_persistence::ConversationQuery;

use super::card::{self, conversation_link, now};
use super::extract::{PageForm, PageQuery};
use super::format::{dollars, span, url_encode, utc};
use super::layout::{check_csrf, error_page, html_response, layout, see_other, Nav};
use super::session::Session;
use super::state::ConsoleState;
use crate::operator::{self, Listed, Operator};

/// Conversations per page of the list.
const PAGE_SIZE: u32 = 50;

/// The inbox's query after a decision: what was decided (`done`: `approved` | `denied`) on which approval
/// (`id`), its tool, target and conversation. Shown as text only (escaped), never trusted for anything else.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DecidedParams {
    done: Option<String>,
    id: Option<String>,
    tool: Option<String>,
    target: Option<String>,
    conversation: Option<String>,
}

impl DecidedParams {
    /// "Approved `write_file` on `notes/plan.txt` in conversation plan-1.", when the query names a decision.
    fn banner(&self) -> Option<Markup> {
        let verb = match self.done.as_deref()? {
            "approved" => "Approved",
            "denied" => "Denied",
            _ => return None,
        };
        let id = self.id.as_deref()?;
        Some(html! {
            p class="notice" id="decided" role="status" data-decision=(self.done.as_deref().unwrap_or_default()) {
                (verb) " "
                @match &self.tool {
                    Some(tool) => code class="decided-tool" { (tool) },
                    None => { "approval " code { (id) } },
                }
                @if let Some(target) = &self.target {
                    " on " code class="decided-target" { (target) }
                }
                @if let Some(conversation) = &self.conversation {
                    " in conversation " (conversation_link(conversation))
                }
                ". The client's waiting turn resumes when it resends."
            }
        })
    }
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

/// `GET /console`: the approvals inbox: the calls waiting for a decision, then the decided calls whose client
/// has not resumed yet; after a decision, a banner naming it.
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
    let (waiting, answered): (Vec<Listed>, Vec<Listed>) = page_of
        .listed
        .into_iter()
        .partition(|l| l.status == "pending");
    let files = state.operators.files.as_deref();
    let records = state.records.as_deref();
    let waiting_cards = card::cards(files, records, &waiting).await;
    let answered_cards = card::cards(files, records, &answered).await;
    let main = html! {
        @if let Some(banner) = decided.banner() {
            (banner)
        }
        p class="hint" { (hint) }
        p id="more-approvals" class=(if page_of.next.is_some() { "hint" } else { "hint hidden" }) {
            "Showing the oldest " (operator::MAX_LIST) " pending approvals; more wait behind them."
        }
        section aria-labelledby="pending-heading" {
            h2 id="pending-heading" { "Pending (" span id="pending-count" { (waiting.len()) } ")" }
            (card::approvals_table(&waiting_cards, &session.csrf, card::TableIds {
                table: Some("approvals"),
                empty: Some("no-approvals"),
                empty_text: "Nothing waits for a decision.",
            }))
        }
        section aria-labelledby="decided-heading" {
            h2 id="decided-heading" { "Decided, waiting for the client (" span id="decided-count" { (answered.len()) } ")" }
            p class="hint" {
                "Decided calls stay here until their client resends the conversation and the gateway resumes the \
                 turn (or until they expire)."
            }
            (card::approvals_table(&answered_cards, &session.csrf, card::TableIds {
                table: Some("decided-approvals"),
                empty: Some("no-decided"),
                empty_text: "No decided call waits for its client.",
            }))
        }
    };
    html_response(
        StatusCode::OK,
        layout("Approvals", Nav::Inbox, Some(&session), main),
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

/// `POST /console/approvals/{id}/decision` (form: `csrf`, `decision` = `approve` | `deny`, `reason`). Answers
/// with the inbox, whose banner names the tool, its target and the conversation decided on.
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
    // Read before deciding: once decided, the client may resume and take the approval at any moment.
    let named = operator::find_listed(&state.operators, &id).await;
    let operator = Operator::named(&session.operator);
    match operator::record_decision(&state.operators, &operator, &id, approved, reason).await {
        Ok(()) => {
            let mut location = format!(
                "/console?done={}&id={}",
                if approved { "approved" } else { "denied" },
                url_encode(&id)
            );
            if let Some(listed) = named {
                let notice = &listed.paused.notice;
                location.push_str(&format!(
                    "&tool={}&conversation={}",
                    url_encode(&notice.tool),
                    url_encode(listed.paused.conversation.as_str())
                ));
                if let Some(target) = card::target(&notice.arguments) {
                    location.push_str(&format!("&target={}", url_encode(&target)));
                }
            }
            see_other(&location)
        }
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

/// `GET /console/approvals/{id}/decision`: what a decision's URL shows when opened as a page (a bookmarked or
/// shared link, a reload after posting): the approval's card with its decision form while it waits or awaits its
/// client, else a 404 page saying it is not listed. Never the API's `405`.
pub(crate) async fn decision_page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    let Some(listed) = operator::find_listed(&state.operators, &id).await else {
        return error_page(
            StatusCode::NOT_FOUND,
            &format!(
                "No approval {id:?} is listed: it was decided and its client resumed, it expired, or it never \
                 existed. The conversation's timeline keeps every decision."
            ),
        );
    };
    let listed = [listed];
    let cards = card::cards(
        state.operators.files.as_deref(),
        state.records.as_deref(),
        &listed,
    )
    .await;
    let main = html! {
        p class="hint" {
            @if listed[0].status == "pending" {
                "This approval waits for a decision."
            } @else {
                "This approval was decided; it waits for its client to resume the turn."
            }
            " " a href="/console" { "All approvals" }
        }
        (card::approvals_table(&cards, &session.csrf, card::TableIds {
            table: None,
            empty: None,
            empty_text: "Nothing waits for a decision.",
        }))
    };
    html_response(
        StatusCode::OK,
        layout("Approval", Nav::Inbox, Some(&session), main),
    )
}
