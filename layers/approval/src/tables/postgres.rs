//! [`PostgresApprovalStore`]: pending approvals and the audit log in the persistence crate's PostgreSQL pool.

use std::fmt;
use std::time::SystemTime;

use tower_chat::{ChatError, ConversationId};
use tower_chat_persistence::store::postgres::tokio_postgres::{self, types::ToSql, Row};
use tower_chat_persistence::{Migration, PostgresStore};

use super::sql::{
    context_sql, decide_sql, decided_sql, decisions_sql, list_pending_tail, not_recorded,
    store_error, tables_sql, AuditRow, PendingRow, AUDIT_COLUMNS, CONTEXT_MIGRATION_ID,
    DECISIONS_MIGRATION_ID, MIGRATION_ID, PENDING_COLUMNS,
};
use crate::record::{AuditRecord, DecideOutcome, PendingApproval, PendingCursor, PendingDecision};
use crate::store::{ApprovalStore, StoreFuture};

/// An [`ApprovalStore`] in PostgreSQL, sharing the pool (and schema) of a persistence [`PostgresStore`]:
/// replicas on one database share pending approvals, so a pause in one resumes in another.
///
/// Single use rests on one `DELETE … RETURNING` statement: of concurrent takes of an id, in any number of
/// processes, exactly one gets the row.
#[derive(Clone)]
pub struct PostgresApprovalStore {
    db: PostgresStore,
}

impl PostgresApprovalStore {
    /// Keep approvals in `db`'s database (and schema), creating the tables if they are missing.
    pub async fn new(db: PostgresStore) -> Result<Self, ChatError> {
        db.apply_migrations(&migrations()).await?;
        Ok(PostgresApprovalStore { db })
    }

    /// The underlying store.
    pub fn get_ref(&self) -> &PostgresStore {
        &self.db
    }
}

/// The tables in PostgreSQL's dialect (JSON as JSONB), then the decision columns.
pub(crate) fn migrations() -> [Migration; 3] {
    [
        Migration::new(MIGRATION_ID, tables_sql("JSONB", "BIGSERIAL PRIMARY KEY")),
        Migration::new(
            DECISIONS_MIGRATION_ID,
            decisions_sql("BOOLEAN", "IF NOT EXISTS "),
        ),
        Migration::new(CONTEXT_MIGRATION_ID, context_sql("IF NOT EXISTS ")),
    ]
}

impl fmt::Debug for PostgresApprovalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresApprovalStore")
            .field("schema", &self.db.schema())
            .finish()
    }
}

/// A store error naming PostgreSQL's reason (tokio-postgres displays a server error as just "db error").
fn failed(what: &'static str) -> impl Fn(tokio_postgres::Error) -> ChatError {
    move |e| {
        let message = match e.as_db_error() {
            Some(db) => format!(
                "PostgreSQL: {what} ({}: {})",
                db.code().code(),
                db.message()
            ),
            None => format!("PostgreSQL: {what}"),
        };
        store_error(message).with_source(e)
    }
}

/// JSONB columns are read as text, so both dialects decode the same strings.
const PENDING_SELECT: &str =
    "approval_id, conversation_id, caller, call::text, reason, created_at, expires_at, \
     decided_approved, decided_reason, decided_by, decided_at, context_user, context_text";

const AUDIT_SELECT: &str =
    "approval_id, conversation_id, caller, approver, call::text, outcome, reason, decided_at";

fn pending_row(row: &Row) -> Result<PendingRow, tokio_postgres::Error> {
    Ok(PendingRow {
        approval_id: row.try_get(0)?,
        conversation_id: row.try_get(1)?,
        caller: row.try_get(2)?,
        call: row.try_get(3)?,
        reason: row.try_get(4)?,
        created_at: row.try_get(5)?,
        expires_at: row.try_get(6)?,
        decided_approved: row.try_get(7)?,
        decided_reason: row.try_get(8)?,
        decided_by: row.try_get(9)?,
        decided_at: row.try_get(10)?,
        context_user: row.try_get(11)?,
        context_text: row.try_get(12)?,
    })
}

fn audit_row(row: &Row) -> Result<AuditRow, tokio_postgres::Error> {
    Ok(AuditRow {
        approval_id: row.try_get(0)?,
        conversation_id: row.try_get(1)?,
        caller: row.try_get(2)?,
        approver: row.try_get(3)?,
        call: row.try_get(4)?,
        outcome: row.try_get(5)?,
        reason: row.try_get(6)?,
        decided_at: row.try_get(7)?,
    })
}

