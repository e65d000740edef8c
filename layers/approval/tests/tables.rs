//! The approval crate's SQL tables, on SQLite and (with `DATABASE_URL`) PostgreSQL: single-use takes, also under
//! concurrency, expiry purges, the audit log in order; and a database created while the persistence crate still
//! owned these tables is used in place.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tower_chat::{CallerIdentity, ConversationId, ToolCall};
use tower_chat_approval::{
    ApprovalStore, AuditOutcome, AuditRecord, PendingApproval, PostgresApprovalStore, RefusalKind,
    SqliteApprovalStore,
};
use tower_chat_persistence::{Migration, PostgresStore, SqliteStore};

/// Whole microseconds: what the stores keep.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(1_800_000_000_000_000)
}

fn pending(id: &str, expires_at: SystemTime) -> PendingApproval {
    PendingApproval {
        approval_id: id.to_owned(),
        conversation_id: ConversationId::new("conv-a"),
        caller: Some(CallerIdentity::new("alice")),
        call: ToolCall::new("call-1", "delete_file", json!({"path": "/etc/passwd"})),
        reason: Some("writes outside the workspace".into()),
        created_at: now(),
        expires_at,
    }
}

async fn takes_are_single_use_and_decisions_are_audited(store: Arc<dyn ApprovalStore>) {
    let first = pending("ap-1", now() + Duration::from_secs(600));
    store.insert_pending(&first).await.unwrap();
    assert!(
        store.insert_pending(&first).await.is_err(),
        "ids are unique"
    );
    assert_eq!(
        store.get_pending("ap-1").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store.take_pending("ap-1").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(store.take_pending("ap-1").await.unwrap(), None, "replay");
    assert_eq!(store.get_pending("ap-1").await.unwrap(), None);
    assert_eq!(store.take_pending("forged").await.unwrap(), None);

    // Concurrent takes of one id: exactly one wins.
    store
        .insert_pending(&pending("ap-2", now() + Duration::from_secs(600)))
        .await
        .unwrap();
    let takes: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.take_pending("ap-2").await.unwrap() })
        })
        .collect();
    let mut winners = 0;
    for take in takes {
        winners += usize::from(take.await.unwrap().is_some());
    }
    assert_eq!(winners, 1);

    // Expired approvals can be purged.
    store
        .insert_pending(&pending("ap-old", now() - Duration::from_secs(1)))
        .await
        .unwrap();
    store
        .insert_pending(&pending("ap-new", now() + Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(store.purge_expired(now()).await.unwrap(), 1);
    assert!(store.get_pending("ap-new").await.unwrap().is_some());

    // The audit log keeps every decision in order, outcomes typed.
    let audit = |id: &str, outcome: AuditOutcome, offset: u64| AuditRecord {
        approval_id: id.to_owned(),
        conversation_id: Some(ConversationId::new("conv-a")),
        caller: Some(CallerIdentity::new("alice")),
        approver: Some("bob".into()),
        call: Some(first.call.clone()),
        outcome,
        reason: None,
        decided_at: now() + Duration::from_secs(offset),
    };
    let log = vec![
        audit("ap-1", AuditOutcome::Approved, 1),
        audit("ap-1", AuditOutcome::Refused(RefusalKind::Replayed), 2),
    ];
    for record in &log {
        store.insert_audit(record).await.unwrap();
    }
    let mut other = audit("ap-9", AuditOutcome::Denied, 3);
    other.conversation_id = Some(ConversationId::new("conv-b"));
    other.call = None;
    store.insert_audit(&other).await.unwrap();
    let read = |conversation: &'static str| {
        let store = store.clone();
        async move {
            store
                .audit_log(&ConversationId::new(conversation))
                .await
                .unwrap()
        }
    };
    assert_eq!(read("conv-a").await, log);
    assert_eq!(read("conv-b").await, vec![other]);
}

#[tokio::test]
async fn sqlite_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteStore::open(dir.path().join("chat.db")).await.unwrap();
    let store = SqliteApprovalStore::new(db).await.unwrap();
    takes_are_single_use_and_decisions_are_audited(Arc::new(store)).await;
}

#[tokio::test]
async fn postgres_tables() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let schema = format!("tcapproval_tables_{}", uuid::Uuid::new_v4().simple());
    let db = PostgresStore::builder(url)
        .schema(&schema)
        .connect()
        .await
        .unwrap();
    let store = PostgresApprovalStore::new(db.clone()).await.unwrap();
    let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        takes_are_single_use_and_decisions_are_audited(Arc::new(store)),
    ))
    .await;
    db.client()
        .await
        .unwrap()
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The tables as the persistence crate's retired migration `0002_approvals` created them.
const RETIRED_SQL: &str = "CREATE TABLE chat_pending_approvals (
    approval_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, caller TEXT, call TEXT NOT NULL, reason TEXT,
    created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL);
CREATE INDEX chat_pending_approvals_by_expiry ON chat_pending_approvals (expires_at);
CREATE TABLE chat_approval_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, approval_id TEXT NOT NULL, conversation_id TEXT, caller TEXT,
    approver TEXT, call TEXT, outcome TEXT NOT NULL, reason TEXT, decided_at BIGINT NOT NULL);
CREATE INDEX chat_approval_audit_by_conversation ON chat_approval_audit (conversation_id, seq);";

#[tokio::test]
async fn a_database_from_before_the_move_is_used_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let old = SqliteStore::builder(&path)
        .migration(Migration::new(
            "tower-chat-persistence/0002_approvals",
            RETIRED_SQL,
        ))
        .open()
        .await
        .unwrap();
    let call = serde_json::to_string(&pending("ap-old", now()).call).unwrap();
    old.run("seed a pending approval", move |conn| {
        conn.execute(
            "INSERT INTO chat_pending_approvals VALUES ('ap-old', 'conv-a', 'alice', ?1, \
             'writes outside the workspace', 1800000000000000, 1800000600000000)",
            [call],
        )
    })
    .await
    .unwrap();
    drop(old);

    let store = SqliteApprovalStore::new(SqliteStore::open(&path).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        store.take_pending("ap-old").await.unwrap(),
        Some(pending("ap-old", now() + Duration::from_secs(600)))
    );
    takes_are_single_use_and_decisions_are_audited(Arc::new(store)).await;
}
