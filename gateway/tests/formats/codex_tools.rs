//! Codex CLI's tools through the gateway to an upstream of every kind: its freeform `apply_patch` tool (a
//! `custom` tool with a Lark grammar) beside a function tool and the hosted `web_search`. A Responses upstream
//! gets the tools as sent; every other kind gets `apply_patch` as a function tool with one string parameter and
//! the grammar in its description, and `web_search` is left out and named. The upstream's call comes back as a
//! `custom_tool_call` item, whole and streamed, and the client's `custom_tool_call_output` reaches the upstream
//! as that kind's tool result. Hosted tools no upstream of the kind can run are refused by name.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{carries, text_reply, KindUpstreams, KINDS};
use common::{Answer, Harness};

const DROPPED: &str = "x-tower-chat-dropped";

/// A grammar in the shape of Codex's `apply_patch` one (Lark).
const GRAMMAR: &str = r#"start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change+
filename: /(.+)/
add_line: "+" /(.*)/ LF
change: change_context | change_line
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
%import common.LF
"#;

/// The patch every upstream's model writes: quotes, backslashes and newlines, so a wrong escape shows.
const PATCH: &str =
    "*** Begin Patch\n*** Add File: hello.txt\n+Hello, \"world\" \\o/\n*** End Patch\n";

/// What the client answers the patch call with.
const APPLIED: &str = "Success. Updated the following files:\nA hello.txt\n";

/// The tools Codex sends: its shell as a function tool, `apply_patch` as a freeform tool with its grammar,
/// and the hosted web search.
fn codex_tools() -> Value {
    json!([
        {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
         "strict": false, "parameters": {"type": "object", "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "The command to execute"},
            "workdir": {"type": "string", "description": "The working directory"},
            "timeout_ms": {"type": "number", "description": "The timeout in milliseconds"}},
          "required": ["command"], "additionalProperties": false}},
        {"type": "custom", "name": "apply_patch",
         "description": "Use the `apply_patch` tool to edit files. This is a FREEFORM tool: do not wrap the patch in JSON.",
         "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}},
        {"type": "web_search", "external_web_access": false}
    ])
}

/// A Codex-shaped request (`codex exec` with `wire_api = "responses"`): instructions, the tools, reasoning with
/// encrypted content, no storage, a prompt cache key and client metadata.
fn codex_request(model: &str, stream: bool, input: Value) -> Value {
    json!({
        "model": model,
        "instructions": "You are a coding agent running in the Codex CLI.",
        "input": input,
        "tools": codex_tools(),
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a7c5-codex-session",
        "text": {"verbosity": "low"},
        "client_metadata": {"originator": "codex_exec"},
    })
}

fn first_turn() -> Value {
    json!([{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Create hello.txt with a greeting."}]}])
}

/// The next round: the call as the gateway answered it, and the client's output for it.
fn second_turn(call_id: &str) -> Value {
    let mut input = first_turn();
    let items = input.as_array_mut().unwrap();
    items.push(
        json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": call_id,
                      "name": "apply_patch", "input": PATCH}),
    );
    items.push(json!({"type": "custom_tool_call_output", "call_id": call_id, "output": APPLIED}));
    input
}

/// The model's call of `apply_patch` in `kind`'s wire format.
fn patch_call(kind: &str) -> Reply {
    let arguments = json!({"input": PATCH}).to_string();
    match kind {
        "openai" | "azure" => Reply::openai_tool_calls(&[("call_p", "apply_patch", &arguments)]),
        "openai-responses" => {
            let item = json!({"type": "custom_tool_call", "id": "ctc_up", "call_id": "call_p",
                              "name": "apply_patch", "input": PATCH});
            let (head, tail) = PATCH.split_at(20);
            Reply::responses_stream(&[
                json!({"type": "response.created", "response": {"id": "resp_up", "object": "response",
                    "model": "gpt-5-codex", "status": "in_progress", "output": []}}),
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "custom_tool_call", "id": "ctc_up", "call_id": "call_p",
                             "name": "apply_patch", "input": ""}}),
                json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_up",
                    "output_index": 0, "delta": head}),
                json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_up",
                    "output_index": 0, "delta": tail}),
                json!({"type": "response.custom_tool_call_input.done", "item_id": "ctc_up",
                    "output_index": 0, "input": PATCH}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                json!({"type": "response.completed", "response": {"id": "resp_up", "object": "response",
                    "model": "gpt-5-codex", "status": "completed", "output": [item],
                    "usage": {"input_tokens": 30, "output_tokens": 20, "total_tokens": 50}}}),
            ])
        }
        "anthropic" => {
            let (head, tail) = arguments.split_at(25);
            Reply::anthropic_stream(&[
                json!({"type": "message_start", "message": {"id": "msg_p", "type": "message",
                    "role": "assistant", "model": "claude-scripted", "content": [],
                    "usage": {"input_tokens": 20, "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use",
                    "id": "toolu_p", "name": "apply_patch", "input": {}}}),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": head}}),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": tail}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                    "usage": {"output_tokens": 30}}),
                json!({"type": "message_stop"}),
            ])
        }
        "gemini" | "vertex" => {
            Reply::gemini_function_calls(&[("apply_patch", json!({"input": PATCH}))], None)
        }
        "bedrock" => {
            Reply::bedrock_tool_use(&[("tooluse_p", "apply_patch", json!({"input": PATCH}))])
        }
        other => panic!("no such kind {other}"),
    }
}

