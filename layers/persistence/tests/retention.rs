//! Retention (`Store::delete_expired`), in SQLite and PostgreSQL: calls past the period go with the messages,
//! blobs and search index entries nothing else reaches; newer calls, the messages and blobs a newer call
//! shares, calls in flight or paused awaiting an approval, and the spend rollup stay; batches are bounded; a
//! conversation continued after its first turns went is stored whole.

#[macro_use]
mod common;

use std::time::{Duration, SystemTime};

use common::{found, uuid_simple, Backend, TestDb};
use tower_chat::{FinishReason, Message, Part, Shared};
use tower_chat_persistence::{
    CallId, CallOutcome, CallRecord, Purged, Retention, SpendRollupQuery, SpendRow, UtcDay,
};

both_stores!(
    old_calls_go_with_what_only_they_reach_and_the_rollup_keeps_their_sums,
    a_conversation_continued_after_its_first_turns_went_is_stored_whole,
);

const DAY: Duration = Duration::from_secs(86_400);

/// A call shaped from `template`: its own id, `conversation`, `history` answered with `answer`, at `at`.
fn call(
    template: &CallRecord,
    conversation: &str,
    history: Vec<Message>,
    answer: &str,
    at: SystemTime,
) -> CallRecord {
    let mut r = template.clone();
    r.call_id = CallId::new(format!("call-{}", uuid_simple()));
    r.conversation_id = conversation.into();
    r.request.messages = Shared::new(history);
    r.response.messages = vec![Message::assistant(answer)];
    r.started_at = at;
    r.first_token_at = None;
    r.ended_at = at;
    r.outcome = CallOutcome::Completed;
    r
}

fn image(seed: u8) -> Message {
    Message::user(vec![
        Part::text("look at this"),
        Part::image(vec![seed; 4096], "image/png"),
    ])
}

/// Rows of a table of the test's database.
async fn rows(db: &TestDb, table: &'static str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    match &db.backend {
        Backend::Sqlite(store) => store
            .run("count", move |conn| conn.query_row(&sql, [], |r| r.get(0)))
            .await
            .unwrap(),
        Backend::Postgres(store) => store
            .client()
            .await
            .unwrap()
            .query_one(&sql, &[])
            .await
            .unwrap()
            .get(0),
    }
}

/// The whole rollup, per day, caller, team and model.
async fn rollup(db: &TestDb, now: SystemTime) -> Vec<SpendRow> {
    let mut query = SpendRollupQuery::days(UtcDay::of(now - 100 * DAY), UtcDay::of(now + DAY));
    (query.by_day, query.by_caller, query.by_team, query.by_model) = (true, true, true, true);
    db.store.spend_rollup(&query).await.unwrap()
}

