//! The approval crate's SQL tables, on SQLite and (with `DATABASE_URL`) PostgreSQL: single-use takes, also under
//! concurrency, expiry purges, the audit log in order; pending approvals listed a bounded page at a time with
//! decisions recorded once and the call's context kept with them; and a database created while the persistence crate still
//! owned these tables is used in place.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tower_chat::{CallerIdentity, ConversationId, ToolCall};
use tower_chat_approval::{
    ApprovalContext, ApprovalStore, AuditOutcome, AuditRecord, DecideOutcome, MemoryApprovalStore,
    PendingApproval, PendingCursor, PendingDecision, PostgresApprovalStore, RefusalKind,
    SqliteApprovalStore, MAX_PENDING_PAGE,
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
        decision: None,
        // Kept with the approval, multi-line and non-ASCII; the model's text is absent on some.
        context: ApprovalContext {
            user_message: Some(format!("Write {id}\nplease ✓")),
            model_text: id
                .len()
                .is_multiple_of(2)
                .then(|| "I will write the file now.".to_owned()),
        },
    }
}

/// Pending approvals are listed unexpired, oldest first, a bounded page at a time, with the decisions recorded
/// on them; a decision is recorded once, and never on an expired, taken or unknown approval.
async fn listing_pages_and_decisions(store: Arc<dyn ApprovalStore>) {
    let ttl = Duration::from_secs(10_000);
    // 2 × MAX_PENDING_PAGE + 3 unexpired, and expired ones.
    let total = 2 * MAX_PENDING_PAGE + 3;
    let mut expected = Vec::new();
    for i in 0..total {
        // Groups of three share an expiry: ties are ordered by id.
        let p = pending(
            &format!("ls-{i:05}"),
            now() + ttl - Duration::from_secs((total - i / 3 * 3) as u64),
        );
        store.insert_pending(&p).await.unwrap();
        expected.push(p);
    }
    for i in 0..5 {
        let mut gone = pending(&format!("ls-expired-{i}"), now());
        gone.created_at = now() - Duration::from_secs(100 + i);
        store.insert_pending(&gone).await.unwrap();
    }
    expected.sort_by(|a, b| (a.expires_at, &a.approval_id).cmp(&(b.expires_at, &b.approval_id)));

    let mut listed: Vec<PendingApproval> = Vec::new();
    let mut cursor: Option<PendingCursor> = None;
    let mut pages = 0;
    loop {
        let page = store
            .list_pending(now(), cursor.as_ref(), usize::MAX)
            .await
            .unwrap();
        assert!(page.len() <= MAX_PENDING_PAGE, "bounded: {}", page.len());
        let Some(last) = page.last() else { break };
        // The cursor survives its text form, as an HTTP API hands it out.
        let text = PendingCursor::after(last).to_string();
        cursor = Some(text.parse().unwrap());
        listed.extend(page);
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(listed, expected, "every unexpired approval once, in order");
    let small = store.list_pending(now(), None, 2).await.unwrap();
    assert_eq!(small, expected[..2]);
    assert_eq!(store.list_pending(now(), None, 0).await.unwrap().len(), 1);
    assert!("garbage".parse::<PendingCursor>().is_err());

    // A decision is recorded once and listed and read with the approval, which stays pending.
    let id = expected[1].approval_id.clone();
    let decision = PendingDecision {
        approved: true,
        reason: Some("looks fine".into()),
        approver: "operator:carol".into(),
        decided_at: now(),
    };
    assert_eq!(
        store.decide_pending(&id, &decision).await.unwrap(),
        DecideOutcome::Recorded
    );
    let other = PendingDecision {
        approved: false,
        approver: "operator:dan".into(),
        ..decision.clone()
    };
    assert_eq!(
        store.decide_pending(&id, &other).await.unwrap(),
        DecideOutcome::AlreadyDecided
    );
    let read = store.get_pending(&id).await.unwrap().unwrap();
    assert_eq!(read.decision.as_ref(), Some(&decision));
    let small = store.list_pending(now(), None, 2).await.unwrap();
    assert_eq!(small[1].decision.as_ref(), Some(&decision));
    assert_eq!(small[0].decision, None);
    assert_eq!(
        store.take_pending(&id).await.unwrap().unwrap().decision,
        Some(decision.clone()),
        "the resume that takes it gets the decision"
    );
    assert_eq!(
        store.decide_pending(&id, &decision).await.unwrap(),
        DecideOutcome::NotPending,
        "taken"
    );
    assert_eq!(
        store
            .decide_pending("ls-expired-0", &decision)
            .await
            .unwrap(),
        DecideOutcome::NotPending,
        "expired"
    );
    assert_eq!(
        store.decide_pending("forged", &decision).await.unwrap(),
        DecideOutcome::NotPending
    );

    // Concurrent decisions of one id: exactly one is recorded.
    let contested = expected[2].approval_id.clone();
    let tries: Vec<_> = (0..16)
        .map(|i| {
            let (store, id) = (store.clone(), contested.clone());
            let decision = PendingDecision {
                approver: format!("operator:{i}"),
                ..decision.clone()
            };
            tokio::spawn(async move { store.decide_pending(&id, &decision).await.unwrap() })
        })
        .collect();
    let mut recorded = 0;
    for t in tries {
        recorded += usize::from(t.await.unwrap() == DecideOutcome::Recorded);
    }
    assert_eq!(recorded, 1);
}

#[tokio::test]
async fn memory_listing() {
    listing_pages_and_decisions(Arc::new(MemoryApprovalStore::new())).await;
}

#[tokio::test]
async fn sqlite_listing_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chat.db");
    let store = SqliteApprovalStore::new(SqliteStore::open(&path).await.unwrap())
        .await
        .unwrap();
    listing_pages_and_decisions(Arc::new(store)).await;
    // Another process opening the file (a replica, or the gateway after a restart) sees the same approvals.
    let reopened = SqliteApprovalStore::new(SqliteStore::open(&path).await.unwrap())
        .await
        .unwrap();
    let first = reopened.list_pending(now(), None, 3).await.unwrap();
    assert_eq!(first.len(), 3);
    assert_eq!(first[0].approval_id, "ls-00000");
    assert!(
        first[1].decision.is_some(),
        "the contested decision is kept in the file"
    );
}

#[tokio::test]
async fn postgres_listing() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let schema = format!("tcapproval_list_{}", uuid::Uuid::new_v4().simple());
    let db = PostgresStore::builder(url)
        .schema(&schema)
        .connect()
        .await
        .unwrap();
    let store = PostgresApprovalStore::new(db.clone()).await.unwrap();
    let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        listing_pages_and_decisions(Arc::new(store)),
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
    // A row from before the context columns existed reads back without context.
    let mut old = pending("ap-old", now() + Duration::from_secs(600));
    old.context = ApprovalContext::default();
    assert_eq!(store.take_pending("ap-old").await.unwrap(), Some(old));
    takes_are_single_use_and_decisions_are_audited(Arc::new(store)).await;
}