/// Every kind's upstream: the patch call when `apply_patch` is offered, "Patched." once the request carries
/// the patch's output, "ok" to any other; a gateway with no server-side tools, as an agent's would be.
async fn every_kind() -> (KindUpstreams, Harness) {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request: &RecordedRequest, _| {
            if carries(request, "A hello.txt") {
                text_reply(kind, "Patched.")
            } else if carries(request, "apply_patch") {
                patch_call(kind)
            } else {
                text_reply(kind, "ok")
            }
        })
    })
    .await;
    before_agents(upstreams).await
}

/// A gateway routing a model to each of `upstreams`, with no server-side tools, as an agent's would be.
pub(crate) async fn before_agents(upstreams: KindUpstreams) -> (KindUpstreams, Harness) {
    let toml = upstreams.toml();
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| {
            config.file = file;
            config.add_tool = false;
            config.files = None;
        },
    )
    .await;
    (upstreams, gw)
}

/// Posts `body` to `/v1/responses` and returns the answer and the body `kind`'s upstream received.
pub(crate) async fn through(
    upstreams: &KindUpstreams,
    gw: &Harness,
    kind: &str,
    body: &Value,
) -> (Answer, Value) {
    let upstream = upstreams.get(kind);
    let before = upstream.server.requests().len();
    let answer = gw.post_json("/v1/responses", body, &[]).await;
    assert_eq!(answer.status, 200, "{kind}: {}", answer.body);
    let requests = upstream.server.requests();
    assert_eq!(requests.len(), before + 1, "{kind} was called once");
    (answer, requests[before].body.clone())
}

/// The tools `kind`'s upstream was offered, as `(name, tool)` in its wire format.
fn offered(kind: &str, sent: &Value) -> Vec<(String, Value)> {
    let tools: Vec<Value> = match kind {
        "openai" | "azure" => sent["tools"].as_array().cloned().unwrap_or_default(),
        "gemini" | "vertex" => sent["tools"][0]["functionDeclarations"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        "bedrock" => sent["toolConfig"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        _ => sent["tools"].as_array().cloned().unwrap_or_default(),
    };
    tools
        .into_iter()
        .map(|tool| {
            let name = tool["name"]
                .as_str()
                .or(tool["function"]["name"].as_str())
                .or(tool["toolSpec"]["name"].as_str())
                .or(tool["type"].as_str())
                .unwrap_or_default()
                .to_owned();
            (name, tool)
        })
        .collect()
}

/// The description and the parameter schema of a function tool in `kind`'s wire format.
fn function_parts(kind: &str, tool: &Value) -> (String, Value) {
    let (description, schema) = match kind {
        "openai" | "azure" => (
            &tool["function"]["description"],
            &tool["function"]["parameters"],
        ),
        "anthropic" => (&tool["description"], &tool["input_schema"]),
        "gemini" | "vertex" => (
            &tool["description"],
            if tool["parametersJsonSchema"].is_null() {
                &tool["parameters"]
            } else {
                &tool["parametersJsonSchema"]
            },
        ),
        "bedrock" => (
            &tool["toolSpec"]["description"],
            &tool["toolSpec"]["inputSchema"]["json"],
        ),
        other => panic!("{other} has no function tool"),
    };
    (
        description.as_str().unwrap_or_default().to_owned(),
        schema.clone(),
    )
}

/// The `custom_tool_call` items of a whole answer.
fn custom_calls(answer: &Answer) -> Vec<Value> {
    let body = answer.json();
    body["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no output: {body}"))
        .iter()
        .filter(|item| item["type"] == "custom_tool_call")
        .cloned()
        .collect()
}

/// The streamed custom call: its `output_item.added` item, its input deltas joined, `.done`'s input, and the
/// `output_item.done` item.
fn streamed_custom_call(answer: &Answer) -> (Value, String, String, Value) {
    let events = answer.named_events();
    let find = |name: &str| {
        events
            .iter()
            .find(|(n, e)| {
                n == name && (e["item"].is_null() || e["item"]["type"] == "custom_tool_call")
            })
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("no {name}: {}", answer.body))
    };
    let deltas: String = events
        .iter()
        .filter(|(name, _)| name == "response.custom_tool_call_input.delta")
        .map(|(_, e)| e["delta"].as_str().unwrap().to_owned())
        .collect();
    let done = find("response.custom_tool_call_input.done");
    (
        find("response.output_item.added")["item"].clone(),
        deltas,
        done["input"].as_str().unwrap_or_default().to_owned(),
        find("response.output_item.done")["item"].clone(),
    )
}

