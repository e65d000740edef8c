//! Where pending approvals and the audit log live.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use futures_util::future::{self, BoxFuture};
use tower_chat::{ChatError, ConversationId, ErrorKind};

use crate::record::{
    AuditRecord, DecideOutcome, PendingApproval, PendingCursor, PendingDecision, MAX_PENDING_PAGE,
};

/// The future of an [`ApprovalStore`] operation. Failures are [`ErrorKind::Store`] errors.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, ChatError>>;

/// Pending approvals (each taken at most once) and an append-only audit log.
///
/// The layer decides policy — expiry, binding to conversation and caller, tamper checks, the approver rule. A
/// store guarantees what only a store can: [`take_pending`](Self::take_pending) hands an id out at most once, even
/// to concurrent requests in different processes sharing the store.
///
/// Implementations: [`MemoryApprovalStore`] (one process), and with the `sqlite` / `postgres` features
/// `SqliteApprovalStore` / `PostgresApprovalStore` (durable, shared by replicas).
pub trait ApprovalStore: Send + Sync + 'static {
    /// Record a pending approval. An id already pending is an error.
    fn insert_pending<'a>(&'a self, pending: &'a PendingApproval) -> StoreFuture<'a, ()>;

    /// Read a pending approval without taking it.
    fn get_pending<'a>(&'a self, approval_id: &'a str) -> StoreFuture<'a, Option<PendingApproval>>;

    /// Remove and return a pending approval, atomically: of concurrent takes of one id exactly one gets it.
    /// Unknown and already-taken ids give `None`.
    fn take_pending<'a>(&'a self, approval_id: &'a str)
        -> StoreFuture<'a, Option<PendingApproval>>;

    /// Up to `limit` (at most [`MAX_PENDING_PAGE`]) approvals unexpired at `now`, soonest expiry first (then
    /// id; with one time to live, oldest first), starting after `after` — what an operator's inbox lists, a page
    /// at a time, whichever process issued them. The next page starts at [`PendingCursor::after`] the last one
    /// returned. Ordered by expiry so that a SQL store reads one index range from `now` on, however many expired
    /// approvals wait to be purged.
    fn list_pending<'a>(
        &'a self,
        now: SystemTime,
        after: Option<&'a PendingCursor>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<PendingApproval>>;

    /// Record `decision` on the pending, unexpired (at `decision.decided_at`) approval `approval_id`, once: of
    /// concurrent decisions, in any number of processes, exactly one is [`DecideOutcome::Recorded`]. The
    /// approval stays pending until a request carrying the decision takes it.
    fn decide_pending<'a>(
        &'a self,
        approval_id: &'a str,
        decision: &'a PendingDecision,
    ) -> StoreFuture<'a, DecideOutcome>;

    /// Delete approvals that expired before `now`; returns how many.
    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64>;

    /// Append to the audit log.
    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()>;

    /// A conversation's audit log, oldest first.
    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> StoreFuture<'a, Vec<AuditRecord>>;
}

impl<T: ApprovalStore + ?Sized> ApprovalStore for Arc<T> {
    fn insert_pending<'a>(&'a self, pending: &'a PendingApproval) -> StoreFuture<'a, ()> {
        (**self).insert_pending(pending)
    }

    fn get_pending<'a>(&'a self, approval_id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        (**self).get_pending(approval_id)
    }

    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> StoreFuture<'a, Option<PendingApproval>> {
        (**self).take_pending(approval_id)
    }

    fn list_pending<'a>(
        &'a self,
        now: SystemTime,
        after: Option<&'a PendingCursor>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<PendingApproval>> {
        (**self).list_pending(now, after, limit)
    }

    fn decide_pending<'a>(
        &'a self,
        approval_id: &'a str,
        decision: &'a PendingDecision,
    ) -> StoreFuture<'a, DecideOutcome> {
        (**self).decide_pending(approval_id, decision)
    }

    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64> {
        (**self).purge_expired(now)
    }

    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()> {
        (**self).insert_audit(record)
    }

    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> StoreFuture<'a, Vec<AuditRecord>> {
        (**self).audit_log(conversation_id)
    }
}

