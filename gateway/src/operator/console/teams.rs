//! The teams pages: `/console/teams` lists every managed team with its member keys, limits and spend against
//! its budgets (the counters its members share), with a form that creates a team; `/console/teams/{id}` shows
//! one team, its members and every counter against its limits, a form that changes its limits as the admin
//! API's `PATCH` does, and its deletion behind a confirmation (refused while a member key is not revoked). A
//! refused form comes back filled with what the operator typed, the reason beside it.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use serde_json::Map;
use tower_chat_limits::CounterKind;

use super::extract::{PageForm, PageQuery};
use super::key_page::{confirmation, ChangeForm};
use super::layout::{error_page, html_response, layout, see_other, Nav};
use super::managed::{
    self, budget_cell, form_error, limits_fields, limits_list, operator, refused, usage_table,
    LimitsForm,
};
use super::session::Session;
use super::state::ConsoleState;
use crate::error::ApiError;
use crate::keys::ops::{self, AdminState, NewTeam, TeamUpdate};
use crate::keys::record::{now_ms, Kind};
use crate::keys::table::Table;

/// The team form: the CSRF token, the name (creation only) and the limits.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct TeamForm {
    csrf: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(flatten)]
    limits: LimitsForm,
}

/// The list's query after a deletion: `deleted=NAME`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Deleted {
    deleted: Option<String>,
}

/// The team page's query after a change: `done=updated`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Done {
    done: Option<String>,
}

/// The member keys of team `id`, by name: (id, name, status).
fn members(table: &Table, id: &str) -> Vec<(String, String, &'static str)> {
    let now = now_ms();
    let mut members: Vec<_> = table
        .keys
        .iter()
        .filter(|k| k.doc.team.as_deref() == Some(id))
        .map(|k| {
            (
                k.row.id.clone(),
                k.row.name.clone(),
                managed::status(&k.doc, k.row.previous_digest.is_some(), now),
            )
        })
        .collect();
    members.sort_by(|a, b| a.1.cmp(&b.1));
    members
}

/// `GET /console/teams`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(deleted): PageQuery<Deleted>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let form = TeamForm::default();
    render_list(keys, &session, &form, None, deleted.deleted.as_deref()).await
}

/// The teams page, its create form filled with `form`; a refusal of it shown beside the form, with its status.
async fn render_list(
    keys: &AdminState,
    session: &Session,
    form: &TeamForm,
    refusal: Option<&ApiError>,
    deleted: Option<&str>,
) -> Response {
    let table = keys.keys.table();
    let mut teams: Vec<_> = table.teams.iter().collect();
    teams.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let mut rows = Vec::with_capacity(teams.len());
    for (row, doc) in teams {
        let usage = match ops::team_usage(keys, &row.name).await {
            Ok(usage) => usage,
            Err(error) => {
                tracing::warn!(team = %row.id, error = %error.message, "console: cannot read a team's counters");
                None
            }
        };
        let members = members(&table, &row.id);
        rows.push(html! {
            tr data-team=(row.id) {
                th scope="row" data-label="name" { a href=(format!("/console/teams/{}", row.id)) { (row.name) } }
                td data-label="members" {
                    @if members.is_empty() { "none" }
                    @for (i, (id, name, _)) in members.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(format!("/console/keys/{id}")) { (name) }
                    }
                }
                td data-label="limits" { (limits_list(&doc.limits)) }
                td class="number" data-label="today" { (budget_cell(usage.as_ref(), CounterKind::CostPerDay, None)) }
                td class="number" data-label="this month" { (budget_cell(usage.as_ref(), CounterKind::CostPerMonth, None)) }
                td class="number" data-label="requests" { (budget_cell(usage.as_ref(), CounterKind::Requests, None)) }
            }
        });
    }
    let main = html! {
        @if let Some(name) = deleted {
            p class="notice" role="status" id="deleted-notice" { "Team " (name) " is deleted: its limits no longer apply." }
        }
        p class="hint" { "A team's limits are shared by its member keys: every call of a member counts against them." }
        @if rows.is_empty() {
            p class="empty" id="teams-empty" { "No teams yet." }
        } @else {
            div class="table-frame" tabindex="0" role="region" aria-label="Teams" {
                table id="teams" class="keys" {
                    thead {
                        tr {
                            @for heading in ["name", "members", "limits", "today", "this month", "requests"] {
                                th scope="col" { (heading) }
                            }
                        }
                    }
                    tbody { @for row in &rows { (row) } }
                }
            }
        }
        h2 id="create-team-heading" { "Create a team" }
        @if let Some(error) = refusal { (form_error("create-team-error", error)) }
        form method="post" action="/console/teams" class="create" id="create-team" aria-labelledby="create-team-heading" {
            input type="hidden" name="csrf" value=(session.csrf);
            label for="team-name" { "Name" }
            input type="text" id="team-name" name="name" required maxlength="64" pattern="[A-Za-z0-9._\\-]+" autocomplete="off" value=(form.name);
            (limits_fields("team", &form.limits))
            button type="submit" id="create-team-button" { "Create team" }
        }
    };
    html_response(
        refusal.map_or(StatusCode::OK, |e| e.status),
        layout("Teams", Nav::Teams, Some(session), main),
    )
}

/// `POST /console/teams`: the team created as the admin API creates it; then its page.
pub(crate) async fn create(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageForm(form): PageForm<TeamForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let created = async {
        let new = NewTeam {
            name: form.name.trim().to_owned(),
            limits: form.limits.limits()?,
            metadata: Map::new(),
        };
        ops::create_team(keys, &operator(&session), new).await
    };
    match created.await {
        Ok(row) => see_other(&format!("/console/teams/{}", row.id)),
        Err(error) => render_list(keys, &session, &form, Some(&error), None).await,
    }
}

