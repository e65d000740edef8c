//! The admin API (`/admin/…`, operator keys only, JSON): keys and teams created, listed, shown, updated, keys
//! rotated and revoked, teams deleted, and the audit log of every change. `GET /admin/openapi.json` describes it
//! (`openapi.json` beside this file).
//!
//! The handlers read JSON and answer JSON; what they do is [`super::ops`], which the console's pages run too.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use http::StatusCode;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

pub(crate) use super::ops::AdminState;
use super::ops::{self, not_found, KeyUpdate, NewKey, NewTeam, TeamUpdate};
use super::record::{invalid, now_ms, Kind};
use super::table::Table;
use crate::api::extract::ApiQuery;
use crate::error::{json_response, ApiError};
use crate::operator::Operator;

/// The most audit entries one request lists.
const MAX_AUDIT: i64 = 500;

/// The admin routes (authentication is the caller's to add).
pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/admin/openapi.json", get(openapi))
        .route("/admin/keys", get(list_keys).post(create_key))
        .route("/admin/keys/{id}", get(show_key).patch(update_key))
        .route("/admin/keys/{id}/rotate", post(rotate_key))
        .route("/admin/keys/{id}/revoke", post(revoke_key))
        .route("/admin/teams", get(list_teams).post(create_team))
        .route(
            "/admin/teams/{id}",
            get(show_team).patch(update_team).delete(delete_team),
        )
        .route("/admin/audit", get(audit))
}

/// The OpenAPI 3 document of these routes.
pub(crate) const OPENAPI: &str = include_str!("openapi.json");

async fn openapi() -> Response {
    ([(http::header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// A JSON body (an empty one reads as `{}`), refused with `invalid_body` naming what is wrong.
fn body<T: DeserializeOwned>(bytes: &Bytes, expected: &str) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| invalid("invalid_body", format!("expected {expected}: {e}")))
}

const NEW_KEY: &str = r#"{"name": "…", "team": "<team id>", "expires_at": <unix seconds>, "models": ["gpt-4o*"], "routes": ["/v1/chat/completions"], "limits": {…}, "metadata": {…}}"#;

const KEY_UPDATE: &str = r#"{"team": "<team id>"|null, "expires_at": <unix seconds>|null, "models": […], "routes": […], "limits": {…}, "metadata": {…}} (any of them)"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rotation {
    grace_seconds: Option<u64>,
}

/// The query of `GET /admin/audit`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AuditParams {
    /// Only the entries of this key or team id.
    target: Option<String>,
    /// At most this many (1 to 500, default 100).
    limit: Option<i64>,
}

fn answer(result: Result<Value, ApiError>, status: StatusCode) -> Response {
    match result {
        Ok(value) => json_response(status, &value),
        Err(error) => error.into_response(),
    }
}

async fn create_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    bytes: Bytes,
) -> Response {
    let created = async {
        let new: NewKey = body(&bytes, NEW_KEY)?;
        let (row, secret) = ops::create_key(&state, &operator, new).await?;
        let mut shown = row.public(Kind::Key, now_ms());
        shown["key"] = Value::String(secret);
        Ok::<_, ApiError>(shown)
    };
    answer(created.await, StatusCode::CREATED)
}

async fn list_keys(State(state): State<AdminState>) -> Response {
    let now = now_ms();
    let table = state.keys.table();
    let mut data: Vec<Value> = table
        .keys
        .iter()
        .map(|k| k.row.public(Kind::Key, now))
        .collect();
    data.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

/// A usage report as the API shows it (`null` without a limits layer).
fn usage_value(report: Option<tower_chat_limits::UsageReport>) -> Value {
    report
        .and_then(|r| serde_json::to_value(r).ok())
        .unwrap_or(Value::Null)
}

/// Key `id` with `usage`: its counters against its limits, as the limits layer reports them (`null` without
/// a limits layer).
async fn show_key(State(state): State<AdminState>, Path(id): Path<String>) -> Response {
    let shown = async {
        let row = state
            .keys
            .row(Kind::Key, &id)
            .ok_or_else(|| not_found(Kind::Key, &id))?;
        let mut shown = row.public(Kind::Key, now_ms());
        shown["usage"] = usage_value(ops::key_usage(&state, &row.name).await?);
        Ok::<_, ApiError>(shown)
    };
    answer(shown.await, StatusCode::OK)
}

/// Key `id` changed ([`ops::update_key`]).
async fn update_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let updated = async {
        let update: KeyUpdate = body(&bytes, KEY_UPDATE)?;
        let row = ops::update_key(&state, &operator, id, update).await?;
        Ok::<_, ApiError>(row.public(Kind::Key, now_ms()))
    };
    answer(updated.await, StatusCode::OK)
}

/// A new secret for key `id` ([`ops::rotate_key`]).
async fn rotate_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let rotated = async {
        let rotation: Rotation = body(&bytes, r#"{"grace_seconds": 3600}"#)?;
        let (row, secret) = ops::rotate_key(&state, &operator, id, rotation.grace_seconds).await?;
        let mut shown = row.public(Kind::Key, now_ms());
        shown["key"] = Value::String(secret);
        Ok::<_, ApiError>(shown)
    };
    answer(rotated.await, StatusCode::OK)
}

