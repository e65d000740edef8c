//! One managed key's page (`/console/keys/{id}`): what it is, its limits against its counters, and the two
//! changes that cannot be taken back, each behind a confirmation that works without script: a first POST
//! answers a page asking to confirm, whose form posts again with `confirm=1`. A rotation shows the new secret
//! once, as a creation does; a revocation leads back to the key's page.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::html;
use serde::Deserialize;

use super::extract::{PageForm, PageQuery};
use super::keys::secret_page;
use super::layout::{error_page, html_response, layout, see_other, Nav};
use super::managed::{self, limits_list, operator, patterns, refused, usage_table};
use super::session::Session;
use super::state::ConsoleState;
use crate::keys::ops::{self, AdminState, DEFAULT_GRACE, MAX_GRACE};
use crate::keys::record::{invalid, now_ms, Kind};

/// A confirmed change's form: the CSRF token, `confirm=1` once confirmed, and a rotation's grace period.
#[derive(Debug, Deserialize)]
pub(crate) struct ChangeForm {
    csrf: Option<String>,
    confirm: Option<String>,
    grace_seconds: Option<String>,
}

impl ChangeForm {
    fn confirmed(&self) -> bool {
        self.confirm.as_deref() == Some("1")
    }
}

/// The key page's query after a change: `done=revoked`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
}

/// `GET /console/keys/{id}`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageQuery(done): PageQuery<Done>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let table = keys.keys.table();
    let Some(key) = table.keys.iter().find(|k| k.row.id == id) else {
        return error_page(StatusCode::NOT_FOUND, &format!("There is no key {id}."));
    };
    let usage = match ops::key_usage(keys, &key.row.name).await {
        Ok(usage) => usage,
        Err(error) => return refused(&error),
    };
    let now = now_ms();
    let status = managed::status(&key.doc, key.row.previous_digest.is_some(), now);
    let team = key.doc.team.as_deref().map(|team_id| {
        let name = table
            .teams
            .iter()
            .find(|(row, _)| row.id == team_id)
            .map_or(team_id, |(row, _)| row.name.as_str());
        (team_id.to_owned(), name.to_owned())
    });
    let doc = &key.doc;
    let main = html! {
        @if done.done.as_deref() == Some("revoked") {
            p class="notice" role="status" id="revoked-notice" { "Key " (key.row.name) " is revoked: its secret is refused from now on." }
        }
        dl class="facts" id="key-facts" {
            dt { "name" } dd id="shown-key-name" { (key.row.name) }
            dt { "id" } dd { code { (key.row.id) } }
            dt { "status" } dd id="key-status" { (status) }
            dt { "team" } dd {
                @match &team {
                    Some((team_id, name)) => a href=(format!("/console/teams/{team_id}")) { (name) },
                    None => "—",
                }
            }
            dt { "models" } dd { (patterns(&doc.models)) }
            dt { "routes" } dd { (patterns(&doc.routes)) }
            dt { "expires" } dd { @match doc.expires_at { Some(at) => (managed::at(at)), None => "never" } }
            dt { "secret" } dd { code { (doc.hint) } }
            @if status == "rotating" {
                @if let Some(until) = doc.previous_valid_until {
                    dt { "previous secret valid until" } dd { (managed::at(until / 1000)) }
                }
            }
            dt { "created" } dd { (managed::at(doc.created_at)) }
            dt { "updated" } dd { (managed::at(doc.updated_at)) }
            @if let Some(at) = doc.revoked_at {
                dt { "revoked" } dd { (managed::at(at)) }
            }
        }
        h2 { "Limits" }
        (limits_list(&doc.limits))
        h2 { "Use against its limits" }
        (usage_table(usage.as_ref(), "key-usage", keys.limits.is_some()))
        p { a href=(format!("/console/audit?target={}", key.row.id)) { "This key's changes in the audit log" } }
        @if doc.revoked_at.is_none() {
            h2 id="rotate-heading" { "Rotate" }
            form method="post" action=(format!("/console/keys/{}/rotate", key.row.id)) class="create" id="rotate" aria-labelledby="rotate-heading" {
                input type="hidden" name="csrf" value=(session.csrf);
                label for="grace" { "Grace period: seconds the current secret stays valid (at most " (MAX_GRACE.as_secs()) ")" }
                input type="number" id="grace" name="grace_seconds" min="0" max=(MAX_GRACE.as_secs()) value=(DEFAULT_GRACE.as_secs());
                button type="submit" id="rotate-button" { "Rotate…" }
            }
            h2 id="revoke-heading" { "Revoke" }
            form method="post" action=(format!("/console/keys/{}/revoke", key.row.id)) class="create" id="revoke" aria-labelledby="revoke-heading" {
                input type="hidden" name="csrf" value=(session.csrf);
                button type="submit" class="deny" id="revoke-button" { "Revoke…" }
            }
        }
    };
    html_response(
        StatusCode::OK,
        layout(
            &format!("Key {}", key.row.name),
            Nav::Keys,
            Some(&session),
            main,
        ),
    )
}

