//! A full conversation with a tool round, streamed to the terminal.
//!
//! `cargo run --release --example quickstart` (from the repository root)
//!
//! Offline by default: a scripted OpenAI-compatible provider starts on loopback and the real HTTP leaf talks to
//! it. With `OPENAI_API_KEY` set (optionally `OPENAI_BASE_URL`, `OPENAI_MODEL`) the same stack talks to that
//! provider instead.

use std::io::Write;

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::{ServiceBuilder, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{ChatEvent, ChatRequest, Message, ModelInfo, ResponseBuilder};
use tower_chat_function_invocation::schemars::{self, JsonSchema};
use tower_chat_function_invocation::{tool_fn, FunctionInvocationLayer, ToolContext};

#[derive(Deserialize, JsonSchema)]
struct Weather {
    /// The city, e.g. "Oslo".
    city: String,
}

#[derive(Deserialize, JsonSchema)]
struct Add {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
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
                .provider_name("scripted")
                .build()?;
            (leaf, Some(provider))
        }
    };
    let meta = leaf.model_metadata();
    println!(
        "model: {} via {} ({})\n",
        meta.model_id.as_deref().unwrap_or("?"),
        meta.provider,
        meta.endpoint.as_deref().unwrap_or("?")
    );

    let weather = tool_fn(
        "get_weather",
        "Current weather in a city",
        |args: Weather, _ctx: ToolContext| async move {
            // A real tool would call a weather API here.
            let report = match args.city.to_lowercase().as_str() {
                "oslo" => "4°C, light snow",
                "rome" => "17°C, sunny",
                _ => "no data",
            };
            Ok::<_, String>(json!({"city": args.city, "report": report}))
        },
    );
    let add = tool_fn(
        "add",
        "Adds two numbers",
        |args: Add, _ctx: ToolContext| async move { Ok::<_, String>(args.a + args.b) },
    );

    let chat = ServiceBuilder::new()
        .layer(
            // Each tool's schema is compiled as it is added: a bad one is an error here.
            FunctionInvocationLayer::new()
                .tool(weather)?
                .tool(add)?
                .max_rounds(5),
        )
        .service(leaf);

    let mut history = vec![
        Message::system("You are a helpful assistant. Use the tools when they help."),
        Message::user("What's the weather in Oslo, and what is 21.5 + 20.5?"),
    ];
    println!("user: What's the weather in Oslo, and what is 21.5 + 20.5?\n");

    let mut stream = chat.oneshot(ChatRequest::new(history.clone())).await?;
    let mut collected = ResponseBuilder::new();
    let mut in_text = false;
    while let Some(event) = stream.next().await {
        let event = event?;
        collected.push(&event);
        match &event {
            ChatEvent::TextDelta { text } => {
                if !in_text {
                    print!("assistant: ");
                    in_text = true;
                }
                print!("{text}");
                std::io::stdout().flush()?;
            }
            ChatEvent::ToolCallEnd { call, .. } => {
                println!(
                    "→ tool call  {}({})",
                    call.name,
                    call.arguments.to_wire_string()
                );
            }
            ChatEvent::ToolResult { result } => {
                let marker = if result.is_error { "✗" } else { "←" };
                println!("{marker} tool result {} = {}", result.name, result.content);
            }
            ChatEvent::Usage { usage } => {
                println!(
                    "\n\n[usage: {} input + {} output tokens]",
                    usage.input_tokens, usage.output_tokens
                );
            }
            ChatEvent::Finish { reason } => println!("[finish: {reason}]"),
            _ => {}
        }
    }
    let response = collected.finish();
    history.extend(response.messages);
    println!("[history now has {} messages]", history.len());
    Ok(())
}

/// The scripted model: asks for both tools in one round (arguments split across chunks, as real providers
/// stream them), then answers from the tool results it is sent back.
fn scripted_model(request: &RecordedRequest, _index: usize) -> Reply {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    if results.is_empty() {
        return Reply::openai_tool_calls(&[
            ("call_weather", "get_weather", r#"{"city": "Oslo"}"#),
            ("call_add", "add", r#"{"a": 21.5, "b": 20.5}"#),
        ]);
    }
    let weather: Value =
        serde_json::from_str(results[0]["content"].as_str().unwrap_or("{}")).unwrap_or_default();
    let sum = results
        .get(1)
        .and_then(|r| r["content"].as_str())
        .unwrap_or("?");
    Reply::openai_text(&format!(
        "In {} it is {} right now, and 21.5 + 20.5 = {}.",
        weather["city"].as_str().unwrap_or("?"),
        weather["report"].as_str().unwrap_or("unknown"),
        sum
    ))
}
