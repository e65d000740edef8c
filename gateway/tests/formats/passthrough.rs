//! What the gateway does not model still travels: request fields, content blocks, input items and feature
//! headers reach an upstream of the client's own format verbatim and in the client's order; an upstream of
//! another format answers without them, and the `x-tower-chat-dropped` header names what was left out. Answer
//! blocks the gateway does not model reach a client of their format in place. Carried fields are kept in the
//! call record, and two requests that differ only in one are two cache entries.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{ApiFormat, ConversationId};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_persistence::Store;

use common::{post, Harness};

const DROPPED: &str = "x-tower-chat-dropped";

/// A Claude Code–shaped request: fields, a block and a header the gateway has no model of.
fn claude_code_request() -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 64,
        "service_tier": "auto",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what does the page say?"},
            {"type": "search_result", "source": "https://example.com", "title": "Example",
             "content": [{"type": "text", "text": "An example page."}], "citations": {"enabled": true}}
        ]}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
                                           "trigger": {"value": 30000, "type": "input_tokens"}}]},
        "stream": true,
        "container": "container_1"
    })
}

fn anthropic_text(text: &str) -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_up","model":"claude-x","usage":{"input_tokens":3,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}),
        json!({"type":"message_stop"}),
    ])
}

/// The names of `body`'s top-level fields that are among `names`, in the body's order.
fn order_of<'a>(body: &'a Value, names: &[&str]) -> Vec<&'a str> {
    body.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|key| names.contains(key))
        .collect()
}

fn dropped(answer: &common::Answer) -> Vec<String> {
    answer
        .headers
        .get(DROPPED)
        .map(|v| v.to_str().unwrap().split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_messages_request_reaches_an_anthropic_upstream_with_what_the_gateway_does_not_model() {
    let gw = Harness::start(
        |_, _| anthropic_text("It says hi."),
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let body = claude_code_request();
    let answer = post(
        &gw.url("/v1/messages?beta=true"),
        body.to_string(),
        &[
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "context-management-2025-06-27,interleaved-thinking-2025-05-14",
            ),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.messages_text(true), "It says hi.");
    assert!(
        answer.headers.get(DROPPED).is_none(),
        "{:?}",
        answer.headers
    );

    let sent: &RecordedRequest = &gw.provider.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.query.as_deref(), Some("beta=true"));
    assert_eq!(
        sent.headers["anthropic-beta"],
        "context-management-2025-06-27,interleaved-thinking-2025-05-14"
    );
    let carried = ["service_tier", "context_management", "container"];
    assert_eq!(order_of(&sent.body, &carried), carried);
    for field in carried {
        assert_eq!(sent.body[field], body[field], "{field}");
    }
    // Verbatim down to the order of a nested object's keys.
    let raw = String::from_utf8_lossy(&sent.raw_body);
    assert!(
        raw.contains(r#""trigger":{"value":30000,"type":"input_tokens"}"#),
        "{raw}"
    );
    let content = &sent.body["messages"][0]["content"];
    assert_eq!(content[0]["text"], "what does the page say?");
    assert_eq!(content[1], body["messages"][0]["content"][1]);
}

#[tokio::test]
async fn the_same_request_to_an_openai_upstream_answers_and_names_what_was_left_out() {
    let gw = Harness::start(|_, _| Reply::openai_text("It says hi."), |_| {}).await;
    let answer = post(
        &gw.url("/v1/messages?beta=true"),
        claude_code_request().to_string(),
        &[
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "context-management-2025-06-27"),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.messages_text(true), "It says hi.");
    let mut names = dropped(&answer);
    names.sort();
    assert_eq!(
        names,
        [
            "?beta=true",
            "anthropic-beta",
            "container",
            "content:search_result",
            "context_management",
            "service_tier",
        ]
    );
    let sent = &gw.provider.requests()[0];
    for field in ["service_tier", "context_management", "container"] {
        assert!(sent.body.get(field).is_none(), "{field}: {}", sent.body);
    }
    assert!(sent.headers.get("anthropic-beta").is_none());
    assert_eq!(sent.query, None);
    let user = gw.upstream_messages(0).pop().unwrap();
    assert_eq!(user["role"], "user");
    assert!(
        user.to_string().contains("what does the page say?"),
        "{user}"
    );
    assert!(!user.to_string().contains("search_result"), "{user}");
}

/// A gateway whose model `codex-model` is served by a scripted Responses upstream answering with `handler`.
async fn responses_gateway(
    handler: impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static,
) -> (ScriptedProvider, Harness) {
    let responses = ScriptedProvider::start(handler).await;
    let text = format!(
        r#"
[[upstreams.models]]
name = "codex-model"

[[upstreams.models.targets]]
provider = "openai-responses"
model = "gpt-5-codex"
base_url = "{base}"
no_key = true
"#,
        base = responses.base_url(),
    );
    let file = ConfigFile::parse(&text, "gateway.toml").expect("valid config");
    let gw = Harness::start(
        |_, _| Reply::openai_text("the --upstream is unused"),
        |config| config.file = file,
    )
    .await;
    (responses, gw)
}

#[tokio::test]
async fn a_codex_shaped_responses_request_reaches_a_responses_upstream_verbatim() {
    let (responses, gw) = responses_gateway(|_, _| Reply::responses_text("Listed.")).await;
    let web_search = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                            "action": {"type": "search", "query": "rust editions"}});
    let shell = json!({"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1", "status": "completed",
                       "action": {"type": "exec", "command": ["ls"], "env": {}}});
    let body = json!({
        "model": "codex-model",
        "instructions": "You are a coding agent.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
            web_search,
            shell,
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]}
        ],
        "prompt_cache_key": "0199-thread",
        "stream": false,
        "client_metadata": {"originator": "codex_exec", "turn": 2},
        "service_tier": "flex"
    });
    let answer = gw
        .post_json(
            "/v1/responses",
            &body,
            &[("openai-beta", "responses=experimental")],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.headers.get(DROPPED).is_none(),
        "{:?}",
        answer.headers
    );
    let sent = &responses.requests()[0];
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(sent.headers["openai-beta"], "responses=experimental");
    let carried = ["prompt_cache_key", "client_metadata", "service_tier"];
    assert_eq!(order_of(&sent.body, &carried), carried);
    for field in carried {
        assert_eq!(sent.body[field], body[field], "{field}");
    }
    let input = sent.body["input"].as_array().unwrap();
    let at = |item: &Value| input.iter().position(|i| i == item);
    let (search, call) = (at(&web_search).unwrap(), at(&shell).unwrap());
    assert_eq!(call, search + 1, "{input:?}");
    assert_eq!(input[search - 1]["role"], "user");
    assert_eq!(input[call + 1]["role"], "user");
}

