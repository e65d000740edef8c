//! The Anthropic Messages API leaf service (`POST {base_url}/messages`).
//!
//! System messages become the `system` prompt, tool calls and results become `tool_use` / `tool_result` blocks
//! (consecutive results share one user message, as the API requires), and the streamed event sequence
//! (`message_start`, `content_block_*`, `message_delta` with cumulative usage, `message_stop`, `ping`, `error`)
//! maps to the same [`ChatEvent`](crate::ChatEvent)s as every other leaf.
//!
//! [`AnthropicVertexChat`] is the same wire format on Vertex AI (`:rawPredict`, an OAuth bearer token).
//!
//! ```no_run
//! use tower::ServiceExt;
//! use tower_chat::anthropic::AnthropicChat;
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # async fn run() -> Result<(), tower_chat::ChatError> {
//! let leaf = AnthropicChat::builder()
//!     .api_key(std::env::var("ANTHROPIC_API_KEY").unwrap_or_default())
//!     .model("claude-sonnet-4-5")
//!     .build()?;
//! let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
//! println!("{}", leaf.oneshot(request).await?.collect_response().await?.text());
//! # Ok(()) }
//! ```

mod decode;
#[cfg(test)]
mod decode_tests;
mod messages;
mod vertex;
mod wire;

use crate::leaf::{ChatLeaf, ChatLeafBuilder};

pub use messages::{Anthropic, DEFAULT_API_VERSION};
pub use vertex::{
    AnthropicVertex, AnthropicVertexChat, AnthropicVertexChatBuilder, VERTEX_API_VERSION,
};

/// The Messages API leaf service: [`ChatLeaf`] speaking [`Anthropic`]'s wire format. Cheap to clone: clones
/// share configuration and the connection pool.
pub type AnthropicChat = ChatLeaf<Anthropic>;

/// Configures an [`AnthropicChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`api_version`](ChatLeafBuilder::api_version) and [`default_max_tokens`](ChatLeafBuilder::default_max_tokens).
pub type AnthropicChatBuilder = ChatLeafBuilder<Anthropic>;

/// Decodes a Messages API SSE body into chat events, byte chunk by byte chunk — the leaf's own decoder, for
/// bodies that arrive some other way.
pub type StreamDecoder = crate::leaf::StreamDecoder<Anthropic>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelInfo;

    #[test]
    fn debug_hides_the_key_and_metadata_names_anthropic() {
        let leaf = AnthropicChat::builder()
            .api_key("sk-ant-secret")
            .model("claude-sonnet-4-5")
            .build()
            .unwrap();
        assert!(!format!("{leaf:?}").contains("sk-ant-secret"));
        let meta = leaf.model_metadata();
        assert_eq!(meta.provider, "anthropic");
        assert_eq!(meta.context_window, Some(200_000));
        assert_eq!(
            leaf.endpoint().to_string(),
            "https://api.anthropic.com/v1/messages"
        );
    }
}
