//! The scripted model behind every upstream kind: each request is checked the way the real API checks it (its
//! host, its credential, its top-level fields, tool results answering calls of the turn before), then answered
//! by the script of the agent whose tools it offers. A request the real API would refuse is refused in the
//! kind's own error shape and kept as a complaint the test reports.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};

use crate::common::kinds::{call_path, carries, check_credential, streamed, text_reply, Handler};

mod fields;

/// The kinds the agents are run against.
pub const KINDS: [&str; 7] = [
    "anthropic",
    "openai",
    "openai-responses",
    "azure",
    "gemini",
    "vertex",
    "bedrock",
];

/// What a kind's model sends with a tool call and expects back with the tool's result: the thinking block's
/// signature (Anthropic), the encrypted reasoning item (Responses), the thought signature (Gemini, Vertex), the
/// `reasoningContent` block's signature (Bedrock, extended thinking of a Claude model).
pub fn reasoning_token(kind: &str) -> Option<&'static str> {
    match kind {
        "anthropic" => Some("sig-anthropic-thinking-ZXhhbXBsZQ"),
        "openai-responses" => Some("enc-responses-reasoning-ZXhhbXBsZQ"),
        "gemini" => Some("sig-gemini-thought-ZXhhbXBsZQ"),
        "vertex" => Some("sig-vertex-thought-ZXhhbXBsZQ"),
        "bedrock" => Some("sig-bedrock-reasoning-ZXhhbXBsZQ"),
        _ => None,
    }
}

/// The wire format `kind` speaks: Azure speaks OpenAI Chat's, Vertex AI Gemini's (their paths, credentials and
/// accepted fields differ, and are checked apart).
pub fn wire(kind: &str) -> &str {
    match kind {
        "azure" => "openai",
        "vertex" => "gemini",
        other => other,
    }
}

/// One model turn: call a tool, or answer with text.
#[derive(Debug, Clone)]
pub enum Turn {
    /// Call the function tool `name` with these JSON arguments.
    Call { name: String, arguments: Value },
    /// Call the freeform (`custom`) tool `name` with this text.
    Freeform { name: String, input: String },
    /// Answer with this text.
    Answer(String),
}

/// What one agent's conversation looks like to the model: given the upstream's kind, the tools offered and the
/// request, the next turn, or `None` when the request is not this agent's.
pub type Script =
    Arc<dyn Fn(&'static str, &[Tool], &RecordedRequest) -> Option<Turn> + Send + Sync>;

/// A tool as offered in a request: its name and whether it is freeform (a `custom` tool).
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub freeform: bool,
    /// The JSON Schema of its parameters (`Null` for a freeform tool).
    pub parameters: Value,
}

/// The upstream side of a test: the scripts, and what the upstreams refused.
#[derive(Clone, Default)]
pub struct Model {
    scripts: Arc<Mutex<Vec<Script>>>,
    complaints: Arc<Mutex<Vec<String>>>,
    /// Every request seen, as `kind: summary` lines, for a failing test's message.
    log: Arc<Mutex<Vec<String>>>,
    /// The kinds whose reasoning came back with a tool's result, once per answer that checked it.
    continued: Arc<Mutex<Vec<&'static str>>>,
    /// Answers given so far: each gets an id of its own, as the real APIs give.
    answered: Arc<AtomicUsize>,
}

impl Model {
    /// Answer requests offering an agent's tools with `script`.
    pub fn script(&self, script: Script) {
        self.scripts.lock().unwrap().push(script);
    }

    /// Everything an upstream refused, in order.
    pub fn complaints(&self) -> Vec<String> {
        self.complaints.lock().unwrap().clone()
    }

    /// How many answers found `kind`'s reasoning carried back with the tool's result.
    pub fn continued(&self, kind: &str) -> usize {
        self.continued
            .lock()
            .unwrap()
            .iter()
            .filter(|k| **k == kind)
            .count()
    }

    /// Every request seen, summarised.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The handler for `kind`'s scripted server.
    pub fn handler(&self, kind: &'static str) -> Handler {
        let model = self.clone();
        Box::new(move |request, _| model.answer(kind, request))
    }