#[tokio::test]
async fn a_codex_request_reaches_every_kind_and_its_patch_call_comes_back_as_a_custom_tool_call() {
    let (upstreams, gw) = every_kind().await;
    for kind in KINDS {
        for stream in [false, true] {
            let body = codex_request(&upstreams.get(kind).model(), stream, first_turn());
            let (answer, sent) = through(&upstreams, &gw, kind, &body).await;
            let at = format!("{kind} (stream: {stream}): {sent}");
            let tools = offered(kind, &sent);
            let names: Vec<&str> = tools.iter().map(|(name, _)| name.as_str()).collect();
            let patch = &tools
                .iter()
                .find(|(name, _)| name == "apply_patch")
                .unwrap()
                .1;
            let dropped = answer
                .headers
                .get(DROPPED)
                .map(|v| v.to_str().unwrap().to_owned());
            if kind == "openai-responses" {
                let sent_tools = sent["tools"].as_array().unwrap();
                let expected = codex_tools();
                assert_eq!(sent_tools[1], expected[1], "the custom tool as sent: {at}");
                assert_eq!(sent_tools[2], expected[2], "the hosted tool as sent: {at}");
                assert_eq!(sent["prompt_cache_key"], "0199a7c5-codex-session", "{at}");
                assert_eq!(sent["text"], json!({"verbosity": "low"}), "{at}");
                assert_eq!(dropped, None, "{at}");
            } else {
                assert_eq!(
                    names,
                    ["shell", "apply_patch"],
                    "web_search is left out: {at}"
                );
                let (description, schema) = function_parts(kind, patch);
                assert!(
                    description.starts_with("Use the `apply_patch` tool")
                        && description.contains("lark grammar")
                        && description
                            .contains("add_hunk: \"*** Add File: \" filename LF add_line+"),
                    "the grammar is in the description: {at}"
                );
                assert_eq!(schema["properties"]["input"]["type"], "string", "{at}");
                assert_eq!(schema["required"], json!(["input"]), "{at}");
                let dropped = dropped.unwrap_or_default();
                for name in ["tool:web_search", "text", "prompt_cache_key"] {
                    assert!(dropped.split(',').any(|n| n == name), "{name}: {dropped}");
                }
            }
            let (call_id, input) = if stream {
                let (added, deltas, done, item) = streamed_custom_call(&answer);
                assert_eq!(added["type"], "custom_tool_call", "{kind}: {}", answer.body);
                assert_eq!(added["name"], "apply_patch", "{kind}");
                assert_eq!(deltas, PATCH, "{kind}: the deltas join to the input");
                assert_eq!(done, PATCH, "{kind}");
                assert_eq!(item["input"], PATCH, "{kind}");
                assert_eq!(item["call_id"], added["call_id"], "{kind}");
                let names: Vec<String> =
                    answer.named_events().into_iter().map(|(n, _)| n).collect();
                assert!(
                    !names
                        .iter()
                        .any(|n| n.starts_with("response.function_call")),
                    "{kind}: {names:?}"
                );
                (
                    item["call_id"].as_str().unwrap().to_owned(),
                    item["input"].clone(),
                )
            } else {
                let calls = custom_calls(&answer);
                assert_eq!(calls.len(), 1, "{kind}: {}", answer.body);
                assert_eq!(calls[0]["name"], "apply_patch", "{kind}");
                assert!(
                    !answer.body.contains("\"function_call\""),
                    "{kind}: no function call item: {}",
                    answer.body
                );
                (
                    calls[0]["call_id"].as_str().unwrap().to_owned(),
                    calls[0]["input"].clone(),
                )
            };
            assert_eq!(input, PATCH, "{kind}");
            assert!(!call_id.is_empty(), "{kind}");
        }
    }
}

