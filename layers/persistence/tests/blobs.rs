//! Binary parts stored once, by content hash: every test runs against SQLite (a real file) and PostgreSQL
//! (`DATABASE_URL`; skipped with a visible message when unset, a failure under CI).

#[macro_use]
mod common;

use common::{answer, copy, scripted, Backend, TestDb};
use serde_json::json;
use tower::{Layer, ServiceExt};
use tower_chat::{
    Blob, CallerIdentity, ChatRequest, ChatStreamExt, ConversationId, ErrorKind, FilePart,
    ImageDetail, ImagePart, MediaSource, Message, Part, ProviderPart,
};
use tower_chat_persistence::{CallOutcome, Store};
use tower_chat_testkit::{scripted_stream, Delivery, PDF, PNG};

both_stores!(
    fifty_turns_resending_one_image_store_it_once,
    every_kind_of_part_reads_back_equal_from_every_read,
    messages_stored_with_base64_inside_still_read,
    a_blob_the_database_refuses_fails_the_call_and_stores_nothing_of_it,
    one_message_reads_only_its_own_blobs,
);

fn conversation() -> ConversationId {
    ConversationId::new(format!("conv-{}", common::uuid_simple()))
}

/// `len` bytes no compression shrinks (PostgreSQL compresses large values), from a generator seeded by `seed`.
fn incompressible(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

/// The bytes the database takes, with SQLite's write-ahead log checkpointed into the file first.
async fn checkpointed_size(db: &TestDb) -> u64 {
    if let Backend::Sqlite(store) = &db.backend {
        store
            .run("checkpoint", |conn| {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            })
            .await
            .unwrap();
    }
    db.size_bytes().await
}

/// A scalar query's answer, in either dialect.
async fn count(db: &TestDb, sql: &'static str) -> i64 {
    match &db.backend {
        Backend::Sqlite(store) => store
            .run("count", move |conn| {
                conn.query_row(sql, [], |row| row.get(0))
            })
            .await
            .unwrap(),
        Backend::Postgres(store) => store
            .client()
            .await
            .unwrap()
            .query_one(sql, &[])
            .await
            .unwrap()
            .get(0),
    }
}

/// A chat client sending the same 5 MB image with each of 50 new user messages, resending the whole history
/// (every earlier image included) each turn as a real chat does, grows the database by the image once (+10 %).
/// Each turn's image is a fresh copy of the bytes, as an upload decoded from a request body would be.
async fn fifty_turns_resending_one_image_store_it_once(db: &TestDb) {
    const TURNS: usize = 50;
    const IMAGE: usize = 5 * 1024 * 1024;
    let image = incompressible(IMAGE, 7);
    let layer = db.layer();
    let items = std::sync::Arc::new(answer("I see the chart."));
    let chat = layer.layer(scripted(move |_| {
        scripted_stream(Delivery::AllAtOnce, copy(&items))
    }));
    let conv = conversation();
    // One text-only call first, so the tables exist with their first pages.
    chat.clone()
        .oneshot(
            ChatRequest::new(vec![Message::user("hello")])
                .with_extension(conversation())
                .with_extension(CallerIdentity::new("alice")),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let before = checkpointed_size(db).await;
    let mut history = vec![Message::system("Describe charts.")];
    for turn in 0..TURNS {
        history.push(Message::user(vec![
            Part::text(format!("What changed in turn {turn}?")),
            Part::image(image.clone(), "image/png"),
        ]));
        let request = ChatRequest::new(history.clone())
            .with_extension(conv.clone())
            .with_extension(CallerIdentity::new("alice"));
        let response = chat
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        history.extend(response.messages);
    }
    layer.flush().await.unwrap();
    let growth = checkpointed_size(db).await.saturating_sub(before);
    eprintln!(
        "{TURNS} turns, each a new user message with the same {IMAGE}-byte image and the history resent: \
         the database grew by {growth} bytes ({:.3}× the image)",
        growth as f64 / IMAGE as f64
    );
    assert!(
        growth <= (IMAGE as u64) * 11 / 10,
        "{TURNS} turns grew the database by {growth} bytes, more than the image + 10 %"
    );
    assert_eq!(count(db, "SELECT COUNT(*) FROM chat_blobs").await, 1);
    // And every turn's message reads back with its bytes.
    let loaded = db.store.load_conversation(&conv).await.unwrap();
    assert_eq!(loaded, history);
    let images = loaded
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.media_bytes()),
            _ => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(images, vec![IMAGE; TURNS]);
}

/// Every kind of part, in a user message and a tool result, reads back equal through every read of the store.
async fn every_kind_of_part_reads_back_equal_from_every_read(db: &TestDb) {
    let audio = incompressible(3000, 1);
    let user = Message::user(vec![
        Part::text("Compare these."),
        Part::from(ImagePart {
            source: MediaSource::Data(Blob::new(PNG.to_vec(), "image/png")),
            detail: Some(ImageDetail::High),
            cache: None,
        }),
        Part::audio(audio.clone(), "audio/wav"),
        Part::file(PDF.to_vec(), "application/pdf", Some("report.pdf".into())),
        Part::image_url("https://example.com/chart.png"),
        Part::from(FilePart {
            source: MediaSource::FileId {
                id: "file-abc".into(),
            },
            media_type: Some("application/pdf".into()),
            name: Some("uploaded.pdf".into()),
            cache: None,
        }),
        Part::from(ProviderPart {
            provider: "anthropic".into(),
            value: json!({"type": "search_result", "source": "https://example.com", "content": []}),
        }),
    ]);
    let tool = Message::tool_result(
        "call-1",
        "screenshot",
        vec![
            Part::text("the page"),
            Part::image(PNG.to_vec(), "image/png"),
        ],
    );
    let sent = vec![Message::system("be brief"), user, tool];
    let layer = db.layer();
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::OneByOne, answer("Both show growth."))
    }));
    let conv = conversation();
    let response = chat
        .oneshot(ChatRequest::new(sent.clone()).with_extension(conv.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();

    let calls = db.store.conversation_calls(&conv).await.unwrap();
    assert_eq!(calls.len(), 1);
    let record = &calls[0];
    assert_eq!(*record.request.messages, sent);
    assert_eq!(record.response.messages, response.messages);
    let by_id = db.store.call(&record.call_id).await.unwrap().unwrap();
    assert_eq!(*by_id.request.messages, sent);
    let latest = db
        .store
        .latest_completed_call(&conv)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*latest.request.messages, sent);
    let mut history = sent.clone();
    history.extend(response.messages.clone());
    assert_eq!(db.store.load_conversation(&conv).await.unwrap(), history);
    for (index, message) in history.iter().enumerate() {
        let one = db.store.call_message(&record.call_id, index).await.unwrap();
        assert_eq!(one.as_ref(), Some(message), "message {index}");
    }
    assert_eq!(
        db.store
            .call_message(&record.call_id, history.len())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db.store
            .call_message(&tower_chat_persistence::CallId::new("no-such-call"), 0)
            .await
            .unwrap(),
        None
    );

    // The bytes are in `chat_blobs` (the PNG twice in the messages, once in the table), raw, not base64 in the
    // messages' JSON.
    assert_eq!(count(db, "SELECT COUNT(*) FROM chat_blobs").await, 3);
    assert_eq!(
        count(
            db,
            "SELECT CAST(SUM(LENGTH(bytes)) AS BIGINT) FROM chat_blobs"
        )
        .await,
        (PNG.len() + audio.len() + PDF.len()) as i64
    );
    let base64_of_pdf = tower_chat_testkit::base64(PDF);
    let messages = match &db.backend {
        Backend::Sqlite(store) => store
            .run("read", |conn| {
                conn.prepare("SELECT message FROM chat_messages")?
                    .query_map([], |row| row.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await
            .unwrap(),
        Backend::Postgres(store) => store
            .client()
            .await
            .unwrap()
            .query("SELECT message::text FROM chat_messages", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect(),
    };
    assert!(messages.iter().all(|m| !m.contains(&base64_of_pdf)));
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.contains("blob_sha256"))
            .count(),
        2
    );
}

/// A database written before binary parts had their own table holds their base64 inside the messages' JSON;
/// such messages read back exactly, and the conversation continues on top of them.
async fn messages_stored_with_base64_inside_still_read(db: &TestDb) {
    let with_image = Message::user(vec![
        Part::text("What is this?"),
        Part::image(PNG.to_vec(), "image/png"),
        Part::file(PDF.to_vec(), "application/pdf", Some("a.pdf".into())),
    ]);
    let layer = db.layer();
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("A pixel."))
    }));
    let conv = conversation();
    chat.clone()
        .oneshot(ChatRequest::new(vec![with_image.clone()]).with_extension(conv.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    // Rewrite the stored node as the earlier build wrote it (the message's own JSON, base64 inside) and drop
    // the blobs.
    let old_json = serde_json::to_string(&with_image).unwrap();
    assert!(old_json.contains(&tower_chat_testkit::base64(PNG)));
    match &db.backend {
        Backend::Sqlite(store) => {
            let json = old_json.clone();
            store
                .run("rewrite", move |conn| {
                    let changed = conn.execute(
                        "UPDATE chat_messages SET message = ?1 WHERE message LIKE '%blob_sha256%'",
                        [json],
                    )?;
                    assert_eq!(changed, 1);
                    conn.execute("DELETE FROM chat_blobs", [])
                })
                .await
                .unwrap();
        }
        Backend::Postgres(store) => {
            let client = store.client().await.unwrap();
            let changed = client
                .execute(
                    "UPDATE chat_messages SET message = $1::text::jsonb \
                     WHERE message::text LIKE '%blob_sha256%'",
                    &[&old_json],
                )
                .await
                .unwrap();
            assert_eq!(changed, 1);
            client.execute("DELETE FROM chat_blobs", &[]).await.unwrap();
        }
    }
    assert_eq!(count(db, "SELECT COUNT(*) FROM chat_blobs").await, 0);
    let loaded = db.store.load_conversation(&conv).await.unwrap();
    assert_eq!(loaded.len(), 2);
    assert_eq!(loaded[0], with_image);
    assert!(matches!(&loaded[1], Message::Assistant(a) if a.content == "A pixel."));
    // The next turn resends the old message: it is stored the new way beside the old one, and both read.
    let mut next = loaded.clone();
    next.push(Message::user("And now?"));
    chat.oneshot(ChatRequest::new(next.clone()).with_extension(conv.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let calls = db.store.conversation_calls(&conv).await.unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(*calls[0].request.messages, vec![with_image]);
    assert_eq!(*calls[1].request.messages, next);
}

/// The blob is written in the transaction of the record that refers to it: when the database refuses the blob,
/// the fail-closed call fails with a store error, and neither the record nor its messages are stored.
async fn a_blob_the_database_refuses_fails_the_call_and_stores_nothing_of_it(db: &TestDb) {
    db.refuse_inserts_into("chat_blobs").await;
    let layer = db.layer();
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Seen."))
    }));
    let conv = conversation();
    let message = Message::user(vec![
        Part::text("Look"),
        Part::image(PNG.to_vec(), "image/png"),
    ]);
    let error = chat
        .oneshot(ChatRequest::new(vec![message]).with_extension(conv.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap_err();
    assert!(matches!(error.kind(), ErrorKind::Store), "{error}");
    layer.flush().await.unwrap();
    assert!(db.store.conversation_calls(&conv).await.unwrap().is_empty());
    assert_eq!(count(db, "SELECT COUNT(*) FROM chat_messages").await, 0);
    assert_eq!(count(db, "SELECT COUNT(*) FROM chat_blobs").await, 0);
    // A text-only call still goes through.
    let ok = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Fine."))
    }));
    ok.oneshot(ChatRequest::new(vec![Message::user("plain")]).with_extension(conv.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let calls = db.store.conversation_calls(&conv).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].outcome, CallOutcome::Completed);
}

