//! Fault-injecting scripted providers and leaves for the resilience tests; the rest comes from the kit.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use serde_json::json;
use tower_chat::anthropic::AnthropicChat;
use tower_chat::openai::OpenAiChat;
pub use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::transport::Timeouts;
use tower_chat_resilience::ResilienceEvent;
pub use tower_chat_testkit::*;

/// No leaf deadlines: under `tokio::time::pause()` the clock jumps whenever the runtime waits on I/O, so the
/// only timers in these tests must be the ones under test.
pub fn no_timeouts() -> Timeouts {
    Timeouts {
        connect: None,
        first_byte: None,
        idle: None,
    }
}

pub fn openai(provider: &ScriptedProvider, model: &str) -> OpenAiChat {
    OpenAiChat::builder()
        .base_url(provider.base_url())
        .model(model)
        .timeouts(no_timeouts())
        .build()
        .unwrap()
}

pub fn anthropic(provider: &ScriptedProvider, model: &str) -> AnthropicChat {
    AnthropicChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-ant-test")
        .model(model)
        .timeouts(no_timeouts())
        .build()
        .unwrap()
}

/// The opening chunk of an OpenAI stream (id and model, no text), then the connection breaks.
pub fn cut_before_first_token() -> Reply {
    let first = json!({"id": "chatcmpl-cut", "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]});
    cut_after([format!("data: {first}\n\n")])
}

/// The opening chunk and one word of text, then the connection breaks.
pub fn cut_after_first_token(word: &str) -> Reply {
    let first = json!({"id": "chatcmpl-cut", "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]});
    let text = json!({"choices": [{"index": 0, "delta": {"content": word}}]});
    cut_after([format!("data: {first}\n\n"), format!("data: {text}\n\n")])
}

/// A provider answering its n-th request with `script[n]` (the last entry for every request after).
pub async fn scripted(script: Vec<Reply>) -> ScriptedProvider {
    ScriptedProvider::start(move |_, index| script[index.min(script.len() - 1)].clone()).await
}

/// Records resilience events as short strings.
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<String>>>);

impl Events {
    pub fn observer(&self) -> impl Fn(&ResilienceEvent<'_>) + Send + Sync + 'static {
        let log = self.0.clone();
        move |event: &ResilienceEvent<'_>| {
            let line = match event {
                ResilienceEvent::Retry { attempt, wait, .. } => {
                    format!("retry {attempt} after {}ms", wait.as_millis())
                }
                ResilienceEvent::BudgetExhausted { .. } => "budget exhausted".to_owned(),
                ResilienceEvent::Fallback { from, to, .. } => format!("fallback {from} -> {to}"),
                ResilienceEvent::Breaker { target, state } => {
                    format!("breaker {target} {}", state.as_str())
                }
                _ => "other".to_owned(),
            };
            log.lock().unwrap().push(line);
        }
    }

    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// A non-streaming OpenAI completion answering `text`.
pub fn openai_completion(text: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "scripted-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
    )
}

/// The success reply for a request of either shape.
pub fn ok_reply(stream: bool, text: &str) -> Reply {
    if stream {
        Reply::openai_text(text)
    } else {
        openai_completion(text)
    }
}
