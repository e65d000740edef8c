//! Tables for the approval layer: pending approvals (taken at most once) and an append-only audit log, in the
//! same database as the call records, so that a pause in one replica can be resumed in another or after a restart.
//!
//! Both stores create these tables in their migrations. The approval layer decides policy (expiry, binding to a
//! conversation and caller, tamper checks); the tables guarantee the one thing a database must: an approval id
//! is taken at most once, even by concurrent requests in different processes (`DELETE … RETURNING`).

use std::time::SystemTime;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tower_chat::{CallerIdentity, ConversationId, ToolCall};

use crate::store::StoreError;

/// An approval request waiting for a decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The (unguessable) id a decision must name.
    pub approval_id: String,
    /// The conversation the request belongs to.
    pub conversation_id: ConversationId,
    /// The caller who triggered the tool call.
    pub caller: Option<CallerIdentity>,
    /// The tool call waiting: id, tool name, arguments.
    pub call: ToolCall,
    /// Why approval is needed.
    pub reason: Option<String>,
    /// When it was requested.
    pub created_at: SystemTime,
    /// When it stops being valid.
    pub expires_at: SystemTime,
}

/// One decision (or refused decision) in the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The approval id the decision named.
    pub approval_id: String,
    /// The conversation the decision arrived in.
    pub conversation_id: Option<ConversationId>,
    /// The caller of the request that carried the decision.
    pub caller: Option<CallerIdentity>,
    /// Who decided, as the approval layer identifies them.
    pub approver: Option<String>,
    /// The tool call decided on, when known.
    pub call: Option<ToolCall>,
    /// The outcome, as the approval layer names it (`approved`, `denied`, `refused_replay`, …).
    pub outcome: String,
    /// The decision's or the refusal's reason.
    pub reason: Option<String>,
    /// When it was decided.
    pub decided_at: SystemTime,
}

/// Pending approvals and the audit log, implemented by [`crate::SqliteStore`] and [`crate::PostgresStore`].
pub trait ApprovalTables: Send + Sync + 'static {
    /// Record a pending approval. An id that is already pending is an error (ids must be unique).
    fn insert_pending<'a>(
        &'a self,
        pending: &'a PendingApproval,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Read a pending approval without taking it.
    fn get_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>>;

    /// Take a pending approval: it is removed and returned, atomically, so of any number of concurrent takes
    /// of one id exactly one gets it. Unknown and already-taken ids give `None`. Expiry is not checked here:
    /// the caller compares [`PendingApproval::expires_at`] (an expired approval is still consumed).
    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>>;

    /// Delete approvals that expired before `now`; returns how many.
    fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// Append to the audit log.
    fn insert_audit<'a>(&'a self, record: &'a AuditRecord)
        -> BoxFuture<'a, Result<(), StoreError>>;

    /// A conversation's audit log, oldest first.
    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<AuditRecord>, StoreError>>;
}

