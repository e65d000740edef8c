//! The operations on managed keys and teams that both the admin API ([`super::admin`], JSON) and the operator
//! console's pages (HTML forms) run: one implementation, so a change made in either is checked, stored and
//! audited the same way, attributed to the operator who made it.
//!
//! Each change runs through [`KeyStore::change`](super::store::KeyStore::change) (one transaction with its
//! audit entry) and then reloads this process's table, so the next request here sees it; other replicas see it
//! on the store's notification. A new secret is returned to the caller and nowhere else: not logged, not kept.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use tower_chat_limits::{LimitsLayer, UsageReport};

use super::record::{
    check_limits, check_metadata, check_name, check_patterns, conflict, hint, internal, invalid,
    new_secret, now_ms, secret_digest, KeyDoc, Kind, Row, TeamDoc,
};
use super::store::{AuditEntry, Change, Edit};
use super::table::ManagedKeys;
use crate::config::limits::LimitsEntry;
use crate::error::ApiError;
use crate::operator::Operator;

/// The grace period of a rotation without `grace_seconds`.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);
/// The longest grace period.
pub(crate) const MAX_GRACE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The managed keys and the limits layer counting their use: what the admin API's handlers and the console's
/// key pages read.
#[derive(Clone, Debug)]
pub(crate) struct AdminState {
    pub(crate) keys: ManagedKeys,
    /// The limits layer, for the spend of keys and teams against their budgets.
    pub(crate) limits: Option<LimitsLayer>,
}

/// A key to create.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewKey {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) team: Option<String>,
    #[serde(default)]
    pub(crate) expires_at: Option<i64>,
    #[serde(default)]
    pub(crate) models: Vec<String>,
    #[serde(default)]
    pub(crate) routes: Vec<String>,
    #[serde(default)]
    pub(crate) limits: LimitsEntry,
    #[serde(default)]
    pub(crate) metadata: Map<String, Value>,
}

/// `Some(value)` for a field that is present, `null` included: `Some(None)` clears it.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields of a key to change (an absent one stays as it is; `team` and `expires_at` set to `null` clear
/// it). A key's name is not among them: it is the caller identity its counters and call records are kept
/// under, so a new name would start fresh budgets and split its history.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyUpdate {
    #[serde(default, deserialize_with = "present")]
    pub(crate) team: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) expires_at: Option<Option<i64>>,
    pub(crate) models: Option<Vec<String>>,
    pub(crate) routes: Option<Vec<String>>,
    pub(crate) limits: Option<LimitsEntry>,
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// The fields of a team to change (an absent one stays as it is); its name is fixed, as a key's is.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TeamUpdate {
    pub(crate) limits: Option<LimitsEntry>,
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// A team to create.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTeam {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) limits: LimitsEntry,
    #[serde(default)]
    pub(crate) metadata: Map<String, Value>,
}

pub(crate) fn not_found(kind: Kind, id: &str) -> ApiError {
    let code = match kind {
        Kind::Key => "key_not_found",
        Kind::Team => "team_not_found",
    };
    ApiError::not_found_error(code, format!("no {} `{id}`", kind.noun()))
}

pub(crate) fn doc_text<T: serde::Serialize>(doc: &T) -> String {
    serde_json::to_string(doc).expect("a document serialises")
}

pub(crate) fn check_key_doc(doc: &KeyDoc) -> Result<(), ApiError> {
    check_patterns("models", &doc.models)?;
    check_patterns("routes", &doc.routes)?;
    check_limits(&doc.limits)?;
    check_metadata(&doc.metadata)
}

/// Apply `edit` to `kind` `id` for `operator` as `action`, then reload this process's table.
pub(crate) async fn change(
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

/// Create key `new`: its row and its secret (the only time the secret exists outside its digest).
pub(crate) async fn create_key(
    state: &AdminState,
    operator: &Operator,
    new: NewKey,
) -> Result<(Row, String), ApiError> {
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
        state,
        operator,
        Kind::Key,
        id,
        "create",
        Box::new(move |before| match before {
            None => Ok(row),
            Some(_) => Err(conflict("id_taken", "a key with this id exists already")),
        }),
    )
    .await?;
    Ok((row, secret))
}

