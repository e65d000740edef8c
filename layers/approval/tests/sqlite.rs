//! Durability with the persistence crate's SQLite store: a pause survives a process restart (the first leg runs
//! in a child process; a new store instance on the same file resumes it here), and every check holds on it.

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{json, Value};
use tower_chat::{
    ApprovalDecision, ApprovalRequest, ConversationId, FinishReason, Message, ToolCall,
};
use tower_chat_approval::{
    ApprovalLayer, ApprovalStore, AuditOutcome, Clock, ManualClock, RefusalKind,
    SqliteApprovalStore,
};
use tower_chat_persistence::SqliteStore;

/// Set in the child process: the database file to pause in.
const CHILD_DB: &str = "TOWER_CHAT_APPROVAL_CHILD_DB";

async fn open(path: &Path) -> SqliteApprovalStore {
    SqliteApprovalStore::new(SqliteStore::open(path).await.expect("open SQLite"))
        .await
        .expect("create the approval tables")
}

fn first_round() -> Vec<ToolCall> {
    vec![delete_call("c1", "a.txt"), weather_call("c2")]
}

/// The child process: pause, hand the history and the approval request over in a file, exit.
async fn child(path: &str) {
    let store = open(Path::new(path)).await;
    let runs = Runs::new();
    let (m, _) = model(Delivery::OneByOne, first_round());
    let chat = stack(&flagged().store(store), &runs, m);
    let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
    assert_eq!(runs.deletes(), 0);
    assert_eq!(runs.weathers(), 1);
    let handoff = json!({"history": history, "approval": approvals(&events)[0]});
    std::fs::write(format!("{path}.json"), handoff.to_string()).unwrap();
}

#[tokio::test]
async fn a_pause_resumes_after_a_process_restart() {
    if let Ok(path) = std::env::var(CHILD_DB) {
        return child(&path).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("approvals.db");
    let status = tower_chat_testkit::ProcessGroup::spawn(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_pause_resumes_after_a_process_restart",
                "--nocapture",
            ])
            .env(CHILD_DB, &path),
    )
    .and_then(|mut child| child.wait())
    .expect("spawn the first process");
    assert!(status.success(), "the first process failed: {status}");
    let handoff: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{}.json", path.display())).unwrap())
            .unwrap();
    let history: Vec<Message> = serde_json::from_value(handoff["history"].clone()).unwrap();
    let approval: ApprovalRequest = serde_json::from_value(handoff["approval"].clone()).unwrap();
    assert_eq!(approval.call, delete_call("c1", "a.txt"));

    // This process never saw the pause: a new store instance on the same file.
    let store = open(&path).await;
    let runs = Runs::new();
    let (m, model) = model(Delivery::AllAtOnce, first_round());
    let chat = stack(&flagged().store(store.clone()), &runs, m);

    let mut tampered = history.clone();
    edit_call(&mut tampered, "c1", |c| {
        c.arguments = tower_chat::ToolArguments::Json(json!({"path": "/"}))
    });
    let error = try_run(
        chat.clone(),
        decide(
            request(tampered),
            vec![ApprovalDecision::approve(&approval.id)],
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(refusal_kinds(&error), vec![RefusalKind::Tampered]);
    assert_eq!(runs.deletes(), 0);

    let events = try_run(
        chat.clone(),
        decide(
            request(history.clone()),
            vec![ApprovalDecision::approve(&approval.id)],
        ),
    )
    .await
    .expect("resumed after the restart");
    assert_eq!(runs.deletes(), 1);
    assert_eq!(runs.weathers(), 0, "the first process ran it");
    assert_eq!(finish(&events), Some(FinishReason::Stop));
    assert_eq!(model.calls(), 1, "only the continuation");
    assert!(
        text(&events).starts_with("Results: delete=delete done"),
        "{}",
        text(&events)
    );

    let error = try_run(
        chat.clone(),
        decide(
            request(history),
            vec![ApprovalDecision::approve(&approval.id)],
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(refusal_kinds(&error), vec![RefusalKind::Replayed]);
    assert_eq!(runs.deletes(), 1);

    // The audit log is on disk: a third instance reads it.
    drop(chat);
    let log = open(&path)
        .await
        .audit_log(&ConversationId::new(CONVERSATION))
        .await
        .unwrap();
    let outcomes: Vec<AuditOutcome> = log.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            AuditOutcome::Refused(RefusalKind::Tampered),
            AuditOutcome::Approved,
            AuditOutcome::Refused(RefusalKind::Replayed)
        ]
    );
    assert_eq!(log[1].approver.as_deref(), Some(CALLER));
    assert_eq!(log[1].call, Some(delete_call("c1", "a.txt")));
}

#[tokio::test]
async fn expiry_and_binding_hold_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("a.db")).await;
    for shape in SHAPES {
        let runs = Runs::new();
        let (m, _) = model(shape, vec![delete_call("c1", "a.txt")]);
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000));
        let ttl = Duration::from_secs(60);
        let layer: ApprovalLayer = flagged().store(store.clone()).ttl(ttl).clock(clock.clone());
        let chat = stack(&layer, &runs, m);
        let (events, history) = pause(&chat, vec![Message::user("x")]).await;
        let id = approvals(&events)[0].id.clone();
        let pending = store.get_pending(&id).await.unwrap().expect("stored");
        assert_eq!(pending.call, delete_call("c1", "a.txt"));
        assert_eq!(pending.reason.as_deref(), Some("destructive"));

        let other = decide(
            request(history.clone()).with_extension(ConversationId::new("conv-other")),
            vec![ApprovalDecision::approve(&id)],
        );
        assert_eq!(
            refusal_kinds(&try_run(chat.clone(), other).await.unwrap_err()),
            vec![RefusalKind::OtherConversation]
        );

        clock.advance(ttl + Duration::from_secs(1));
        let late = decide(request(history), vec![ApprovalDecision::approve(&id)]);
        assert_eq!(
            refusal_kinds(&try_run(chat.clone(), late).await.unwrap_err()),
            vec![RefusalKind::Expired]
        );
        assert_eq!(runs.deletes(), 0);
        assert!(store.purge_expired(clock.now()).await.unwrap() >= 1);
        assert!(store.get_pending(&id).await.unwrap().is_none());
    }
}