/// The call and its result as `kind`'s upstream received them: `(call name, call input, result call id,
/// result text)`.
fn call_and_result(kind: &str, sent: &Value) -> (String, Value, String, String) {
    let find = |list: &Value, pick: &dyn Fn(&Value) -> bool| -> Value {
        list.as_array()
            .unwrap_or_else(|| panic!("{kind}: {sent}"))
            .iter()
            .find(|v| pick(v))
            .cloned()
            .unwrap_or_else(|| panic!("{kind}: not found in {sent}"))
    };
    let blocks = |key: &str| -> Value {
        let mut all = Vec::new();
        for message in sent[key].as_array().unwrap() {
            let parts = if kind == "gemini" || kind == "vertex" {
                &message["parts"]
            } else {
                &message["content"]
            };
            all.extend(parts.as_array().cloned().unwrap_or_default());
        }
        Value::Array(all)
    };
    match kind {
        "openai-responses" => {
            let call = find(&sent["input"], &|i| i["type"] == "custom_tool_call");
            let output = find(&sent["input"], &|i| i["type"] == "custom_tool_call_output");
            assert!(
                !sent["input"].to_string().contains("\"function_call"),
                "no function items: {sent}"
            );
            (
                call["name"].as_str().unwrap().into(),
                json!({"input": call["input"]}),
                output["call_id"].as_str().unwrap().into(),
                output["output"].as_str().unwrap().into(),
            )
        }
        "openai" | "azure" => {
            let assistant = find(&sent["messages"], &|m| m["role"] == "assistant");
            let call = &assistant["tool_calls"][0];
            let result = find(&sent["messages"], &|m| m["role"] == "tool");
            (
                call["function"]["name"].as_str().unwrap().into(),
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap(),
                result["tool_call_id"].as_str().unwrap().into(),
                result["content"].as_str().unwrap_or_default().into(),
            )
        }
        "anthropic" => {
            let all = blocks("messages");
            let call = find(&all, &|b| b["type"] == "tool_use");
            let result = find(&all, &|b| b["type"] == "tool_result");
            let text = match &result["content"] {
                Value::String(text) => text.clone(),
                parts => parts[0]["text"].as_str().unwrap_or_default().into(),
            };
            (
                call["name"].as_str().unwrap().into(),
                call["input"].clone(),
                result["tool_use_id"].as_str().unwrap().into(),
                text,
            )
        }
        "gemini" | "vertex" => {
            let all = blocks("contents");
            let call = find(&all, &|p| !p["functionCall"].is_null())["functionCall"].clone();
            let result =
                find(&all, &|p| !p["functionResponse"].is_null())["functionResponse"].clone();
            (
                call["name"].as_str().unwrap().into(),
                call["args"].clone(),
                result["name"].as_str().unwrap().into(),
                result["response"].to_string(),
            )
        }
        "bedrock" => {
            let all = blocks("messages");
            let call = find(&all, &|b| !b["toolUse"].is_null())["toolUse"].clone();
            let result = find(&all, &|b| !b["toolResult"].is_null())["toolResult"].clone();
            (
                call["name"].as_str().unwrap().into(),
                call["input"].clone(),
                result["toolUseId"].as_str().unwrap().into(),
                result["content"].to_string(),
            )
        }
        other => panic!("no such kind {other}"),
    }
}