/// `GET /console/teams/{id}`.
pub(crate) async fn team(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageQuery(done): PageQuery<Done>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    render_team(keys, &session, &id, done.done.as_deref(), None).await
}

/// Team `id`'s page; after a refused change, the edit form holds what the operator typed and the reason is
/// beside it, answered with the refusal's status.
async fn render_team(
    keys: &AdminState,
    session: &Session,
    id: &str,
    done: Option<&str>,
    refused_edit: Option<(&TeamForm, &ApiError)>,
) -> Response {
    let table = keys.keys.table();
    let Some((row, doc)) = table.teams.iter().find(|(row, _)| row.id == id) else {
        return error_page(StatusCode::NOT_FOUND, &format!("There is no team {id}."));
    };
    let usage = match ops::team_usage(keys, &row.name).await {
        Ok(usage) => usage,
        Err(error) => return refused(&error),
    };
    let members = members(&table, &row.id);
    let form = refused_edit.map_or_else(
        || TeamForm {
            limits: LimitsForm::of(&doc.limits),
            ..TeamForm::default()
        },
        |(form, _)| form.clone(),
    );
    let main = html! {
        @if done == Some("updated") {
            p class="notice" role="status" id="updated-notice" { "Team " (row.name) " is changed: its members' next calls are held to the limits it shows now." }
        }
        dl class="facts" {
            dt { "name" } dd id="shown-team-name" { (row.name) }
            dt { "id" } dd { code { (row.id) } }
            dt { "created" } dd { (managed::at(doc.created_at)) }
        }
        h2 { "Members" }
        @if members.is_empty() {
            p class="empty" id="members-empty" { "No key belongs to this team yet: choose it when creating a key." }
        } @else {
            ul id="members" {
                @for (key_id, name, status) in &members {
                    li { a href=(format!("/console/keys/{key_id}")) { (name) } " (" (status) ")" }
                }
            }
        }
        h2 { "Limits" }
        (limits_list(&doc.limits))
        h2 { "Use against its limits" }
        (usage_table(usage.as_ref(), "team-usage", keys.limits.is_some()))
        p { a href=(format!("/console/audit?target={}", row.id)) { "This team's changes in the audit log" } }
        h2 id="edit-heading" { "Change its limits" }
        @if let Some((_, error)) = refused_edit { (form_error("edit-team-error", error)) }
        form method="post" action=(format!("/console/teams/{}/edit", row.id)) class="create" id="edit-team" aria-labelledby="edit-heading" {
            input type="hidden" name="csrf" value=(session.csrf);
            p class="hint" {
                "The name stays: it is the team its counters and its members' call records are kept under. \
                 Its metadata is changed through the admin API."
            }
            (limits_fields("edit", &form.limits))
            button type="submit" id="edit-team-button" { "Save changes" }
        }
        h2 id="delete-heading" { "Delete" }
        @if members.iter().any(|(_, _, status)| *status != "revoked") {
            p class="hint" id="delete-hint" { "A team is deleted once none of its keys is in use: move its members to another team or revoke them first." }
        }
        form method="post" action=(format!("/console/teams/{}/delete", row.id)) class="create" id="delete" aria-labelledby="delete-heading" {
            input type="hidden" name="csrf" value=(session.csrf);
            button type="submit" class="deny" id="delete-button" { "Delete…" }
        }
    };
    html_response(
        refused_edit.map_or(StatusCode::OK, |(_, error)| error.status),
        layout(
            &format!("Team {}", row.name),
            Nav::Teams,
            Some(session),
            main,
        ),
    )
}

/// `POST /console/teams/{id}/edit`: the team's limits changed as the admin API's `PATCH` changes them
/// ([`ops::update_team`], one audit entry under the operator's name); then its page.
pub(crate) async fn edit(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageForm(form): PageForm<TeamForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    if keys.keys.row(Kind::Team, &id).is_none() {
        return error_page(StatusCode::NOT_FOUND, &format!("There is no team {id}."));
    }
    let changed = async {
        let update = TeamUpdate {
            limits: Some(form.limits.limits()?),
            metadata: None,
        };
        ops::update_team(keys, &operator(&session), id.clone(), update).await
    };
    match changed.await {
        Ok(_) => see_other(&format!("/console/teams/{id}?done=updated")),
        Err(error) => render_team(keys, &session, &id, None, Some((&form, &error))).await,
    }
}

/// `POST /console/teams/{id}/delete`: first the confirmation, then (`confirm=1`) the deletion
/// ([`ops::delete_team`]); then the list.
pub(crate) async fn delete(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    PageForm(form): PageForm<ChangeForm>,
) -> Response {
    let keys = match managed::keys_to_change(&state, &session, form.csrf.as_deref()) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let Some(row) = keys.keys.row(Kind::Team, &id) else {
        return error_page(StatusCode::NOT_FOUND, &format!("There is no team {id}."));
    };
    if !form.confirmed() {
        return confirmation(
            &session,
            Nav::Teams,
            &format!("/console/teams/{id}"),
            "delete",
            &format!(
                "Delete team {}? This cannot be undone: its limits stop applying; its history stays in the audit \
                 log.",
                row.name
            ),
            "Delete team",
            None,
        );
    }
    match ops::delete_team(keys, &operator(&session), id).await {
        Ok(row) => see_other(&format!(
            "/console/teams?deleted={}",
            super::format::url_encode(&row.name)
        )),
        Err(error) => refused(&error),
    }
}
