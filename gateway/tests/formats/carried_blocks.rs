//! Blocks the gateway does not model inside an assistant turn (a server tool's `server_tool_use` and its
//! `web_search_tool_result`, as Claude Code sends its history back) and inside a `tool_result` (`search_result`)
//! reach an Anthropic upstream verbatim and in their place; an upstream of another format answers without them,
//! and `x-tower-chat-dropped` names them.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;

use common::{post, Harness};

const DROPPED: &str = "x-tower-chat-dropped";

fn server_tool_use() -> Value {
    json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
           "input": {"query": "tower middleware"}})
}

fn web_search_tool_result() -> Value {
    json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
        {"type": "web_search_result", "url": "https://docs.rs/tower", "title": "tower",
         "encrypted_content": "EqkBCioIAhgC", "page_age": null}]})
}

fn search_result() -> Value {
    json!({"type": "search_result", "source": "https://docs.rs/tower", "title": "tower",
           "content": [{"type": "text", "text": "A library of modular components."}],
           "citations": {"enabled": true}})
}

/// A history whose assistant turn ran a server tool between two texts and then called a client tool, whose
/// result holds a search result after its text.
fn history_request() -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 64,
        "tools": [{"name": "lookup", "description": "Look a page up.",
                   "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "What is tower?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me search."},
                server_tool_use(),
                web_search_tool_result(),
                {"type": "text", "text": "Found a page; reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup",
                 "input": {"url": "https://docs.rs/tower"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "text", "text": "page fetched"},
                    search_result()
                ]}
            ]}
        ]
    })
}

fn anthropic_answer() -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_up","model":"claude-x","usage":{"input_tokens":3,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Tower is a library."}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}),
        json!({"type":"message_stop"}),
    ])
}

#[tokio::test]
async fn carried_blocks_of_a_history_reach_an_anthropic_upstream_verbatim_and_in_place() {
    let gw = Harness::start(
        |_, _| anthropic_answer(),
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let answer = post(
        &gw.url("/v1/messages"),
        history_request().to_string(),
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.headers.get(DROPPED).is_none(),
        "{:?}",
        answer.headers
    );
    let sent = &gw.provider.requests()[0].body;
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{sent}");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "text", "text": "Let me search."},
            server_tool_use(),
            web_search_tool_result(),
            {"type": "text", "text": "Found a page; reading it."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup",
             "input": {"url": "https://docs.rs/tower"}}
        ])
    );
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result", "{result}");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "page fetched"}, search_result()])
    );
}

#[tokio::test]
async fn the_same_history_to_an_openai_upstream_leaves_the_blocks_out_and_names_them() {
    let gw = Harness::start(|_, _| Reply::openai_text("Tower is a library."), |_| {}).await;
    let answer = post(
        &gw.url("/v1/messages"),
        history_request().to_string(),
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mut names: Vec<String> = answer
        .headers
        .get(DROPPED)
        .map(|v| v.to_str().unwrap().split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    names.sort();
    assert_eq!(
        names,
        [
            "content:search_result",
            "content:server_tool_use",
            "content:web_search_tool_result",
        ]
    );
    let sent = gw.provider.requests()[0].body.to_string();
    for kind in ["server_tool_use", "web_search_tool_result", "search_result"] {
        assert!(!sent.contains(kind), "{kind}: {sent}");
    }
    // What the gateway models still goes: both texts, the call and the result's text.
    assert!(
        sent.contains("Let me search.Found a page; reading it."),
        "{sent}"
    );
    assert!(sent.contains("toolu_1"), "{sent}");
    assert!(sent.contains("page fetched"), "{sent}");
}
