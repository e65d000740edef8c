//! `--demo`: the gateway with no provider behind it. A scripted OpenAI-compatible upstream
//! ([`tower_chat::test_server::ScriptedProvider`], the same double the quickstart and the tests use) runs
//! in-process on a loopback port and the gateway calls it over real HTTP, so every inbound format (Chat
//! Completions, Messages, Responses, streaming or not) and the whole stack — tool loop, persistence, approvals —
//! work with no key and no network.
//!
//! The scripted model is deterministic:
//! - the last user message holds two numbers and the request offers the `add` tool: it calls `add` with them;
//! - the conversation ends with tool results: it answers with them;
//! - otherwise it says what it is and repeats the last user message.

use serde_json::Value;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};

/// The scripted upstream `--demo` runs; stops when dropped.
#[derive(Debug)]
pub struct DemoUpstream {
    provider: ScriptedProvider,
}

impl DemoUpstream {
    /// Start the scripted upstream on a free loopback port (inside a tokio runtime).
    pub async fn start() -> Self {
        DemoUpstream {
            provider: ScriptedProvider::start(|request, _| answer(request)).await,
        }
    }

    /// Its OpenAI-compatible base URL (`http://127.0.0.1:PORT/v1`), to give the gateway as its upstream.
    pub fn base_url(&self) -> String {
        self.provider.base_url()
    }
}

/// The demo model's reply to one upstream request (OpenAI Chat Completions).
pub fn answer(request: &RecordedRequest) -> Reply {
    let messages = request.body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .map(|m| text_of(&m["content"]))
        .collect();
    if !results.is_empty() {
        let results: Vec<&str> = results.iter().rev().map(String::as_str).collect();
        return Reply::openai_text(&format!(
            "The tool answered: {}. (demo upstream)",
            results.join(", ")
        ));
    }
    let said = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    if let (Some((a, b)), true) = (two_numbers(&said), offers_tool(&request.body, "add")) {
        let arguments = serde_json::json!({"a": a, "b": b}).to_string();
        return Reply::openai_tool_calls(&[("call_demo_add", "add", &arguments)]);
    }
    let said: String = said.chars().take(200).collect();
    Reply::openai_text(&format!(
        "Hello from the tower-chat demo upstream (no provider is called). You said: \"{said}\". \
         Ask me to add two numbers, e.g. \"add 2 and 3\", to see a tool round."
    ))
}

/// A message's text: a string, or the text parts of a content array.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The first two numbers written in `text` (`2`, `-3`, `4.5`), whole numbers kept whole so the tool's answer
/// reads as the user wrote them.
fn two_numbers(text: &str) -> Option<(Value, Value)> {
    let mut numbers = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .map(|word| word.trim_matches('.'))
        .filter_map(|word| match word.parse::<i64>() {
            Ok(n) => Some(Value::from(n)),
            Err(_) => word
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number),
        });
    Some((numbers.next()?, numbers.next()?))
}

fn offers_tool(body: &Value, name: &str) -> bool {
    body["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|tool| tool["function"]["name"] == name || tool["name"] == name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_found_in_a_sentence() {
        assert_eq!(
            two_numbers("add 2 and 3.5."),
            Some((Value::from(2), Value::from(3.5)))
        );
        assert_eq!(
            two_numbers("what is -4 + 10?"),
            Some((Value::from(-4), Value::from(10)))
        );
        assert_eq!(two_numbers("only 1 here"), None);
        assert_eq!(two_numbers("hello"), None);
    }
}
