//! Scripted inner services with model metadata, for the tracing layer's tests; the rest comes from the kit.
#![allow(dead_code)]

use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, ModelInfo, ModelMetadata,
};
pub use tower_chat_testkit::*;

/// A complete answer: metadata, two text deltas, usage in two increments, finish.
pub fn complete_answer() -> Vec<Result<ChatEvent, ChatError>> {
    vec![
        Ok(ChatEvent::ResponseMetadata {
            id: Some("resp-1".into()),
            model: Some("gpt-4o-mini-2024-07-18".into()),
        }),
        Ok(ChatEvent::text("Hello")),
        Ok(ChatEvent::text(", world")),
        Ok(usage(10, 2)),
        Ok(usage(0, 3)),
        Ok(ChatEvent::finish(FinishReason::Stop)),
    ]
}

/// A service with [`ModelInfo`], answering each call with `reply(request)`.
#[derive(Clone)]
pub struct Scripted<F> {
    pub reply: F,
    pub metadata: ModelMetadata,
}

pub fn openai_metadata() -> ModelMetadata {
    ModelMetadata {
        provider: "openai".into(),
        model_id: Some("gpt-4o-mini".into()),
        endpoint: Some("https://api.openai.com/v1".into()),
        supports_tools: true,
        supports_parallel_tool_calls: true,
        supports_streaming_usage: true,
        context_window: Some(128_000),
    }
}

impl<F> ModelInfo for Scripted<F> {
    fn model_metadata(&self) -> ModelMetadata {
        self.metadata.clone()
    }
}

impl<F, Fut> tower::Service<ChatRequest> for Scripted<F>
where
    F: FnMut(ChatRequest) -> Fut,
    Fut: std::future::Future<Output = Result<ChatStream, ChatError>>,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Fut;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ChatError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Fut {
        (self.reply)(request)
    }
}