async fn old_calls_go_with_what_only_they_reach_and_the_rollup_keeps_their_sums(db: &TestDb) {
    let template = db.recorded_call("template words").await;
    let now = SystemTime::now();
    let old = now - 40 * DAY;
    let q = Message::user("ancient question");
    let a = Message::assistant("ancient answer");
    // An old conversation of two turns, sharing their first messages.
    let first = call(&template, "old", vec![q.clone()], "ancient answer", old);
    let second = call(
        &template,
        "old",
        vec![q.clone(), a.clone(), Message::user("ancient followup")],
        "ancient done",
        old + Duration::from_secs(1),
    );
    // A client that sends no conversation id: its new call resends an old call's history, so the two share
    // nodes, one of them an image.
    let shared_old = call(
        &template,
        "stateless-1",
        vec![image(1)],
        "shared reply",
        old + Duration::from_secs(2),
    );
    let shared_new = call(
        &template,
        "stateless-2",
        vec![
            image(1),
            Message::assistant("shared reply"),
            Message::user("fresh question"),
        ],
        "fresh answer",
        now,
    );
    // An image only an old call carries.
    let lonely = call(
        &template,
        "lonely",
        vec![image(2)],
        "lonely reply",
        old + Duration::from_secs(3),
    );
    // Old, but still in flight, and paused awaiting an approval: both stay.
    let mut in_flight = call(&template, "running", vec![q.clone()], "", old);
    in_flight.outcome = CallOutcome::InFlight;
    in_flight.response.messages.clear();
    let mut paused = call(&template, "paused", vec![q.clone()], "may I?", old);
    paused.response.finish_reason = Some(FinishReason::AwaitingApproval);
    let records = [
        first.clone(),
        second.clone(),
        shared_old.clone(),
        shared_new.clone(),
        lonely.clone(),
        in_flight.clone(),
        paused.clone(),
    ];
    db.store.write_calls(&records).await.unwrap();
    let sums = rollup(db, now).await;
    assert!(found(db, "followup").await > 0);
    assert!(found(db, "lonely").await > 0);
    let blobs = rows(db, "chat_blobs").await;
    assert_eq!(blobs, 2);

    // Four calls may go; two a batch: two transactions.
    let retention = Retention::days(30).unwrap().batch(2);
    let purged = db.store.delete_expired(&retention, now).await.unwrap();
    assert_eq!((purged.calls, purged.batches), (4, 2), "{purged:?}");
    // The second turn's three messages past the question the in-flight and paused calls still reach (the
    // same caller's same first message is one node), and the lonely call's two.
    assert_eq!(purged.messages, 3 + 2, "{purged:?}");
    assert_eq!(purged.blobs, 1, "only the image no remaining call reaches");

    for gone in [&first, &second, &shared_old, &lonely] {
        assert!(db.store.call(&gone.call_id).await.unwrap().is_none());
    }
    for kept in [&shared_new, &in_flight, &paused, &template] {
        let stored = db.store.call(&kept.call_id).await.unwrap().unwrap();
        assert_eq!(stored.history(), kept.history(), "{}", kept.call_id);
    }
    assert_eq!(
        rollup(db, now).await,
        sums,
        "the rollup keeps the deleted calls' sums"
    );
    assert_eq!(
        found(db, "followup").await,
        0,
        "no index entry of a deleted call"
    );
    assert_eq!(found(db, "lonely").await, 0);
    assert_eq!(found(db, "fresh").await, 1);
    assert_eq!(rows(db, "chat_blobs").await, 1);
    // What remains is what the remaining calls reach: the template's two messages, the shared history's four,
    // and the in-flight and paused calls' question and the paused call's answer.
    assert_eq!(rows(db, "chat_messages").await, 2 + 4 + 2);

    // Idempotent: a second run finds nothing.
    assert_eq!(
        db.store.delete_expired(&retention, now).await.unwrap(),
        Purged::default()
    );
}

async fn a_conversation_continued_after_its_first_turns_went_is_stored_whole(db: &TestDb) {
    let template = db.recorded_call("template words").await;
    let now = SystemTime::now();
    let mut history = vec![Message::user("first question")];
    let old = call(
        &template,
        "long",
        history.clone(),
        "first answer",
        now - 40 * DAY,
    );
    db.store
        .write_calls(std::slice::from_ref(&old))
        .await
        .unwrap();
    let purged = db
        .store
        .delete_expired(&Retention::days(30).unwrap(), now)
        .await
        .unwrap();
    assert_eq!((purged.calls, purged.messages), (1, 2));

    // The client resends the whole history: the store writes again the messages retention deleted.
    history.extend([Message::assistant("first answer"), Message::user("next")]);
    let next = call(&template, "long", history, "next answer", now);
    db.store
        .write_calls(std::slice::from_ref(&next))
        .await
        .unwrap();
    let stored = db.store.call(&next.call_id).await.unwrap().unwrap();
    assert_eq!(stored.history(), next.history());
    assert_eq!(
        db.store.load_conversation(&"long".into()).await.unwrap(),
        next.history()
    );
}
