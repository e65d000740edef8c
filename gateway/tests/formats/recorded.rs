//! The recorded provider responses of the core's `tests/data/recorded/` (one file each), replayed by a scripted
//! upstream of their kind and read through the gateway on every inbound format — Chat Completions, Messages and
//! Responses, streamed when the recording is — then compared field by field with the reading the file expects,
//! as the core's `tests/recorded.rs` compares the leaf's own reading: the answer text, the reasoning, each tool
//! call's name and arguments, the finish reason and the usage. A new recording is one more file there; both
//! readings check it.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::KindUpstreams;
use common::{Answer, Harness};

/// The `[upstreams]` kind serving a recording of `provider`.
fn kind_of(provider: &str) -> &'static str {
    match provider {
        "anthropic" => "anthropic",
        "openai" => "openai",
        "gemini" => "gemini",
        "responses" => "openai-responses",
        other => panic!("no upstream kind for provider `{other}`"),
    }
}

/// The recordings, by file name.
fn recordings() -> Vec<(String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/recorded");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no recordings in {dir}");
    files
        .into_iter()
        .map(|path| {
            let fixture = serde_json::from_slice(&std::fs::read(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                fixture,
            )
        })
        .collect()
}

/// A request for `model` in the format of `path`, declaring the tools the recording calls (so their calls are
/// the client's to see).
fn request(path: &str, model: &str, stream: bool, tools: &[String]) -> Value {
    let parameters = json!({"type": "object"});
    match path {
        "/v1/chat/completions" => json!({
            "model": model, "stream": stream, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "recorded"}],
            "tools": tools.iter().map(|name| json!({"type": "function",
                "function": {"name": name, "parameters": parameters}})).collect::<Vec<_>>(),
        }),
        "/v1/messages" => json!({
            "model": model, "stream": stream, "max_tokens": 1024,
            "messages": [{"role": "user", "content": "recorded"}],
            "tools": tools.iter().map(|name| json!({"name": name, "input_schema": parameters}))
                .collect::<Vec<_>>(),
        }),
        _ => json!({
            "model": model, "stream": stream, "input": "recorded",
            "tools": tools.iter().map(|name| json!({"type": "function", "name": name,
                "parameters": parameters})).collect::<Vec<_>>(),
        }),
    }
}

/// What a client reads from an answer, in the recordings' terms.
#[derive(Default)]
struct Reading {
    text: String,
    reasoning: String,
    /// (name, arguments as JSON text), by the call's position.
    calls: Vec<(String, String)>,
    finish_reason: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
}

impl Reading {
    fn call(&mut self, index: usize) -> &mut (String, String) {
        while self.calls.len() <= index {
            self.calls.push(Default::default());
        }
        &mut self.calls[index]
    }

    fn value(&self) -> Value {
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|(name, arguments)| {
                json!({"name": name, "arguments": serde_json::from_str::<Value>(arguments)
                    .unwrap_or(Value::Null)})
            })
            .collect();
        json!({
            "text": self.text,
            "reasoning": self.reasoning,
            "tool_calls": calls,
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
        })
    }
}

fn tokens(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// A Chat Completions answer, whole or as chunks.
fn read_chat(answer: &Answer, stream: bool) -> Reading {
    let mut reading = Reading::default();
    let chunks: Vec<Value> = if stream {
        answer
            .events()
            .iter()
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    } else {
        vec![answer.json()]
    };
    for chunk in chunks {
        if let Some(choice) = chunk["choices"].get(0) {
            let part = if stream {
                &choice["delta"]
            } else {
                &choice["message"]
            };
            reading.text += part["content"].as_str().unwrap_or("");
            reading.reasoning += part["reasoning_content"].as_str().unwrap_or("");
            for (position, call) in part["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let index = call["index"].as_u64().map_or(position, |i| i as usize);
                let (name, arguments) = reading.call(index);
                name.push_str(call["function"]["name"].as_str().unwrap_or(""));
                arguments.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                reading.finish_reason = Some(reason.to_owned());
            }
        }
        if chunk["usage"].is_object() {
            reading.input_tokens = tokens(&chunk["usage"]["prompt_tokens"]);
            reading.output_tokens = tokens(&chunk["usage"]["completion_tokens"]);
        }
    }
    reading
}

/// A Messages stop reason in the recordings' (the core's) words.
fn messages_finish(reason: &str) -> String {
    match reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        other => other,
    }
    .to_owned()
}

