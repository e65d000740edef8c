//! The OpenAI-compatible leaf against a scripted provider over real loopback HTTP.

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::json;
use tower::{Service, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Part, Reply, ScriptedProvider};
use tower_chat::transport::Timeouts;
use tower_chat::{
    CancellationToken, ChatError, ChatEvent, ChatRequest, ChatStreamExt, ErrorKind, FinishReason,
    Message, ModelInfo, TimeoutPhase, ToolCall, ToolSpec,
};

fn leaf(provider: &ScriptedProvider) -> OpenAiChat {
    OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-test-secret-key")
        .model("scripted-model")
        .header("x-extra", "yes")
        .build()
        .unwrap()
}

/// A leaf with a 1 s connect deadline and these first-byte and idle deadlines.
fn leaf_with_deadlines(
    provider: &ScriptedProvider,
    first_byte: Duration,
    idle: Duration,
) -> OpenAiChat {
    OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .timeouts(Timeouts {
            connect: Some(Duration::from_secs(1)),
            first_byte: Some(first_byte),
            idle: Some(idle),
        })
        .build()
        .unwrap()
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hello")])
}

async fn collect_items(
    leaf: OpenAiChat,
    request: ChatRequest,
) -> Vec<Result<ChatEvent, ChatError>> {
    leaf.oneshot(request).await.unwrap().collect().await
}

#[tokio::test]
async fn streams_text_and_sends_a_well_formed_request() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hello there, friend")).await;
    let response = leaf(&provider)
        .oneshot(hello().tool(ToolSpec::new("add", "adds", json!({"type": "object"}))))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "Hello there, friend");
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(response.usage.total_tokens(), 17);
    assert_eq!(response.response_id.as_deref(), Some("chatcmpl-scripted"));

    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test-secret-key");
    assert_eq!(sent.headers["x-extra"], "yes");
    assert_eq!(sent.headers["accept"], "text/event-stream");
    assert_eq!(sent.body["model"], "scripted-model");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"]["include_usage"], true);
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "user", "content": "Hello"}])
    );
    assert_eq!(sent.body["tools"][0]["type"], "function");
}

/// The leaf keeps the JSON of the last tools list it sent (one list shared by every request is serialised once):
/// every request still sends exactly its own tools, whether it shares the list, changes it or has none.
#[tokio::test]
async fn each_request_sends_its_own_tools_when_lists_are_shared_and_changed() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("ok")).await;
    let leaf = leaf(&provider);
    let toolbox = hello()
        .tool(ToolSpec::new("add", "adds", json!({"type": "object"})))
        .options
        .tools
        .clone();
    let with = |tools: &tower_chat::Shared<Vec<ToolSpec>>| {
        let mut request = hello();
        request.options.tools = tools.clone();
        request
    };
    let mut changed = toolbox.clone();
    changed.push(ToolSpec::new("sub", "subtracts", json!({"type": "object"})));
    for request in [
        with(&toolbox),
        with(&toolbox),
        with(&changed),
        hello(),
        with(&toolbox),
    ] {
        leaf.clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
    }
    let names: Vec<Vec<String>> = provider
        .requests()
        .iter()
        .map(|sent| {
            sent.body["tools"]
                .as_array()
                .map(|tools| {
                    tools
                        .iter()
                        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        names,
        [
            vec!["add"],
            vec!["add"],
            vec!["add", "sub"],
            vec![],
            vec!["add"]
        ]
    );
    assert!(provider.requests()[3].body.get("tools").is_none());
}

#[tokio::test]
async fn parallel_tool_calls_split_across_chunks_and_mid_utf8() {
    let reply = Reply::openai_tool_calls(&[
        ("call_a", "weather", r#"{"city":"Zürich"}"#),
        ("call_b", "time", r#"{"tz":"Europe/Zürich"}"#),
    ]);
    // Re-cut the whole body into 7-byte pieces, which splits lines, events and the 'ü'.
    let reply = reply.rechunked(7);
    let provider = ScriptedProvider::start(move |_, _| reply.clone()).await;
    let response = leaf(&provider)
        .oneshot(hello())
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        response.last_assistant().unwrap().tool_calls,
        vec![
            ToolCall::new("call_a", "weather", json!({"city": "Zürich"})),
            ToolCall::new("call_b", "time", json!({"tz": "Europe/Zürich"})),
        ]
    );
}

#[tokio::test]
async fn non_streaming_calls_give_the_same_events() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::json(200, json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}))
    })
    .await;
    let response = leaf(&provider)
        .oneshot(hello().stream(false))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "Hi!");
    assert_eq!(response.usage.total_tokens(), 6);
    let sent = &provider.requests()[0];
    assert_eq!(sent.body["stream"], false);
    assert!(sent.body.get("stream_options").is_none());
}