/// Key `id` refused from now on ([`ops::revoke_key`]).
async fn revoke_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
) -> Response {
    let revoked = ops::revoke_key(&state, &operator, id)
        .await
        .map(|row| row.public(Kind::Key, now_ms()));
    answer(revoked, StatusCode::OK)
}

async fn create_team(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    bytes: Bytes,
) -> Response {
    let created = async {
        let new: NewTeam = body(&bytes, r#"{"name": "…", "limits": {…}, "metadata": {…}}"#)?;
        let row = ops::create_team(&state, &operator, new).await?;
        Ok::<_, ApiError>(row.public(Kind::Team, now_ms()))
    };
    answer(created.await, StatusCode::CREATED)
}

/// Team `row` as listed and shown: its public fields, its member keys (a count, or their ids and names), and
/// `usage`: its counters against its limits, shared by its members (no scopes when the team has no limits;
/// `null` without a limits layer).
async fn team_value(
    state: &AdminState,
    table: &Table,
    row: &super::record::Row,
    members: bool,
) -> Result<Value, ApiError> {
    let mut team = row.public(Kind::Team, now_ms());
    let keys = table
        .keys
        .iter()
        .filter(|k| k.doc.team.as_deref() == Some(&row.id));
    team["keys"] = if members {
        json!(keys
            .map(|k| json!({"id": k.row.id, "name": k.row.name}))
            .collect::<Vec<_>>())
    } else {
        json!(keys.count())
    };
    team["usage"] = usage_value(ops::team_usage(state, &row.name).await?);
    Ok(team)
}

async fn list_teams(State(state): State<AdminState>) -> Response {
    let listed = async {
        let table = state.keys.table();
        let mut data = Vec::with_capacity(table.teams.len());
        for (row, _) in &table.teams {
            data.push(team_value(&state, &table, row, false).await?);
        }
        data.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok::<_, ApiError>(json!({"object": "list", "data": data}))
    };
    answer(listed.await, StatusCode::OK)
}

async fn show_team(State(state): State<AdminState>, Path(id): Path<String>) -> Response {
    let shown = async {
        let table = state.keys.table();
        let (row, _) = table
            .teams
            .iter()
            .find(|(row, _)| row.id == id)
            .ok_or_else(|| not_found(Kind::Team, &id))?;
        team_value(&state, &table, row, true).await
    };
    answer(shown.await, StatusCode::OK)
}

/// Team `id` changed ([`ops::update_team`]).
async fn update_team(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let updated = async {
        let update: TeamUpdate = body(&bytes, r#"{"limits": {…}, "metadata": {…}} (either)"#)?;
        let row = ops::update_team(&state, &operator, id, update).await?;
        Ok::<_, ApiError>(row.public(Kind::Team, now_ms()))
    };
    answer(updated.await, StatusCode::OK)
}

/// Team `id` deleted ([`ops::delete_team`]): its last state, with `"deleted": true`.
async fn delete_team(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
) -> Response {
    let deleted = ops::delete_team(&state, &operator, id).await.map(|row| {
        let mut shown = row.public(Kind::Team, now_ms());
        shown["deleted"] = Value::Bool(true);
        shown
    });
    answer(deleted, StatusCode::OK)
}

/// `GET /admin/audit?target=ID&limit=N`: the latest changes, newest first.
async fn audit(
    State(state): State<AdminState>,
    ApiQuery(params): ApiQuery<AuditParams>,
) -> Response {
    let listed = async {
        let limit = params.limit.unwrap_or(100);
        if !(1..=MAX_AUDIT).contains(&limit) {
            return Err(invalid(
                "invalid_limit",
                format!("`limit` must be a whole number from 1 to {MAX_AUDIT}"),
            ));
        }
        let entries = ops::audit(&state, params.target.unwrap_or_default(), limit, 0).await?;
        let data: Vec<Value> = entries
            .into_iter()
            .map(|e| {
                json!({
                    "object": "audit_entry",
                    "id": e.id,
                    "at": e.at_ms / 1000,
                    "at_ms": e.at_ms,
                    "actor": e.actor,
                    "action": e.action,
                    "target_kind": e.kind,
                    "target_id": e.target,
                    "before": e.before,
                    "after": e.after,
                })
            })
            .collect();
        Ok::<_, ApiError>(json!({"object": "list", "data": data}))
    };
    answer(listed.await, StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_names_every_route() {
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        let paths = doc["paths"].as_object().unwrap();
        for (path, methods) in [
            ("/admin/keys", &["get", "post"][..]),
            ("/admin/keys/{id}", &["get", "patch"]),
            ("/admin/keys/{id}/rotate", &["post"]),
            ("/admin/keys/{id}/revoke", &["post"]),
            ("/admin/teams", &["get", "post"]),
            ("/admin/teams/{id}", &["get", "patch", "delete"]),
            ("/admin/audit", &["get"]),
            ("/admin/openapi.json", &["get"]),
        ] {
            for method in methods {
                assert!(paths[path][method].is_object(), "{method} {path}");
            }
        }
        assert_eq!(paths.len(), 8, "no route the gateway does not serve");
    }

    #[test]
    fn an_update_tells_a_null_from_an_absent_field() {
        let update: KeyUpdate = serde_json::from_str(r#"{"team": null}"#).unwrap();
        assert_eq!(update.team, Some(None));
        assert_eq!(update.expires_at, None);
        assert!(serde_json::from_str::<KeyUpdate>(r#"{"name": "x"}"#).is_err());
    }
}
