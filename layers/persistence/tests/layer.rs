//! Behaviour of the layer itself (ordering, buffering, policies), over a store whose writes can be held back.
//!
//! The tests that check that something has not happened yet run on a paused clock: their timeouts fire only once
//! every task has done all it can, so the check does not depend on how fast the machine is.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{answer, scripted, TestDb};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::watch;
use tower::{Layer, ServiceExt};
use tower_chat::{
    BoxChatService, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ConversationId,
    FinishReason, Message, ModelInfo, ModelMetadata,
};
use tower_chat_persistence::{
    CallId, CallOutcome, CallRecord, ConversationQuery, ConversationSummary, PersistenceLayer,
    RequestedCallId, Store, StoreError,
};
use tower_chat_testkit::{hanging, scripted_stream, Delivery, SHAPES};

/// A store whose writes wait while the gate is closed, and which counts write batches.
#[derive(Debug)]
struct GatedStore {
    inner: Arc<dyn Store>,
    open: watch::Receiver<bool>,
    batches: AtomicUsize,
}

impl Store for GatedStore {
    fn write_calls<'a>(
        &'a self,
        records: &'a [CallRecord],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut open = self.open.clone();
            open.wait_for(|open| *open).await.unwrap();
            self.batches.fetch_add(1, Ordering::SeqCst);
            self.inner.write_calls(records).await
        })
    }
    fn call<'a>(&'a self, id: &'a CallId) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        self.inner.call(id)
    }
    fn conversation_calls<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        self.inner.conversation_calls(id)
    }
    fn list_conversations<'a>(
        &'a self,
        query: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
        self.inner.list_conversations(query)
    }
}

async fn gated() -> (TestDb, Arc<GatedStore>, watch::Sender<bool>) {
    let db = TestDb::sqlite().await;
    let (gate, open) = watch::channel(false);
    let store = Arc::new(GatedStore {
        inner: db.store.clone(),
        open,
        batches: AtomicUsize::new(0),
    });
    (db, store, gate)
}

fn conv(name: &str) -> ConversationId {
    ConversationId::new(name)
}

fn req(conversation: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user("q")]).with_extension(conv(conversation))
}

#[tokio::test(start_paused = true)]
async fn finish_is_delivered_only_after_the_record_is_stored() {
    for shape in SHAPES {
        let (db, store, gate) = gated().await;
        let layer = PersistenceLayer::new(store.clone());
        let chat = layer.layer(scripted(move |_| scripted_stream(shape, answer("Hello"))));
        let mut stream = chat.oneshot(req("c")).await.unwrap();
        // Every event before Finish flows while the store is held back…
        for _ in 0..5 {
            let event = stream.next().await.unwrap().unwrap();
            assert!(!matches!(event, ChatEvent::Finish { .. }), "{event:?}");
        }
        // …but Finish waits for the write.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), stream.next())
                .await
                .is_err(),
            "{shape:?}: Finish arrived before the record was stored"
        );
        gate.send(true).unwrap();
        let finish = stream.next().await.unwrap().unwrap();
        assert_eq!(finish, ChatEvent::finish(FinishReason::Stop));
        assert!(stream.next().await.is_none());
        let calls = db.store.conversation_calls(&conv("c")).await.unwrap();
        assert_eq!(calls[0].outcome, CallOutcome::Completed);
    }
}

#[tokio::test]
async fn fail_open_never_waits_and_counts_records_dropped_by_a_full_buffer() {
    let (db, store, gate) = gated().await;
    let layer = PersistenceLayer::new(store.clone())
        .fail_open()
        .buffer(2)
        .max_batch(1);
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Hello"))
    }));
    // The writer takes one record and blocks on the gate; two more fill the buffer; the rest are dropped.
    for i in 0..10 {
        let response = chat
            .clone()
            .oneshot(req(&format!("c{i}")))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.finish_reason, Some(FinishReason::Stop));
        tokio::task::yield_now().await;
    }
    let dropped = layer.stats().dropped;
    assert!((7..=8).contains(&dropped), "dropped {dropped}");
    gate.send(true).unwrap();
    layer.flush().await.unwrap();
    let stats = layer.stats();
    assert_eq!(stats.recorded + stats.dropped, 10, "{stats:?}");
    assert_eq!(stats.failed, 0);
    let listed = db
        .store
        .list_conversations(&ConversationQuery::new())
        .await
        .unwrap();
    assert_eq!(listed.len() as u64, stats.recorded);
}