#[tokio::test]
async fn statuses_become_typed_service_errors_without_the_key() {
    let provider = ScriptedProvider::start(|_, i| match i {
        0 => Reply::json(401, json!({"error": {"message": "Incorrect API key provided: sk-test-secret-key", "type": "invalid_request_error"}})),
        1 => Reply::json(429, json!({"error": {"message": "Rate limit reached"}})).header("retry-after", "3"),
        2 => Reply::json(500, json!({"error": {"message": "The server had an error"}})),
        3 => Reply::json(400, json!({"error": {"message": "bad tool schema"}})),
        _ => Reply::json(503, json!({})),
    })
    .await;
    let leaf = leaf(&provider);
    let err = leaf.clone().oneshot(hello()).await.err().unwrap();
    assert_eq!(err.kind(), &ErrorKind::Authentication);
    assert_eq!(err.status().map(|s| s.as_u16()), Some(401));
    assert!(!err.to_string().contains("sk-test-secret-key"), "{err}");
    assert!(
        !format!("{err:?}").contains("sk-test-secret-key"),
        "{err:?}"
    );

    let err = leaf.clone().oneshot(hello()).await.err().unwrap();
    assert_eq!(
        err.kind(),
        &ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(3))
        }
    );
    assert!(err.is_retryable());

    let err = leaf.clone().oneshot(hello()).await.err().unwrap();
    assert_eq!(err.kind(), &ErrorKind::Upstream);
    assert_eq!(err.message(), "The server had an error");

    let err = leaf.clone().oneshot(hello()).await.err().unwrap();
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    assert_eq!(err.message(), "bad tool schema");

    let err = leaf.clone().oneshot(hello()).await.err().unwrap();
    assert_eq!(err.kind(), &ErrorKind::Upstream);
    assert_eq!(err.message(), "Service Unavailable");
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_an_error_item_not_a_hang() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::sse_chunks([
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n",
        ])
        .then(Part::Pause(Duration::from_millis(20)))
        .then(Part::Abort)
    })
    .await;
    let items = tokio::time::timeout(
        Duration::from_secs(5),
        collect_items(leaf(&provider), hello()),
    )
    .await
    .expect("no hang");
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &ChatEvent::text("partial"));
    assert_eq!(
        items[1].as_ref().unwrap_err().kind(),
        &ErrorKind::Connection
    );
}

#[tokio::test]
async fn a_body_that_ends_without_finishing_is_an_error_item() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::sse_chunks([
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}}]}\n\n",
        ])
    })
    .await;
    let items = collect_items(leaf(&provider), hello()).await;
    assert_eq!(
        items.last().unwrap().as_ref().unwrap_err().kind(),
        &ErrorKind::Connection
    );
}

#[tokio::test]
async fn a_malformed_event_is_a_protocol_error_item() {
    let provider =
        ScriptedProvider::start(|_, _| Reply::sse_chunks(["data: {\"choices\": [oops\n\n"])).await;
    let items = collect_items(leaf(&provider), hello()).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Protocol);
    assert!(err.message().contains("oops"), "{err}");
}

#[tokio::test]
async fn idle_and_first_byte_timeouts_are_typed() {
    let provider = ScriptedProvider::start(|_, i| match i {
        0 => Reply::sse_chunks([
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        ])
        .then(Part::Hang),
        _ => Reply::openai_text("late").delayed(Duration::from_secs(5)),
    })
    .await;
    let leaf = leaf_with_deadlines(
        &provider,
        Duration::from_millis(200),
        Duration::from_millis(200),
    );
    let items = collect_items(leaf.clone(), hello()).await;
    assert_eq!(
        items.last().unwrap().as_ref().unwrap_err().kind(),
        &ErrorKind::Timeout(TimeoutPhase::Idle)
    );
    let err = leaf.oneshot(hello()).await.err().unwrap();
    assert_eq!(err.kind(), &ErrorKind::Timeout(TimeoutPhase::FirstByte));
}

