//! What both SQL backends share: the migrations, the column lists and statements, and the rows as column values.

use std::time::SystemTime;

use tower_chat::{ChatError, ErrorKind, ToolCall};

use crate::record::{
    AuditOutcome, AuditRecord, DecideOutcome, PendingApproval, PendingCursor, PendingDecision,
    MAX_PENDING_PAGE,
};

/// The migration id, global per database.
pub(super) const MIGRATION_ID: &str = "tower-chat-approval/0001_tables";

/// The second migration: a decision recorded on a pending approval (before a request carries it), and the index
/// that pages through unexpired approvals in expiry order (one range from now on, whatever expired before).
pub(super) const DECISIONS_MIGRATION_ID: &str = "tower-chat-approval/0002_decisions";

/// The third migration: what an approver reads beside the call ([`crate::ApprovalContext`]).
pub(super) const CONTEXT_MIGRATION_ID: &str = "tower-chat-approval/0003_context";

/// The third migration in a dialect (`if_not_exists` as in [`decisions_sql`]).
pub(super) fn context_sql(if_not_exists: &str) -> String {
    format!(
        "ALTER TABLE chat_pending_approvals ADD COLUMN {if_not_exists}context_user TEXT;\n\
         ALTER TABLE chat_pending_approvals ADD COLUMN {if_not_exists}context_text TEXT;"
    )
}

/// The second migration in a dialect: `if_not_exists` is PostgreSQL's `IF NOT EXISTS` for `ADD COLUMN` (SQLite
/// has none; the migration runner runs it once per database anyway).
pub(super) fn decisions_sql(boolean: &str, if_not_exists: &str) -> String {
    let add = |column: &str, ty: &str| {
        format!("ALTER TABLE chat_pending_approvals ADD COLUMN {if_not_exists}{column} {ty};\n")
    };
    let mut sql = String::new();
    sql.push_str(&add("decided_approved", boolean));
    sql.push_str(&add("decided_reason", "TEXT"));
    sql.push_str(&add("decided_by", "TEXT"));
    sql.push_str(&add("decided_at", "BIGINT"));
    sql.push_str(
        "CREATE INDEX IF NOT EXISTS chat_pending_approvals_by_expiry_and_id \
         ON chat_pending_approvals (expires_at, approval_id);",
    );
    sql
}