#[tokio::test]
async fn a_chat_request_reaches_an_openai_compatible_upstream_with_its_unknown_fields_in_order() {
    let gw = Harness::start(|_, _| Reply::openai_text("ok"), |_| {}).await;
    let body = json!({
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}],
        "verbosity": "low",
        "seed": 7,
        "logit_bias": {"50256": -100, "1000": 5},
        "safety_identifier": "user-1"
    });
    let answer = gw.chat(&body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.headers.get(DROPPED).is_none(),
        "{:?}",
        answer.headers
    );
    let sent = &gw.provider.requests()[0];
    let carried = ["verbosity", "seed", "logit_bias", "safety_identifier"];
    assert_eq!(order_of(&sent.body, &carried), carried);
    for field in carried {
        assert_eq!(sent.body[field], body[field], "{field}");
    }
    let raw = String::from_utf8_lossy(&sent.raw_body);
    assert!(
        raw.contains(r#""logit_bias":{"50256":-100,"1000":5}"#),
        "{raw}"
    );
}

#[tokio::test]
async fn requests_that_differ_only_in_a_carried_field_do_not_share_a_cache_entry() {
    let file = ConfigFile::parse("[cache]\nttl_seconds = 600\n", "gateway.toml").unwrap();
    let gw = Harness::start(
        |_, index| anthropic_text(&format!("answer {index}")),
        |config| {
            config.file = file;
            config.provider = tower_chat_gateway::Provider::Anthropic;
        },
    )
    .await;
    let ask = |keep: u32| {
        let mut body = claude_code_request();
        body["context_management"]["edits"][0]["keep"] =
            json!({"type": "tool_uses", "value": keep});
        body
    };
    let send = |body: Value| {
        let url = gw.url("/v1/messages");
        async move {
            post(
                &url,
                body.to_string(),
                &[("anthropic-version", "2023-06-01")],
            )
            .await
        }
    };
    let first = send(ask(3)).await;
    let again = send(ask(3)).await;
    let other = send(ask(5)).await;
    let x_cache = |answer: &common::Answer| answer.headers["x-cache"].to_str().unwrap().to_owned();
    assert_eq!(
        [x_cache(&first), x_cache(&again), x_cache(&other)],
        ["miss", "hit", "miss"]
    );
    assert_eq!(other.messages_text(true), "answer 1");
    let sent = gw.provider.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[1].body["context_management"]["edits"][0]["keep"]["value"],
        5
    );
}

