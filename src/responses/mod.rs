//! The OpenAI Responses API leaf service (`POST {base_url}/responses`).
//!
//! The conversation goes as `input` items: messages, `function_call` items for the assistant's tool calls and
//! `function_call_output` items for their results. Reasoning models continue a tool round from their `reasoning`
//! items: the leaf asks for them encrypted (`include: ["reasoning.encrypted_content"]`) and stores nothing at
//! OpenAI (`store: false`) by default, streams each item's summary as reasoning deltas, ends it with a
//! [`ChatEvent::ReasoningEnd`] carrying
//! [`Continuation::OpenAiReasoning`](crate::Continuation::OpenAiReasoning), and sends those items back first in
//! their turn, exactly as received, on the next round. Another provider's reasoning is left out of the request
//! (with a `tracing` debug line). Usage reports cached and reasoning tokens; `response.incomplete` ends with
//! [`FinishReason::Length`](crate::FinishReason::Length) or
//! [`ContentFilter`](crate::FinishReason::ContentFilter); `response.failed` and `error` events are typed
//! [`ChatError`]s (rate limited, invalid request, upstream).
//!
//! ```
//! use serde_json::json;
//! use tower::ServiceExt;
//! use tower_chat::responses::ResponsesChat;
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, Message};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower_chat::ChatError> {
//! // A scripted Responses server on loopback stands in for `https://api.openai.com/v1`.
//! let provider = ScriptedProvider::start(|_request, _index| Reply::responses_text("Hello there")).await;
//! let leaf = ResponsesChat::builder()
//!     .base_url(provider.base_url())
//!     .api_key("sk-test")
//!     .model("gpt-5-mini")
//!     .build()?;
//! let reply = leaf
//!     .oneshot(ChatRequest::new(vec![Message::user("Hi")]))
//!     .await?
//!     .collect_response()
//!     .await?;
//! assert_eq!(reply.text(), "Hello there");
//!
//! let sent = &provider.requests()[0];
//! assert_eq!(sent.path, "/v1/responses");
//! assert_eq!(sent.body["store"], false);
//! assert_eq!(sent.body["include"], json!(["reasoning.encrypted_content"]));
//! assert_eq!(sent.body["input"][0], json!({"type": "message", "role": "user", "content": "Hi"}));
//! # Ok(()) }
//! ```
//!
//! Keeping responses at OpenAI instead (so that `previous_response_id` can refer to them) is one builder call,
//! [`store(true)`](ChatLeafBuilder::store); a request's [`extra`](crate::ChatOptions::extra) fields win over
//! the leaf's (`{"reasoning": {"effort": "high", "summary": "auto"}}`; Chat Completions' `reasoning_effort`
//! is understood too).

mod decode;
mod error;
mod wire;

use std::sync::Arc;

use http::header::{HeaderName, AUTHORIZATION};

use crate::error::ChatError;
use crate::event::ChatEvent;
use crate::leaf::{ChatLeaf, ChatLeafBuilder, Provider, ProviderWire};
use crate::request::ChatRequest;
use crate::transport::ToolsJson;

/// What the leaf asks to be included in a response unless configured otherwise: the encrypted reasoning a
/// reasoning model continues a tool round from when nothing is stored at OpenAI.
pub const DEFAULT_INCLUDE: &str = "reasoning.encrypted_content";

/// The Responses API leaf service: [`ChatLeaf`] speaking [`OpenAiResponses`]' wire format. Cheap to clone: clones
/// share configuration and the connection pool.
pub type ResponsesChat = ChatLeaf<OpenAiResponses>;

/// Configures a [`ResponsesChat`]: the shared settings of [`ChatLeafBuilder`], plus
/// [`store`](ChatLeafBuilder::store) and [`include`](ChatLeafBuilder::include).
pub type ResponsesChatBuilder = ChatLeafBuilder<OpenAiResponses>;

/// Decodes a Responses SSE body into chat events, byte chunk by byte chunk — the leaf's own decoder, for bodies
/// that arrive some other way.
///
/// ```
/// use tower_chat::{ChatEvent, FinishReason};
///
/// let mut decoder = tower_chat::responses::StreamDecoder::new();
/// decoder.feed(b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\nev");
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::text("Hi"));
/// assert!(decoder.next_event().is_none()); // the rest of the body is needed
/// decoder.feed(b"ent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n");
/// decoder.finish();
/// assert_eq!(decoder.next_event().unwrap().unwrap(), ChatEvent::finish(FinishReason::Stop));
/// assert!(decoder.next_event().is_none());
/// ```
pub type StreamDecoder = crate::leaf::StreamDecoder<OpenAiResponses>;

