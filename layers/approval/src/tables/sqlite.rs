//! [`SqliteApprovalStore`]: pending approvals and the audit log in the persistence crate's SQLite file.

use std::fmt;
use std::time::SystemTime;

use tower_chat::ConversationId;
use tower_chat_persistence::store::sqlite::rusqlite::{self, params, OptionalExtension};
use tower_chat_persistence::{Migration, SqliteStore};

use super::sql::{
    context_sql, decide_sql, decided_sql, decisions_sql, list_pending_tail, not_recorded,
    tables_sql, AuditRow, PendingRow, AUDIT_COLUMNS, CONTEXT_MIGRATION_ID, DECISIONS_MIGRATION_ID,
    MIGRATION_ID, PENDING_COLUMNS,
};
use crate::record::{AuditRecord, DecideOutcome, PendingApproval, PendingCursor, PendingDecision};
use crate::store::{ApprovalStore, StoreFuture};

/// An [`ApprovalStore`] in a SQLite file, sharing the connection of a persistence [`SqliteStore`]: a pause
/// survives a restart (reopen the file), and the records and approvals of a conversation sit in one database.
///
/// Single use rests on `DELETE … RETURNING` on the store's one connection thread: of concurrent takes of an id,
/// one gets it; other processes opening the same file wait on SQLite's write lock.
///
/// ```
/// use tower_chat_approval::{ApprovalLayer, SqliteApprovalStore};
/// use tower_chat_persistence::SqliteStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let db = SqliteStore::open(dir.path().join("chat.db")).await?; // also a PersistenceLayer's store
/// let approvals = ApprovalLayer::new().store(SqliteApprovalStore::new(db).await?);
/// # let _ = approvals;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteApprovalStore {
    db: SqliteStore,
}

impl SqliteApprovalStore {
    /// Keep approvals in `db`'s file, creating the tables if they are missing.
    pub async fn new(db: SqliteStore) -> Result<Self, tower_chat::ChatError> {
        db.apply_migrations(&migrations()).await?;
        Ok(SqliteApprovalStore { db })
    }

    /// The underlying store.
    pub fn get_ref(&self) -> &SqliteStore {
        &self.db
    }
}

/// The tables in SQLite's dialect (JSON as TEXT), then the decision columns.
pub(crate) fn migrations() -> [Migration; 3] {
    [
        Migration::new(
            MIGRATION_ID,
            tables_sql("TEXT", "INTEGER PRIMARY KEY AUTOINCREMENT"),
        ),
        Migration::new(DECISIONS_MIGRATION_ID, decisions_sql("BOOLEAN", "")),
        Migration::new(CONTEXT_MIGRATION_ID, context_sql("")),
    ]
}

impl fmt::Debug for SqliteApprovalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteApprovalStore")
            .field("path", &self.db.path())
            .finish()
    }
}

fn pending_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PendingRow> {
    Ok(PendingRow {
        approval_id: row.get(0)?,
        conversation_id: row.get(1)?,
        caller: row.get(2)?,
        call: row.get(3)?,
        reason: row.get(4)?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
        decided_approved: row.get(7)?,
        decided_reason: row.get(8)?,
        decided_by: row.get(9)?,
        decided_at: row.get(10)?,
        context_user: row.get(11)?,
        context_text: row.get(12)?,
    })
}

fn audit_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        approval_id: row.get(0)?,
        conversation_id: row.get(1)?,
        caller: row.get(2)?,
        approver: row.get(3)?,
        call: row.get(4)?,
        outcome: row.get(5)?,
        reason: row.get(6)?,
        decided_at: row.get(7)?,
    })
}

impl SqliteApprovalStore {
    /// One pending approval selected (or taken) by `sql` with the id as its only parameter.
    async fn one_pending(
        &self,
        what: &'static str,
        sql: String,
        approval_id: &str,
    ) -> Result<Option<PendingApproval>, tower_chat::ChatError> {
        let id = approval_id.to_owned();
        self.db
            .run(what, move |conn| {
                conn.query_row(&sql, [id], pending_row).optional()
            })
            .await?
            .map(PendingRow::decode)
            .transpose()
    }
}

