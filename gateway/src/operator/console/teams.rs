//! The teams pages: `/console/teams` lists every managed team with its member keys, limits and spend against
//! its budgets (the counters its members share), with a form that creates a team; `/console/teams/{id}` shows
//! one team, its members and every counter against its limits.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use serde_json::Map;
use tower_chat_limits::CounterKind;

use super::extract::PageForm;
use super::layout::{error_page, html_response, layout, see_other, Nav};
use super::managed::{
    self, budget_cell, limits_fields, limits_list, operator, refused, usage_table, LimitsForm,
};
use super::session::Session;
use super::state::ConsoleState;
use crate::keys::ops::{self, NewTeam};
use crate::keys::record::now_ms;
use crate::keys::table::Table;

/// The create form: the CSRF token, the name and the limits.
#[derive(Debug, Deserialize)]
pub(crate) struct TeamForm {
    csrf: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(flatten)]
    limits: LimitsForm,
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
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
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
        form method="post" action="/console/teams" class="create" id="create-team" aria-labelledby="create-team-heading" {
            input type="hidden" name="csrf" value=(session.csrf);
            label for="team-name" { "Name" }
            input type="text" id="team-name" name="name" required maxlength="64" pattern="[A-Za-z0-9._\\-]+" autocomplete="off";
            (limits_fields("team"))
            button type="submit" id="create-team-button" { "Create team" }
        }
    };
    html_response(
        StatusCode::OK,
        layout("Teams", Nav::Teams, Some(&session), main),
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
        Err(error) => refused(&error),
    }
}

/// `GET /console/teams/{id}`.
pub(crate) async fn team(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let table = keys.keys.table();
    let Some((row, doc)) = table.teams.iter().find(|(row, _)| row.id == id) else {
        return error_page(StatusCode::NOT_FOUND, &format!("There is no team {id}."));
    };
    let usage = match ops::team_usage(keys, &row.name).await {
        Ok(usage) => usage,
        Err(error) => return refused(&error),
    };
    let members = members(&table, &row.id);
    let main = html! {
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
    };
    html_response(
        StatusCode::OK,
        layout(
            &format!("Team {}", row.name),
            Nav::Teams,
            Some(&session),
            main,
        ),
    )
}
