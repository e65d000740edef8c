//! Deleting a team: the one change that removes a row instead of writing one. It runs as every other change
//! does ([`KeyStore::change`]): one transaction that reads the row (locked, on PostgreSQL), checks, removes it,
//! appends the audit entry (the team before, nothing after) and moves the version counter, announced by
//! `NOTIFY` on PostgreSQL, so every replica's table drops the team, and with it the team's limits, as it picks
//! up an update.
//!
//! The check is the team's members: a key that is not revoked and names the team refuses the deletion. They
//! are read inside the transaction, and on PostgreSQL a key change holds its team's row `FOR SHARE` until it
//! commits, so a key joining the team while it is deleted either is seen here or is refused itself.

use tower_chat_persistence::store::sqlite::rusqlite::{self, params, OptionalExtension};

use super::record::{conflict, now_ms, Kind, Row};
use super::store::{
    bump_and_notify_pg, columns, insert_audit_lite, insert_audit_pg, lite, lite_row, pg, pg_row,
    store_failed, AuditEntry, Change, KeyStore, BUMP,
};
use crate::error::ApiError;

/// The keys whose document may name a team: `$1` is the team's id between `%`s. Its `_`s match any character,
/// so this finds a superset; [`refusal`] reads each document to tell.
const CANDIDATES: &str = "SELECT id, name, doc FROM tower_chat_keys WHERE doc LIKE $1";
const DELETE: &str = "DELETE FROM tower_chat_teams WHERE id = $1";

/// A key that may belong to the team: its id, name and document.
type Candidate = (String, String, String);

/// Why team `team` may not be deleted: the keys among `candidates` that belong to it and are not revoked
/// (a document that cannot be read counts as one: its membership is unknown).
fn refusal(team: &Row, candidates: &[Candidate]) -> Option<ApiError> {
    let mut members: Vec<(&str, &str)> = candidates
        .iter()
        .filter(|(id, name, doc)| {
            let row = Row {
                id: id.clone(),
                name: name.clone(),
                digest: String::new(),
                previous_digest: None,
                doc: doc.clone(),
            };
            row.key_doc().map_or(true, |doc| {
                doc.team.as_deref() == Some(team.id.as_str()) && doc.revoked_at.is_none()
            })
        })
        .map(|(id, name, _)| (name.as_str(), id.as_str()))
        .collect();
    if members.is_empty() {
        return None;
    }
    members.sort_unstable();
    let named: Vec<String> = members
        .iter()
        .map(|(name, id)| format!("`{name}` ({id})"))
        .collect();
    Some(conflict(
        "team_has_members",
        format!(
            "team `{}` still has member keys that are not revoked: {}; move them to another team or revoke them \
             first",
            team.name,
            named.join(", ")
        ),
    ))
}

/// The audit entry of `change` removing `before`, or the refusal.
fn plan(
    change: &Change,
    before: Option<Row>,
    candidates: &[Candidate],
) -> Result<(Row, AuditEntry), ApiError> {
    let before = before.ok_or_else(|| super::ops::not_found(Kind::Team, &change.id))?;
    if let Some(refused) = refusal(&before, candidates) {
        return Err(refused);
    }
    let now = now_ms();
    let audit = AuditEntry {
        id: uuid::Uuid::now_v7().to_string(),
        at_ms: now,
        actor: change.actor.clone(),
        action: change.action.to_owned(),
        kind: Kind::Team.noun().to_owned(),
        target: change.id.clone(),
        before: Some(before.public(Kind::Team, now)),
        after: None,
    };
    Ok((before, audit))
}

impl KeyStore {
    /// Delete team `change.id` with its audit entry: the team as it was, or the refusal (no such team, members
    /// that are not revoked, a store failure).
    pub(crate) async fn remove_team(&self, change: Change) -> Result<Row, ApiError> {
        let select = format!(
            "SELECT {} FROM tower_chat_teams WHERE id = $1",
            columns(Kind::Team)
        );
        let pattern = format!("%{}%", change.id);
        match self {
            KeyStore::Sqlite(db) => db
                .run("managed keys team deletion", move |conn| {
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    let before = tx
                        .query_row(&lite(&select), params![change.id], lite_row)
                        .optional()?;
                    let candidates = tx
                        .prepare(&lite(CANDIDATES))?
                        .query_map(params![pattern], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                        .collect::<Result<Vec<Candidate>, _>>()?;
                    let (row, audit) = match plan(&change, before, &candidates) {
                        Ok(planned) => planned,
                        Err(refused) => return Ok(Err(refused)),
                    };
                    tx.execute(&lite(DELETE), params![change.id])?;
                    insert_audit_lite(&tx, &audit)?;
                    tx.execute(BUMP, [])?;
                    tx.commit()?;
                    Ok(Ok(row))
                })
                .await
                .map_err(store_failed)?,
            KeyStore::Postgres(db, _) => {
                let failed = |e: tokio_postgres::Error| store_failed(pg("team deletion")(e));
                let mut client = db.client().await.map_err(store_failed)?;
                let tx = client.transaction().await.map_err(failed)?;
                // Locked first: a key change naming this team holds it `FOR SHARE` until it commits, so the
                // members read next include every key that joined before this deletion could proceed.
                let before = tx
                    .query_opt(&format!("{select} FOR UPDATE"), &[&change.id])
                    .await
                    .map_err(failed)?
                    .as_ref()
                    .map(pg_row);
                let candidates: Vec<Candidate> = tx
                    .query(CANDIDATES, &[&pattern])
                    .await
                    .map_err(failed)?
                    .iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2)))
                    .collect();
                let (row, audit) = plan(&change, before, &candidates)?;
                tx.execute(DELETE, &[&change.id]).await.map_err(failed)?;
                insert_audit_pg(&tx, &audit).await.map_err(failed)?;
                bump_and_notify_pg(&tx).await.map_err(failed)?;
                tx.commit().await.map_err(failed)?;
                Ok(row)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::record::KeyDoc;

    fn candidate(id: &str, team: &str, revoked: bool) -> Candidate {
        let doc = KeyDoc {
            team: Some(team.to_owned()),
            revoked_at: revoked.then_some(1),
            ..KeyDoc::default()
        };
        (
            id.to_owned(),
            format!("name-{id}"),
            serde_json::to_string(&doc).unwrap(),
        )
    }

    #[test]
    fn only_members_that_are_not_revoked_refuse_a_deletion() {
        let team = Row {
            id: "team_a1".into(),
            name: "research".into(),
            digest: String::new(),
            previous_digest: None,
            doc: "{}".into(),
        };
        // `team_a1` as a LIKE pattern also finds `teamXa1` and `team_a10`: not members.
        let others = [
            candidate("k1", "teamXa1", false),
            candidate("k2", "team_a10", false),
            candidate("k3", "team_a1", true),
        ];
        assert!(refusal(&team, &others).is_none());
        let mut with_member = others.to_vec();
        with_member.push(candidate("k4", "team_a1", false));
        with_member.push(("k5".into(), "broken".into(), "not json".into()));
        let refused = refusal(&team, &with_member).unwrap();
        assert_eq!(refused.status, http::StatusCode::CONFLICT);
        assert_eq!(refused.code, "team_has_members");
        assert!(
            refused.message.contains("`name-k4` (k4)") && refused.message.contains("`broken` (k5)"),
            "{}",
            refused.message
        );
        assert!(!refused.message.contains("k3"), "{}", refused.message);
    }
}