/// The Responses wire format (`POST {base_url}/responses`, `Authorization: Bearer`), with its two settings:
/// whether OpenAI stores the responses, and what the responses include.
#[derive(Clone, Debug)]
pub struct OpenAiResponses {
    store: bool,
    include: Vec<String>,
    /// Shared by the provider's clones (the leaf's clones): one list offered to every call is serialised once.
    tools: Arc<ToolsJson>,
}

impl Default for OpenAiResponses {
    fn default() -> Self {
        OpenAiResponses {
            store: false,
            include: vec![DEFAULT_INCLUDE.to_owned()],
            tools: Arc::default(),
        }
    }
}

impl Provider for OpenAiResponses {}

impl ProviderWire for OpenAiResponses {
    type Decoder = decode::ResponseDecoder;
    const LEAF_NAME: &'static str = "ResponsesChat";
    const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    const DEFAULT_PROVIDER_NAME: &'static str = "openai";
    const PATH: &'static str = "responses";
    const API_FORMAT: Option<crate::ApiFormat> = Some(crate::ApiFormat::Responses);

    fn keeps_part(&self, part: &crate::ProviderPart) -> bool {
        // A whole input item, or a part already in this API's shape (`input_*`): a Chat Completions part would
        // be refused.
        part.provider == wire::ITEM_PROVIDER
            || part.provider == "openai"
                && part
                    .value
                    .get("type")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|kind| kind.starts_with("input_"))
    }

    fn auth_header(&self) -> (HeaderName, &'static str) {
        (AUTHORIZATION, "Bearer ")
    }

    fn supports_streaming_usage(&self) -> bool {
        true
    }

    fn encode(
        &self,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Vec<u8>, ChatError> {
        wire::encode(
            request,
            &wire::EncodeOptions {
                default_model,
                store: self.store,
                include: &self.include,
                tools: &self.tools,
            },
        )
    }

    fn error_message(body: &[u8]) -> Option<String> {
        error::provider_message(body)
    }

    fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
        decode::decode_response(body)
    }
}

impl ChatLeafBuilder<OpenAiResponses> {
    /// Whether OpenAI keeps the responses (`store`; default `false`: nothing is kept, and reasoning continues
    /// from the encrypted items the leaf sends back).
    pub fn store(mut self, store: bool) -> Self {
        self.provider.store = store;
        self
    }

    /// What responses include (`include`; default [`DEFAULT_INCLUDE`]). An empty list sends none.
    pub fn include<I, S>(mut self, include: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.provider.include = include.into_iter().map(Into::into).collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelInfo;

    #[test]
    fn debug_hides_the_key_and_metadata_names_openai() {
        let leaf = ResponsesChat::builder()
            .api_key("sk-responses-secret")
            .model("gpt-4o-mini")
            .build()
            .unwrap();
        let debug = format!("{leaf:?}");
        assert!(!debug.contains("sk-responses-secret"), "{debug}");
        assert!(debug.starts_with("ResponsesChat"), "{debug}");
        let meta = leaf.model_metadata();
        assert_eq!(meta.provider, "openai");
        assert_eq!(meta.context_window, Some(128_000));
        assert_eq!(
            leaf.endpoint().to_string(),
            "https://api.openai.com/v1/responses"
        );
    }
}