#[tokio::test]
async fn a_cache_hit_names_what_the_call_left_out_as_the_miss_did() {
    let file = ConfigFile::parse("[cache]\nttl_seconds = 600\n", "gateway.toml").unwrap();
    let gw = Harness::start(
        |_, _| Reply::openai_text("It says hi."),
        |config| config.file = file,
    )
    .await;
    // A body of its own (a nonce in the text): no entry another run left in a shared store answers it.
    let mut body = claude_code_request();
    body["messages"][0]["content"][0]["text"] =
        format!("what does the page say? {}", uuid::Uuid::new_v4()).into();
    let url = gw.url("/v1/messages");
    let send = || {
        post(
            &url,
            body.to_string(),
            &[("anthropic-version", "2023-06-01")],
        )
    };
    let (miss, hit) = (send().await, send().await);
    for answer in [&miss, &hit] {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.messages_text(true), "It says hi.");
    }
    assert_eq!(miss.headers["x-cache"], "miss");
    assert_eq!(hit.headers["x-cache"], "hit");
    assert_eq!(gw.provider.requests().len(), 1);
    let mut names = dropped(&miss);
    names.sort();
    assert_eq!(
        names,
        [
            "container",
            "content:search_result",
            "context_management",
            "service_tier",
        ]
    );
    assert_eq!(dropped(&hit), dropped(&miss));
}

/// An Anthropic answer that used a server tool: text, the tool's call (its input streamed), its result, text.
fn web_search_answer() -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_up","model":"claude-x","usage":{"input_tokens":3,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Searching."}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\": "}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"rust\"}"}}),
        json!({"type":"content_block_stop","index":1}),
        json!({"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1",
               "content":[{"type":"web_search_result","url":"https://rust-lang.org","title":"Rust","encrypted_content":"abc"}]}}),
        json!({"type":"content_block_stop","index":2}),
        json!({"type":"content_block_start","index":3,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"Rust 2024."}}),
        json!({"type":"content_block_stop","index":3}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}),
        json!({"type":"message_stop"}),
    ])
}

#[tokio::test]
async fn answer_blocks_the_gateway_does_not_model_reach_a_messages_client_in_place() {
    let gw = Harness::start(
        |_, _| web_search_answer(),
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let call = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                      "input": {"query": "rust"}});
    let result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
        "content": [{"type": "web_search_result", "url": "https://rust-lang.org", "title": "Rust",
                     "encrypted_content": "abc"}]});
    let ask = |stream: bool| {
        json!({"model": "claude-test", "max_tokens": 64, "stream": stream,
               "messages": [{"role": "user", "content": "search rust"}]})
    };
    let headers = [("anthropic-version", "2023-06-01")];

    let whole = gw.post_json("/v1/messages", &ask(false), &headers).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(
        whole.json()["content"],
        json!([{"type": "text", "text": "Searching."}, call, result,
               {"type": "text", "text": "Rust 2024."}])
    );

    let streamed = gw.post_json("/v1/messages", &ask(true), &headers).await;
    let events = streamed.named_events();
    let blocks: Vec<(&str, &Value)> = events
        .iter()
        .filter(|(name, _)| name.starts_with("content_block"))
        .map(|(name, body)| (name.as_str(), body))
        .collect();
    let starts: Vec<&Value> = blocks
        .iter()
        .filter(|(name, _)| *name == "content_block_start")
        .map(|(_, body)| &body["content_block"])
        .collect();
    assert_eq!(
        starts,
        [
            &json!({"type": "text", "text": ""}),
            &call,
            &result,
            &json!({"type": "text", "text": ""})
        ]
    );
    // Each block is started, stopped, and numbered in order.
    let mut open = None;
    let mut next = 0;
    for (name, body) in &blocks {
        let index = body["index"].as_u64().unwrap();
        match *name {
            "content_block_start" => {
                assert_eq!((open, index), (None, next), "{events:?}");
                open = Some(index);
                next += 1;
            }
            "content_block_stop" => assert_eq!(open.take(), Some(index), "{events:?}"),
            _ => assert_eq!(open, Some(index), "{events:?}"),
        }
    }
    assert_eq!(streamed.messages_text(true), "Searching.Rust 2024.");
}

