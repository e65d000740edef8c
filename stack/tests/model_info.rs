//! Model metadata survives tower's own middleware between tower-chat layers and the leaf: `ModelInfo` reads
//! through timeouts, limits, retries, filters and `map_future`, and `BoxChatService` keeps it where tower hides
//! the inner service (`MapRequest`, `MapErr`). The persistence layer then records the leaf's provider.

use std::time::Duration;

use tower::limit::{ConcurrencyLimit, RateLimit};
use tower::timeout::Timeout;
use tower::util::{Either, MapFuture};
use tower::{Layer, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    BoxChatService, ChatError, ChatRequest, ChatStreamExt, ConversationId, Message, ModelInfo,
};
use tower_chat_stack::persistence::{PersistenceLayer, SqliteStore, Store};
use tower_chat_stack::tools::FunctionInvocationLayer;

fn leaf(base_url: &str) -> OpenAiChat {
    OpenAiChat::builder()
        .base_url(base_url)
        .model("leaf-model")
        .build()
        .unwrap()
}

#[tokio::test]
async fn model_info_reads_through_towers_middleware() {
    let leaf = leaf("http://127.0.0.1:9");
    let expected = leaf.model_metadata();
    assert_eq!(expected.provider, "openai");
    assert_eq!(expected.model_id.as_deref(), Some("leaf-model"));

    let mapped = MapFuture::new(
        leaf.clone(),
        |future: <OpenAiChat as tower::Service<ChatRequest>>::Future| future,
    );
    let limited = RateLimit::new(
        ConcurrencyLimit::new(mapped, 4),
        tower::limit::rate::Rate::new(100, Duration::from_secs(1)),
    );
    let stack = Timeout::new(limited, Duration::from_secs(30));
    assert_eq!(stack.model_metadata(), expected);

    let branch: Either<OpenAiChat, BoxChatService> = Either::Right(BoxChatService::new(leaf));
    assert_eq!(branch.model_metadata(), expected);
}

#[tokio::test]
async fn a_boxed_stack_with_hidden_middleware_still_records_the_leafs_provider() {
    let provider = ScriptedProvider::start(|_req, _i| Reply::openai_text("Hi")).await;
    let leaf = leaf(&provider.base_url());
    let metadata = leaf.model_metadata();
    // tower's `MapRequest` and `MapErr` hide their inner service: box with the leaf's metadata.
    let hidden = Timeout::new(ConcurrencyLimit::new(leaf, 8), Duration::from_secs(30))
        .map_err(ChatError::from_boxed)
        .map_request(|request: ChatRequest| request.model("mapped-model"));
    let boxed = BoxChatService::with_metadata(hidden, metadata.clone());

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("chat.db")).await.unwrap();
    let layer = PersistenceLayer::new(store.clone());
    let chat = layer.layer(FunctionInvocationLayer::new().layer(boxed));
    assert_eq!(chat.model_metadata(), metadata);

    let conversation = ConversationId::new("conv-meta");
    let response = chat
        .oneshot(
            ChatRequest::new(vec![Message::user("Hello")]).with_extension(conversation.clone()),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "Hi");
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].provider.as_deref(), Some("openai"));
    assert_eq!(
        provider.requests()[0].body["model"],
        "mapped-model",
        "the MapRequest ran"
    );
}
