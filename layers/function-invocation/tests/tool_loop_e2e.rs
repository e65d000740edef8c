//! The tool loop end to end through the OpenAI-compatible leaf over loopback HTTP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, ChatRequest, ChatStreamExt, FinishReason, Message,
    ModelInfo,
};
use tower_chat_function_invocation::{tool_json, CompiledTool, FunctionInvocationLayer};

/// A tool that counts its runs and answers "result for {q}" after `delay`.
fn counting_tool(
    name: &'static str,
    runs: Arc<AtomicUsize>,
    approval: bool,
    delay: Duration,
) -> CompiledTool {
    let schema =
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    let tool = tool_json(
        name,
        "Looks something up",
        schema,
        move |args: Value, _ctx| {
            let runs = runs.clone();
            async move {
                tokio::time::sleep(delay).await;
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("result for {}", args["q"].as_str().unwrap_or("?")))
            }
        },
    );
    let tool = if approval { tool.with_approval() } else { tool };
    tool.compile().unwrap()
}

fn tool_messages(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

/// Round 0 asks for two parallel lookups; later rounds answer with what the tools returned.
fn two_lookups_then_answer(request: &RecordedRequest, _index: usize) -> Reply {
    let results = tool_messages(request);
    let streaming = request.body["stream"] == true;
    if results.is_empty() {
        let reply = Reply::openai_tool_calls(&[
            ("call_1", "lookup", r#"{"q":"Zürich"}"#),
            ("call_2", "lookup", r#"{"q":"Köln"}"#),
        ]);
        if streaming {
            return reply.rechunked(5);
        }
        return Reply::json(
            200,
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"Zürich\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"Köln\"}"}}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9}}),
        );
    }
    let text = results
        .iter()
        .map(|r| r["content"].as_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ");
    if streaming {
        Reply::openai_text(&text).rechunked(3)
    } else {
        Reply::json(
            200,
            json!({"id": "c2", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 12, "completion_tokens": 5}}),
        )
    }
}

async fn run_two_lookups(streaming: bool) {
    let provider = ScriptedProvider::start(two_lookups_then_answer).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .build()
        .unwrap();
    let chat = FunctionInvocationLayer::new()
        .tool(counting_tool("lookup", runs.clone(), false, Duration::ZERO))
        .unwrap()
        .layer(leaf);
    assert_eq!(
        chat.model_metadata().provider,
        "openai",
        "metadata reads through the layer"
    );
    let request =
        ChatRequest::new(vec![Message::user("Look up Zürich and Köln")]).stream(streaming);
    let response = chat
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();

    assert_eq!(
        response.text(),
        "result for Zürich; result for Köln",
        "streaming={streaming}"
    );
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        response.usage.total_tokens(),
        46,
        "usage summed over both rounds"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        response.messages.len(),
        4,
        "assistant(calls), tool, tool, assistant(text)"
    );

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1].body["messages"];
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        second[1]["tool_calls"][1]["function"]["arguments"],
        "{\"q\":\"Köln\"}"
    );
    assert_eq!(
        second[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "result for Zürich"})
    );
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "call_2", "content": "result for Köln"})
    );
}

#[tokio::test]
async fn parallel_calls_split_across_chunks_streaming() {
    run_two_lookups(true).await;
}

#[tokio::test]
async fn parallel_calls_non_streaming() {
    run_two_lookups(false).await;
}

#[tokio::test]
async fn approval_pause_and_resume_over_http() {
    let provider = ScriptedProvider::start(|request, _| {
        if tool_messages(request).is_empty() {
            Reply::openai_tool_calls(&[("call_rm", "delete", r#"{"q":"old.txt"}"#)])
        } else {
            Reply::openai_text(&format!(
                "done: {}",
                tool_messages(request)[0]["content"].as_str().unwrap()
            ))
        }
    })
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .build()
        .unwrap();
    let chat = FunctionInvocationLayer::new()
        .tool(counting_tool("delete", runs.clone(), true, Duration::ZERO))
        .unwrap()
        .layer(leaf);

    let mut history = vec![Message::user("delete old.txt")];
    let paused = chat
        .clone()
        .oneshot(ChatRequest::new(history.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
    assert_eq!(paused.approval_requests.len(), 1);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "gated tool never runs without a decision"
    );
    assert_eq!(provider.requests().len(), 1);

    history.extend(paused.messages);
    let decisions = ApprovalDecisions(vec![ApprovalDecision::approve(
        paused.approval_requests[0].id.clone(),
    )]);
    let resumed = chat
        .oneshot(ChatRequest::new(history).with_extension(decisions))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(resumed.text(), "done: result for old.txt");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Reports through a channel when it is dropped: a tool body holding one tells the test its future was dropped.
struct ReportDrop(tokio::sync::mpsc::UnboundedSender<&'static str>);

impl Drop for ReportDrop {
    fn drop(&mut self) {
        let _ = self.0.send("body dropped");
    }
}

/// The next report, or a failure naming what never happened.
async fn next_report(
    reports: &mut tokio::sync::mpsc::UnboundedReceiver<&'static str>,
) -> &'static str {
    tokio::time::timeout(Duration::from_secs(10), reports.recv())
        .await
        .expect("no report within 10 s: a tool body outlived the dropped stream")
        .expect("every reporter is gone")
}

#[tokio::test]
async fn dropping_the_stream_mid_tool_makes_no_further_model_call() {
    let provider = ScriptedProvider::start(two_lookups_then_answer).await;
    let (report, mut reports) = tokio::sync::mpsc::unbounded_channel();
    // A body that never finishes by itself: only cancellation ends it. It also spawns work that waits on the
    // call's cancellation token, as a body handing work to another task would.
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let lookup = tool_json(
        "lookup",
        "Looks something up",
        schema,
        move |_args: Value, ctx| {
            let report = report.clone();
            async move {
                let token = ctx.cancellation().clone();
                let spawned = report.clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    let _ = spawned.send("token cancelled");
                });
                let _dropped = ReportDrop(report.clone());
                let _ = report.send("started");
                std::future::pending::<()>().await;
                Ok::<_, String>(String::new())
            }
        },
    )
    .compile()
    .unwrap();
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .build()
        .unwrap();
    let chat = FunctionInvocationLayer::new()
        .tool(lookup)
        .unwrap()
        .layer(leaf);
    let mut stream = chat
        .oneshot(ChatRequest::new(vec![Message::user("go")]))
        .await
        .unwrap();
    // Poll the stream until both bodies run (they run concurrently, driven by the stream).
    let mut started = 0;
    while started < 2 {
        tokio::select! {
            event = stream.next() => { event.expect("the stream ended early").unwrap(); }
            Some(what) = reports.recv() => {
                assert_eq!(what, "started");
                started += 1;
            }
        }
    }
    drop(stream);
    // Without cancellation on drop nothing more is reported: the bodies wait forever and `next_report` fails.
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next_report(&mut reports).await);
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        [
            "body dropped",
            "body dropped",
            "token cancelled",
            "token cancelled"
        ]
    );
    assert_eq!(provider.requests().len(), 1, "no further model call");
}