#[tokio::test]
async fn the_idle_deadline_moves_with_each_chunk_and_still_fires_after_the_last() {
    // Chunks 100 ms apart for 400 ms with a 150 ms idle limit: the timer armed for the first deadline fires
    // while data is still flowing and must be re-armed, not reported; after the last chunk it must fire.
    let chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
    let provider = ScriptedProvider::start(move |_, _| {
        let mut reply = Reply::sse_chunks([chunk]);
        for _ in 0..4 {
            reply = reply
                .then(Part::Pause(Duration::from_millis(100)))
                .then(Part::Bytes(chunk.into()));
        }
        reply.then(Part::Hang)
    })
    .await;
    let leaf = leaf_with_deadlines(
        &provider,
        Duration::from_secs(5),
        Duration::from_millis(150),
    );
    let items = tokio::time::timeout(Duration::from_secs(10), collect_items(leaf, hello()))
        .await
        .expect("the idle deadline never fired");
    let texts = items
        .iter()
        .filter(|item| matches!(item, Ok(ChatEvent::TextDelta { .. })))
        .count();
    assert_eq!(texts, 5, "{items:?}");
    assert_eq!(
        items.last().unwrap().as_ref().unwrap_err().kind(),
        &ErrorKind::Timeout(TimeoutPhase::Idle)
    );
}

#[tokio::test]
async fn the_idle_deadline_wakes_the_task_that_polls_last() {
    // The stream skips re-polling its idle timer while the timer holds the current poller's waker. Polled once
    // with a waker that wakes nobody (what `now_or_never` does) and then moved to another task, it must hand the
    // timer the new task's waker, or that task would never be woken by the deadline.
    let provider = ScriptedProvider::start(|_, _| {
        Reply::sse_chunks(["data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"])
            .then(Part::Hang)
    })
    .await;
    let leaf = leaf_with_deadlines(
        &provider,
        Duration::from_secs(5),
        Duration::from_millis(200),
    );
    let mut stream = leaf.oneshot(hello()).await.unwrap();
    loop {
        if let Ok(ChatEvent::TextDelta { .. }) = stream.next().await.unwrap() {
            break;
        }
    }
    while let Some(item) = stream.next().now_or_never() {
        assert!(item.unwrap().is_ok(), "nothing fails before the deadline");
    }
    let rest = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::spawn(async move { stream.collect::<Vec<_>>().await }),
    )
    .await
    .expect("the idle timer woke the earlier waker, not the task polling now")
    .unwrap();
    assert_eq!(
        rest.last().unwrap().as_ref().unwrap_err().kind(),
        &ErrorKind::Timeout(TimeoutPhase::Idle)
    );
}

#[tokio::test]
async fn an_unreachable_provider_is_a_connection_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let leaf = OpenAiChat::builder()
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .model("m")
        .build()
        .unwrap();
    let err = leaf.oneshot(hello()).await.err().unwrap();
    assert_eq!(err.kind(), &ErrorKind::Connection);
}

#[tokio::test]
async fn cancelling_through_the_request_ends_the_stream() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::sse_chunks(["data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"])
            .then(Part::Hang)
    })
    .await;
    let token = CancellationToken::new();
    let mut stream = leaf(&provider)
        .oneshot(hello().with_extension(token.clone()))
        .await
        .unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap(), ChatEvent::text("a"));
    // Polled once: the stream is now waiting on the hanging body; cancel while it waits.
    let mut next = stream.next();
    assert!(futures_util::FutureExt::now_or_never(&mut next).is_none());
    token.cancel();
    let next = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("cancel is prompt");
    assert_eq!(next.unwrap().unwrap_err().kind(), &ErrorKind::Cancelled);
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn http2_prior_knowledge_speaks_h2_and_pools_connections() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("over h2")).await;
    let mut leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .http2_prior_knowledge(true)
        .build()
        .unwrap();
    for _ in 0..3 {
        let stream = leaf.ready().await.unwrap().call(hello()).await.unwrap();
        assert_eq!(stream.collect_response().await.unwrap().text(), "over h2");
    }
    let requests = provider.requests();
    assert!(requests.iter().all(|r| r.version == http::Version::HTTP_2));
}

#[tokio::test]
async fn metadata_is_readable_from_the_leaf() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("x")).await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("deepseek-chat")
        .provider_name("deepseek")
        .build()
        .unwrap();
    let meta = leaf.model_metadata();
    assert_eq!(meta.provider, "deepseek");
    assert_eq!(meta.model_id.as_deref(), Some("deepseek-chat"));
    assert_eq!(meta.context_window, Some(128_000));
    assert!(meta.supports_streaming_usage);
}

/// Tasks alive while a test's one keep-alive connection sits idle: the scripted provider's accept loop and its
/// connection, and the client's connection task and pool timer. More are alive while a response body is drained or a
/// connection is being handed back to the pool.
const TASKS_WITH_AN_IDLE_CONNECTION: usize = 4;

