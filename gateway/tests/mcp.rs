//! The gateway with an `[[mcp]]` stdio server, end to end: a scripted upstream calls the MCP tool, the result goes
//! back to it, the client gets the answer and the result is persisted; per-key allow-lists; an MCP tool that needs
//! approval pauses the turn until the client approves.
//!
//! The MCP server is the demo server of `tower_chat_mcp::test_server` (written with rmcp), and its binary is this
//! test binary: started with [`SERVE`] set it serves MCP on stdin/stdout instead of running the tests (as
//! `cargo run --example mcp` does), so no binary of another package has to be built first. Hence
//! `harness = false`: libtest writes to stdout, the MCP channel, before any test code runs. Arguments that do not
//! start with `-` filter the tests by substring, as with libtest.

mod common;

use std::future::Future;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::process::ExitCode;

use common::{request, tool_result, Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat::{ConversationId, Message};
use tower_chat_gateway::mcp::McpServerEntry;
use tower_chat_mcp::test_server::{serve_stdio, DemoServer};
use tower_chat_persistence::Store;

/// Set in the child's environment: serve MCP instead of testing.
const SERVE: &str = "TOWER_CHAT_GATEWAY_TEST_MCP_SERVE";

type Test = fn() -> Pin<Box<dyn Future<Output = ()>>>;

const TESTS: &[(&str, Test)] = &[
    (
        "an_mcp_tool_result_goes_back_to_the_model_and_the_client_gets_the_answer",
        || Box::pin(an_mcp_tool_result_goes_back_to_the_model_and_the_client_gets_the_answer()),
    ),
    (
        "a_key_whose_allow_list_excludes_a_tool_is_not_offered_it_and_cannot_call_it",
        || Box::pin(a_key_whose_allow_list_excludes_a_tool_is_not_offered_it_and_cannot_call_it()),
    ),
    (
        "an_mcp_tool_requiring_approval_pauses_the_turn_and_runs_once_approved",
        || Box::pin(an_mcp_tool_requiring_approval_pauses_the_turn_and_runs_once_approved()),
    ),
    (
        "a_client_tool_named_like_an_mcp_tool_its_caller_is_offered_is_refused",
        || Box::pin(a_client_tool_named_like_an_mcp_tool_its_caller_is_offered_is_refused()),
    ),
];

fn main() -> ExitCode {
    if std::env::var_os(SERVE).is_some() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        return match runtime.block_on(serve_stdio(DemoServer::new("demo", true))) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo MCP server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let chosen: Vec<_> = TESTS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, test) in &chosen {
        print!("test {name} ... ");
        let _ = std::io::stdout().flush();
        // A runtime per test, as #[tokio::test] gives; dropping it kills the test's MCP child (kill_on_drop).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(test())));
        drop(runtime);
        match outcome {
            Ok(()) => println!("ok"),
            Err(_) => {
                println!("FAILED");
                failed.push(*name);
            }
        }
    }
    let status = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {status}. {} passed; {} failed",
        chosen.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failures: {failed:?}");
        ExitCode::FAILURE
    }
}

/// The model: once it has the result of `call_1` it answers `Result: {result}`; before, it calls the tool its
/// first user message names, `{tool} {arguments as JSON}`.
fn upstream(req: &RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    if let Some(result) = tool_result(messages, "call_1") {
        return Reply::openai_text(&format!("Result: {result}"));
    }
    let user = messages.iter().find(|m| m["role"] == "user").unwrap();
    let (tool, arguments) = user["content"].as_str().unwrap().split_once(' ').unwrap();
    Reply::openai_tool_calls(&[("call_1", tool, arguments)])
}

/// A gateway with keys `alice` (every tool of `demo`), `bob` (`echo` and `read_note`) and `carol` (none), and
/// the demo server as `[[mcp]] demo` with approval for destructive tools.
async fn gateway() -> (Harness, tempfile::TempDir) {
    let keys = tempfile::tempdir().unwrap();
    let keys_file = keys.path().join("keys");
    std::fs::write(&keys_file, "alice:sk-alice\nbob:sk-bob\ncarol:sk-carol\n").unwrap();
    let me = std::env::current_exe().unwrap();
    let demo = McpServerEntry {
        name: "demo".into(),
        command: Some(me.to_string_lossy().into_owned()),
        env: [(SERVE.to_owned(), "1".to_owned())].into(),
        policy: Some("if_destructive".into()),
        keys: Some(vec!["alice".into()]),
        key_tools: [("bob".to_owned(), vec!["echo".into(), "read_note".into()])].into(),
        ..Default::default()
    };
    let gw = Harness::start(upstream, move |config| {
        config.api_keys_file = Some(keys_file);
        config.file.mcp = vec![demo];
    })
    .await;
    (gw, keys)
}

