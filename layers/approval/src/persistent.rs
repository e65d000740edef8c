//! The persistence crate's SQLite and PostgreSQL stores as approval stores.

use std::fmt;
use std::time::SystemTime;

use tower_chat::{ChatError, ConversationId, ErrorKind};
use tower_chat_persistence::{self as persistence, ApprovalTables};

use crate::record::{AuditRecord, PendingApproval};
use crate::store::{ApprovalStore, StoreFuture};

/// An [`ApprovalStore`] over the persistence crate's approval tables: `SqliteStore` (feature `sqlite`) or
/// `PostgresStore` (feature `postgres`), the same store a `PersistenceLayer` writes to. The tables come with the
/// persistence crate's migrations; share one PostgreSQL database between replicas to resume a pause in any of
/// them, or reopen the SQLite file after a restart.
///
/// Single use rests on the tables' atomic take (`DELETE … RETURNING`): of concurrent requests using one id, in
/// any number of processes, one gets it.
#[derive(Clone)]
pub struct PersistentApprovalStore<T> {
    tables: T,
}

impl<T: ApprovalTables> PersistentApprovalStore<T> {
    /// Keep approvals in these tables.
    pub fn new(tables: T) -> Self {
        PersistentApprovalStore { tables }
    }

    /// The underlying store.
    pub fn get_ref(&self) -> &T {
        &self.tables
    }

    /// Unwrap the underlying store.
    pub fn into_inner(self) -> T {
        self.tables
    }
}

impl<T> fmt::Debug for PersistentApprovalStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistentApprovalStore")
            .field("tables", &std::any::type_name::<T>())
            .finish()
    }
}

fn to_row(pending: &PendingApproval) -> persistence::PendingApproval {
    persistence::PendingApproval {
        approval_id: pending.approval_id.clone(),
        conversation_id: pending.conversation_id.clone(),
        caller: pending.caller.clone(),
        call: pending.call.clone(),
        reason: pending.reason.clone(),
        created_at: pending.created_at,
        expires_at: pending.expires_at,
    }
}

fn from_row(row: persistence::PendingApproval) -> PendingApproval {
    PendingApproval {
        approval_id: row.approval_id,
        conversation_id: row.conversation_id,
        caller: row.caller,
        call: row.call,
        reason: row.reason,
        created_at: row.created_at,
        expires_at: row.expires_at,
    }
}

fn audit_to_row(record: &AuditRecord) -> persistence::AuditRecord {
    persistence::AuditRecord {
        approval_id: record.approval_id.clone(),
        conversation_id: record.conversation_id.clone(),
        caller: record.caller.clone(),
        approver: record.approver.clone(),
        call: record.call.clone(),
        outcome: record.outcome.as_str().to_owned(),
        reason: record.reason.clone(),
        decided_at: record.decided_at,
    }
}

fn audit_from_row(row: persistence::AuditRecord) -> Result<AuditRecord, ChatError> {
    let outcome = row.outcome.parse().map_err(|e| {
        ChatError::new(
            ErrorKind::Store,
            "the approval audit log holds an unknown outcome",
        )
        .with_source(e)
    })?;
    Ok(AuditRecord {
        approval_id: row.approval_id,
        conversation_id: row.conversation_id,
        caller: row.caller,
        approver: row.approver,
        call: row.call,
        outcome,
        reason: row.reason,
        decided_at: row.decided_at,
    })
}

impl<T: ApprovalTables> ApprovalStore for PersistentApprovalStore<T> {
    fn insert_pending<'a>(&'a self, pending: &'a PendingApproval) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = to_row(pending);
            Ok(self.tables.insert_pending(&row).await?)
        })
    }

    fn get_pending<'a>(&'a self, approval_id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        Box::pin(async move { Ok(self.tables.get_pending(approval_id).await?.map(from_row)) })
    }

    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> StoreFuture<'a, Option<PendingApproval>> {
        Box::pin(async move { Ok(self.tables.take_pending(approval_id).await?.map(from_row)) })
    }

    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64> {
        Box::pin(async move { Ok(self.tables.purge_expired(now).await?) })
    }

    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let row = audit_to_row(record);
            Ok(self.tables.insert_audit(&row).await?)
        })
    }

    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> StoreFuture<'a, Vec<AuditRecord>> {
        Box::pin(async move {
            self.tables
                .audit_log(conversation_id)
                .await?
                .into_iter()
                .map(audit_from_row)
                .collect()
        })
    }
}
