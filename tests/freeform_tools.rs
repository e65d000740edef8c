//! Freeform and hosted tools through the leaves, over real loopback HTTP: a Responses leaf sends a `custom`
//! tool, a hosted tool and freeform calls and results as the API spells them and reads a `custom_tool_call`
//! back (streamed in pieces, and whole); a leaf of another format sends the freeform tool as a one-string
//! function with its grammar, marks the model's call of it freeform, drops a hosted tool that only widens a
//! search (and says so) and refuses one whose output the client asked for, before sending anything. The same
//! rules hold for the freeform and hosted tools inside a Responses tool namespace.

use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::anthropic::AnthropicChat;
use tower_chat::responses::ResponsesChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    ApiFormat, AssistantMessage, CallKind, ChatError, ChatRequest, ChatResponse, ChatStreamExt,
    DroppedFields, ErrorKind, HostedTool, Message, ToolCall, ToolMessage, ToolSpec,
};

const PATCH: &str = "*** Begin Patch\n*** Add File: a.txt\n+say \"hi\" \\o/\n*** End Patch\n";

fn grammar() -> Value {
    json!({"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\" /(.|\\n)+/"})
}

/// A conversation with an earlier freeform call and its result, offering the freeform tool, a function tool
/// and `hosted`.
fn request(hosted: Value) -> ChatRequest {
    let earlier = ToolCall::custom("call_0", "apply_patch", PATCH);
    ChatRequest::new(vec![
        Message::user("patch a.txt"),
        Message::Assistant(AssistantMessage {
            tool_calls: vec![earlier],
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolMessage::success("call_0", "apply_patch", "applied")),
        Message::user("once more"),
    ])
    .tool(ToolSpec::new(
        "shell",
        "Runs a command.",
        json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    ))
    .tool(ToolSpec::custom(
        "apply_patch",
        "Edit files.",
        Some(grammar()),
    ))
    .tool(ToolSpec::hosted(HostedTool::new(
        ApiFormat::Responses,
        hosted,
    )))
}

fn the_call(response: &ChatResponse) -> ToolCall {
    let calls: Vec<&ToolCall> = response
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(&a.tool_calls),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{response:?}");
    calls[0].clone()
}

/// A Responses answer calling `apply_patch`, its input streamed in two pieces.
fn responses_patch_call() -> Reply {
    let item = json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1",
                      "name": "apply_patch", "input": PATCH});
    let (head, tail) = PATCH.split_at(17);
    Reply::responses_stream(&[
        json!({"type": "response.created", "response": {"id": "resp_1", "object": "response",
            "model": "gpt-5", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1",
                     "name": "apply_patch", "input": ""}}),
        json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_1", "output_index": 0,
            "delta": head}),
        json!({"type": "response.custom_tool_call_input.delta", "item_id": "ctc_1", "output_index": 0,
            "delta": tail}),
        json!({"type": "response.custom_tool_call_input.done", "item_id": "ctc_1", "output_index": 0,
            "input": PATCH}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "object": "response",
            "model": "gpt-5", "status": "completed", "output": [item],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}}),
    ])
}

#[tokio::test]
async fn a_responses_leaf_speaks_freeform_and_hosted_tools_natively() {
    let provider = ScriptedProvider::start(|_, _| responses_patch_call()).await;
    let leaf = ResponsesChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-test")
        .model("gpt-5")
        .build()
        .unwrap();
    let search = json!({"type": "web_search", "external_web_access": false});
    for stream in [true, false] {
        let response = leaf
            .clone()
            .oneshot(request(search.clone()).stream(stream))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(
            the_call(&response),
            ToolCall::custom("call_1", "apply_patch", PATCH),
            "stream: {stream}"
        );
        let sent = provider.requests().last().unwrap().body.clone();
        assert_eq!(
            sent["tools"][1],
            json!({"type": "custom", "name": "apply_patch", "description": "Edit files.",
                   "format": grammar()}),
            "{sent}"
        );
        assert_eq!(sent["tools"][2], search, "{sent}");
        let input = sent["input"].as_array().unwrap();
        assert_eq!(
            input[1],
            json!({"type": "custom_tool_call", "call_id": "call_0", "name": "apply_patch", "input": PATCH})
        );
        assert_eq!(
            input[2],
            json!({"type": "custom_tool_call_output", "call_id": "call_0", "output": "applied"})
        );
    }
}

/// An Anthropic answer calling `apply_patch` as the function it was given.
fn anthropic_patch_call() -> Reply {
    anthropic_freeform_call("apply_patch")
}

