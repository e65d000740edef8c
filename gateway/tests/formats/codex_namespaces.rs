//! Codex's namespaced tools (a Responses `namespace` tool grouping an MCP server's function tools) through the
//! gateway: a Responses upstream gets the group as sent and answers namespaced calls; an Anthropic and a Chat
//! Completions upstream get each tool of the group as a function tool named `<namespace>__<name>`, and their
//! call of it reaches the client as the namespaced `function_call` (`namespace` + `name`), whole and streamed.
//! The client's next request, carrying that call and its output, reaches each upstream in its own terms again.
//! A freeform (`custom`) tool of the group goes the same way as a one-string function and comes back as the
//! namespaced `custom_tool_call`; the group's hosted search is left out (and named) where it cannot run; a
//! `tool_choice` naming a tool of the group names it as each kind was offered it (Gemini too).

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
    function_call(kind, "call_docs", TOOL, r#"{"query":"limits"}"#)
}

/// The model's call `call_id` of the group's function tool `tool` with `arguments`, in `kind`'s wire format:
/// by its joined name, or, from a Responses upstream, by its namespace and name.
fn function_call(kind: &str, call_id: &str, tool: &str, arguments: &str) -> Reply {
    let flat = tower_chat::namespaced_tool_name(NAMESPACE, tool);
    match kind {
        "openai" => Reply::openai_tool_calls(&[(call_id, &flat, arguments)]),
        "anthropic" => Reply::anthropic_stream(&[
            json!({"type": "message_start", "message": {"id": "msg_d", "type": "message",
                "role": "assistant", "model": "claude-scripted", "content": [],
                "usage": {"input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use",
                "id": call_id, "name": flat, "input": {}}}),
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": arguments}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 12}}),
            json!({"type": "message_stop"}),
        ]),
        "openai-responses" => {
            let item = json!({"type": "function_call", "id": "fc_up", "call_id": call_id,
                "namespace": NAMESPACE, "name": tool, "arguments": arguments, "status": "completed"});
            Reply::responses_stream(&[
                json!({"type": "response.created", "response": {"id": "resp_up", "object": "response",
                    "model": "gpt-5.5", "status": "in_progress", "output": []}}),
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "function_call", "id": "fc_up", "call_id": call_id,
                        "namespace": NAMESPACE, "name": tool, "arguments": "", "status": "in_progress"}}),
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

/// The group's freeform tool.
const EDIT: &str = "edit";
/// What the model writes into [`EDIT`].
const PATCH: &str = "*** Begin Patch\n*** Add File: limits.md\n+Limits.\n*** End Patch\n";
/// What the client's MCP server answers the edit with.
const APPLIED: &str = "Applied the patch to limits.md.";

/// The docs group with a freeform tool (its grammar given) and a hosted search beside its function tool.
fn tools_with_members() -> Value {
    let mut tools = tools();
    let members = tools[1]["tools"].as_array_mut().unwrap();
    members.push(json!({"type": "custom", "name": EDIT, "description": "Edits the docs.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\" /(.|\\n)+/"}}));
    members.push(json!({"type": "web_search"}));
    tools
}

/// The model's freeform call of [`EDIT`] in `kind`'s wire format: the one-string function at a provider
/// without freeform tools, the namespaced `custom_tool_call` from a Responses upstream.
fn edit_call(kind: &str) -> Reply {
    if kind != "openai-responses" {
        return function_call(
            kind,
            "call_edit",
            EDIT,
            &json!({"input": PATCH}).to_string(),
        );
    }
    let item = json!({"type": "custom_tool_call", "id": "ctc_up", "call_id": "call_edit",
        "namespace": NAMESPACE, "name": EDIT, "input": PATCH});
    let mut added = item.clone();
    added["input"] = json!("");
    Reply::responses_stream(&[
        json!({"type": "response.created", "response": {"id": "resp_up", "object": "response",
            "model": "gpt-5.5", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
        json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_up",
            "output_index": 0, "delta": PATCH}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp_up", "object": "response",
            "model": "gpt-5.5", "status": "completed", "output": [item],
            "usage": {"input_tokens": 30, "output_tokens": 20, "total_tokens": 50}}}),
    ])
}

/// The `custom_tool_call` items of an answer: the output of a whole one, each `output_item.done` of a stream.
fn freeform_calls(answer: &Answer, stream: bool) -> Vec<Value> {
    let items: Vec<Value> = if stream {
        answer
            .named_events()
            .into_iter()
            .filter(|(name, _)| name == "response.output_item.done")
            .map(|(_, event)| event["item"].clone())
            .collect()
    } else {
        answer.json()["output"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    items
        .into_iter()
        .filter(|item| item["type"] == "custom_tool_call")
        .collect()
}

#[tokio::test]
async fn a_freeform_tool_of_a_namespace_reaches_each_kind_and_comes_back_as_the_namespaced_custom_call(
) {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request: &RecordedRequest, _| {
            if carries(request, APPLIED) {
                text_reply(kind, "Edited.")
            } else {
                edit_call(kind)
            }
        })
    })
    .await;
    let (upstreams, gw) = before_agents(upstreams).await;
    let flat_edit = tower_chat::namespaced_tool_name(NAMESPACE, EDIT);
    for kind in KINDS {
        for stream in [false, true] {
            let at = format!("{kind}, stream: {stream}");
            let model = upstreams.get(kind).model();
            let mut body = request(&model, stream, first_turn());
            body["tools"] = tools_with_members();
            let (answer, sent) = through(&upstreams, &gw, kind, &body).await;
            let dropped = answer
                .headers
                .get("x-tower-chat-dropped")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            if kind == "openai-responses" {
                assert_eq!(sent["tools"], tools_with_members(), "{at}");
                assert!(!dropped.contains("web_search"), "{at}: {dropped}");
            } else {
                let offered: Vec<Value> = sent["tools"].as_array().unwrap().to_vec();
                let pick = |tool: &Value, key: &str| {
                    if kind == "anthropic" {
                        tool[key].clone()
                    } else {
                        tool["function"][key].clone()
                    }
                };
                let names = Value::Array(offered.iter().map(|t| pick(t, "name")).collect());
                assert_eq!(names, json!(["exec_command", FLAT, flat_edit]), "{at}");
                let schema_key = if kind == "anthropic" {
                    "input_schema"
                } else {
                    "parameters"
                };
                assert_eq!(
                    pick(&offered[2], schema_key)["required"],
                    json!(["input"]),
                    "{at}"
                );
                let text = pick(&offered[2], "description");
                assert!(
                    text.as_str().unwrap().contains("lark grammar"),
                    "{at}: {text}"
                );
                // The hosted search of the group only widens what the model may look up: left out, and named.
                assert!(dropped.contains("tool:web_search"), "{at}: {dropped}");
            }
            let got = freeform_calls(&answer, stream);
            assert_eq!(got.len(), 1, "{at}: {}", answer.body);
            assert_eq!(got[0]["namespace"], NAMESPACE, "{at}: {}", got[0]);
            assert_eq!(got[0]["name"], EDIT, "{at}: {}", got[0]);
            assert_eq!(got[0]["input"], PATCH, "{at}: {}", got[0]);
            assert_eq!(got[0]["call_id"], "call_edit", "{at}");

            let mut input = first_turn();
            let items = input.as_array_mut().unwrap();
            items.push(got[0].clone());
            items.push(json!({"type": "custom_tool_call_output", "call_id": "call_edit", "output": APPLIED}));
            let mut body = request(&model, stream, input);
            body["tools"] = tools_with_members();
            let (answer, sent) = through(&upstreams, &gw, kind, &body).await;
            assert!(answer.body.contains("Edited."), "{at}: {}", answer.body);
            match kind {
                "openai-responses" => {
                    let items = sent["input"].as_array().unwrap();
                    let call = items
                        .iter()
                        .find(|item| item["type"] == "custom_tool_call")
                        .unwrap();
                    assert_eq!(call["namespace"], NAMESPACE, "{at}: {call}");
                    assert_eq!(call["name"], EDIT, "{at}: {call}");
                    assert_eq!(call["input"], PATCH, "{at}: {call}");
                    assert!(
                        items.iter().any(|i| i["type"] == "custom_tool_call_output"),
                        "{at}: {sent}"
                    );
                }
                "anthropic" => {
                    let call = &sent["messages"][1]["content"][0];
                    assert_eq!(call["name"], flat_edit.as_str(), "{at}: {sent}");
                    assert_eq!(call["input"], json!({"input": PATCH}), "{at}");
                }
                _ => {
                    let call = &sent["messages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|m| m["role"] == "assistant")
                        .unwrap()["tool_calls"][0];
                    assert_eq!(call["function"]["name"], flat_edit.as_str(), "{at}: {sent}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_tool_choice_naming_a_namespaced_tool_names_it_as_each_kind_was_offered_it() {
    const CHOOSING: [&str; 4] = ["openai-responses", "anthropic", "openai", "gemini"];
    let upstreams =
        KindUpstreams::start(|kind| Box::new(move |_: &RecordedRequest, _| text_reply(kind, "ok")))
            .await;
    let (upstreams, gw) = before_agents(upstreams).await;
    let flat_edit = tower_chat::namespaced_tool_name(NAMESPACE, EDIT);
    for (kind_of_tool, tool, flat) in [
        ("function", TOOL, FLAT),
        ("custom", EDIT, flat_edit.as_str()),
    ] {
        for kind in CHOOSING {
            for stream in [false, true] {
                let at = format!("{kind_of_tool} {tool} at {kind}, stream: {stream}");
                let mut body = request(&upstreams.get(kind).model(), stream, first_turn());
                body["tools"] = tools_with_members();
                let choice = json!({"type": kind_of_tool, "namespace": NAMESPACE, "name": tool});
                body["tool_choice"] = choice.clone();
                let (answer, sent) = through(&upstreams, &gw, kind, &body).await;
                assert!(answer.body.contains("ok"), "{at}: {}", answer.body);
                match kind {
                    // The group went as sent: so does the choice.
                    "openai-responses" => assert_eq!(sent["tool_choice"], choice, "{at}"),
                    "anthropic" => {
                        assert_eq!(sent["tool_choice"]["type"], "tool", "{at}: {sent}");
                        assert_eq!(sent["tool_choice"]["name"], flat, "{at}: {sent}");
                    }
                    "openai" => assert_eq!(
                        sent["tool_choice"],
                        json!({"type": "function", "function": {"name": flat}}),
                        "{at}"
                    ),
                    _ => {
                        assert_eq!(
                            sent["toolConfig"]["functionCallingConfig"],
                            json!({"mode": "ANY", "allowedFunctionNames": [flat]}),
                            "{at}"
                        );
                        let declared = &sent["tools"][0]["functionDeclarations"];
                        assert!(
                            declared
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|d| d["name"] == flat),
                            "{at}: {sent}"
                        );
                    }
                }
            }
        }
    }
}