/// The tables in a dialect: JSON columns as `json`, the audit log's sequence key as `serial_key`.
pub(super) fn tables_sql(json: &str, serial_key: &str) -> String {
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

pub(super) const PENDING_COLUMNS: &str =
    "approval_id, conversation_id, caller, call, reason, created_at, expires_at, \
     decided_approved, decided_reason, decided_by, decided_at, context_user, context_text";

/// The condition and order of a page of unexpired pending approvals; parameters: now, the cursor's expiry and id
/// (the smallest values when the listing starts), the page size.
pub(super) fn list_pending_tail(param: impl Fn(usize) -> String) -> String {
    format!(
        "WHERE expires_at > {} AND (expires_at, approval_id) > ({}, {}) \
         ORDER BY expires_at, approval_id LIMIT {}",
        param(1),
        param(2),
        param(3),
        param(4)
    )
}

/// Record a decision once, on an unexpired approval; parameters: approved, reason, approver, decided at, id.
pub(super) fn decide_sql(param: impl Fn(usize) -> String) -> String {
    format!(
        "UPDATE chat_pending_approvals SET decided_approved = {}, decided_reason = {}, decided_by = {}, \
         decided_at = {} WHERE approval_id = {} AND decided_by IS NULL AND expires_at > {}",
        param(1),
        param(2),
        param(3),
        param(4),
        param(5),
        param(4)
    )
}

/// Why a decision was not recorded: one row (whether it is decided) when the approval is pending; parameters:
/// id, now.
pub(super) fn decided_sql(param: impl Fn(usize) -> String) -> String {
    format!(
        "SELECT decided_by IS NOT NULL FROM chat_pending_approvals WHERE approval_id = {} AND expires_at > {}",
        param(1),
        param(2)
    )
}

/// The start of a listing: nothing sorts before it.
pub(super) fn cursor_params(after: Option<&PendingCursor>) -> (i64, String) {
    match after {
        Some(cursor) => (to_micros(cursor.expires_at), cursor.approval_id.clone()),
        None => (i64::MIN, String::new()),
    }
}

/// A page size as a store is asked for it: at least one, at most [`MAX_PENDING_PAGE`].
pub(super) fn page_size(limit: usize) -> i64 {
    limit.clamp(1, MAX_PENDING_PAGE) as i64
}

/// What [`decided_sql`] found, as an outcome of a decision that changed no row.
pub(super) fn not_recorded(decided: Option<bool>) -> DecideOutcome {
    match decided {
        Some(true) => DecideOutcome::AlreadyDecided,
        // Pending and undecided, yet the update missed it: it expired (or was taken) in between.
        Some(false) | None => DecideOutcome::NotPending,
    }
}

pub(super) const AUDIT_COLUMNS: &str =
    "approval_id, conversation_id, caller, approver, call, outcome, reason, decided_at";

/// A pending approval as column values.
pub(super) struct PendingRow {
    pub(super) approval_id: String,
    pub(super) conversation_id: String,
    pub(super) caller: Option<String>,
    pub(super) call: String,
    pub(super) reason: Option<String>,
    pub(super) created_at: i64,
    pub(super) expires_at: i64,
    pub(super) decided_approved: Option<bool>,
    pub(super) decided_reason: Option<String>,
    pub(super) decided_by: Option<String>,
    pub(super) decided_at: Option<i64>,
    pub(super) context_user: Option<String>,
    pub(super) context_text: Option<String>,
}

impl PendingRow {
    pub(super) fn encode(pending: &PendingApproval) -> Result<PendingRow, ChatError> {
        Ok(PendingRow {
            approval_id: pending.approval_id.clone(),
            conversation_id: pending.conversation_id.as_str().to_owned(),
            caller: pending.caller.as_ref().map(|c| c.as_str().to_owned()),
            call: encode_call(&pending.call)?,
            reason: pending.reason.clone(),
            created_at: to_micros(pending.created_at),
            expires_at: to_micros(pending.expires_at),
            decided_approved: pending.decision.as_ref().map(|d| d.approved),
            decided_reason: pending.decision.as_ref().and_then(|d| d.reason.clone()),
            decided_by: pending.decision.as_ref().map(|d| d.approver.clone()),
            decided_at: pending.decision.as_ref().map(|d| to_micros(d.decided_at)),
            context_user: pending.context.user_message.clone(),
            context_text: pending.context.model_text.clone(),
        })
    }

    pub(super) fn decode(self) -> Result<PendingApproval, ChatError> {
        let decision = match (self.decided_by, self.decided_approved, self.decided_at) {
            (Some(approver), Some(approved), Some(at)) => Some(PendingDecision {
                approved,
                reason: self.decided_reason,
                approver,
                decided_at: from_micros(at),
            }),
            (None, None, None) => None,
            _ => return Err(store_error("a pending approval holds a partial decision")),
        };
        Ok(PendingApproval {
            approval_id: self.approval_id,
            conversation_id: self.conversation_id.into(),
            caller: self.caller.map(Into::into),
            call: decode_call(&self.call)?,
            reason: self.reason,
            created_at: from_micros(self.created_at),
            expires_at: from_micros(self.expires_at),
            decision,
            context: crate::record::ApprovalContext {
                user_message: self.context_user,
                model_text: self.context_text,
            },
        })
    }
}

/// An audit record as column values.
pub(super) struct AuditRow {
    pub(super) approval_id: String,
    pub(super) conversation_id: Option<String>,
    pub(super) caller: Option<String>,
    pub(super) approver: Option<String>,
    pub(super) call: Option<String>,
    pub(super) outcome: String,
    pub(super) reason: Option<String>,
    pub(super) decided_at: i64,
}

impl AuditRow {
    pub(super) fn encode(record: &AuditRecord) -> Result<AuditRow, ChatError> {
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

    pub(super) fn decode(self) -> Result<AuditRecord, ChatError> {
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

pub(super) fn store_error(message: impl Into<String>) -> ChatError {
    ChatError::new(ErrorKind::Store, message)
}

pub(super) fn encode_call(call: &ToolCall) -> Result<String, ChatError> {
    serde_json::to_string(call).map_err(|e| store_error("cannot encode a tool call").with_source(e))
}

pub(super) fn decode_call(json: &str) -> Result<ToolCall, ChatError> {
    serde_json::from_str(json)
        .map_err(|e| store_error("the approval tables hold an unreadable tool call").with_source(e))
}

/// Whole microseconds since the Unix epoch, as the persistence crate stores its timestamps.
pub(super) fn to_micros(time: SystemTime) -> i64 {
    crate::record::micros(time)
}

pub(super) fn from_micros(micros: i64) -> SystemTime {
    crate::record::from_micros(micros)
}