/// Shared tables are tables: `Arc<SqliteStore>`, `Arc<dyn ApprovalTables>`.
impl<T: ApprovalTables + ?Sized> ApprovalTables for std::sync::Arc<T> {
    fn insert_pending<'a>(
        &'a self,
        pending: &'a PendingApproval,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).insert_pending(pending)
    }

    fn get_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>> {
        (**self).get_pending(approval_id)
    }

    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>> {
        (**self).take_pending(approval_id)
    }

    fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        (**self).purge_expired(now)
    }

    fn insert_audit<'a>(
        &'a self,
        record: &'a AuditRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).insert_audit(record)
    }

    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<AuditRecord>, StoreError>> {
        (**self).audit_log(conversation_id)
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn encode_call(call: &ToolCall) -> Result<String, StoreError> {
    serde_json::to_string(call).map_err(|e| StoreError::with_source("cannot encode a tool call", e))
}

/// The raw columns of a pending approval.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
type PendingRow = (
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    i64,
    i64,
);

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn decode_pending(row: PendingRow) -> Result<PendingApproval, StoreError> {
    use crate::record::from_micros;
    let (approval_id, conversation_id, caller, call, reason, created_at, expires_at) = row;
    Ok(PendingApproval {
        approval_id,
        conversation_id: conversation_id.into(),
        caller: caller.map(Into::into),
        call: crate::store::decode_json("pending tool call", &call)?,
        reason,
        created_at: from_micros(created_at),
        expires_at: from_micros(expires_at),
    })
}

/// The raw columns of an audit record.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
type AuditRow = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    i64,
);

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn decode_audit(row: AuditRow) -> Result<AuditRecord, StoreError> {
    use crate::record::from_micros;
    let (approval_id, conversation_id, caller, approver, call, outcome, reason, decided_at) = row;
    Ok(AuditRecord {
        approval_id,
        conversation_id: conversation_id.map(Into::into),
        caller: caller.map(Into::into),
        approver,
        call: call
            .map(|c| crate::store::decode_json("audited tool call", &c))
            .transpose()?,
        outcome,
        reason,
        decided_at: from_micros(decided_at),
    })
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
const PENDING_COLUMNS: &str =
    "approval_id, conversation_id, caller, call, reason, created_at, expires_at";

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use crate::record::to_micros;
    use crate::store::sqlite::rusqlite::{self, params, OptionalExtension};
    use crate::SqliteStore;

    fn pending_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PendingRow> {
        Ok((
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
            row.get(5)?,
            row.get(6)?,
        ))
    }

    impl ApprovalTables for SqliteStore {
        fn insert_pending<'a>(
            &'a self,
            pending: &'a PendingApproval,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let values = (
                    pending.approval_id.clone(),
                    pending.conversation_id.as_str().to_owned(),
                    pending.caller.as_ref().map(|c| c.as_str().to_owned()),
                    encode_call(&pending.call)?,
                    pending.reason.clone(),
                    to_micros(pending.created_at),
                    to_micros(pending.expires_at),
                );
                self.run("cannot insert a pending approval", move |conn| {
                    conn.execute(
                        &format!(
                            "INSERT INTO chat_pending_approvals ({PENDING_COLUMNS}) \
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                        ),
                        params![
                            values.0, values.1, values.2, values.3, values.4, values.5, values.6
                        ],
                    )
                    .map(drop)
                })
                .await
            })
        }

        fn get_pending<'a>(
            &'a self,
            approval_id: &'a str,
        ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>> {
            let id = approval_id.to_owned();
            Box::pin(async move {
                self.run("cannot read a pending approval", move |conn| {
                    conn.query_row(
                        &format!(
                            "SELECT {PENDING_COLUMNS} FROM chat_pending_approvals WHERE approval_id = ?1"
                        ),
                        [id],
                        pending_row,
                    )
                    .optional()
                })
                .await?
                .map(decode_pending)
                .transpose()
            })
        }

        fn take_pending<'a>(
            &'a self,
            approval_id: &'a str,
        ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>> {
            let id = approval_id.to_owned();
            Box::pin(async move {
                self.run("cannot take a pending approval", move |conn| {
                    conn.query_row(
                        &format!(
                            "DELETE FROM chat_pending_approvals WHERE approval_id = ?1 \
                             RETURNING {PENDING_COLUMNS}"
                        ),
                        [id],
                        pending_row,
                    )
                    .optional()
                })
                .await?
                .map(decode_pending)
                .transpose()
            })
        }

        fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
            let now = to_micros(now);
            Box::pin(async move {
                let deleted = self
                    .run("cannot purge expired approvals", move |conn| {
                        conn.execute(
                            "DELETE FROM chat_pending_approvals WHERE expires_at < ?1",
                            [now],
                        )
                    })
                    .await?;
                Ok(deleted as u64)
            })
        }

        fn insert_audit<'a>(
            &'a self,
            record: &'a AuditRecord,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let call = record.call.as_ref().map(encode_call).transpose()?;
                let values = (
                    record.approval_id.clone(),
                    record
                        .conversation_id
                        .as_ref()
                        .map(|c| c.as_str().to_owned()),
                    record.caller.as_ref().map(|c| c.as_str().to_owned()),
                    record.approver.clone(),
                    call,
                    record.outcome.clone(),
                    record.reason.clone(),
                    to_micros(record.decided_at),
                );
                self.run("cannot append to the approval audit log", move |conn| {
                    conn.execute(
                        "INSERT INTO chat_approval_audit (approval_id, conversation_id, caller, approver, call, \
                         outcome, reason, decided_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        params![
                            values.0, values.1, values.2, values.3, values.4, values.5, values.6, values.7
                        ],
                    )
                    .map(drop)
                })
                .await
            })
        }

        fn audit_log<'a>(
            &'a self,
            conversation_id: &'a ConversationId,
        ) -> BoxFuture<'a, Result<Vec<AuditRecord>, StoreError>> {
            let id = conversation_id.as_str().to_owned();
            Box::pin(async move {
                let rows = self
                    .run("cannot read the approval audit log", move |conn| {
                        conn.prepare_cached(
                            "SELECT approval_id, conversation_id, caller, approver, call, outcome, reason, \
                             decided_at FROM chat_approval_audit WHERE conversation_id = ?1 ORDER BY seq",
                        )?
                        .query_map([id], |row| {
                            Ok((
                                row.get(0)?,
                                row.get(1)?,
                                row.get(2)?,
                                row.get(3)?,
                                row.get(4)?,
                                row.get(5)?,
                                row.get(6)?,
                                row.get(7)?,
                            ))
                        })?
                        .collect::<rusqlite::Result<Vec<AuditRow>>>()
                    })
                    .await?;
                rows.into_iter().map(decode_audit).collect()
            })
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::record::to_micros;
    use crate::store::postgres::tokio_postgres::{self, Row};
    use crate::PostgresStore;

    fn failed(what: &'static str) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
        move |e| {
            let message = match e.as_db_error() {
                Some(db) => format!(
                    "PostgreSQL: {what} ({}: {})",
                    db.code().code(),
                    db.message()
                ),
                None => format!("PostgreSQL: {what}"),
            };
            StoreError::with_source(message, e)
        }
    }

    fn pending_row(row: &Row) -> Result<PendingRow, tokio_postgres::Error> {
        Ok((
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
            row.try_get(5)?,
            row.try_get(6)?,
        ))
    }

    const PENDING_SELECT: &str =
        "approval_id, conversation_id, caller, call::text, reason, created_at, expires_at";

    impl PostgresStore {
        async fn one_pending(
            &self,
            sql: &str,
            approval_id: &str,
            what: &'static str,
        ) -> Result<Option<PendingApproval>, StoreError> {
            let client = self.client().await?;
            let row = client
                .query_opt(sql, &[&approval_id])
                .await
                .map_err(failed(what))?;
            row.map(|row| {
                pending_row(&row)
                    .map_err(failed(what))
                    .and_then(decode_pending)
            })
            .transpose()
        }
    }

    impl ApprovalTables for PostgresStore {
        fn insert_pending<'a>(
            &'a self,
            pending: &'a PendingApproval,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let call = encode_call(&pending.call)?;
                let client = self.client().await?;
                client
                    .execute(
                        &format!(
                            "INSERT INTO chat_pending_approvals ({PENDING_COLUMNS}) \
                             VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7)"
                        ),
                        &[
                            &pending.approval_id,
                            &pending.conversation_id.as_str(),
                            &pending.caller.as_ref().map(|c| c.as_str()),
                            &call,
                            &pending.reason,
                            &to_micros(pending.created_at),
                            &to_micros(pending.expires_at),
                        ],
                    )
                    .await
                    .map_err(failed("cannot insert a pending approval"))?;
                Ok(())
            })
        }

        fn get_pending<'a>(
            &'a self,
            approval_id: &'a str,
        ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>> {
            Box::pin(async move {
                let sql = format!(
                    "SELECT {PENDING_SELECT} FROM chat_pending_approvals WHERE approval_id = $1"
                );
                self.one_pending(&sql, approval_id, "cannot read a pending approval")
                    .await
            })
        }

        fn take_pending<'a>(
            &'a self,
            approval_id: &'a str,
        ) -> BoxFuture<'a, Result<Option<PendingApproval>, StoreError>> {
            Box::pin(async move {
                // One statement: of concurrent takes, only the one whose DELETE removed the row gets it back.
                let sql = format!(
                    "DELETE FROM chat_pending_approvals WHERE approval_id = $1 RETURNING {PENDING_SELECT}"
                );
                self.one_pending(&sql, approval_id, "cannot take a pending approval")
                    .await
            })
        }

        fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
            Box::pin(async move {
                let client = self.client().await?;
                client
                    .execute(
                        "DELETE FROM chat_pending_approvals WHERE expires_at < $1",
                        &[&to_micros(now)],
                    )
                    .await
                    .map_err(failed("cannot purge expired approvals"))
            })
        }

        fn insert_audit<'a>(
            &'a self,
            record: &'a AuditRecord,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let call = record.call.as_ref().map(encode_call).transpose()?;
                let client = self.client().await?;
                client
                    .execute(
                        "INSERT INTO chat_approval_audit (approval_id, conversation_id, caller, approver, call, \
                         outcome, reason, decided_at) VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7, $8)",
                        &[
                            &record.approval_id,
                            &record.conversation_id.as_ref().map(|c| c.as_str()),
                            &record.caller.as_ref().map(|c| c.as_str()),
                            &record.approver,
                            &call,
                            &record.outcome,
                            &record.reason,
                            &to_micros(record.decided_at),
                        ],
                    )
                    .await
                    .map_err(failed("cannot append to the approval audit log"))?;
                Ok(())
            })
        }

        fn audit_log<'a>(
            &'a self,
            conversation_id: &'a ConversationId,
        ) -> BoxFuture<'a, Result<Vec<AuditRecord>, StoreError>> {
            Box::pin(async move {
                let what = "cannot read the approval audit log";
                let client = self.client().await?;
                let rows = client
                    .query(
                        "SELECT approval_id, conversation_id, caller, approver, call::text, outcome, reason, \
                         decided_at FROM chat_approval_audit WHERE conversation_id = $1 ORDER BY seq",
                        &[&conversation_id.as_str()],
                    )
                    .await
                    .map_err(failed(what))?;
                rows.iter()
                    .map(|row| {
                        let raw: AuditRow = (
                            row.try_get(0).map_err(failed(what))?,
                            row.try_get(1).map_err(failed(what))?,
                            row.try_get(2).map_err(failed(what))?,
                            row.try_get(3).map_err(failed(what))?,
                            row.try_get(4).map_err(failed(what))?,
                            row.try_get(5).map_err(failed(what))?,
                            row.try_get(6).map_err(failed(what))?,
                            row.try_get(7).map_err(failed(what))?,
                        );
                        decode_audit(raw)
                    })
                    .collect()
            })
        }
    }
}
