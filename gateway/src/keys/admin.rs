//! The admin API (`/admin/…`, operator keys only, JSON): keys and teams created, listed, shown, updated, keys
//! rotated and revoked, and the audit log of every change. `GET /admin/openapi.json` describes it
//! (`openapi.json` beside this file).
//!
//! Each change runs through [`KeyStore::change`](super::store::KeyStore::change) (one transaction with its
//! audit entry, naming the operator key that made it) and then reloads this process's table, so the next
//! request here sees it; other replicas see it on the store's notification.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use http::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};
use tower_chat_limits::LimitsLayer;

use super::record::{
    check_limits, check_metadata, check_name, check_patterns, conflict, hint, invalid, new_secret,
    now_ms, secret_digest, KeyDoc, Kind, Row, TeamDoc,
};
use super::store::{Change, Edit};
use super::table::ManagedKeys;
use crate::api::extract::ApiQuery;
use crate::config::limits::LimitsEntry;
use crate::error::{json_response, ApiError};
use crate::operator::Operator;

/// The grace period of a rotation without `grace_seconds`.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);
/// The longest grace period.
pub(crate) const MAX_GRACE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most audit entries one request lists.
const MAX_AUDIT: i64 = 500;

/// What the handlers read.
#[derive(Clone, Debug)]
pub(crate) struct AdminState {
    pub(crate) keys: ManagedKeys,
    /// The limits layer, for a key's spend against its budgets.
    pub(crate) limits: Option<LimitsLayer>,
}

/// The admin routes (authentication is the caller's to add).
pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/admin/openapi.json", get(openapi))
        .route("/admin/keys", get(list_keys).post(create_key))
        .route("/admin/keys/{id}", get(show_key).patch(update_key))
        .route("/admin/keys/{id}/rotate", post(rotate_key))
        .route("/admin/keys/{id}/revoke", post(revoke_key))
        .route("/admin/teams", get(list_teams).post(create_team))
        .route("/admin/teams/{id}", get(show_team).patch(update_team))
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

/// `Some(value)` for a field that is present, `null` included: `Some(None)` clears it.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewKey {
    name: String,
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    expires_at: Option<i64>,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
    #[serde(default)]
    limits: LimitsEntry,
    #[serde(default)]
    metadata: Map<String, Value>,
}

const NEW_KEY: &str = r#"{"name": "…", "team": "<team id>", "expires_at": <unix seconds>, "models": ["gpt-4o*"], "routes": ["/v1/chat/completions"], "limits": {…}, "metadata": {…}}"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyUpdate {
    #[serde(default, deserialize_with = "present")]
    team: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    expires_at: Option<Option<i64>>,
    models: Option<Vec<String>>,
    routes: Option<Vec<String>>,
    limits: Option<LimitsEntry>,
    metadata: Option<Map<String, Value>>,
}