/// The page asking to confirm `question`, whose form posts to `action` again with `confirm=1` (and the grace
/// period, for a rotation).
fn confirmation(
    session: &Session,
    id: &str,
    action: &str,
    question: &str,
    button: &str,
    grace: Option<&str>,
) -> Response {
    let main = html! {
        p id="confirm-question" { (question) }
        form method="post" action=(format!("/console/keys/{id}/{action}")) class="confirm" id="confirm" {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="confirm" value="1";
            @if let Some(grace) = grace {
                input type="hidden" name="grace_seconds" value=(grace);
            }
            button type="submit" class="deny" id="confirm-button" { (button) }
            " "
            a href=(format!("/console/keys/{id}")) id="cancel" { "Cancel" }
        }
    };
    html_response(
        StatusCode::OK,
        layout("Confirm", Nav::Keys, Some(session), main),
    )
}

/// The name of key `id`, or the 404 page.
fn key_name(keys: &AdminState, id: &str) -> Result<String, Box<Response>> {
    keys.keys
        .row(Kind::Key, id)
        .map(|row| row.name)
        .ok_or_else(|| {
            Box::new(error_page(
                StatusCode::NOT_FOUND,
                &format!("There is no key {id}."),
            ))
        })
}

/// `POST /console/keys/{id}/rotate`: first the confirmation, then (`confirm=1`) the rotation and its new secret.
pub(crate) async fn rotate(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageForm(form): PageForm<ChangeForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let name = match key_name(keys, &id) {
        Ok(name) => name,
        Err(refusal) => return *refusal,
    };
    let grace_text = form.grace_seconds.as_deref().map(str::trim).unwrap_or("");
    let grace = if grace_text.is_empty() {
        None
    } else {
        match grace_text.parse::<u64>() {
            Ok(seconds) => Some(seconds),
            Err(_) => {
                return refused(&invalid(
                    "invalid_grace",
                    "the grace period must be a whole number of seconds",
                ))
            }
        }
    };
    let seconds = grace.unwrap_or(DEFAULT_GRACE.as_secs());
    if !form.confirmed() {
        return confirmation(
            &session,
            &id,
            "rotate",
            &format!(
                "Rotate key {name}? It gets a new secret; the current one stays valid for {seconds} seconds, then \
                 is refused."
            ),
            "Rotate key",
            Some(&seconds.to_string()),
        );
    }
    match ops::rotate_key(keys, &operator(&session), id, grace).await {
        Ok((row, secret)) => {
            let until = row
                .key_doc()
                .ok()
                .and_then(|doc| doc.previous_valid_until)
                .filter(|until| *until > now_ms());
            let more = html! {
                p id="grace-notice" {
                    @match until {
                        Some(until) => { "The previous secret stays valid until " (managed::at(until / 1000)) "." },
                        None => "The previous secret is refused from now on.",
                    }
                }
            };
            secret_page(&session, &row, &secret, "rotated", Some(more))
        }
        Err(error) => refused(&error),
    }
}

/// `POST /console/keys/{id}/revoke`: first the confirmation, then (`confirm=1`) the revocation.
pub(crate) async fn revoke(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageForm(form): PageForm<ChangeForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let name = match key_name(keys, &id) {
        Ok(name) => name,
        Err(refusal) => return *refusal,
    };
    if !form.confirmed() {
        return confirmation(
            &session,
            &id,
            "revoke",
            &format!(
                "Revoke key {name}? This cannot be undone: its secret is refused from now on."
            ),
            "Revoke key",
            None,
        );
    }
    match ops::revoke_key(keys, &operator(&session), id.clone()).await {
        Ok(_) => see_other(&format!("/console/keys/{id}?done=revoked")),
        Err(error) => refused(&error),
    }
}