impl PostgresApprovalStore {
    async fn execute(
        &self,
        what: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, ChatError> {
        let client = self.db.client().await?;
        client.execute(sql, params).await.map_err(failed(what))
    }

    async fn one_pending(
        &self,
        what: &'static str,
        sql: &str,
        approval_id: &str,
    ) -> Result<Option<PendingApproval>, ChatError> {
        let client = self.db.client().await?;
        let row = client
            .query_opt(sql, &[&approval_id])
            .await
            .map_err(failed(what))?;
        row.map(|row| pending_row(&row).map_err(failed(what))?.decode())
            .transpose()
    }
}

impl ApprovalStore for PostgresApprovalStore {
    fn insert_pending<'a>(&'a self, pending: &'a PendingApproval) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = PendingRow::encode(pending)?;
            let sql = format!(
                "INSERT INTO chat_pending_approvals ({PENDING_COLUMNS}) \
                 VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            );
            self.execute(
                "cannot insert a pending approval",
                &sql,
                &[
                    &row.approval_id,
                    &row.conversation_id,
                    &row.caller,
                    &row.call,
                    &row.reason,
                    &row.created_at,
                    &row.expires_at,
                    &row.decided_approved,
                    &row.decided_reason,
                    &row.decided_by,
                    &row.decided_at,
                    &row.context_user,
                    &row.context_text,
                ],
            )
            .await?;
            Ok(())
        })
    }

    fn get_pending<'a>(&'a self, approval_id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT {PENDING_SELECT} FROM chat_pending_approvals WHERE approval_id = $1"
            );
            self.one_pending("cannot read a pending approval", &sql, approval_id)
                .await
        })
    }

    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> StoreFuture<'a, Option<PendingApproval>> {
        Box::pin(async move {
            // One statement: of concurrent takes, only the one whose DELETE removed the row gets it back.
            let sql = format!(
                "DELETE FROM chat_pending_approvals WHERE approval_id = $1 RETURNING {PENDING_SELECT}"
            );
            self.one_pending("cannot take a pending approval", &sql, approval_id)
                .await
        })
    }

    fn list_pending<'a>(
        &'a self,
        now: SystemTime,
        after: Option<&'a PendingCursor>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<PendingApproval>> {
        Box::pin(async move {
            let what = "cannot list pending approvals";
            let (created_at, approval_id) = super::sql::cursor_params(after);
            let client = self.db.client().await?;
            let sql = format!(
                "SELECT {PENDING_SELECT} FROM chat_pending_approvals {}",
                list_pending_tail(|i| format!("${i}"))
            );
            let rows = client
                .query(
                    &sql,
                    &[
                        &super::sql::to_micros(now),
                        &created_at,
                        &approval_id,
                        &super::sql::page_size(limit),
                    ],
                )
                .await
                .map_err(failed(what))?;
            rows.iter()
                .map(|row| pending_row(row).map_err(failed(what))?.decode())
                .collect()
        })
    }

    fn decide_pending<'a>(
        &'a self,
        approval_id: &'a str,
        decision: &'a PendingDecision,
    ) -> StoreFuture<'a, DecideOutcome> {
        Box::pin(async move {
            let what = "cannot record a decision";
            let at = super::sql::to_micros(decision.decided_at);
            // One statement: of concurrent decisions, only the one whose UPDATE found the row undecided wins.
            let changed = self
                .execute(
                    what,
                    &decide_sql(|i| format!("${i}")),
                    &[
                        &decision.approved,
                        &decision.reason,
                        &decision.approver,
                        &at,
                        &approval_id,
                    ],
                )
                .await?;
            if changed == 1 {
                return Ok(DecideOutcome::Recorded);
            }
            let client = self.db.client().await?;
            let decided = client
                .query_opt(&decided_sql(|i| format!("${i}")), &[&approval_id, &at])
                .await
                .map_err(failed(what))?
                .map(|row| row.try_get::<_, bool>(0))
                .transpose()
                .map_err(failed(what))?;
            Ok(not_recorded(decided))
        })
    }

    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            self.execute(
                "cannot purge expired approvals",
                "DELETE FROM chat_pending_approvals WHERE expires_at < $1",
                &[&super::sql::to_micros(now)],
            )
            .await
        })
    }

    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = AuditRow::encode(record)?;
            let sql = format!(
                "INSERT INTO chat_approval_audit ({AUDIT_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7, $8)"
            );
            self.execute(
                "cannot append to the approval audit log",
                &sql,
                &[
                    &row.approval_id,
                    &row.conversation_id,
                    &row.caller,
                    &row.approver,
                    &row.call,
                    &row.outcome,
                    &row.reason,
                    &row.decided_at,
                ],
            )
            .await?;
            Ok(())
        })
    }

    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> StoreFuture<'a, Vec<AuditRecord>> {
        Box::pin(async move {
            let what = "cannot read the approval audit log";
            let client = self.db.client().await?;
            let sql = format!(
                "SELECT {AUDIT_SELECT} FROM chat_approval_audit WHERE conversation_id = $1 ORDER BY seq"
            );
            let rows = client
                .query(&sql, &[&conversation_id.as_str()])
                .await
                .map_err(failed(what))?;
            rows.iter()
                .map(|row| audit_row(row).map_err(failed(what))?.decode())
                .collect()
        })
    }
}
