//! The keys page (`/console/keys`): every managed key with its team, allowed models and routes, expiry, status
//! and its spend today and this month against its budgets (without one: what the store's spend rollup holds);
//! a form that creates a key (a refused one comes back filled with what the operator typed, the reason beside
//! it). Creating one answers the page that shows its secret, once ([`secret_page`]): the secret is in that
//! page's body and nowhere else (not in a URL, not in the store, not in a log), and the page is answered
//! `Cache-Control: no-store`.

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::{header, HeaderValue, StatusCode};
use maud::{html, Markup};
use tower_chat_limits::CounterKind;

use super::extract::PageForm;
use super::key_form::KeyForm;
use super::layout::{html_response, layout, Nav};
use super::managed::{self, budget_cell, form_error, operator, patterns};
use super::session::Session;
use super::state::ConsoleState;
use crate::error::ApiError;
use crate::keys::ops::{self, AdminState};
use crate::keys::record::{now_ms, Row};

/// `GET /console/keys`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refused) => return *refused,
    };
    render(&state, keys, &session, &KeyForm::default(), None).await
}

/// The keys page, its create form filled with `form`; a refusal of it shown beside the form, with its status.
async fn render(
    state: &ConsoleState,
    keys: &AdminState,
    session: &Session,
    form: &KeyForm,
    refusal: Option<&ApiError>,
) -> Response {
    let table = keys.keys.table();
    let now = now_ms();
    let mut listed: Vec<_> = table.keys.iter().collect();
    listed.sort_by(|a, b| a.row.name.cmp(&b.row.name));
    let (today, month) = managed::spent(state).await;
    let mut rows = Vec::with_capacity(listed.len());
    for key in listed {
        let usage = match ops::key_usage(keys, &key.row.name).await {
            Ok(usage) => usage,
            Err(error) => {
                tracing::warn!(key = %key.row.id, error = %error.message, "console: cannot read a key's counters");
                None
            }
        };
        let team = key.doc.team.as_deref().map(|id| {
            let name = table
                .teams
                .iter()
                .find(|(row, _)| row.id == id)
                .map(|(row, _)| row.name.clone());
            (id.to_owned(), name)
        });
        rows.push(html! {
            tr data-key=(key.row.id) {
                th scope="row" data-label="name" { a href=(format!("/console/keys/{}", key.row.id)) { (key.row.name) } }
                td class="id" data-label="id" { code { (key.row.id) } }
                td data-label="team" {
                    @match &team {
                        Some((id, Some(name))) => a href=(format!("/console/teams/{id}")) { (name) },
                        // A revoked member of a team deleted since: the team's history is in the audit log.
                        Some((id, None)) => a href=(format!("/console/audit?target={id}")) { "deleted team" },
                        None => "—",
                    }
                }
                td data-label="models" { (patterns(&key.doc.models)) }
                td data-label="routes" { (patterns(&key.doc.routes)) }
                td data-label="expires" {
                    @match key.doc.expires_at { Some(at) => (managed::at(at)), None => "never" }
                }
                td class="status" data-label="status" { (managed::status(&key.doc, key.row.previous_digest.is_some(), now)) }
                td class="number" data-label="today" { (budget_cell(usage.as_ref(), CounterKind::CostPerDay, today.get(&key.row.name).copied())) }
                td class="number" data-label="this month" { (budget_cell(usage.as_ref(), CounterKind::CostPerMonth, month.get(&key.row.name).copied())) }
                td class="number" data-label="requests" { (budget_cell(usage.as_ref(), CounterKind::Requests, None)) }
            }
        });
    }
    let main = html! {
        p class="hint" {
            "Client keys kept in the gateway's database, changed here or through the admin API (/admin/keys); \
             every change is in the " a href="/console/audit" { "audit log" } "."
        }
        @if rows.is_empty() {
            p class="empty" id="keys-empty" { "No managed keys yet." }
        } @else {
            div class="table-frame" tabindex="0" role="region" aria-label="Managed keys" {
                table id="keys" class="keys" {
                    thead {
                        tr {
                            @for heading in ["name", "id", "team", "models", "routes", "expires", "status", "today", "this month", "requests"] {
                                th scope="col" { (heading) }
                            }
                        }
                    }
                    tbody { @for row in &rows { (row) } }
                }
            }
        }
        h2 id="create-heading" { "Create a key" }
        @if let Some(error) = refusal { (form_error("create-key-error", error)) }
        form method="post" action="/console/keys" class="create" id="create-key" aria-labelledby="create-heading" {
            input type="hidden" name="csrf" value=(session.csrf);
            (form.fields("key", &table.teams, true))
            button type="submit" id="create-key-button" { "Create key" }
        }
    };
    html_response(
        refusal.map_or(StatusCode::OK, |e| e.status),
        layout("Keys", Nav::Keys, Some(session), main),
    )
}

/// `POST /console/keys`: the key created as the admin API creates it, and its secret shown once.
pub(crate) async fn create(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageForm(form): PageForm<KeyForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let created = async {
        let new = form.new_key()?;
        ops::create_key(keys, &operator(&session), new).await
    };
    match created.await {
        Ok((row, secret)) => secret_page(&session, &row, &secret, "created", None),
        Err(error) => render(&state, keys, &session, &form, Some(&error)).await,
    }
}

/// The one page a secret is ever shown on, after a creation or a rotation: never cached, never stored.
pub(super) fn secret_page(
    session: &Session,
    row: &Row,
    secret: &str,
    what: &str,
    more: Option<Markup>,
) -> Response {
    let main = html! {
        p class="notice" role="status" id="secret-notice" {
            "Key " strong { (row.name) } " " (what) ". Copy its secret now: "
            strong { "it will not be shown again" }
            " (the gateway keeps only its SHA-256)."
        }
        @if let Some(more) = more { (more) }
        h2 { "Secret" }
        pre class="secret" id="new-secret" tabindex="0" { (secret) }
        p { a href=(format!("/console/keys/{}", row.id)) id="to-key" { "Go to the key" } }
    };
    let mut response = html_response(
        StatusCode::OK,
        layout("New secret", Nav::Keys, Some(session), main),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
