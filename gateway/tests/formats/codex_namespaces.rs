//! Codex's namespaced tools (a Responses `namespace` tool grouping an MCP server's function tools) through the
//! gateway: a Responses upstream gets the group as sent and answers namespaced calls; an Anthropic and a Chat
//! Completions upstream get each tool of the group as a function tool named `<namespace>__<name>`, and their
//! call of it reaches the client as the namespaced `function_call` (`namespace` + `name`), whole and streamed.
//! The client's next request, carrying that call and its output, reaches each upstream in its own terms again.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};

use super::codex_tools::{before_agents, through};
use common::kinds::{carries, text_reply, KindUpstreams};
use common::{Answer, Harness};

const NAMESPACE: &str = "mcp__docs";
const TOOL: &str = "search";
const FLAT: &str = "mcp__docs__search";
/// What the client's MCP server answers the call with.
const FOUND: &str = "Found: the guide's page on limits.";

/// The kinds the group reaches: as it is (Responses) and flattened (Anthropic, Chat Completions).
const KINDS: [&str; 3] = ["openai-responses", "anthropic", "openai"];

fn tools() -> Value {
    json!([
        {"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": false,
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
        {"type": "namespace", "name": NAMESPACE, "description": "Tools of the docs MCP server.", "tools": [
            {"type": "function", "name": TOOL, "description": "Searches the docs.", "strict": false,
             "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                            "required": ["query"]}}]}
    ])
}

fn request(model: &str, stream: bool, input: Value) -> Value {
    json!({"model": model, "instructions": "You are Codex.", "input": input, "tools": tools(),
           "tool_choice": "auto", "parallel_tool_calls": false, "store": false, "stream": stream})
}

fn first_turn() -> Value {
    json!([{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What do the docs say about limits?"}]}])
}

/// The next round: the namespaced call as the client got it, and its output.
fn second_turn() -> Value {
    let mut input = first_turn();
    let items = input.as_array_mut().unwrap();
    items.push(
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_docs",
        "namespace": NAMESPACE, "name": TOOL, "arguments": "{\"query\":\"limits\"}"}),
    );
    items.push(json!({"type": "function_call_output", "call_id": "call_docs", "output": FOUND}));
    input
}

/// The model's call of the docs search in `kind`'s wire format.
fn search_call(kind: &str) -> Reply {
    let arguments = r#"{"query":"limits"}"#;
    match kind {
        "openai" => Reply::openai_tool_calls(&[("call_docs", FLAT, arguments)]),
        "anthropic" => Reply::anthropic_stream(&[
            json!({"type": "message_start", "message": {"id": "msg_d", "type": "message",
                "role": "assistant", "model": "claude-scripted", "content": [],
                "usage": {"input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use",
                "id": "call_docs", "name": FLAT, "input": {}}}),
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": arguments}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 12}}),
            json!({"type": "message_stop"}),
        ]),
        "openai-responses" => {
            let item = json!({"type": "function_call", "id": "fc_up", "call_id": "call_docs",
                "namespace": NAMESPACE, "name": TOOL, "arguments": arguments, "status": "completed"});
            Reply::responses_stream(&[
                json!({"type": "response.created", "response": {"id": "resp_up", "object": "response",
                    "model": "gpt-5.5", "status": "in_progress", "output": []}}),
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "function_call", "id": "fc_up", "call_id": "call_docs",
                        "namespace": NAMESPACE, "name": TOOL, "arguments": "", "status": "in_progress"}}),
                json!({"type": "response.function_call_arguments.delta", "item_id": "fc_up",
                    "output_index": 0, "delta": arguments}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                json!({"type": "response.completed", "response": {"id": "resp_up", "object": "response",
                    "model": "gpt-5.5", "status": "completed", "output": [item],
                    "usage": {"input_tokens": 30, "output_tokens": 20, "total_tokens": 50}}}),
            ])
        }
        other => panic!("not a kind of this test: {other}"),
    }
}

async fn every_kind() -> (KindUpstreams, Harness) {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request: &RecordedRequest, _| {
            if carries(request, FOUND) {
                text_reply(kind, "The limits page.")
            } else {
                search_call(kind)
            }
        })
    })
    .await;
    before_agents(upstreams).await
}

fn calls(answer: &Answer, stream: bool) -> Vec<Value> {
    let items: Vec<Value> = if stream {
        answer
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter(|event| {
                event["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("response.output_item."))
            })
            .map(|event| event["item"].clone())
            .collect()
    } else {
        answer.json()["output"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    items
        .into_iter()
        .filter(|item| item["type"] == "function_call")
        .collect()
}

#[tokio::test]
async fn a_namespace_reaches_each_kind_in_its_terms_and_its_calls_come_back_namespaced() {
    let (upstreams, gw) = every_kind().await;
    for kind in KINDS {
        for stream in [false, true] {
            let at = format!("{kind}, stream: {stream}");
            let model = upstreams.get(kind).model();
            let (answer, sent) = through(
                &upstreams,
                &gw,
                kind,
                &request(&model, stream, first_turn()),
            )
            .await;
            match kind {
                "openai-responses" => assert_eq!(sent["tools"], tools(), "{at}"),
                "anthropic" => {
                    let names: Vec<&str> = sent["tools"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter_map(|t| t["name"].as_str())
                        .collect();
                    assert_eq!(names, ["exec_command", FLAT], "{at}");
                    assert_eq!(
                        sent["tools"][1]["description"], "Searches the docs.",
                        "{at}"
                    );
                    assert_eq!(
                        sent["tools"][1]["input_schema"]["required"],
                        json!(["query"]),
                        "{at}"
                    );
                }
                _ => {
                    let names: Vec<&str> = sent["tools"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter_map(|t| t["function"]["name"].as_str())
                        .collect();
                    assert_eq!(names, ["exec_command", FLAT], "{at}");
                    assert_eq!(
                        sent["tools"][1]["function"]["parameters"]["properties"]["query"]["type"],
                        "string",
                        "{at}"
                    );
                }
            }
            let dropped = answer
                .headers
                .get("x-tower-chat-dropped")
                .and_then(|v| v.to_str().ok());
            assert!(
                !dropped.unwrap_or_default().contains("namespace"),
                "{at}: {dropped:?}"
            );
            let got = calls(&answer, stream);
            assert!(!got.is_empty(), "{at}: {}", answer.body);
            for call in &got {
                assert_eq!(call["namespace"], NAMESPACE, "{at}: {call}");
                assert_eq!(call["name"], TOOL, "{at}: {call}");
                assert_eq!(call["call_id"], "call_docs", "{at}: {call}");
            }
            let done = got.last().unwrap();
            let arguments: Value =
                serde_json::from_str(done["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(arguments, json!({"query": "limits"}), "{at}");

            let (answer, sent) = through(
                &upstreams,
                &gw,
                kind,
                &request(&model, stream, second_turn()),
            )
            .await;
            assert!(
                answer.body.contains("The limits page."),
                "{at}: {}",
                answer.body
            );
            match kind {
                "openai-responses" => {
                    let call = sent["input"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|item| item["type"] == "function_call")
                        .cloned()
                        .unwrap();
                    assert_eq!(call["namespace"], NAMESPACE, "{at}: {call}");
                    assert_eq!(call["name"], TOOL, "{at}: {call}");
                }
                "anthropic" => {
                    let call = &sent["messages"][1]["content"][0];
                    assert_eq!(call["type"], "tool_use", "{at}: {sent}");
                    assert_eq!(call["name"], FLAT, "{at}: {sent}");
                    assert_eq!(call["input"], json!({"query": "limits"}), "{at}");
                }
                _ => {
                    let call = &sent["messages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|m| m["role"] == "assistant")
                        .unwrap()["tool_calls"][0];
                    assert_eq!(call["function"]["name"], FLAT, "{at}: {sent}");
                }
            }
        }
    }
}