    fn answer(&self, kind: &'static str, request: &RecordedRequest) -> Reply {
        let tools = offered(kind, &request.body);
        self.log.lock().unwrap().push(format!(
            "{kind} {} {} tools={:?} conversation={}",
            request.method,
            request.path,
            tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            shape(&request.body)
        ));
        if let Err(wrong) = check(kind, request) {
            self.complaints
                .lock()
                .unwrap()
                .push(format!("{kind}: {wrong}"));
            return refusal(kind, &wrong);
        }
        if let (true, Some(token)) = (answers_a_call(kind, &request.body), reasoning_token(kind)) {
            // The reasoning that led to a call must come back with the call's result.
            if !carries(request, token) || !bedrock_reasoning_verbatim(kind, &request.body, token) {
                let wrong = format!("the tool result came back without the reasoning ({token})");
                self.complaints
                    .lock()
                    .unwrap()
                    .push(format!("{kind}: {wrong}"));
                return refusal(kind, &wrong);
            }
            self.continued.lock().unwrap().push(kind);
        }
        let scripts = self.scripts.lock().unwrap().clone();
        let turn = scripts
            .iter()
            .find_map(|script| script(kind, &tools, request))
            // Requests of no script (titles, summaries, quota probes) get a short answer.
            .unwrap_or_else(|| Turn::Answer("ok".into()));
        reply(kind, &turn, self.answered.fetch_add(1, Ordering::Relaxed))
    }
}

/// The tools `body` offers, in `kind`'s wire format.
pub fn offered(kind: &str, body: &Value) -> Vec<Tool> {
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    let function = |name: &Value, parameters: &Value| Tool {
        name: name.as_str().unwrap_or_default().to_owned(),
        freeform: false,
        parameters: parameters.clone(),
    };
    match wire(kind) {
        "anthropic" => list(&body["tools"])
            .iter()
            .map(|t| function(&t["name"], &t["input_schema"]))
            .collect(),
        "openai" => list(&body["tools"])
            .iter()
            .map(|t| function(&t["function"]["name"], &t["function"]["parameters"]))
            .collect(),
        "openai-responses" => list(&body["tools"])
            .iter()
            .map(|t| Tool {
                freeform: t["type"] == "custom",
                ..function(&t["name"], &t["parameters"])
            })
            .collect(),
        "gemini" => list(&body["tools"])
            .iter()
            .flat_map(|t| list(&t["functionDeclarations"]))
            .map(|d| {
                let schema = if d["parametersJsonSchema"].is_null() {
                    &d["parameters"]
                } else {
                    &d["parametersJsonSchema"]
                };
                function(&d["name"], schema)
            })
            .collect(),
        "bedrock" => list(&body["toolConfig"]["tools"])
            .iter()
            .map(|t| {
                function(
                    &t["toolSpec"]["name"],
                    &t["toolSpec"]["inputSchema"]["json"],
                )
            })
            .collect(),
        other => panic!("no such kind {other}"),
    }
}