/// A new secret for key `id`; the old one stays valid for `grace_seconds` (default [`DEFAULT_GRACE`], at most
/// [`MAX_GRACE`]; `0` ends it at once). A rotation during an earlier one's grace ends that grace.
pub(crate) async fn rotate_key(
    state: &AdminState,
    operator: &Operator,
    id: String,
    grace_seconds: Option<u64>,
) -> Result<(Row, String), ApiError> {
    let grace = grace_seconds.map_or(DEFAULT_GRACE, Duration::from_secs);
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
        state,
        operator,
        Kind::Key,
        id,
        "rotate",
        Box::new(move |before| {
            let mut row = before.ok_or(missing)?;
            let mut doc = row.key_doc().map_err(internal)?;
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
    Ok((row, secret))
}

/// Key `id` refused from now on (its secret and a rotation's previous one), on every replica.
pub(crate) async fn revoke_key(
    state: &AdminState,
    operator: &Operator,
    id: String,
) -> Result<Row, ApiError> {
    let missing = not_found(Kind::Key, &id);
    change(
        state,
        operator,
        Kind::Key,
        id,
        "revoke",
        Box::new(move |before| {
            let mut row = before.ok_or(missing)?;
            let mut doc = row.key_doc().map_err(internal)?;
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
    .await
}

/// Change key `id` as `update` says. A revoked key is refused (409 `key_revoked`), as a rotation of one is:
/// it can never authenticate again, and its last state is the record of what it could do.
pub(crate) async fn update_key(
    state: &AdminState,
    operator: &Operator,
    id: String,
    update: KeyUpdate,
) -> Result<Row, ApiError> {
    let missing = not_found(Kind::Key, &id);
    change(
        state,
        operator,
        Kind::Key,
        id,
        "update",
        Box::new(move |before| {
            let mut row = before.ok_or(missing)?;
            let mut doc = row.key_doc().map_err(internal)?;
            if doc.revoked_at.is_some() {
                return Err(conflict("key_revoked", "a revoked key cannot be changed"));
            }
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
    .await
}

/// Create team `new`.
pub(crate) async fn create_team(
    state: &AdminState,
    operator: &Operator,
    new: NewTeam,
) -> Result<Row, ApiError> {
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
    change(
        state,
        operator,
        Kind::Team,
        id,
        "create",
        Box::new(move |before| match before {
            None => Ok(row),
            Some(_) => Err(conflict("id_taken", "a team with this id exists already")),
        }),
    )
    .await
}

/// Change team `id` as `update` says.
pub(crate) async fn update_team(
    state: &AdminState,
    operator: &Operator,
    id: String,
    update: TeamUpdate,
) -> Result<Row, ApiError> {
    let missing = not_found(Kind::Team, &id);
    change(
        state,
        operator,
        Kind::Team,
        id,
        "update",
        Box::new(move |before| {
            let mut row = before.ok_or(missing)?;
            let mut doc = row.team_doc().map_err(internal)?;
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
    .await
}

/// Delete team `id`: refused (409 `team_has_members`, naming them) while a key that is not revoked belongs to
/// it. Revoked members keep the team's id, so their pages and the audit log still say which team they were
/// in; the team's own audit entries stay. Its limits stop applying when the table reloads, here at once and on
/// other replicas at the store's notification, as after any change.
pub(crate) async fn delete_team(
    state: &AdminState,
    operator: &Operator,
    id: String,
) -> Result<Row, ApiError> {
    let change = Change {
        kind: Kind::Team,
        id,
        actor: operator.name().to_owned(),
        action: "delete",
    };
    let row = state.keys.store().remove_team(change).await?;
    state.keys.refresh().await;
    tracing::info!(kind = "team", id = %row.id, name = %row.name, action = "delete", operator = operator.name(), "managed keys changed");
    Ok(row)
}

/// Key `name`'s counters against its limits (its own, per model, its team's), as the limits layer reports
/// them; `None` without a limits layer.
pub(crate) async fn key_usage(
    state: &AdminState,
    name: &str,
) -> Result<Option<UsageReport>, ApiError> {
    let Some(limits) = &state.limits else {
        return Ok(None);
    };
    limits
        .usage(name)
        .await
        .map(Some)
        .map_err(|e| crate::error::from_chat(&e))
}

/// Team `name`'s counters against its limits, shared by its members: one scope, or none when the team has no
/// limits; `None` without a limits layer.
pub(crate) async fn team_usage(
    state: &AdminState,
    name: &str,
) -> Result<Option<UsageReport>, ApiError> {
    let Some(limits) = &state.limits else {
        return Ok(None);
    };
    let report = limits
        .team_usage(name)
        .await
        .map_err(|e| crate::error::from_chat(&e))?;
    Ok(Some(report.unwrap_or_else(|| UsageReport {
        caller: name.to_owned(),
        scopes: Vec::new(),
    })))
}

/// The audit entries after the newest `skip`, at most `limit`, newest first (of one key or team when `target`
/// is not empty).
pub(crate) async fn audit(
    state: &AdminState,
    target: String,
    limit: i64,
    skip: i64,
) -> Result<Vec<AuditEntry>, ApiError> {
    state
        .keys
        .store()
        .audit(target, limit, skip)
        .await
        .map_err(|e| internal(e.to_string()))
}