#[tokio::test(start_paused = true)]
async fn fail_closed_applies_backpressure_instead_of_dropping() {
    let (db, store, gate) = gated().await;
    let layer = PersistenceLayer::new(store.clone()).buffer(2).max_batch(64);
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Hello"))
    }));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let call: BoxFuture<'static, Result<ChatStream, ChatError>> =
            Box::pin(chat.clone().oneshot(req(&format!("c{i}"))));
        tasks.push(tokio::spawn(async move {
            call.await.unwrap().collect_response().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "calls finished before their records were stored"
    );
    gate.send(true).unwrap();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().text(), "Hello");
    }
    let stats = layer.stats();
    assert_eq!((stats.recorded, stats.dropped, stats.failed), (20, 0, 0));
    // Records that queued up while the store was slow went in batches.
    assert!(store.batches.load(Ordering::SeqCst) < 20);
    let listed = db
        .store
        .list_conversations(&ConversationQuery::new())
        .await
        .unwrap();
    assert_eq!(listed.len(), 20);
}

#[tokio::test]
async fn events_after_finish_release_it_and_are_recorded_too() {
    let db = TestDb::sqlite().await;
    let layer = db.layer();
    // A stream that (against the contract) finishes a round and then continues.
    let chat = layer.layer(scripted(|_| {
        scripted_stream(
            Delivery::OneByOne,
            vec![
                Ok(ChatEvent::text("one")),
                Ok(ChatEvent::finish(FinishReason::ToolCalls)),
                Ok(ChatEvent::ToolResult {
                    result: tower_chat::ToolMessage::success("c", "t", "r"),
                }),
                Ok(ChatEvent::text("two")),
                Ok(ChatEvent::finish(FinishReason::Stop)),
            ],
        )
    }));
    let events: Vec<_> = chat
        .oneshot(req("c"))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(events.len(), 5);
    assert_eq!(events[1], ChatEvent::finish(FinishReason::ToolCalls));
    let record = &db.store.conversation_calls(&conv("c")).await.unwrap()[0];
    assert_eq!(record.outcome, CallOutcome::Completed);
    assert_eq!(record.text(), "two");
    assert_eq!(record.response.messages.len(), 3);
    assert_eq!(record.finish_reason(), Some(&FinishReason::Stop));
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_after_finish_arrived_is_recorded_as_completed() {
    let db = TestDb::sqlite().await;
    let layer = db.layer();
    // Finish, then the upstream hangs instead of ending: the caller never sees Finish and drops the stream.
    let chat = layer.layer(scripted(|_| hanging(answer("Hi"))));
    let mut stream = chat.oneshot(req("c")).await.unwrap();
    let mut seen = 0;
    while tokio::time::timeout(Duration::from_millis(20), stream.next())
        .await
        .is_ok()
    {
        seen += 1;
    }
    assert_eq!(seen, 5, "every event but the held Finish");
    drop(stream);
    layer.flush().await.unwrap();
    let record = &db.store.conversation_calls(&conv("c")).await.unwrap()[0];
    assert_eq!(record.outcome, CallOutcome::Completed);
    assert_eq!(record.text(), "Hi");
}

#[tokio::test]
async fn the_inner_service_sees_the_call_and_conversation_ids() {
    let db = TestDb::sqlite().await;
    let layer = db.layer();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_inner = seen.clone();
    let chat = layer.layer(scripted(move |req: &ChatRequest| {
        seen_inner.lock().unwrap().push((
            req.extensions.get::<CallId>().cloned().unwrap(),
            req.conversation_id().cloned().unwrap(),
        ));
        scripted_stream(Delivery::AllAtOnce, answer("ok"))
    }));
    let _ = chat
        .oneshot(ChatRequest::new(vec![Message::user("q")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let (call_id, conversation_id) = seen.lock().unwrap()[0].clone();
    let record = db.store.call(&call_id).await.unwrap().unwrap();
    assert_eq!(record.conversation_id, conversation_id);
}

#[derive(Clone)]
struct Described;

impl ModelInfo for Described {
    fn model_metadata(&self) -> ModelMetadata {
        ModelMetadata {
            provider: "openai".into(),
            model_id: Some("gpt-4o-mini".into()),
            endpoint: None,
            supports_tools: true,
            supports_parallel_tool_calls: true,
            supports_streaming_usage: true,
            context_window: Some(128_000),
        }
    }
}

#[tokio::test]
async fn model_metadata_is_forwarded_through_the_layer() {
    let db = TestDb::sqlite().await;
    let service = db.layer().layer(Described);
    assert_eq!(service.model_metadata().provider, "openai");
    assert_eq!(
        service.layer().policy(),
        tower_chat_persistence::FailurePolicy::FailClosed
    );
    assert_eq!(
        service.get_ref().model_metadata().model_id.as_deref(),
        Some("gpt-4o-mini")
    );
}

/// A described service that also answers chat requests.
#[derive(Clone)]
struct DescribedChat(BoxChatService);

impl ModelInfo for DescribedChat {
    fn model_metadata(&self) -> ModelMetadata {
        Described.model_metadata()
    }
}

impl tower::Service<ChatRequest> for DescribedChat {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = <BoxChatService as tower::Service<ChatRequest>>::Future;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ChatError>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, req: ChatRequest) -> Self::Future {
        self.0.call(req)
    }
}

#[tokio::test]
async fn the_provider_can_come_from_the_inner_service() {
    let db = TestDb::sqlite().await;
    let inner = DescribedChat(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("ok"))
    }));
    // Nothing configured on the layer: the provider recorded is the one the inner service reports.
    let chat = db.layer().layer(inner);
    let _ = chat
        .oneshot(req("p"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let record = &db.store.conversation_calls(&conv("p")).await.unwrap()[0];
    assert_eq!(record.provider.as_deref(), Some("openai"));
}

#[tokio::test]
async fn bad_store_configuration_is_a_clear_error() {
    use tower_chat_persistence::{PostgresStore, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/chat.db");
    let error = SqliteStore::open(&missing).await.unwrap_err();
    assert!(error.to_string().contains("cannot open"), "{error}");
    assert!(error.to_string().contains("no/such/dir"), "{error}");

    let error = PostgresStore::connect("not a url").await.unwrap_err();
    assert!(
        error.to_string().contains("invalid PostgreSQL URL"),
        "{error}"
    );
    let error = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/test")
        .schema("x; DROP TABLE chat_calls")
        .connect()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("invalid PostgreSQL schema name"),
        "{error}"
    );
    let error = PostgresStore::builder("postgres://postgres@127.0.0.1:5432/test")
        .pool_size(0)
        .connect()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("pool size"), "{error}");
    // Nothing listens on port 1: a prompt, typed failure rather than a hang.
    let error = PostgresStore::builder("postgres://postgres@127.0.0.1:1/test")
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no connection"), "{error}");
    let chat_error: ChatError = error.into();
    assert_eq!(chat_error.kind(), &tower_chat::ErrorKind::Store);
}

#[tokio::test]
async fn a_call_id_in_the_request_names_the_record() {
    let db = TestDb::sqlite().await;
    let layer = PersistenceLayer::new(db.store.clone());
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Hello"))
    }));
    let named = req("c").with_extension(RequestedCallId(CallId::new("resp_given")));
    chat.clone()
        .oneshot(named)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    chat.oneshot(req("c"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let record = db.store.call(&CallId::new("resp_given")).await.unwrap();
    assert_eq!(record.expect("stored under the given id").text(), "Hello");
    let calls = db.store.conversation_calls(&conv("c")).await.unwrap();
    assert_eq!(calls.len(), 2);
    assert_ne!(
        calls[1].call_id.as_str(),
        "resp_given",
        "a fresh id otherwise"
    );
}

#[tokio::test]
async fn a_requested_call_id_names_only_the_outermost_record() {
    let db = TestDb::sqlite().await;
    let outer = PersistenceLayer::new(db.store.clone());
    let inner = PersistenceLayer::new(db.store.clone());
    let chat = outer.layer(inner.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Hello"))
    })));
    let named = req("c").with_extension(RequestedCallId(CallId::new("resp_outer")));
    chat.oneshot(named)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    outer.flush().await.unwrap();
    inner.flush().await.unwrap();
    let calls = db.store.conversation_calls(&conv("c")).await.unwrap();
    assert_eq!(calls.len(), 2, "both layers recorded: {calls:?}");
    let named: Vec<_> = calls
        .iter()
        .filter(|c| c.call_id.as_str() == "resp_outer")
        .collect();
    assert_eq!(named.len(), 1);
}

