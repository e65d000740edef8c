//! Helpers of the persistence tests only (the shared ones are in `tower_chat_testkit`): a scripted inner service
//! that names its provider, a full answer to record, and the two stores behind one interface.
#![allow(dead_code)]

use std::sync::Arc;

use tower::{Layer, ServiceExt};
use tower_chat::{
    BoxChatService, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ConversationId,
    FinishReason, Message, ModelMetadata, Usage,
};
use tower_chat::{GuardrailAction, GuardrailStage};
use tower_chat_persistence::{
    CallLogQuery, CallRecord, PersistenceLayer, PostgresStore, SqliteStore, Store,
};
use tower_chat_testkit::{database_url, scripted_stream, streaming_model, Delivery, Items};

/// One test module per store: `sqlite::name` on a fresh file, `postgres::name` on `DATABASE_URL` (skipped with a
/// visible message when unset, a failure under CI), each running `name(&db)` and cleaning up after it.
#[allow(unused_macros)]
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = crate::common::TestDb::sqlite().await;
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = crate::common::TestDb::postgres().await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// An inner service answering every request with `script(request)`; it reports provider `scripted`
/// (`ModelInfo`), which the persistence layer records.
pub fn scripted<F>(script: F) -> BoxChatService
where
    F: Fn(&ChatRequest) -> ChatStream + Send + Sync + 'static,
{
    BoxChatService::with_metadata(streaming_model(script).0, ModelMetadata::new("scripted"))
}

/// A full model answer: metadata, reasoning, text in pieces, usage, finish.
pub fn answer(text: &str) -> Items {
    let mut items = vec![
        Ok(ChatEvent::ResponseMetadata {
            id: Some("resp-1".into()),
            model: Some("scripted-model-2".into()),
        }),
        Ok(ChatEvent::ReasoningDelta {
            text: "thinking".into(),
        }),
    ];
    let mid = text.len() / 2;
    let (a, b) = text.split_at(
        text.char_indices()
            .map(|(i, _)| i)
            .find(|&i| i >= mid)
            .unwrap_or(0),
    );
    for part in [a, b] {
        if !part.is_empty() {
            items.push(Ok(ChatEvent::text(part)));
        }
    }
    items.push(Ok(ChatEvent::Usage {
        usage: Usage {
            input_tokens: 10,
            output_tokens: 4,
            ..Usage::default()
        },
    }));
    items.push(Ok(ChatEvent::finish(FinishReason::Stop)));
    items
}

pub enum Backend {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// One test's database: a fresh SQLite file, or a fresh PostgreSQL schema.
pub struct TestDb {
    pub store: Arc<dyn Store>,
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::builder(dir.path().join("chat.db"))
            .search_index(true)
            .open()
            .await
            .unwrap();
        TestDb {
            store: Arc::new(store.clone()),
            backend: Backend::Sqlite(store),
            _dir: Some(dir),
        }
    }

    /// A PostgreSQL store in a schema of its own, or `None` (with a visible message) without `DATABASE_URL`.
    pub async fn postgres() -> Option<TestDb> {
        let url = database_url()?;
        let schema = format!("tcpersist_{}", uuid_simple());
        let store = PostgresStore::builder(url)
            .schema(schema)
            .connect()
            .await
            .unwrap();
        Some(TestDb {
            store: Arc::new(store.clone()),
            backend: Backend::Postgres(store),
            _dir: None,
        })
    }

    pub fn layer(&self) -> PersistenceLayer {
        PersistenceLayer::shared(self.store.clone())
    }

    /// One real record, written through the layer in a conversation of its own (the user says `text`, the
    /// answer repeats it), for a test to shape records of its own from.
    pub async fn recorded_call(&self, text: &str) -> CallRecord {
        let layer = self.layer();
        let answer_text = text.to_owned();
        let chat = layer.layer(scripted(move |_| {
            scripted_stream(Delivery::AllAtOnce, answer(&answer_text))
        }));
        let conversation = ConversationId::new(format!("template-{}", uuid_simple()));
        chat.oneshot(
            ChatRequest::new(vec![Message::user(text)]).with_extension(conversation.clone()),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
        layer.flush().await.unwrap();
        self.store
            .conversation_calls(&conversation)
            .await
            .unwrap()
            .pop()
            .unwrap()
    }

    /// Make the database refuse every new record (a trigger in SQLite, an always-false check in PostgreSQL).
    pub async fn refuse_writes(&self) {
        self.refuse_inserts_into("chat_calls").await;
    }

    /// Make the database refuse every new row of `table`.
    pub async fn refuse_inserts_into(&self, table: &str) {
        match &self.backend {
            Backend::Sqlite(store) => {
                let sql = format!(
                    "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} \
                     BEGIN SELECT RAISE(ABORT, 'the database refuses writes'); END;"
                );
                store
                    .run("break", move |conn| conn.execute_batch(&sql))
                    .await
                    .unwrap()
            }
            Backend::Postgres(store) => store
                .client()
                .await
                .unwrap()
                .batch_execute(&format!(
                    "ALTER TABLE {table} ADD CONSTRAINT refuse CHECK (false) NOT VALID"
                ))
                .await
                .unwrap(),
        }
    }

    pub async fn accept_writes(&self) {
        match &self.backend {
            Backend::Sqlite(store) => store
                .run("repair", |conn| {
                    conn.execute_batch("DROP TRIGGER refuse_chat_calls")
                })
                .await
                .unwrap(),
            Backend::Postgres(store) => store
                .client()
                .await
                .unwrap()
                .batch_execute("ALTER TABLE chat_calls DROP CONSTRAINT refuse")
                .await
                .unwrap(),
        }
    }

    /// The bytes the test's database takes: SQLite's files (database and write-ahead log), or the
    /// PostgreSQL schema's tables with their indexes and TOAST. Flush the layer first.
    pub async fn size_bytes(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(store) => {
                let dir = store.path().parent().unwrap();
                let name = store
                    .path()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                std::fs::read_dir(dir)
                    .unwrap()
                    .map(|entry| entry.unwrap())
                    .filter(|entry| entry.file_name().to_string_lossy().starts_with(&name))
                    .map(|entry| entry.metadata().unwrap().len())
                    .sum()
            }
            Backend::Postgres(store) => {
                let row = store
                    .client()
                    .await
                    .unwrap()
                    .query_one(
                        "SELECT CAST(COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS BIGINT) \
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $1 AND c.relkind = 'r'",
                        &[&store.schema().unwrap()],
                    )
                    .await
                    .unwrap();
                row.get::<_, i64>(0) as u64
            }
        }
    }