#[tokio::test]
async fn the_patch_output_reaches_every_kind_as_its_tool_result() {
    let (upstreams, gw) = every_kind().await;
    for kind in KINDS {
        for stream in [false, true] {
            let body = codex_request(&upstreams.get(kind).model(), stream, second_turn("call_p"));
            let (answer, sent) = through(&upstreams, &gw, kind, &body).await;
            assert_eq!(
                answer.responses_text(stream),
                "Patched.",
                "{kind}: {}",
                answer.body
            );
            let (name, input, result_id, result) = call_and_result(kind, &sent);
            let at = format!("{kind}: {sent}");
            assert_eq!(name, "apply_patch", "{at}");
            assert_eq!(input, json!({"input": PATCH}), "{at}");
            // Gemini pairs a result with its call by the tool's name, the others by the call's id.
            let expected_id = if kind == "gemini" || kind == "vertex" {
                "apply_patch"
            } else {
                "call_p"
            };
            assert_eq!(result_id, expected_id, "{at}");
            assert!(result.contains("A hello.txt"), "{at}");
        }
    }
}

#[tokio::test]
async fn a_hosted_tool_no_upstream_of_the_kind_runs_is_refused_by_name() {
    let (upstreams, gw) = every_kind().await;
    let mut tools = codex_tools();
    tools
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "code_interpreter", "container": {"type": "auto"}}));
    for kind in KINDS {
        let mut body = codex_request(&upstreams.get(kind).model(), false, first_turn());
        body["tools"] = tools.clone();
        let upstream = upstreams.get(kind);
        let before = upstream.server.requests().len();
        let answer = gw.post_json("/v1/responses", &body, &[]).await;
        if kind == "openai-responses" {
            assert_eq!(answer.status, 200, "{}", answer.body);
            let sent = &upstream.server.requests()[before].body;
            assert_eq!(sent["tools"], tools, "carried as sent: {sent}");
            continue;
        }
        assert_eq!(answer.status, 400, "{kind}: {}", answer.body);
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("`code_interpreter`") && message.contains("openai-responses"),
            "{kind}: {message}"
        );
        assert_eq!(
            upstream.server.requests().len(),
            before,
            "{kind}: nothing was sent"
        );
    }
}

#[tokio::test]
async fn anthropic_server_tools_reach_an_anthropic_upstream_and_are_dropped_or_refused_elsewhere() {
    let (upstreams, gw) = every_kind().await;
    let search = json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 3});
    let code = json!({"type": "code_execution_20250825", "name": "code_execution"});
    let body = |kind: &str, tools: Value| {
        json!({"model": upstreams.get(kind).model(), "max_tokens": 1024, "tools": tools,
               "messages": [{"role": "user", "content": "What changed in Rust 1.90?"}]})
    };
    for kind in KINDS {
        let upstream = upstreams.get(kind);
        let before = upstream.server.requests().len();
        let headers = [("anthropic-version", "2023-06-01")];
        let answer = gw
            .post_json("/v1/messages", &body(kind, json!([search])), &headers)
            .await;
        assert_eq!(answer.status, 200, "{kind}: {}", answer.body);
        let sent = &upstream.server.requests()[before].body;
        let dropped = answer
            .headers
            .get(DROPPED)
            .map(|v| v.to_str().unwrap().to_owned());
        if kind == "anthropic" {
            assert_eq!(sent["tools"], json!([search]), "carried as sent: {sent}");
            assert_eq!(dropped, None);
        } else {
            assert!(!sent.to_string().contains("web_search"), "{kind}: {sent}");
            assert_eq!(
                dropped.as_deref(),
                Some("tool:web_search_20250305"),
                "{kind}"
            );
        }
        let answer = gw
            .post_json("/v1/messages", &body(kind, json!([code])), &headers)
            .await;
        if kind == "anthropic" {
            assert_eq!(answer.status, 200, "{}", answer.body);
        } else {
            assert_eq!(answer.status, 400, "{kind}: {}", answer.body);
            assert!(
                answer.body.contains("`code_execution_20250825`")
                    && answer.body.contains("`anthropic`"),
                "{kind}: {}",
                answer.body
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_parses_a_streamed_custom_tool_call() {
    let test = "the_official_openai_python_client_parses_a_streamed_custom_tool_call";
    if !tower_chat_testkit::python_package(test, "openai") {
        return;
    }
    let (upstreams, gw) = every_kind().await;
    for kind in ["anthropic", "openai-responses"] {
        let args = [
            gw.base_url(),
            "sk-unused".to_owned(),
            upstreams.get(kind).model(),
            PATCH.to_owned(),
            GRAMMAR.to_owned(),
        ];
        common::run_python(
            "codex_tools_client.py",
            &args,
            &[
                "ok streamed custom tool call",
                "ok custom tool call output round",
            ],
        )
        .await;
    }
}