/// `call_message` reads the blobs of the message asked for and no other: with another message's blob gone, the
/// whole record no longer reads (an error naming the blob, not a silently empty part), the message still does.
async fn one_message_reads_only_its_own_blobs(db: &TestDb) {
    let first = Message::user(vec![
        Part::text("one"),
        Part::image(PNG.to_vec(), "image/png"),
    ]);
    let second = Message::user(vec![
        Part::text("two"),
        Part::file(PDF.to_vec(), "application/pdf", Some("b.pdf".into())),
    ]);
    let layer = db.layer();
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Noted."))
    }));
    let conv = conversation();
    chat.oneshot(
        ChatRequest::new(vec![
            first.clone(),
            Message::assistant("ok"),
            second.clone(),
        ])
        .with_extension(conv.clone()),
    )
    .await
    .unwrap()
    .collect_response()
    .await
    .unwrap();
    let call_id = db.store.conversation_calls(&conv).await.unwrap()[0]
        .call_id
        .clone();
    let png_hash = {
        use sha2::Digest;
        sha2::Sha256::digest(PNG)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    match &db.backend {
        Backend::Sqlite(store) => {
            let hash = png_hash.clone();
            store
                .run("delete", move |conn| {
                    conn.execute("DELETE FROM chat_blobs WHERE hash = ?1", [hash])
                })
                .await
                .unwrap();
        }
        Backend::Postgres(store) => {
            store
                .client()
                .await
                .unwrap()
                .execute("DELETE FROM chat_blobs WHERE hash = $1", &[&png_hash])
                .await
                .unwrap();
        }
    }
    let error = db.store.call(&call_id).await.unwrap_err();
    assert!(error.to_string().contains(&png_hash), "{error}");
    assert_eq!(
        db.store.call_message(&call_id, 2).await.unwrap(),
        Some(second)
    );
    assert!(db.store.call_message(&call_id, 0).await.is_err());
}
