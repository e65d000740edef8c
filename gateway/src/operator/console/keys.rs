//! The keys page (`/console/keys`): every managed key with its team, allowed models and routes, expiry, status
//! and its spend today and this month against its budgets (without one: what the store's spend rollup holds);
//! a form that creates a key. Creating one answers the page that shows its secret, once ([`secret_page`]): the
//! secret is in that page's body and nowhere else (not in a URL, not in the store, not in a log), and the page
//! is answered `Cache-Control: no-store`.

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::{header, HeaderValue, StatusCode};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Map;
use tower_chat_limits::CounterKind;

use super::extract::PageForm;
use super::layout::{html_response, layout, Nav};
use super::managed::{
    self, budget_cell, limits_fields, operator, patterns, refused, split_list, LimitsForm,
};
use super::session::Session;
use super::spend_range::parse_date;
use super::state::ConsoleState;
use crate::error::ApiError;
use crate::keys::ops::{self, NewKey};
use crate::keys::record::{invalid, now_ms, Row};

/// The create form: the CSRF token, the name, the owner team's id (empty: none), the last valid day (UTC,
/// empty: none), the allowed models, and the limits.
#[derive(Debug, Deserialize)]
pub(crate) struct KeyForm {
    csrf: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    team: String,
    #[serde(default)]
    expires: String,
    #[serde(default)]
    models: String,
    #[serde(flatten)]
    limits: LimitsForm,
}

impl KeyForm {
    /// The key the form asks for, as the admin API takes it.
    fn new_key(&self) -> Result<NewKey, ApiError> {
        let expires = self.expires.trim();
        let expires_at = if expires.is_empty() {
            None
        } else {
            // Valid through the whole day named: refused from the next day's midnight, UTC.
            let day = parse_date(expires).map_err(|m| invalid("invalid_expiry", m))?;
            Some(day.plus(1).days_since_epoch() * 86_400)
        };
        let team = self.team.trim();
        Ok(NewKey {
            name: self.name.trim().to_owned(),
            team: (!team.is_empty()).then(|| team.to_owned()),
            expires_at,
            models: split_list(&self.models),
            routes: Vec::new(),
            limits: self.limits.limits()?,
            metadata: Map::new(),
        })
    }
}

/// `GET /console/keys`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refused) => return *refused,
    };
    let table = keys.keys.table();
    let now = now_ms();
    let mut listed: Vec<_> = table.keys.iter().collect();
    listed.sort_by(|a, b| a.row.name.cmp(&b.row.name));
    let (today, month) = managed::spent(&state).await;
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
                .map_or(id, |(row, _)| row.name.as_str());
            (id.to_owned(), name.to_owned())
        });
        rows.push(html! {
            tr data-key=(key.row.id) {
                th scope="row" data-label="name" { a href=(format!("/console/keys/{}", key.row.id)) { (key.row.name) } }
                td class="id" data-label="id" { code { (key.row.id) } }
                td data-label="team" {
                    @match &team {
                        Some((id, name)) => a href=(format!("/console/teams/{id}")) { (name) },
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
        (create_form(&session, &table.teams))
    };
    html_response(
        StatusCode::OK,
        layout("Keys", Nav::Keys, Some(&session), main),
    )
}

fn create_form(session: &Session, teams: &[(Row, crate::keys::record::TeamDoc)]) -> Markup {
    let mut teams: Vec<&Row> = teams.iter().map(|(row, _)| row).collect();
    teams.sort_by(|a, b| a.name.cmp(&b.name));
    html! {
        form method="post" action="/console/keys" class="create" id="create-key" aria-labelledby="create-heading" {
            input type="hidden" name="csrf" value=(session.csrf);
            label for="key-name" { "Name (the caller it becomes)" }
            input type="text" id="key-name" name="name" required maxlength="64" pattern="[A-Za-z0-9._\\-]+" autocomplete="off";
            label for="key-team" { "Team" }
            select id="key-team" name="team" {
                option value="" { "none" }
                @for team in teams { option value=(team.id) { (team.name) } }
            }
            label for="key-expires" { "Valid through (UTC day; empty: no expiry)" }
            input type="date" id="key-expires" name="expires";
            label for="key-models" { "Allowed models (names or patterns with *, separated by commas; empty: any)" }
            input type="text" id="key-models" name="models" autocomplete="off";
            (limits_fields("key"))
            button type="submit" id="create-key-button" { "Create key" }
        }
    }
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
        Err(error) => refused(&error),
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