impl ApprovalStore for SqliteApprovalStore {
    fn insert_pending<'a>(&'a self, pending: &'a PendingApproval) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = PendingRow::encode(pending)?;
            self.db
                .run("cannot insert a pending approval", move |conn| {
                    conn.execute(
                        &format!(
                            "INSERT INTO chat_pending_approvals ({PENDING_COLUMNS}) \
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                        ),
                        params![
                            row.approval_id,
                            row.conversation_id,
                            row.caller,
                            row.call,
                            row.reason,
                            row.created_at,
                            row.expires_at,
                            row.decided_approved,
                            row.decided_reason,
                            row.decided_by,
                            row.decided_at,
                            row.context_user,
                            row.context_text
                        ],
                    )
                    .map(drop)
                })
                .await?;
            Ok(())
        })
    }

    fn get_pending<'a>(&'a self, approval_id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        let sql =
            format!("SELECT {PENDING_COLUMNS} FROM chat_pending_approvals WHERE approval_id = ?1");
        Box::pin(self.one_pending("cannot read a pending approval", sql, approval_id))
    }

    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> StoreFuture<'a, Option<PendingApproval>> {
        let sql = format!(
            "DELETE FROM chat_pending_approvals WHERE approval_id = ?1 RETURNING {PENDING_COLUMNS}"
        );
        Box::pin(self.one_pending("cannot take a pending approval", sql, approval_id))
    }

    fn list_pending<'a>(
        &'a self,
        now: SystemTime,
        after: Option<&'a PendingCursor>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<PendingApproval>> {
        let now = super::sql::to_micros(now);
        let (created_at, approval_id) = super::sql::cursor_params(after);
        let limit = super::sql::page_size(limit);
        Box::pin(async move {
            let rows = self
                .db
                .run("cannot list pending approvals", move |conn| {
                    conn.prepare_cached(&format!(
                        "SELECT {PENDING_COLUMNS} FROM chat_pending_approvals {}",
                        list_pending_tail(|i| format!("?{i}"))
                    ))?
                    .query_map(params![now, created_at, approval_id, limit], pending_row)?
                    .collect::<rusqlite::Result<Vec<PendingRow>>>()
                })
                .await?;
            rows.into_iter().map(PendingRow::decode).collect()
        })
    }

    fn decide_pending<'a>(
        &'a self,
        approval_id: &'a str,
        decision: &'a PendingDecision,
    ) -> StoreFuture<'a, DecideOutcome> {
        let id = approval_id.to_owned();
        let decision = decision.clone();
        Box::pin(async move {
            self.db
                .run("cannot record a decision", move |conn| {
                    let at = super::sql::to_micros(decision.decided_at);
                    let changed = conn.execute(
                        &decide_sql(|i| format!("?{i}")),
                        params![
                            decision.approved,
                            decision.reason,
                            decision.approver,
                            at,
                            id
                        ],
                    )?;
                    if changed == 1 {
                        return Ok(DecideOutcome::Recorded);
                    }
                    let decided = conn
                        .query_row(&decided_sql(|i| format!("?{i}")), params![id, at], |row| {
                            row.get(0)
                        })
                        .optional()?;
                    Ok(not_recorded(decided))
                })
                .await
                .map_err(Into::into)
        })
    }

    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64> {
        let now = super::sql::to_micros(now);
        Box::pin(async move {
            let deleted = self
                .db
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

    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = AuditRow::encode(record)?;
            self.db
                .run("cannot append to the approval audit log", move |conn| {
                    conn.execute(
                        &format!(
                            "INSERT INTO chat_approval_audit ({AUDIT_COLUMNS}) \
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                        ),
                        params![
                            row.approval_id,
                            row.conversation_id,
                            row.caller,
                            row.approver,
                            row.call,
                            row.outcome,
                            row.reason,
                            row.decided_at
                        ],
                    )
                    .map(drop)
                })
                .await?;
            Ok(())
        })
    }

    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> StoreFuture<'a, Vec<AuditRecord>> {
        let id = conversation_id.as_str().to_owned();
        Box::pin(async move {
            let rows = self
                .db
                .run("cannot read the approval audit log", move |conn| {
                    conn.prepare_cached(&format!(
                        "SELECT {AUDIT_COLUMNS} FROM chat_approval_audit \
                         WHERE conversation_id = ?1 ORDER BY seq"
                    ))?
                    .query_map([id], audit_row)?
                    .collect::<rusqlite::Result<Vec<AuditRow>>>()
                })
                .await?;
            rows.into_iter().map(AuditRow::decode).collect()
        })
    }
}