#[derive(Debug, Default)]
struct Tables {
    pending: HashMap<String, PendingApproval>,
    audit: Vec<AuditRecord>,
}

/// An in-process store (the default): approvals live as long as the process. Clones share the same tables.
#[derive(Clone, Default)]
pub struct MemoryApprovalStore {
    tables: Arc<Mutex<Tables>>,
}

impl MemoryApprovalStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryApprovalStore::default()
    }

    /// How many approvals are pending (expired ones included until purged).
    pub fn pending_count(&self) -> usize {
        self.lock().pending.len()
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        // Every critical section leaves the tables consistent, so a panic elsewhere does not poison them.
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for MemoryApprovalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tables = self.lock();
        f.debug_struct("MemoryApprovalStore")
            .field("pending", &tables.pending.len())
            .field("audit", &tables.audit.len())
            .finish()
    }
}

impl ApprovalStore for MemoryApprovalStore {
    fn insert_pending<'a>(&'a self, pending: &'a PendingApproval) -> StoreFuture<'a, ()> {
        let mut tables = self.lock();
        let result = if tables.pending.contains_key(&pending.approval_id) {
            Err(ChatError::new(
                ErrorKind::Store,
                "an approval with this id is already pending",
            ))
        } else {
            tables
                .pending
                .insert(pending.approval_id.clone(), pending.clone());
            Ok(())
        };
        Box::pin(future::ready(result))
    }

    fn get_pending<'a>(&'a self, approval_id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        let found = self.lock().pending.get(approval_id).cloned();
        Box::pin(future::ready(Ok(found)))
    }

    fn take_pending<'a>(
        &'a self,
        approval_id: &'a str,
    ) -> StoreFuture<'a, Option<PendingApproval>> {
        let taken = self.lock().pending.remove(approval_id);
        Box::pin(future::ready(Ok(taken)))
    }

    fn list_pending<'a>(
        &'a self,
        now: SystemTime,
        after: Option<&'a PendingCursor>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<PendingApproval>> {
        let key = |p: &PendingApproval| (p.expires_at, p.approval_id.clone());
        let start = after.map(|c| (c.expires_at, c.approval_id.clone()));
        let mut page: Vec<PendingApproval> = self
            .lock()
            .pending
            .values()
            .filter(|p| !p.is_expired(now) && start.as_ref().is_none_or(|s| key(p) > *s))
            .cloned()
            .collect();
        page.sort_by_key(key);
        page.truncate(limit.clamp(1, MAX_PENDING_PAGE));
        Box::pin(future::ready(Ok(page)))
    }

    fn decide_pending<'a>(
        &'a self,
        approval_id: &'a str,
        decision: &'a PendingDecision,
    ) -> StoreFuture<'a, DecideOutcome> {
        let outcome = match self.lock().pending.get_mut(approval_id) {
            Some(p) if p.is_expired(decision.decided_at) => DecideOutcome::NotPending,
            Some(p) if p.decision.is_some() => DecideOutcome::AlreadyDecided,
            Some(p) => {
                p.decision = Some(decision.clone());
                DecideOutcome::Recorded
            }
            None => DecideOutcome::NotPending,
        };
        Box::pin(future::ready(Ok(outcome)))
    }

    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64> {
        let mut tables = self.lock();
        let before = tables.pending.len();
        tables.pending.retain(|_, p| p.expires_at >= now);
        let purged = (before - tables.pending.len()) as u64;
        Box::pin(future::ready(Ok(purged)))
    }

    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()> {
        self.lock().audit.push(record.clone());
        Box::pin(future::ready(Ok(())))
    }

    fn audit_log<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> StoreFuture<'a, Vec<AuditRecord>> {
        let log = self
            .lock()
            .audit
            .iter()
            .filter(|r| r.conversation_id.as_ref() == Some(conversation_id))
            .cloned()
            .collect();
        Box::pin(future::ready(Ok(log)))
    }
}