/// The conversation of `body` as its turns' roles (or item types) and the kinds of their parts, with the tool
/// names they carry: enough to see what a refused request looked like.
fn shape(body: &Value) -> String {
    let turns = ["messages", "input", "contents"]
        .iter()
        .find_map(|key| body[key].as_array())
        .cloned()
        .unwrap_or_default();
    let part = |part: &Value| match part.as_object() {
        Some(fields) => {
            let kind = part["type"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| fields.keys().cloned().collect::<Vec<_>>().join("+"));
            let name = ["name", "toolUseId", "tool_use_id", "call_id"]
                .iter()
                .chain(&["functionCall", "functionResponse", "toolUse", "toolResult"])
                .find_map(|key| {
                    part[key]
                        .as_str()
                        .or_else(|| part[key]["name"].as_str())
                        .or_else(|| part[key]["toolUseId"].as_str())
                });
            name.map_or(kind.clone(), |name| format!("{kind}:{name}"))
        }
        None => "text".into(),
    };
    turns
        .iter()
        .map(|turn| {
            let role = turn["role"]
                .as_str()
                .or(turn["type"].as_str())
                .unwrap_or("?");
            let parts: Vec<String> = ["content", "parts", "tool_calls"]
                .iter()
                .filter_map(|key| turn[key].as_array())
                .flatten()
                .map(part)
                .collect();
            let own = part(turn);
            format!(
                "{role}[{}]",
                if parts.is_empty() {
                    own
                } else {
                    parts.join(",")
                }
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many tool results `body` carries, in `kind`'s wire format.
pub fn results(kind: &str, body: &Value) -> usize {
    let needle = match wire(kind) {
        "anthropic" => "\"type\":\"tool_result\"",
        "openai" => "\"tool_call_id\"",
        "openai-responses" => "_call_output\"",
        "gemini" => "\"functionResponse\"",
        "bedrock" => "\"toolResult\"",
        other => panic!("no such kind {other}"),
    };
    body.to_string().matches(needle).count()
}

/// Whether the last message of `body` carries a tool's result.
fn answers_a_call(kind: &str, body: &Value) -> bool {
    let last = |key: &str| body[key].as_array().and_then(|m| m.last()).cloned();
    let has = |message: Option<Value>, needle: &str| {
        message.is_some_and(|m| m.to_string().contains(needle))
    };
    match wire(kind) {
        "anthropic" => has(last("messages"), "\"tool_result\""),
        "openai" => has(last("messages"), "\"tool_call_id\""),
        "openai-responses" => has(last("input"), "_call_output\""),
        "gemini" => has(last("contents"), "\"functionResponse\""),
        "bedrock" => has(last("messages"), "\"toolResult\""),
        other => panic!("no such kind {other}"),
    }
}

/// What the real API checks before it answers.
fn check(kind: &str, request: &RecordedRequest) -> Result<(), String> {
    // Nothing here may be reached at any other name: a request for another host went somewhere it must not.
    let host = request
        .headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !host.starts_with("127.0.0.1:") {
        return Err(format!("host {host:?} is not this loopback server"));
    }
    check_credential(kind, request)?;
    check_path(kind, request)?;
    let body = request
        .body
        .as_object()
        .ok_or("the body is not a JSON object")?;
    if let Some(unknown) = body
        .keys()
        .find(|k| !fields::known_fields(kind).contains(&k.as_str()))
    {
        return Err(format!("unknown field {unknown:?}"));
    }
    let required: &[&str] = match wire(kind) {
        "anthropic" => &["model", "messages", "max_tokens"],
        "openai" => &["model", "messages"],
        "openai-responses" => &["model", "input"],
        "gemini" => &["contents"],
        "bedrock" => &["messages"],
        other => panic!("no such kind {other}"),
    };
    if let Some(missing) = required.iter().find(|f| !body.contains_key(**f)) {
        return Err(format!("missing required field {missing:?}"));
    }
    if kind == "anthropic" && !request.headers.contains_key("anthropic-version") {
        return Err("missing anthropic-version header".into());
    }
    check_pairing(kind, &request.body)
}

/// The method and path `kind`'s API is called at (a wrong one is a 404 there): the model's own path, Gemini's
/// and Vertex's method after the colon, and for Azure the deployment path with an `api-version` query.
fn check_path(kind: &str, request: &RecordedRequest) -> Result<(), String> {
    let expected = call_path(kind, streamed(request));
    if request.method != "POST" || request.path != expected {
        return Err(format!(
            "{} {} is not POST {expected}",
            request.method, request.path
        ));
    }
    let query = request.query.as_deref().unwrap_or_default();
    let has = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
    if kind == "azure" && !has("api-version") {
        return Err(format!("no api-version in the query {query:?}"));
    }
    // The key goes in its header (or the token in `authorization`), never into a URL that logs keep.
    if wire(kind) == "gemini" && !matches!(query, "" | "alt=sse") {
        return Err(format!("unexpected query {query:?}"));
    }
    Ok(())
}

/// Every tool result answers a call made before it, as each API requires.
fn check_pairing(kind: &str, body: &Value) -> Result<(), String> {
    let items = |key: &str| body[key].as_array().cloned().unwrap_or_default();
    let mut calls: Vec<String> = Vec::new();
    let mut pair = |call: Option<&str>, result: Option<&str>| -> Result<(), String> {
        if let Some(call) = call {
            calls.push(call.to_owned());
        }
        match result {
            Some(result) if !calls.iter().any(|c| c == result) => {
                Err(format!("the tool result {result:?} answers no call"))
            }
            _ => Ok(()),
        }
    };
    match wire(kind) {
        "anthropic" | "bedrock" => {
            let (call, result, id, result_id) = if kind == "anthropic" {
                ("tool_use", "tool_result", "id", "tool_use_id")
            } else {
                ("toolUse", "toolResult", "toolUseId", "toolUseId")
            };
            for message in items("messages") {
                for block in message["content"].as_array().cloned().unwrap_or_default() {
                    if kind == "anthropic" {
                        if block["type"] == call {
                            pair(block[id].as_str(), None)?;
                        } else if block["type"] == result {
                            pair(None, block[result_id].as_str())?;
                        }
                    } else {
                        pair(block[call][id].as_str(), block[result][result_id].as_str())?;
                    }
                }
            }
        }
        "openai" => {
            for message in items("messages") {
                for call in message["tool_calls"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                {
                    pair(call["id"].as_str(), None)?;
                }
                pair(None, message["tool_call_id"].as_str())?;
            }
        }
        "openai-responses" => {
            for item in items("input") {
                let ty = item["type"].as_str().unwrap_or_default();
                if ty.ends_with("_call_output") {
                    pair(None, item["call_id"].as_str())?;
                } else if ty.ends_with("_call") {
                    pair(item["call_id"].as_str(), None)?;
                }
            }
        }
        "gemini" => {
            for content in items("contents") {
                for part in content["parts"].as_array().cloned().unwrap_or_default() {
                    pair(
                        part["functionCall"]["name"].as_str(),
                        part["functionResponse"]["name"].as_str(),
                    )?;
                }
            }
        }
        other => panic!("no such kind {other}"),
    }
    Ok(())
}

/// A 400 in `kind`'s error shape.
fn refusal(kind: &str, message: &str) -> Reply {
    match wire(kind) {
        "anthropic" => Reply::json(
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
        ),
        "gemini" => Reply::json(
            400,
            json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}),
        ),
        "bedrock" => Reply::json(400, json!({"message": message}))
            .header("x-amzn-errortype", "ValidationException"),
        _ => Reply::json(
            400,
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null,
                "code": null}}),
        ),
    }
}

