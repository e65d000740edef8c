//! One managed key's page (`/console/keys/{id}`): what it is, its limits against its counters, a form that
//! changes it as the admin API's `PATCH` does (filled with its values; a refused change comes back with what
//! the operator typed and the reason beside it), and the two changes that cannot be taken back, each behind a
//! confirmation that works without script: a first POST answers a page asking to confirm, whose form posts
//! again with `confirm=1`. A rotation shows the new secret once, as a creation does; a revocation and a change
//! lead back to the key's page. A revoked key has neither form: it can no longer be changed.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::html;
use serde::Deserialize;

use super::extract::{PageForm, PageQuery};
use super::key_form::KeyForm;
use super::keys::secret_page;
use super::layout::{error_page, html_response, layout, see_other, Nav};
use super::managed::{self, form_error, limits_list, operator, patterns, refused, usage_table};
use super::session::Session;
use super::state::ConsoleState;
use crate::error::ApiError;
use crate::keys::ops::{self, AdminState, DEFAULT_GRACE, MAX_GRACE};
use crate::keys::record::{invalid, now_ms, Kind};

/// A confirmed change's form: the CSRF token, `confirm=1` once confirmed, and a rotation's grace period.
#[derive(Debug, Deserialize)]
pub(crate) struct ChangeForm {
    pub(super) csrf: Option<String>,
    confirm: Option<String>,
    grace_seconds: Option<String>,
}

impl ChangeForm {
    /// Whether the confirmation page's form sent it.
    pub(super) fn confirmed(&self) -> bool {
        self.confirm.as_deref() == Some("1")
    }
}

/// The key page's query after a change: `done=revoked` or `done=updated`.
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
    render(keys, &session, &id, done.done.as_deref(), None).await
}

/// Key `id`'s page; after a refused change, the edit form holds what the operator typed and the reason is
/// beside it, answered with the refusal's status.
async fn render(
    keys: &AdminState,
    session: &Session,
    id: &str,
    done: Option<&str>,
    refused_edit: Option<(&KeyForm, &ApiError)>,
) -> Response {
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
    // A revoked key may still name a team deleted since: it keeps the id, whose history the audit log holds.
    let team = key.doc.team.as_deref().map(|team_id| {
        let name = table
            .teams
            .iter()
            .find(|(row, _)| row.id == team_id)
            .map(|(row, _)| row.name.clone());
        (team_id.to_owned(), name)
    });
    let doc = &key.doc;
    let form = refused_edit.map_or_else(|| KeyForm::of(doc), |(form, _)| form.clone());
    let main = html! {
        @match done {
            Some("revoked") => p class="notice" role="status" id="revoked-notice" { "Key " (key.row.name) " is revoked: its secret is refused from now on." },
            Some("updated") => p class="notice" role="status" id="updated-notice" { "Key " (key.row.name) " is changed: the next call it makes is held to what it shows now." },
            _ => {}
        }
        dl class="facts" id="key-facts" {
            dt { "name" } dd id="shown-key-name" { (key.row.name) }
            dt { "id" } dd { code { (key.row.id) } }
            dt { "status" } dd id="key-status" { (status) }
            dt { "team" } dd {
                @match &team {
                    Some((team_id, Some(name))) => a href=(format!("/console/teams/{team_id}")) { (name) },
                    Some((team_id, None)) => {
                        "a deleted team (" a href=(format!("/console/audit?target={team_id}")) { code { (team_id) } } ")"
                    },
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
            h2 id="edit-heading" { "Change" }
            @if let Some((_, error)) = refused_edit { (form_error("edit-key-error", error)) }
            form method="post" action=(format!("/console/keys/{}/edit", key.row.id)) class="create" id="edit-key" aria-labelledby="edit-heading" {
                input type="hidden" name="csrf" value=(session.csrf);
                p class="hint" {
                    "The name stays: it is the caller the key's counters and call records are kept under. \
                     Its metadata is changed through the admin API."
                }
                (form.fields("edit", &table.teams, false))
                button type="submit" id="edit-key-button" { "Save changes" }
            }
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
        } @else {
            @if let Some((_, error)) = refused_edit { (form_error("edit-key-error", error)) }
        }
    };
    html_response(
        refused_edit.map_or(StatusCode::OK, |(_, error)| error.status),
        layout(
            &format!("Key {}", key.row.name),
            Nav::Keys,
            Some(session),
            main,
        ),
    )
}

/// `POST /console/keys/{id}/edit`: the key changed as the admin API's `PATCH` changes it ([`ops::update_key`],
/// one audit entry under the operator's name); then its page.
pub(crate) async fn edit(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageForm(form): PageForm<KeyForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let table = keys.keys.table();
    let Some(key) = table.keys.iter().find(|k| k.row.id == id) else {
        return error_page(StatusCode::NOT_FOUND, &format!("There is no key {id}."));
    };
    // What the page showed: a field the operator left as it was is left as the key has it.
    let shown = KeyForm::of(&key.doc);
    let changed = async {
        let update = form.update(&shown)?;
        ops::update_key(keys, &operator(&session), id.clone(), update).await
    };
    match changed.await {
        Ok(_) => see_other(&format!("/console/keys/{id}?done=updated")),
        Err(error) => render(keys, &session, &id, None, Some((&form, &error))).await,
    }
}

/// The page asking to confirm `question`, whose form posts to `{page}/{action}` again with `confirm=1` (and the
/// grace period, for a rotation); its cancel link leads back to `page`.
pub(super) fn confirmation(
    session: &Session,
    nav: Nav,
    page: &str,
    action: &str,
    question: &str,
    button: &str,
    grace: Option<&str>,
) -> Response {
    let main = html! {
        p id="confirm-question" { (question) }
        form method="post" action=(format!("{page}/{action}")) class="confirm" id="confirm" {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="confirm" value="1";
            @if let Some(grace) = grace {
                input type="hidden" name="grace_seconds" value=(grace);
            }
            button type="submit" class="deny" id="confirm-button" { (button) }
            " "
            a href=(page) id="cancel" { "Cancel" }
        }
    };
    html_response(StatusCode::OK, layout("Confirm", nav, Some(session), main))
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
            Nav::Keys,
            &format!("/console/keys/{id}"),
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
            Nav::Keys,
            &format!("/console/keys/{id}"),
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