fn anthropic(provider: &ScriptedProvider) -> AnthropicChat {
    AnthropicChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-ant-test")
        .model("claude-sonnet-4-5")
        .build()
        .unwrap()
}

#[tokio::test]
async fn another_format_gets_a_one_string_function_and_its_call_comes_back_freeform() {
    let provider = ScriptedProvider::start(|_, _| anthropic_patch_call()).await;
    let dropped = DroppedFields::new();
    let request = request(json!({"type": "web_search"})).with_extension(dropped.clone());
    let response = anthropic(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let call = the_call(&response);
    assert_eq!(call.kind, CallKind::Custom);
    assert_eq!(call.custom_input(), PATCH);
    assert_eq!(dropped.names(), ["tool:web_search"]);
    let sent = &provider.requests()[0].body;
    let tools = sent["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["shell", "apply_patch"], "{sent}");
    let description = tools[1]["description"].as_str().unwrap();
    assert!(
        description.starts_with("Edit files.\n\n")
            && description.contains("start: \"*** Begin Patch\""),
        "{description}"
    );
    assert_eq!(tools[1]["input_schema"]["required"], json!(["input"]));
    // The earlier freeform call goes as the function call it is to this provider.
    assert_eq!(
        sent["messages"][1]["content"][0]["input"],
        json!({"input": PATCH})
    );
}

#[tokio::test]
async fn a_hosted_tool_whose_output_the_client_wants_is_refused_before_sending() {
    let provider = ScriptedProvider::start(|_, _| anthropic_patch_call()).await;
    let error: ChatError = anthropic(&provider)
        .oneshot(request(
            json!({"type": "code_interpreter", "container": {"type": "auto"}}),
        ))
        .await
        .err()
        .unwrap();
    assert_eq!(error.kind(), &ErrorKind::Unsupported);
    assert!(error.is_refused_before_sending());
    assert!(
        error.message().contains("`code_interpreter`")
            && error.message().contains("openai-responses"),
        "{error}"
    );
    assert!(provider.requests().is_empty());
}

/// A tool namespace holding a freeform tool and two hosted ones, as Codex groups an MCP server's tools.
fn namespace(hosted: Value) -> ToolSpec {
    ToolSpec::hosted(HostedTool::new(
        ApiFormat::Responses,
        json!({"type": "namespace", "name": "mcp__edit", "description": "Editing tools.", "tools": [
            {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": grammar()},
            hosted]}),
    ))
}

/// An Anthropic answer calling `name` with the one string [`PATCH`].
fn anthropic_freeform_call(name: &str) -> Reply {
    let arguments = json!({"input": PATCH}).to_string();
    Reply::anthropic_stream(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use",
            "id": "toolu_1", "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": arguments}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ])
}

#[tokio::test]
async fn a_namespaced_freeform_tool_is_a_one_string_function_and_its_hosted_neighbour_goes_by_its_rule(
) {
    let provider =
        ScriptedProvider::start(|_, _| anthropic_freeform_call("mcp__edit__apply_patch")).await;
    let dropped = DroppedFields::new();
    let request = ChatRequest::new(vec![Message::user("patch a.txt")])
        .tool(namespace(json!({"type": "web_search"})))
        .with_extension(dropped.clone());
    let response = anthropic(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let call = the_call(&response);
    assert_eq!(call.name, "mcp__edit__apply_patch");
    assert_eq!(call.kind, CallKind::Custom);
    assert_eq!(call.custom_input(), PATCH);
    assert_eq!(dropped.names(), ["tool:web_search"]);
    let sent = &provider.requests()[0].body;
    let tools = sent["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{sent}");
    assert_eq!(tools[0]["name"], "mcp__edit__apply_patch");
    assert_eq!(tools[0]["input_schema"]["required"], json!(["input"]));
    let description = tools[0]["description"].as_str().unwrap();
    assert!(
        description.starts_with("Edit files.\n\n")
            && description.contains("start: \"*** Begin Patch\""),
        "{description}"
    );

    // A hosted tool whose output the client wants is refused inside a group as at the top level.
    let request = ChatRequest::new(vec![Message::user("patch a.txt")]).tool(namespace(
        json!({"type": "code_interpreter", "container": {"type": "auto"}}),
    ));
    let error: ChatError = anthropic(&provider).oneshot(request).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Unsupported);
    assert!(error.is_refused_before_sending());
    assert!(error.message().contains("`code_interpreter`"), "{error}");
    assert_eq!(provider.requests().len(), 1, "nothing more was sent");
}