    /// Whether `needle` is anywhere in what the test's database holds: SQLite's files (database and write-ahead
    /// log, read as bytes), or every row of the PostgreSQL schema's call and message tables as text. Flush the
    /// layer first.
    pub async fn stored_anywhere(&self, needle: &str) -> bool {
        match &self.backend {
            Backend::Sqlite(store) => {
                let dir = store.path().parent().unwrap();
                std::fs::read_dir(dir).unwrap().any(|entry| {
                    let bytes = std::fs::read(entry.unwrap().path()).unwrap();
                    bytes
                        .windows(needle.len())
                        .any(|window| window == needle.as_bytes())
                })
            }
            Backend::Postgres(store) => {
                let schema = store.schema().unwrap();
                let row = store
                    .client()
                    .await
                    .unwrap()
                    .query_one(
                        &format!(
                            "SELECT (SELECT COUNT(*) FROM {schema}.chat_calls c WHERE c::text LIKE $1) \
                             + (SELECT COUNT(*) FROM {schema}.chat_messages m WHERE m::text LIKE $1)"
                        ),
                        &[&format!("%{needle}%")],
                    )
                    .await
                    .unwrap();
                row.get::<_, i64>(0) > 0
            }
        }
    }

    /// Drop the test's database now (also done on drop, so a failing test cleans up too).
    pub async fn cleanup(self) {
        drop(self);
    }
}

impl Drop for TestDb {
    // A PostgreSQL test schema is dropped through a fresh connection on a thread of its own: this may run while
    // a panicking test unwinds inside its runtime, where the store's pool cannot be driven.
    fn drop(&mut self) {
        if let Backend::Postgres(store) = &self.backend {
            let schema = store.schema().unwrap().to_owned();
            let url = database_url().unwrap();
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let store = PostgresStore::connect(url).await.unwrap();
                    store
                        .client()
                        .await
                        .unwrap()
                        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                        .await
                        .unwrap();
                });
            })
            .join();
            if dropped.is_err() && !std::thread::panicking() {
                panic!("could not drop the test schema");
            }
        }
    }
}

/// A fresh name suffix, for a test's own schema or conversation.
pub fn uuid_simple() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A copy of scripted items (`ChatError` is not `Clone`: errors are rebuilt from their kind and message).
pub fn copy(items: &[Result<ChatEvent, ChatError>]) -> Items {
    items
        .iter()
        .map(|item| match item {
            Ok(event) => Ok(event.clone()),
            Err(error) => Err(ChatError::new(error.kind().clone(), error.message())),
        })
        .collect()
}

/// How many calls of the call log a search for `search` finds.
pub async fn found(db: &TestDb, search: &str) -> usize {
    let query = CallLogQuery {
        search: Some(search.into()),
        ..CallLogQuery::default()
    };
    db.store.call_log(&query).await.unwrap().entries.len()
}

/// A record's guardrail verdicts as (stage, action, detail).
pub fn verdicts(record: &CallRecord) -> Vec<(GuardrailStage, GuardrailAction, Option<&str>)> {
    record
        .guardrail
        .iter()
        .map(|v| (v.stage, v.action, v.detail.as_deref()))
        .collect()
}

/// A moderation-style whole-text check of the answer named `moderation`: it flags a text that contains `marker`
/// (category `violence`, over the marker's span), and counts the texts it was asked about.
pub fn moderation(
    marker: &'static str,
    asked: Arc<std::sync::atomic::AtomicUsize>,
) -> tower_chat_guardrail::Check {
    tower_chat_guardrail::Check::from_fn("moderation", move |text: String, _stage| {
        asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let found = text
            .find(marker)
            .map(|start| tower_chat_guardrail::Finding {
                span: Some(tower_chat::TextSpan {
                    start,
                    end: start + marker.len(),
                }),
                detail: Some("violence".into()),
            });
        async move { Ok::<_, tower_chat::ChatError>(found.into_iter().collect()) }
    })
    .on(&[GuardrailStage::Output])
}