#[tokio::test]
async fn carried_fields_are_kept_in_the_call_record_in_order() {
    let mut gw = Harness::start(
        |_, _| anthropic_text("It says hi."),
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let answer = post(
        &gw.url("/v1/messages"),
        claude_code_request().to_string(),
        &[
            ("anthropic-version", "2023-06-01"),
            ("x-conversation-id", "conv-carried"),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Shutdown flushes the writer.
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = gw.records().await;
    let calls = store
        .conversation_calls(&ConversationId::new("conv-carried"))
        .await
        .unwrap();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let carried = calls[0].request.options.carried.as_ref().expect("carried");
    assert_eq!(carried.format, ApiFormat::Messages);
    let body = claude_code_request();
    let fields: Vec<(&str, &Value)> = carried
        .fields
        .iter()
        .map(|(name, value)| (name.as_str(), value))
        .collect();
    assert_eq!(
        fields,
        [
            ("service_tier", &body["service_tier"]),
            ("context_management", &body["context_management"]),
            ("container", &body["container"]),
        ]
    );
}

#[tokio::test]
async fn output_items_the_gateway_does_not_model_reach_a_responses_client_in_place() {
    let search = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                        "action": {"type": "search", "query": "rust editions"}});
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": "Rust 2024.", "annotations": []}]});
    let events = {
        let (search, message) = (search.clone(), message.clone());
        move || {
            vec![
                json!({"type": "response.created", "response": {"id": "resp_up", "object": "response",
                       "model": "gpt-5-codex", "status": "in_progress", "output": []}}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": search}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": search}),
                json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message",
                       "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}}),
                json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1,
                       "content_index": 0, "delta": "Rust 2024."}),
                json!({"type": "response.output_item.done", "output_index": 1, "item": message}),
                json!({"type": "response.completed", "response": {"id": "resp_up", "object": "response",
                       "model": "gpt-5-codex", "status": "completed", "output": [search, message],
                       "usage": {"input_tokens": 5, "output_tokens": 4, "total_tokens": 9}}}),
            ]
        }
    };
    let (_responses, gw) = responses_gateway(move |_, _| Reply::responses_stream(&events())).await;
    let ask = |stream: bool| json!({"model": "codex-model", "input": "search rust", "stream": stream, "store": false});

    let whole = gw.post_json("/v1/responses", &ask(false), &[]).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    let output = whole.json()["output"].clone();
    assert_eq!(output[0], search, "{output}");
    assert_eq!(output[1]["content"][0]["text"], "Rust 2024.", "{output}");
    assert_eq!(output.as_array().unwrap().len(), 2, "{output}");

    let streamed = gw.post_json("/v1/responses", &ask(true), &[]).await;
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let items: Vec<(String, Value)> = streamed
        .named_events()
        .into_iter()
        .filter(|(name, _)| name.starts_with("response.output_item."))
        .map(|(name, body)| (name, body["item"].clone()))
        .collect();
    assert_eq!(
        items[0],
        ("response.output_item.added".to_owned(), search.clone())
    );
    assert_eq!(
        items[1],
        ("response.output_item.done".to_owned(), search.clone())
    );
    assert_eq!(items[2].1["type"], "message", "{items:?}");
    let completed = streamed.named_events().pop().unwrap().1;
    assert_eq!(completed["response"]["output"][0], search, "{completed}");
    assert_eq!(streamed.responses_text(true), "Rust 2024.");
}
