//! A typed answer, streamed: the object printed as it grows, then the final value read into a Rust type; then the
//! same answer as the stack's own events (`ChatEvent::PartialAnswer`), as a consumer of the stream sees it.
//!
//! `cargo run --example structured` (from the repository root)
//!
//! Offline by default: a scripted OpenAI-compatible provider starts on loopback, answers first with JSON that
//! breaks the schema (so the layer asks again with the violations) and then with a valid answer, a few characters
//! per chunk. With `OPENAI_API_KEY` set (optionally `OPENAI_BASE_URL`, `OPENAI_MODEL`) the same code asks that
//! provider instead.

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tower::{Layer, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{ChatEvent, ChatRequest, Message};
use tower_chat_structured_output::{AnswerSchema, Partial, StructuredExt, StructuredOutputLayer};

/// A city, as the model describes it.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // read through Debug
struct City {
    name: String,
    country: String,
    /// Inhabitants, if the model knows.
    population: Option<u64>,
    landmarks: Vec<Landmark>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // read through Debug
struct Landmark {
    name: String,
    kind: Kind,
}

#[derive(Debug, Deserialize, JsonSchema)]
enum Kind {
    Building,
    Park,
    Museum,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the scripted provider alive for the whole run when offline.
    let (leaf, _provider) = match std::env::var("OPENAI_API_KEY") {
        Ok(key) if !key.is_empty() => {
            let base = std::env::var("OPENAI_BASE_URL")
                .unwrap_or_else(|_| "https://api.openai.com/v1".into());
            let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
            let leaf = OpenAiChat::builder()
                .base_url(base)
                .api_key(key)
                .model(model)
                .build()?;
            (leaf, None)
        }
        _ => {
            let provider = ScriptedProvider::start(scripted_model).await;
            let leaf = OpenAiChat::builder()
                .base_url(provider.base_url())
                .model("scripted-model")
                .build()?;
            (leaf, Some(provider))
        }
    };

    let request = ChatRequest::new(vec![Message::user(
        "Describe Oslo: its country, population and two landmarks.",
    )]);
    let mut answer = leaf.structured_stream::<City>(request);
    while let Some(step) = answer.next().await {
        match step? {
            Partial::Growing { value, .. } => println!("… {value}"),
            Partial::Restarted { violations } => {
                println!("✗ asked again: {}", violations.join("; "))
            }
            Partial::Complete(city) => println!("\n{city:#?}"),
        }
    }

    // Without the helper: the layer adds the JSON so far to the stream's own events.
    let mut request = ChatRequest::new(vec![Message::user(
        "Describe Oslo: its country, population and two landmarks.",
    )]);
    request.options.response_format = Some(AnswerSchema::of::<City>()?.response_format());
    let checked = StructuredOutputLayer::new()
        .partial_answers(true)
        .layer(leaf);
    let mut events = checked.oneshot(request.stream(true)).await?;
    println!();
    while let Some(event) = events.next().await {
        match event? {
            ChatEvent::PartialAnswer { value } => println!("event: {value}"),
            ChatEvent::AnswerRejected { violations } => {
                println!("event: rejected ({})", violations.join("; "))
            }
            ChatEvent::Finish { reason } => println!("event: finish ({reason})"),
            _ => {}
        }
    }
    Ok(())
}

/// The scripted provider, for each of the two runs: a first answer whose landmark kind is not one of the enum's,
/// then a valid one, each streamed in small chunks.
fn scripted_model(_request: &RecordedRequest, index: usize) -> Reply {
    let answer = match index {
        even if even % 2 == 0 => json!({"name": "Oslo", "country": "Norway", "population": 709037,
                    "landmarks": [{"name": "Opera House", "kind": "Theatre"}]}),
        _ => json!({"name": "Oslo", "country": "Norway", "population": 709037,
                    "landmarks": [{"name": "Opera House", "kind": "Building"},
                                  {"name": "Vigeland Park", "kind": "Park"}]}),
    };
    let text = answer.to_string();
    let mut chunks = vec![
        json!({"id": "chatcmpl-structured", "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
    ];
    for piece in text.as_bytes().chunks(12) {
        let piece = String::from_utf8_lossy(piece);
        chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
    }
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    Reply::openai_stream(&chunks)
}
