//! What the layer's tests share: a service that answers with scripted events.

use futures_util::stream;
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream};

/// A service answering every request with `events` (no provider: reasoning and tool rounds are scripted as
/// events).
pub fn answering(
    events: Vec<ChatEvent>,
) -> impl Fn(ChatRequest) -> std::future::Ready<Result<ChatStream, ChatError>> + Clone {
    move |_request| {
        let events: Vec<Result<ChatEvent, ChatError>> =
            events.clone().into_iter().map(Ok).collect();
        std::future::ready(Ok(Box::pin(stream::iter(events)) as ChatStream))
    }
}
