//! Keep a conversation's history server-side and continue it from the store.
//!
//! Runs offline: the "model" is a scripted in-process service that remembers nothing itself — it only sees the
//! messages it is sent — so the second turn can only answer if the history came back from the store.
//!
//! ```sh
//! cargo run -p tower-chat-persistence --example continue_conversation [path/to/chat.db]
//! ```

use futures_util::stream;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    BoxChatService, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ConversationId,
    FinishReason, Message, ModelMetadata, Usage,
};
use tower_chat_persistence::{ConversationQuery, PersistenceLayer, SqliteStore, Store};

/// A stand-in for a real model: it answers "what is my name?" from the history it receives.
fn scripted_model(
) -> impl tower::Service<ChatRequest, Response = ChatStream, Error = ChatError, Future: Send>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|request: ChatRequest| async move {
        let name = request.messages.iter().find_map(|m| match m {
            Message::User { content } => content
                .to_string()
                .strip_prefix("My name is ")
                .map(str::to_owned),
            _ => None,
        });
        let asked = matches!(request.messages.last(), Some(Message::User { content }) if content.to_string().contains("my name?"));
        let answer = match (asked, name) {
            (true, Some(name)) => format!("Your name is {name}"),
            (true, None) => "I don't know your name.".to_owned(),
            (false, _) => "Nice to meet you!".to_owned(),
        };
        let events = vec![
            Ok(ChatEvent::ResponseMetadata {
                id: None,
                model: Some("scripted".into()),
            }),
            Ok(ChatEvent::text(answer)),
            Ok(ChatEvent::Usage {
                usage: Usage {
                    input_tokens: request.messages.len() as u64 * 10,
                    output_tokens: 5,
                    ..Usage::default()
                },
            }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ];
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events)))
    })
}

/// One turn the way a gateway keeps history server-side: the client sends only its new message, the history
/// comes from the store, and the layer records the call (so the next turn finds it).
async fn turn(
    db_path: &std::path::Path,
    conversation: &ConversationId,
    user_text: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    // A fresh store and layer per turn, as if each turn were served by another process or replica.
    let store = SqliteStore::open(db_path).await?;
    let layer = PersistenceLayer::new(store.clone());
    // The provider recorded is the one the inner service reports (`ModelInfo`); this stand-in names its own.
    let chat = layer.layer(BoxChatService::with_metadata(
        scripted_model(),
        ModelMetadata::new("scripted"),
    ));

    let mut messages = store.load_conversation(conversation).await?;
    if messages.is_empty() {
        messages.push(Message::system("You are a helpful assistant."));
    }
    messages.push(Message::user(user_text));
    let request = ChatRequest::new(messages).with_extension(conversation.clone());
    let response = chat.oneshot(request).await?.collect_response().await?;
    // Fail-closed (the default): the call only finished because its record is stored.
    Ok(response.text().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db_path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("chat.db"));
    let conversation = ConversationId::new("demo-conversation");

    for user_text in ["My name is Ada", "What is my name?"] {
        println!("user:      {user_text}");
        println!(
            "assistant: {}",
            turn(&db_path, &conversation, user_text).await?
        );
    }

    let store = SqliteStore::open(&db_path).await?;
    println!("\nstored history of {conversation}:");
    for message in store.load_conversation(&conversation).await? {
        println!("  {}", serde_json::to_string(&message)?);
    }
    println!("\ncalls:");
    for call in store.conversation_calls(&conversation).await? {
        println!(
            "  {} round {} {} model={} tokens={} text={:?}",
            call.call_id,
            call.round_index,
            call.outcome.as_str(),
            call.model.as_deref().unwrap_or("-"),
            call.usage().total_tokens(),
            call.text()
        );
    }
    let conversations = store.list_conversations(&ConversationQuery::new()).await?;
    println!(
        "\n{} conversation(s) in {}",
        conversations.len(),
        db_path.display()
    );
    Ok(())
}
