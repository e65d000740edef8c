//! The response cache inside tracing and persistence, over the real OpenAI-compatible leaf on loopback: a hit is
//! recorded as a call marked cached at zero cost, and its span says so.

use tower::{ServiceBuilder, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    CallerIdentity, ChatRequest, ChatStreamExt, ConversationId, Cost, Message, ModelPrice,
    PriceTable,
};
use tower_chat_stack::cache::{CacheLayer, CacheOutcome, CacheStatus};
use tower_chat_stack::persistence::{PersistenceLayer, SqliteStore, Store};
use tower_chat_stack::tracing::TracingLayer;
use tower_chat_stack::ServiceBuilderExt;
use tower_chat_testkit::{until, Capture};

#[tokio::test]
async fn a_hit_is_recorded_as_a_cached_call_at_zero_cost_and_marked_on_its_span() {
    let (spans, _guard) = Capture::install();
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Paris.")).await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("chat.db")).await.unwrap();
    let price = ModelPrice::per_million_usd(0.15, 0.6);
    let prices = PriceTable::new()
        .with("gpt-4o-mini", price)
        .with("scripted-model", price);
    let cache = CacheLayer::new();
    let chat = ServiceBuilder::new()
        .layer(TracingLayer::new())
        .persist(PersistenceLayer::new(store.clone()).prices(prices))
        .response_cache(cache.clone())
        .service(leaf);

    let mut records = Vec::new();
    for (turn, expected) in [CacheStatus::Miss, CacheStatus::Hit]
        .into_iter()
        .enumerate()
    {
        let conversation = ConversationId::new(format!("conv-{turn}"));
        let outcome = CacheOutcome::new();
        let request = ChatRequest::new(vec![Message::user("Capital of France?")])
            .with_extension(CallerIdentity::new("alice"))
            .with_extension(conversation.clone())
            .with_extension(outcome.clone());
        let answer = chat
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(answer.text(), "Paris.");
        assert_eq!(outcome.get(), Some(expected));
        until("the answer is stored", || async {
            cache.stats().stored == 1
        })
        .await;
        let calls = store.conversation_calls(&conversation).await.unwrap();
        assert_eq!(calls.len(), 1);
        records.push(calls[0].clone());
    }
    assert_eq!(provider.requests().len(), 1);

    let (miss, hit) = (&records[0], &records[1]);
    assert!(!miss.from_response_cache());
    assert!(miss.cost.unwrap() > Cost::ZERO);
    assert!(hit.from_response_cache());
    assert_eq!(hit.cost, Some(Cost::ZERO));
    // The replay's usage is the original call's, what the hit saved.
    assert_eq!(hit.usage().total_tokens(), miss.usage().total_tokens());

    let chat_spans: Vec<_> = spans
        .spans()
        .into_iter()
        .filter(|s| s.name == "chat")
        .collect();
    assert_eq!(chat_spans.len(), 2);
    assert_eq!(chat_spans[0].field("tower_chat.response_cache"), None);
    assert_eq!(
        chat_spans[1].field("tower_chat.response_cache"),
        Some("hit")
    );
}