/// A Messages answer, whole or as events.
fn read_messages(answer: &Answer, stream: bool) -> Reading {
    let mut reading = Reading::default();
    let add_block = |reading: &mut Reading, block: &Value| match block["type"].as_str() {
        Some("text") => reading.text += block["text"].as_str().unwrap_or(""),
        Some("thinking") => reading.reasoning += block["thinking"].as_str().unwrap_or(""),
        Some("tool_use") => {
            let index = reading.calls.len();
            let input = &block["input"];
            *reading.call(index) = (
                block["name"].as_str().unwrap().to_owned(),
                if input.as_object().is_some_and(|o| o.is_empty()) && stream {
                    String::new()
                } else {
                    input.to_string()
                },
            );
        }
        _ => {}
    };
    if !stream {
        let message = answer.json();
        for block in message["content"].as_array().unwrap() {
            add_block(&mut reading, block);
        }
        reading.finish_reason = message["stop_reason"].as_str().map(messages_finish);
        reading.input_tokens = tokens(&message["usage"]["input_tokens"]);
        reading.output_tokens = tokens(&message["usage"]["output_tokens"]);
        return reading;
    }
    // Stream blocks by their index, to tell a call's argument deltas apart.
    let mut call_of_block = std::collections::HashMap::new();
    for (name, event) in answer.named_events() {
        match name.as_str() {
            "message_start" => {
                reading.input_tokens = tokens(&event["message"]["usage"]["input_tokens"]);
            }
            "content_block_start" => {
                if event["content_block"]["type"] == "tool_use" {
                    call_of_block.insert(event["index"].as_u64().unwrap(), reading.calls.len());
                }
                add_block(&mut reading, &event["content_block"]);
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => reading.text += delta["text"].as_str().unwrap(),
                    Some("thinking_delta") => {
                        reading.reasoning += delta["thinking"].as_str().unwrap()
                    }
                    Some("input_json_delta") => {
                        let call = call_of_block[&event["index"].as_u64().unwrap()];
                        reading.call(call).1 += delta["partial_json"].as_str().unwrap();
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                reading.finish_reason = event["delta"]["stop_reason"].as_str().map(messages_finish);
                reading.output_tokens = tokens(&event["usage"]["output_tokens"]);
                if let Some(input) = event["usage"]["input_tokens"].as_u64() {
                    reading.input_tokens = input;
                }
            }
            _ => {}
        }
    }
    reading
}

/// A Responses answer: the response object, whole or from `response.completed`.
fn read_responses(answer: &Answer, stream: bool) -> Reading {
    let response = if stream {
        answer
            .named_events()
            .into_iter()
            .find(|(name, _)| name == "response.completed" || name == "response.incomplete")
            .expect("the stream ends with the response")
            .1["response"]
            .clone()
    } else {
        answer.json()
    };
    let mut reading = Reading::default();
    for item in response["output"].as_array().unwrap() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().unwrap() {
                    reading.text += part["text"].as_str().unwrap_or("");
                }
            }
            Some("reasoning") => {
                for part in item["summary"].as_array().into_iter().flatten() {
                    reading.reasoning += part["text"].as_str().unwrap_or("");
                }
            }
            Some("function_call") => {
                let index = reading.calls.len();
                *reading.call(index) = (
                    item["name"].as_str().unwrap().to_owned(),
                    item["arguments"].as_str().unwrap().to_owned(),
                );
            }
            _ => {}
        }
    }
    reading.finish_reason = Some(
        match (
            response["status"].as_str(),
            response["incomplete_details"]["reason"].as_str(),
        ) {
            (Some("incomplete"), Some("max_output_tokens")) => "length",
            _ if !reading.calls.is_empty() => "tool_calls",
            _ => "stop",
        }
        .to_owned(),
    );
    reading.input_tokens = tokens(&response["usage"]["input_tokens"]);
    reading.output_tokens = tokens(&response["usage"]["output_tokens"]);
    reading
}

#[tokio::test]
async fn every_recorded_response_reads_the_same_through_every_inbound_format() {
    for (file, fixture) in recordings() {
        let kind = kind_of(fixture["provider"].as_str().unwrap());
        let stream = fixture["stream"].as_bool().unwrap_or(false);
        let reply = if stream {
            Reply::sse_chunks([fixture["body"].as_str().unwrap().to_owned()])
        } else {
            Reply::json(200, fixture["body"].clone())
        };
        let upstreams = KindUpstreams::start(move |k| {
            let reply = reply.clone();
            Box::new(move |_, _| {
                if k == kind {
                    reply.clone()
                } else {
                    Reply::json(500, json!({"error": "not this kind"}))
                }
            })
        })
        .await;
        let toml = upstreams.toml();
        let config = ConfigFile::parse(&toml, "gateway.toml").unwrap();
        let gw = Harness::start(
            |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
            |c| c.file = config,
        )
        .await;
        let expected = &fixture["expected"];
        let tools: Vec<String> = expected["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|call| call["name"].as_str().unwrap().to_owned())
            .collect();
        let model = upstreams.get(kind).model();
        for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
            let answer = gw
                .post_json(path, &request(path, &model, stream, &tools), &[])
                .await;
            assert_eq!(answer.status, 200, "{file} on {path}: {}", answer.body);
            let reading = match path {
                "/v1/chat/completions" => read_chat(&answer, stream),
                "/v1/messages" => read_messages(&answer, stream),
                _ => read_responses(&answer, stream),
            }
            .value();
            for field in ["text", "reasoning", "tool_calls", "finish_reason", "usage"] {
                if let Some(want) = expected.get(field) {
                    assert_eq!(
                        &reading[field], want,
                        "{file} on {path}, {field}: {}",
                        answer.body
                    );
                }
            }
        }
    }
}
