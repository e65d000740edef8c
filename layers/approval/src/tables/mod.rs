//! Pending approvals and the audit log in SQL: [`SqliteApprovalStore`] and [`PostgresApprovalStore`], next to
//! the persistence crate's call records in the same SQLite file or PostgreSQL pool.
//!
//! The tables are this crate's: its migration (`tower-chat-approval/0001_tables`) creates them through the
//! persistence crate's migration runner when a store is built. Databases created before the tables moved here
//! already have them (from the retired `tower-chat-persistence/0002_approvals`); the migration only creates what
//! is missing, so they are used as they are.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower_chat::{ChatError, ErrorKind, ToolCall};

use crate::record::{AuditOutcome, AuditRecord, PendingApproval};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::PostgresApprovalStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteApprovalStore;

/// The migration id, global per database.
const MIGRATION_ID: &str = "tower-chat-approval/0001_tables";

/// The tables in a dialect: JSON columns as `json`, the audit log's sequence key as `serial_key`.
fn tables_sql(json: &str, serial_key: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS chat_pending_approvals (
    approval_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT,
    call {json} NOT NULL,
    reason TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS chat_pending_approvals_by_expiry ON chat_pending_approvals (expires_at);
CREATE TABLE IF NOT EXISTS chat_approval_audit (
    seq {serial_key},
    approval_id TEXT NOT NULL,
    conversation_id TEXT,
    caller TEXT,
    approver TEXT,
    call {json},
    outcome TEXT NOT NULL,
    reason TEXT,
    decided_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS chat_approval_audit_by_conversation ON chat_approval_audit (conversation_id, seq);"
    )
}

const PENDING_COLUMNS: &str =
    "approval_id, conversation_id, caller, call, reason, created_at, expires_at";

const AUDIT_COLUMNS: &str =
    "approval_id, conversation_id, caller, approver, call, outcome, reason, decided_at";

/// A pending approval as column values.
struct PendingRow {
    approval_id: String,
    conversation_id: String,
    caller: Option<String>,
    call: String,
    reason: Option<String>,
    created_at: i64,
    expires_at: i64,
}

impl PendingRow {
    fn encode(pending: &PendingApproval) -> Result<PendingRow, ChatError> {
        Ok(PendingRow {
            approval_id: pending.approval_id.clone(),
            conversation_id: pending.conversation_id.as_str().to_owned(),
            caller: pending.caller.as_ref().map(|c| c.as_str().to_owned()),
            call: encode_call(&pending.call)?,
            reason: pending.reason.clone(),
            created_at: to_micros(pending.created_at),
            expires_at: to_micros(pending.expires_at),
        })
    }

    fn decode(self) -> Result<PendingApproval, ChatError> {
        Ok(PendingApproval {
            approval_id: self.approval_id,
            conversation_id: self.conversation_id.into(),
            caller: self.caller.map(Into::into),
            call: decode_call(&self.call)?,
            reason: self.reason,
            created_at: from_micros(self.created_at),
            expires_at: from_micros(self.expires_at),
        })
    }
}

/// An audit record as column values.
struct AuditRow {
    approval_id: String,
    conversation_id: Option<String>,
    caller: Option<String>,
    approver: Option<String>,
    call: Option<String>,
    outcome: String,
    reason: Option<String>,
    decided_at: i64,
}

impl AuditRow {
    fn encode(record: &AuditRecord) -> Result<AuditRow, ChatError> {
        Ok(AuditRow {
            approval_id: record.approval_id.clone(),
            conversation_id: record
                .conversation_id
                .as_ref()
                .map(|c| c.as_str().to_owned()),
            caller: record.caller.as_ref().map(|c| c.as_str().to_owned()),
            approver: record.approver.clone(),
            call: record.call.as_ref().map(encode_call).transpose()?,
            outcome: record.outcome.as_str().to_owned(),
            reason: record.reason.clone(),
            decided_at: to_micros(record.decided_at),
        })
    }

    fn decode(self) -> Result<AuditRecord, ChatError> {
        let outcome: AuditOutcome = self.outcome.parse().map_err(|e| {
            store_error("the approval audit log holds an unknown outcome").with_source(e)
        })?;
        Ok(AuditRecord {
            approval_id: self.approval_id,
            conversation_id: self.conversation_id.map(Into::into),
            caller: self.caller.map(Into::into),
            approver: self.approver,
            call: self.call.as_deref().map(decode_call).transpose()?,
            outcome,
            reason: self.reason,
            decided_at: from_micros(self.decided_at),
        })
    }
}

fn store_error(message: impl Into<String>) -> ChatError {
    ChatError::new(ErrorKind::Store, message)
}

fn encode_call(call: &ToolCall) -> Result<String, ChatError> {
    serde_json::to_string(call).map_err(|e| store_error("cannot encode a tool call").with_source(e))
}

fn decode_call(json: &str) -> Result<ToolCall, ChatError> {
    serde_json::from_str(json)
        .map_err(|e| store_error("the approval tables hold an unreadable tool call").with_source(e))
}

/// Whole microseconds since the Unix epoch, as the persistence crate stores its timestamps.
fn to_micros(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

fn from_micros(micros: i64) -> SystemTime {
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
    }
}