/// `turn` in `kind`'s wire format, streamed or whole as the request asked, the `n`th answer. A call carries the
/// kind's reasoning token.
fn reply(kind: &str, turn: &Turn, n: usize) -> Reply {
    let (name, arguments, freeform) = match turn {
        Turn::Answer(text) => return text_reply(kind, text),
        Turn::Call { name, arguments } => (name.as_str(), arguments.to_string(), false),
        Turn::Freeform { name, input } => (name.as_str(), input.clone(), true),
    };
    let token = reasoning_token(kind).unwrap_or_default();
    match wire(kind) {
        "anthropic" => anthropic_call(name, &arguments, token),
        "openai" => Reply::openai_tool_calls(&[("call_scripted", name, &arguments)]),
        "openai-responses" if freeform => responses_freeform_call(name, &arguments, token),
        "openai-responses" => Reply::responses_reasoning_and_calls(
            &[("rs_scripted", token, "Calling the tool.")],
            &[("call_scripted", name, &arguments)],
        ),
        "gemini" => gemini_call(name, &arguments, token, n),
        "bedrock" => bedrock_call(name, &arguments, token),
        other => panic!("no such kind {other}"),
    }
}

/// What the scripted Claude on Bedrock thinks before each call.
const BEDROCK_THOUGHT: &str = "The tool answers this.";