/// `caller` asks the model to call `tool` with `arguments`.
async fn ask(gw: &Harness, caller: &str, stream: bool, tool: &str, arguments: Value) -> Answer {
    let auth = format!("Bearer sk-{caller}");
    let body = request(stream, &format!("{tool} {arguments}"));
    gw.post_json("/v1/chat/completions", &body, &[("authorization", &auth)])
        .await
}

fn text(answer: &Answer, stream: bool) -> String {
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.chat_text(stream)
}

/// The tool names the upstream's `n`th request offered.
fn offered(gw: &Harness, n: usize) -> Vec<String> {
    gw.provider.requests()[n].body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn an_mcp_tool_result_goes_back_to_the_model_and_the_client_gets_the_answer() {
    for stream in [false, true] {
        let (mut gw, _keys) = gateway().await;
        // The demo server's `add` collides with the gateway's own `add`: it is offered as `demo__add`.
        let body = request(stream, &format!("demo__add {}", json!({"a": 2, "b": 3})));
        let headers = [
            ("authorization", "Bearer sk-alice"),
            ("x-conversation-id", "conv-mcp"),
        ];
        let answer = gw.post_json("/v1/chat/completions", &body, &headers).await;
        assert_eq!(text(&answer, stream), r#"Result: {"sum":5.0}"#);
        let tools = offered(&gw, 0);
        for name in ["add", "demo__add", "echo", "delete_note"] {
            assert!(tools.iter().any(|t| t == name), "{name} in {tools:?}");
        }
        assert_eq!(gw.provider.requests().len(), 2);
        let sent = gw.upstream_messages(1);
        assert_eq!(
            tool_result(&sent, "call_1").as_deref(),
            Some(r#"{"sum":5.0}"#)
        );

        // The persistence layer recorded the MCP tool's result with the turn (shutdown flushes the writer).
        gw.shutdown();
        gw.server.take().unwrap().await.unwrap().unwrap();
        let store = gw.records().await;
        let history = store
            .load_conversation(&ConversationId::new("alice/conv-mcp"))
            .await
            .unwrap();
        assert!(
            history.iter().any(|m| matches!(m, Message::Tool(t)
                if t.name == "demo__add" && t.content == r#"{"sum":5.0}"#)),
            "{history:?}"
        );
    }
}

async fn a_key_whose_allow_list_excludes_a_tool_is_not_offered_it_and_cannot_call_it() {
    let (gw, _keys) = gateway().await;
    // Bob may use `echo` and `read_note` only.
    let answer = ask(&gw, "bob", false, "echo", json!({"text": "hi"})).await;
    assert_eq!(text(&answer, false), "Result: demo: hi");
    let tools = offered(&gw, 0);
    assert!(tools.iter().any(|t| t == "read_note"), "{tools:?}");
    for refused in ["write_note", "delete_note", "demo__add", "crash"] {
        assert!(
            !tools.iter().any(|t| t == refused),
            "{refused} in {tools:?}"
        );
    }
    // A call of a tool bob may not use is a call of an unknown tool...
    let answer = ask(
        &gw,
        "bob",
        false,
        "write_note",
        json!({"key": "k", "text": "from bob"}),
    )
    .await;
    let refusal = text(&answer, false);
    assert!(refusal.contains("unknown tool `write_note`"), "{refusal}");
    // ... that never reached the server: alice finds no note.
    let answer = ask(&gw, "alice", false, "read_note", json!({"key": "k"})).await;
    assert!(
        text(&answer, false).contains("no note k"),
        "{}",
        answer.body
    );
    // Carol is not listed: no tool of the server at all.
    ask(&gw, "carol", false, "echo", json!({"text": "hi"})).await;
    let carol = offered(&gw, gw.provider.requests().len() - 2);
    assert!(!carol.iter().any(|t| t == "echo"), "{carol:?}");
    assert!(
        carol.iter().any(|t| t == "add"),
        "the gateway's own tools stay: {carol:?}"
    );
}

async fn an_mcp_tool_requiring_approval_pauses_the_turn_and_runs_once_approved() {
    let (gw, _keys) = gateway().await;
    let wrote = ask(
        &gw,
        "alice",
        false,
        "write_note",
        json!({"key": "a", "text": "keep me"}),
    )
    .await;
    assert_eq!(
        text(&wrote, false),
        "Result: wrote a",
        "not destructive: no approval"
    );

    // `delete_note` is destructive: the turn pauses with an approval request.
    let first = ask(&gw, "alice", false, "delete_note", json!({"key": "a"})).await;
    let body = first.json();
    assert_eq!(
        body["tower_chat"]["finish_reason"], "awaiting_approval",
        "{body}"
    );
    let approval = body["tower_chat"]["approval_requests"][0].clone();
    assert_eq!(approval["tool"], "delete_note");
    assert_eq!(approval["arguments"], json!({"key": "a"}));
    let upstream_calls = gw.provider.requests().len();
    // Not run yet: the note is still there.
    let read = ask(&gw, "alice", false, "read_note", json!({"key": "a"})).await;
    assert_eq!(text(&read, false), "Result: keep me");

    // The client resends the conversation with its decision; the call runs and the model gets its result.
    let notice = body["choices"][0]["message"]["content"].clone();
    let mut resume = request(false, &format!("delete_note {}", json!({"key": "a"})));
    let messages = resume["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": notice}));
    resume["tower_chat"] = json!({"approvals": [{"id": approval["id"], "approved": true}]});
    let auth = [("authorization", "Bearer sk-alice")];
    let second = gw.post_json("/v1/chat/completions", &resume, &auth).await;
    assert_eq!(text(&second, false), "Result: deleted a");
    assert_eq!(
        gw.provider.requests().len(),
        upstream_calls + 2 + 1,
        "the read, then only the round with the result"
    );
    let read = ask(&gw, "alice", false, "read_note", json!({"key": "a"})).await;
    assert!(text(&read, false).contains("no note a"), "{}", read.body);
}

/// `caller` asks for `tool` with `arguments`, declaring a client tool named `client_tool`, on `path`.
async fn ask_declaring(
    gw: &Harness,
    path: &str,
    caller: &str,
    stream: bool,
    client_tool: &str,
    (tool, arguments): (&str, Value),
) -> Answer {
    let auth = format!("Bearer sk-{caller}");
    let parameters = json!({"type": "object", "properties": {"key": {"type": "string"}}});
    let mut body = request(stream, &format!("{tool} {arguments}"));
    if path == "/v1/messages" {
        body["max_tokens"] = json!(100);
        body.as_object_mut().unwrap().remove("stream_options");
        body["tools"] = json!([{"name": client_tool, "input_schema": parameters}]);
    } else {
        body["tools"] = json!([{"type": "function", "function": {
            "name": client_tool, "parameters": parameters,
        }}]);
    }
    gw.post_json(path, &body, &[("authorization", &auth)]).await
}

async fn a_client_tool_named_like_an_mcp_tool_its_caller_is_offered_is_refused() {
    let (gw, _keys) = gateway().await;
    // Alice is offered every tool of `demo`: `echo`, and `delete_note`, which needs approval.
    for (tool, arguments) in [
        ("echo", json!({"text": "hi"})),
        ("delete_note", json!({"key": "a"})),
    ] {
        for stream in [false, true] {
            let answer = ask_declaring(
                &gw,
                "/v1/chat/completions",
                "alice",
                stream,
                tool,
                (tool, arguments.clone()),
            )
            .await;
            assert_eq!(answer.status, 400, "{tool}: {}", answer.body);
            let error = &answer.json()["error"];
            assert_eq!(error["code"], "tool_name_reserved", "{}", answer.body);
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("`{tool}`")) && message.contains("`demo`"),
                "{message}"
            );
        }
    }
    // In the shape of the route: Anthropic's on /v1/messages.
    let answer = ask_declaring(
        &gw,
        "/v1/messages",
        "alice",
        false,
        "echo",
        ("echo", json!({"text": "hi"})),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["code"], "tool_name_reserved", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`echo`"),
        "{body}"
    );
    assert!(
        gw.provider.requests().is_empty(),
        "refused before the model is asked"
    );

    // Bob is not offered `delete_note`: the name is his client tool's, and the call goes to him alone.
    let answer = ask_declaring(
        &gw,
        "/v1/chat/completions",
        "bob",
        false,
        "delete_note",
        ("delete_note", json!({"key": "a"})),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let choice = &answer.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{}", answer.body);
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["name"],
        "delete_note"
    );
    assert_eq!(
        gw.provider.requests().len(),
        1,
        "one round: nothing ran here"
    );
}
