//! What the cache's test suites share: a counting model, a cache over it, requests.
#![allow(dead_code)]

use std::sync::Arc;

use tower::Layer;
use tower_chat::{
    BoxChatService, CallerIdentity, ChatEvent, ChatRequest, FinishReason, Message, ModelMetadata,
};
use tower_chat_cache::{CacheLayer, Cached};
pub use tower_chat_testkit::*;

/// The model the scripted services describe themselves as.
pub const MODEL: &str = "gpt-4o-mini";

/// `inner` described as a leaf whose default model is [`MODEL`].
pub fn leaf(inner: Chat) -> BoxChatService {
    BoxChatService::with_metadata(inner, ModelMetadata::new("openai").model(MODEL))
}

/// A cache over a model that answers every call with `events`, delivered in `shape`; the handle counts calls.
pub fn cached_answer(
    layer: &CacheLayer,
    shape: Delivery,
    events: Vec<ChatEvent>,
) -> (Cached<BoxChatService>, Model) {
    let events = Arc::new(events);
    let (chat, handle) = model(shape, move |_| events.iter().cloned().map(Ok).collect());
    (layer.layer(leaf(chat)), handle)
}

/// A question from `caller`.
pub fn ask(caller: &str, text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)]).with_extension(CallerIdentity::new(caller))
}

/// An answer with reasoning, text in pieces, a tool call in fragments, usage and a finish.
pub fn rich_answer() -> Vec<ChatEvent> {
    vec![
        ChatEvent::ResponseMetadata {
            id: Some("resp-1".into()),
            model: Some(MODEL.into()),
        },
        ChatEvent::ReasoningDelta {
            text: "The user ".into(),
        },
        ChatEvent::ReasoningDelta {
            text: "greets.".into(),
        },
        ChatEvent::text("Hel"),
        ChatEvent::text("lo!"),
        usage(20, 3),
        ChatEvent::finish(FinishReason::Stop),
    ]
}