/// A Bedrock answer that reasons (a signed `reasoningContent` block, as a Claude model with extended thinking
/// streams it) and then calls `name`.
fn bedrock_call(name: &str, arguments: &str, signature: &str) -> Reply {
    let middle = (0..=arguments.len() / 2)
        .rev()
        .find(|at| arguments.is_char_boundary(*at))
        .unwrap_or(0);
    let (head, tail) = arguments.split_at(middle);
    let (thought_head, thought_tail) = BEDROCK_THOUGHT.split_at(8);
    let reasoning = |delta: Value| {
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": delta}}),
        )
    };
    let input = |fragment: &str| {
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": fragment}}}),
        )
    };
    Reply::bedrock_stream(&[
        ("messageStart", json!({"role": "assistant"})),
        reasoning(json!({"text": thought_head})),
        reasoning(json!({"text": thought_tail})),
        reasoning(json!({"signature": signature})),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 1,
                "start": {"toolUse": {"toolUseId": "tooluse_scripted", "name": name}}}),
        ),
        input(head),
        input(tail),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 30, "outputTokens": 8, "totalTokens": 38},
                "metrics": {"latencyMs": 80}}),
        ),
    ])
}

/// For Bedrock, whether each assistant turn that calls a tool opens with the reasoning block exactly as it was
/// streamed, its text and signature unaltered (Bedrock refuses a thinking turn whose signature does not verify
/// its text); other kinds' tokens are checked by [`carries`] alone.
fn bedrock_reasoning_verbatim(kind: &str, body: &Value, signature: &str) -> bool {
    if kind != "bedrock" {
        return true;
    }
    let expected = json!({"reasoningContent": {"reasoningText": {"text": BEDROCK_THOUGHT,
        "signature": signature}}});
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant" && m.to_string().contains("\"toolUse\""))
        .all(|m| m["content"][0] == expected)
}

/// An Anthropic answer that thinks (a signed thinking block) and then calls `name`.
fn anthropic_call(name: &str, arguments: &str, signature: &str) -> Reply {
    Reply::anthropic_stream(&[
        json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message",
            "role": "assistant", "model": "claude-scripted", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 20, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "The tool answers this."}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": signature}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_scripted", "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": arguments}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ])
}

/// A Gemini answer calling `name`, signed with `signature`. Gemini gives calls no id; the gateway names them
/// after the response's `responseId`, unique per answer as Google's are.
fn gemini_call(name: &str, arguments: &str, signature: &str, n: usize) -> Reply {
    let args: Value = serde_json::from_str(arguments).unwrap();
    Reply::gemini_stream(&[json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": name, "args": args}, "thoughtSignature": signature}]},
            "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 8, "thoughtsTokenCount": 40,
            "totalTokenCount": 78},
        "modelVersion": "gemini-scripted", "responseId": format!("scripted-response-{n}"),
    })])
}

/// A Responses answer that reasons (an encrypted reasoning item) and then calls the freeform tool `name`.
fn responses_freeform_call(name: &str, input: &str, encrypted: &str) -> Reply {
    let reasoning = json!({"type": "reasoning", "id": "rs_scripted", "summary": [],
        "encrypted_content": encrypted});
    let call = json!({"type": "custom_tool_call", "id": "ctc_scripted", "call_id": "call_freeform",
        "name": name, "input": input, "status": "completed"});
    let usage = json!({"input_tokens": 40, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 10}, "total_tokens": 70});
    let events: Vec<Value> = vec![
        json!({"type": "response.created", "response": {"id": "resp_scripted", "object": "response",
            "model": "scripted-model", "status": "in_progress", "output": [], "usage": null}}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_scripted", "summary": []}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
        json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"type": "custom_tool_call", "id": "ctc_scripted", "call_id": "call_freeform",
                "name": name, "input": "", "status": "in_progress"}}),
        json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_scripted",
            "output_index": 1, "delta": input}),
        json!({"type": "response.custom_tool_call_input.done", "item_id": "ctc_scripted",
            "output_index": 1, "input": input}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
        json!({"type": "response.completed", "response": {"id": "resp_scripted", "object": "response",
            "model": "scripted-model", "status": "completed", "output": [reasoning, call],
            "usage": usage}}),
    ];
    let numbered: Vec<Value> = events
        .into_iter()
        .enumerate()
        .map(|(n, mut event)| {
            event["sequence_number"] = n.into();
            event
        })
        .collect();
    Reply::responses_stream(&numbered)
}