/// Building the layer needs no Tokio runtime (it used to panic here: the writer task was spawned on build); the
/// writer starts with the first record, inside the runtime that serves the calls.
#[test]
fn the_layer_is_built_outside_a_runtime_and_writes_inside_one() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime
        .block_on(tower_chat_persistence::SqliteStore::open(
            dir.path().join("chat.db"),
        ))
        .unwrap();
    assert!(tokio::runtime::Handle::try_current().is_err());
    let layer = PersistenceLayer::new(store.clone())
        .buffer(8)
        .max_batch(4)
        .fail_open()
        .failure_policy(tower_chat_persistence::FailurePolicy::FailClosed);
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Hello"))
    }));
    runtime.block_on(async {
        let _ = chat
            .oneshot(req("outside"))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        layer.flush().await.unwrap();
        let calls = store.conversation_calls(&conv("outside")).await.unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].provider.as_deref(), Some("scripted"));
    });
    assert_eq!(layer.stats().recorded, 1);
}

/// A store that keeps records in memory and counts cache releases. No I/O, so on a paused clock every timer
/// fires exactly when due.
#[derive(Debug, Default)]
struct ReleaseCountingStore {
    records: std::sync::Mutex<Vec<CallRecord>>,
    releases: AtomicUsize,
}

impl Store for ReleaseCountingStore {
    fn write_calls<'a>(
        &'a self,
        records: &'a [CallRecord],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.records.lock().unwrap().extend_from_slice(records);
        Box::pin(async { Ok(()) })
    }
    fn call<'a>(&'a self, id: &'a CallId) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        let found = self
            .records
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.call_id == *id)
            .cloned();
        Box::pin(async { Ok(found) })
    }
    fn conversation_calls<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        let records = self.records.lock().unwrap();
        let calls: Vec<_> = records
            .iter()
            .filter(|r| r.conversation_id == *id)
            .cloned()
            .collect();
        Box::pin(async { Ok(calls) })
    }
    fn list_conversations<'a>(
        &'a self,
        _: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn release_caches(&self) {
        self.releases.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn the_writer_releases_the_stores_caches_once_per_quiet_period() {
    use tower_chat_persistence::RELEASE_CACHES_AFTER as QUIET;
    let store = Arc::new(ReleaseCountingStore::default());
    let chat = PersistenceLayer::new(store.clone()).layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("Hello"))
    }));
    let call = |name: &'static str| {
        let chat = chat.clone();
        async move {
            let stream = chat.oneshot(req(name)).await.unwrap();
            stream.collect_response().await.unwrap();
        }
    };
    let releases = || store.releases.load(Ordering::SeqCst);

    // The writer starts with the first record; its quiet periods end at QUIET, 2 × QUIET, …
    call("a").await;
    tokio::time::sleep(QUIET / 2).await;
    call("b").await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(releases(), 0, "released in a period with records");
    tokio::time::sleep(QUIET).await;
    assert_eq!(releases(), 1, "not released after a quiet period");
    tokio::time::sleep(QUIET * 5).await;
    assert_eq!(releases(), 1, "released again with no record since");
    // A record makes the caches worth releasing again, once its period and a quiet one have passed.
    call("c").await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(releases(), 1);
    tokio::time::sleep(QUIET).await;
    assert_eq!(releases(), 2);
    assert_eq!(store.records.lock().unwrap().len(), 3);
}