const KEY_UPDATE: &str = r#"{"team": "<team id>"|null, "expires_at": <unix seconds>|null, "models": […], "routes": […], "limits": {…}, "metadata": {…}} (any of them)"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rotation {
    grace_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTeam {
    name: String,
    #[serde(default)]
    limits: LimitsEntry,
    #[serde(default)]
    metadata: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamUpdate {
    limits: Option<LimitsEntry>,
    metadata: Option<Map<String, Value>>,
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

fn not_found(kind: Kind, id: &str) -> ApiError {
    let code = match kind {
        Kind::Key => "key_not_found",
        Kind::Team => "team_not_found",
    };
    ApiError::not_found_error(code, format!("no {} `{id}`", kind.noun()))
}

fn doc_text<T: serde::Serialize>(doc: &T) -> String {
    serde_json::to_string(doc).expect("a document serialises")
}

fn check_key_doc(doc: &KeyDoc) -> Result<(), ApiError> {
    check_patterns("models", &doc.models)?;
    check_patterns("routes", &doc.routes)?;
    check_limits(&doc.limits)?;
    check_metadata(&doc.metadata)
}

/// Apply `edit` to `kind` `id` for `operator` as `action`, then reload this process's table.
async fn change(
    state: &AdminState,
    operator: &Operator,
    kind: Kind,
    id: String,
    action: &'static str,
    edit: Edit,
) -> Result<Row, ApiError> {
    let change = Change {
        kind,
        id,
        actor: operator.name().to_owned(),
        action,
    };
    let row = state.keys.store().change(change, edit).await?;
    state.keys.refresh().await;
    tracing::info!(kind = kind.noun(), id = %row.id, name = %row.name, action, operator = operator.name(), "managed keys changed");
    Ok(row)
}

async fn create_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    bytes: Bytes,
) -> Response {
    let created = async {
        let new: NewKey = body(&bytes, NEW_KEY)?;
        check_name(&new.name)?;
        if state.keys.in_file(&new.name) {
            return Err(conflict(
                "name_taken",
                format!("`{}` is a key of --api-keys-file", new.name),
            ));
        }
        let secret = new_secret()?;
        let now = now_ms();
        let doc = KeyDoc {
            team: new.team,
            expires_at: new.expires_at,
            models: new.models,
            routes: new.routes,
            limits: new.limits,
            metadata: new.metadata,
            hint: hint(&secret),
            created_at: now / 1000,
            updated_at: now / 1000,
            revoked_at: None,
            previous_valid_until: None,
        };
        check_key_doc(&doc)?;
        let id = format!("key_{}", uuid::Uuid::now_v7().simple());
        let row = Row {
            id: id.clone(),
            name: new.name,
            digest: secret_digest(&secret),
            previous_digest: None,
            doc: doc_text(&doc),
        };
        let row = change(
            &state,
            &operator,
            Kind::Key,
            id,
            "create",
            Box::new(move |before| match before {
                None => Ok(row),
                Some(_) => Err(conflict("id_taken", "a key with this id exists already")),
            }),
        )
        .await?;
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

/// Key `id` with `usage`: its counters against its limits, as the limits layer reports them (`null` without
/// a limits layer).
async fn show_key(State(state): State<AdminState>, Path(id): Path<String>) -> Response {
    let shown = async {
        let row = state
            .keys
            .row(Kind::Key, &id)
            .ok_or_else(|| not_found(Kind::Key, &id))?;
        let mut shown = row.public(Kind::Key, now_ms());
        shown["usage"] = match &state.limits {
            Some(limits) => {
                let report = limits
                    .usage(&row.name)
                    .await
                    .map_err(|e| crate::error::from_chat(&e))?;
                serde_json::to_value(report).unwrap_or(Value::Null)
            }
            None => Value::Null,
        };
        Ok::<_, ApiError>(shown)
    };
    answer(shown.await, StatusCode::OK)
}

async fn update_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let updated = async {
        let update: KeyUpdate = body(&bytes, KEY_UPDATE)?;
        let missing = not_found(Kind::Key, &id);
        let row = change(
            &state,
            &operator,
            Kind::Key,
            id,
            "update",
            Box::new(move |before| {
                let mut row = before.ok_or(missing)?;
                let mut doc = row.key_doc().map_err(super::record::internal)?;
                if let Some(team) = update.team {
                    doc.team = team;
                }
                if let Some(expires_at) = update.expires_at {
                    doc.expires_at = expires_at;
                }
                if let Some(models) = update.models {
                    doc.models = models;
                }
                if let Some(routes) = update.routes {
                    doc.routes = routes;
                }
                if let Some(limits) = update.limits {
                    doc.limits = limits;
                }
                if let Some(metadata) = update.metadata {
                    doc.metadata = metadata;
                }
                check_key_doc(&doc)?;
                doc.updated_at = now_ms() / 1000;
                row.doc = doc_text(&doc);
                Ok(row)
            }),
        )
        .await?;
        Ok::<_, ApiError>(row.public(Kind::Key, now_ms()))
    };
    answer(updated.await, StatusCode::OK)
}

/// A new secret for key `id`; the old one stays valid for `grace_seconds` (default [`DEFAULT_GRACE`], at most
/// [`MAX_GRACE`]; `0` ends it at once). A rotation during an earlier one's grace ends that grace.
async fn rotate_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let rotated = async {
        let rotation: Rotation = body(&bytes, r#"{"grace_seconds": 3600}"#)?;
        let grace = rotation
            .grace_seconds
            .map_or(DEFAULT_GRACE, Duration::from_secs);
        if grace > MAX_GRACE {
            return Err(invalid(
                "invalid_grace",
                format!(
                    "`grace_seconds` may be at most {} (seven days)",
                    MAX_GRACE.as_secs()
                ),
            ));
        }
        let secret = new_secret()?;
        let (digest, shown_hint) = (secret_digest(&secret), hint(&secret));
        let missing = not_found(Kind::Key, &id);
        let row = change(
            &state,
            &operator,
            Kind::Key,
            id,
            "rotate",
            Box::new(move |before| {
                let mut row = before.ok_or(missing)?;
                let mut doc = row.key_doc().map_err(super::record::internal)?;
                if doc.revoked_at.is_some() {
                    return Err(conflict("key_revoked", "a revoked key cannot be rotated"));
                }
                let now = now_ms();
                row.previous_digest = Some(std::mem::replace(&mut row.digest, digest));
                doc.previous_valid_until =
                    Some(now.saturating_add(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX)));
                doc.hint = shown_hint;
                doc.updated_at = now / 1000;
                row.doc = doc_text(&doc);
                Ok(row)
            }),
        )
        .await?;
        let mut shown = row.public(Kind::Key, now_ms());
        shown["key"] = Value::String(secret);
        Ok::<_, ApiError>(shown)
    };
    answer(rotated.await, StatusCode::OK)
}

/// Key `id` refused from now on (its secret and a rotation's previous one), on every replica.
async fn revoke_key(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
) -> Response {
    let revoked = async {
        let missing = not_found(Kind::Key, &id);
        let row = change(
            &state,
            &operator,
            Kind::Key,
            id,
            "revoke",
            Box::new(move |before| {
                let mut row = before.ok_or(missing)?;
                let mut doc = row.key_doc().map_err(super::record::internal)?;
                if doc.revoked_at.is_some() {
                    return Err(conflict("already_revoked", "this key is revoked already"));
                }
                let now = now_ms() / 1000;
                doc.revoked_at = Some(now);
                doc.updated_at = now;
                doc.previous_valid_until = None;
                row.previous_digest = None;
                row.doc = doc_text(&doc);
                Ok(row)
            }),
        )
        .await?;
        Ok::<_, ApiError>(row.public(Kind::Key, now_ms()))
    };
    answer(revoked.await, StatusCode::OK)
}

async fn create_team(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    bytes: Bytes,
) -> Response {
    let created = async {
        let new: NewTeam = body(&bytes, r#"{"name": "…", "limits": {…}, "metadata": {…}}"#)?;
        check_name(&new.name)?;
        check_limits(&new.limits)?;
        check_metadata(&new.metadata)?;
        let now = now_ms() / 1000;
        let id = format!("team_{}", uuid::Uuid::now_v7().simple());
        let row = Row {
            id: id.clone(),
            name: new.name,
            digest: String::new(),
            previous_digest: None,
            doc: doc_text(&TeamDoc {
                limits: new.limits,
                metadata: new.metadata,
                created_at: now,
                updated_at: now,
            }),
        };
        let row = change(
            &state,
            &operator,
            Kind::Team,
            id,
            "create",
            Box::new(move |before| match before {
                None => Ok(row),
                Some(_) => Err(conflict("id_taken", "a team with this id exists already")),
            }),
        )
        .await?;
        Ok::<_, ApiError>(row.public(Kind::Team, now_ms()))
    };
    answer(created.await, StatusCode::CREATED)
}

async fn list_teams(State(state): State<AdminState>) -> Response {
    let now = now_ms();
    let table = state.keys.table();
    let mut data: Vec<Value> = table
        .teams
        .iter()
        .map(|(row, _)| {
            let mut team = row.public(Kind::Team, now);
            team["keys"] = json!(table
                .keys
                .iter()
                .filter(|k| k.doc.team.as_deref() == Some(&row.id))
                .count());
            team
        })
        .collect();
    data.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

async fn show_team(State(state): State<AdminState>, Path(id): Path<String>) -> Response {
    let table = state.keys.table();
    let shown = match table.teams.iter().find(|(row, _)| row.id == id) {
        Some((row, _)) => {
            let mut team = row.public(Kind::Team, now_ms());
            team["keys"] = json!(table
                .keys
                .iter()
                .filter(|k| k.doc.team.as_deref() == Some(&row.id))
                .map(|k| json!({"id": k.row.id, "name": k.row.name}))
                .collect::<Vec<_>>());
            Ok(team)
        }
        None => Err(not_found(Kind::Team, &id)),
    };
    answer(shown, StatusCode::OK)
}

async fn update_team(
    State(state): State<AdminState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Response {
    let updated = async {
        let update: TeamUpdate = body(&bytes, r#"{"limits": {…}, "metadata": {…}} (either)"#)?;
        let missing = not_found(Kind::Team, &id);
        let row = change(
            &state,
            &operator,
            Kind::Team,
            id,
            "update",
            Box::new(move |before| {
                let mut row = before.ok_or(missing)?;
                let mut doc = row.team_doc().map_err(super::record::internal)?;
                if let Some(limits) = update.limits {
                    check_limits(&limits)?;
                    doc.limits = limits;
                }
                if let Some(metadata) = update.metadata {
                    check_metadata(&metadata)?;
                    doc.metadata = metadata;
                }
                doc.updated_at = now_ms() / 1000;
                row.doc = doc_text(&doc);
                Ok(row)
            }),
        )
        .await?;
        Ok::<_, ApiError>(row.public(Kind::Team, now_ms()))
    };
    answer(updated.await, StatusCode::OK)
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
        let entries = state
            .keys
            .store()
            .audit(params.target.unwrap_or_default(), limit)
            .await
            .map_err(|e| super::record::internal(e.to_string()))?;
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
            ("/admin/teams/{id}", &["get", "patch"]),
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