/// Wait until only the tasks of an idle pooled connection are alive (fails after 10 s, printing what is still
/// alive, rather than passing by luck).
async fn connection_back_in_pool() {
    tasks_settle_at(TASKS_WITH_AN_IDLE_CONNECTION).await;
}

/// Wait until at most `tasks` tasks are alive (fails after 10 s).
async fn tasks_settle_at(tasks: usize) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let settled = async {
        while metrics.num_alive_tasks() > tasks {
            tokio::task::yield_now().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(10), settled)
        .await
        .is_err()
    {
        panic!(
            "{} tasks still alive, expected {tasks}",
            metrics.num_alive_tasks()
        );
    }
}

#[tokio::test]
async fn sequential_streaming_calls_reuse_one_pooled_connection() {
    // The body's end comes a little after `[DONE]`, so the stream ends before the body does.
    let provider = ScriptedProvider::start(|_, _| {
        Reply::openai_text("pooled").then(Part::Pause(Duration::from_millis(5)))
    })
    .await;
    let leaf = leaf(&provider);
    for _ in 0..5 {
        let response = leaf
            .clone()
            .oneshot(hello())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "pooled");
        // The stream ended before the body: a task drains the body's last bytes, then hyper hands the connection
        // back to the pool. Wait for those tasks to finish (a signal from the runtime, not a guess at a delay).
        connection_back_in_pool().await;
    }
    assert_eq!(provider.connections(), 1);
}

/// An upstream on a thread of its own that answers one request per connection and then, once told the client
/// has the answer, closes the connection without having said `Connection: close` (as an upstream does when its
/// keep-alive timeout ends) and reports the close. Answers stream one word.
fn upstream_closing_after_each_answer() -> (
    std::net::SocketAddr,
    std::sync::mpsc::Sender<()>,
    std::sync::mpsc::Receiver<()>,
) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (answered_tx, answered) = std::sync::mpsc::channel::<()>();
    let (closed, closed_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let body = concat!(
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        for tcp in listener.incoming() {
            let Ok(mut tcp) = tcp else { return };
            // The whole request: its head, then `content-length` bytes of body.
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            let complete = loop {
                match tcp.read(&mut chunk) {
                    Ok(0) | Err(_) => break false,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
                if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if request.len() >= end + 4 + length {
                        break true;
                    }
                }
            };
            if !complete {
                continue;
            }
            tcp.write_all(answer.as_bytes()).unwrap();
            if answered.recv().is_err() {
                return;
            }
            drop(tcp);
            if closed.send(()).is_err() {
                return;
            }
        }
    });
    (addr, answered_tx, closed_rx)
}

/// A request checked out onto a pooled connection the upstream has closed, before the runtime has looked at the
/// socket again: without a second look the request is written into the dead connection and fails (a `502` at
/// the gateway); with it, hyper-util sends it on a new connection, and the transport counts it.
#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_replaced_before_a_request_is_written() {
    let (addr, answered, closed) = upstream_closing_after_each_answer();
    let leaf = OpenAiChat::builder()
        .base_url(format!("http://{addr}/v1"))
        .model("m")
        .build()
        .unwrap();
    let stale = leaf.transport().stale_connections().clone();
    const ROUNDS: usize = 20;
    let mut failures = Vec::new();
    for _ in 0..ROUNDS {
        let answer = match leaf.clone().oneshot(hello()).await {
            Ok(stream) => stream.collect_response().await,
            Err(error) => Err(error),
        };
        match answer {
            Ok(response) => assert_eq!(response.text(), "hi"),
            Err(error) => {
                failures.push(error);
                continue;
            }
        }
        // The connection back in the pool (left: this runtime's connection task and the pool's timer).
        tasks_settle_at(2).await;
        answered.send(()).unwrap();
        // Blocking on purpose: the runtime must not poll its sockets between the close and the next request, as
        // a busy runtime does not.
        closed.recv().unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} of {ROUNDS} failed: {failures:?}",
        failures.len()
    );
    assert!(
        stale.get() > 0,
        "no request met a closed pooled connection: the test did not test"
    );
}

#[test]
fn after_an_error_item_the_decoder_yields_nothing_more() {
    let mut decoder = tower_chat::openai::StreamDecoder::new();
    decoder.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {not json}\n\n");
    assert!(decoder.next_event().unwrap().is_ok());
    assert!(decoder.next_event().unwrap().is_err());
    assert!(decoder.next_event().is_none());
    // Neither more bytes nor the body's end (which, unfinished, would be an error of its own) add an item.
    decoder.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more\"}}]}\n\n");
    decoder.finish();
    assert!(decoder.next_event().is_none());
}
