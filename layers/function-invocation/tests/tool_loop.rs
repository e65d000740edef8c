//! The loop itself: forwarding, history sent to the model, usage, order, concurrency, limits, readiness.

mod common;

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tower::{Service, ServiceExt};
use tower_chat::{
    AssistantMessage, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ErrorKind,
    FinishReason, Message, ToolChoice, ToolMessage, Usage,
};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer, ToolContext};

#[tokio::test]
async fn one_tool_round_is_one_continuous_stream() {
    for shape in SHAPES {
        let runs = counter();
        let mut first = vec![ChatEvent::text("Let me check. ")];
        first.extend(calls(&[("c1", "weather", json!({"city": "Oslo"}))]));
        let (inner, script) = scripted(shape, vec![first, answer("It is sunny.")]);
        let service = stack(
            FunctionInvocationLayer::new()
                .tool(weather(runs.clone()))
                .unwrap(),
            inner,
        );
        let (events, error) = run(service, user("Weather in Oslo?")).await;
        assert!(error.is_none(), "{shape:?}: {error:?}");
        assert_eq!(count(&runs), 1, "{shape:?}");

        // Internal tool_calls finishes are hidden; one summed usage comes before the one finish.
        assert_eq!(
            finish_reasons(&events),
            vec![FinishReason::Stop],
            "{shape:?}"
        );
        assert_eq!(
            usages(&events),
            vec![Usage {
                input_tokens: 30,
                output_tokens: 8,
                ..Usage::default()
            }],
            "{shape:?}"
        );
        let n = events.len();
        assert!(
            matches!(events[n - 2], ChatEvent::Usage { .. }),
            "{shape:?}"
        );
        assert_eq!(
            tool_results(&events),
            vec![ToolMessage::success("c1", "weather", "sunny in Oslo")]
        );

        // The model was sent the assistant message with its call, then the result.
        assert_eq!(script.calls(), 2);
        let call = call("c1", "weather", json!({"city": "Oslo"}));
        assert_eq!(
            script.sent(1),
            vec![
                Message::user("Weather in Oslo?"),
                Message::Assistant(AssistantMessage {
                    content: "Let me check. ".into(),
                    reasoning: Vec::new(),
                    tool_calls: vec![call.clone()],
                    provider_parts: Vec::new(),
                }),
                Message::tool_result("c1", "weather", "sunny in Oslo"),
            ],
            "{shape:?}"
        );
        for request in script.requests() {
            assert_eq!(request.options.tools.len(), 1);
            assert_eq!(request.options.tools[0].name, "weather");
            assert_eq!(request.options.tools[0].parameters, city_schema());
        }

        // Collected, the stream is exactly the history to append.
        let mut response = tower_chat::ResponseBuilder::new();
        for event in &events {
            response.push(event);
        }
        let response = response.finish();
        assert_eq!(response.messages[..2], script.sent(1)[1..]);
        assert_eq!(response.text(), "It is sunny.");
        assert_eq!(response.usage.total_tokens(), 38);
    }
}

#[tokio::test]
async fn deltas_reach_the_caller_before_the_model_is_done() {
    let (tx, rx) = mpsc::unbounded_channel::<Result<ChatEvent, ChatError>>();
    let rx = Arc::new(std::sync::Mutex::new(Some(rx)));
    let inner = tower::service_fn(move |_req: ChatRequest| {
        let rx = rx.lock().unwrap().take().expect("called once");
        async move {
            let stream: ChatStream = Box::pin(futures_util::stream::unfold(rx, |mut rx| async {
                rx.recv().await.map(|item| (item, rx))
            }));
            Ok::<_, ChatError>(stream)
        }
    });
    let service = FunctionInvocationLayer::new()
        .tool(weather(counter()))
        .unwrap()
        .layer_service(inner);
    let mut stream = service.oneshot(user("hi")).await.unwrap();
    tx.send(Ok(ChatEvent::text("Hel"))).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the first delta was held back");
    assert_eq!(first.unwrap().unwrap(), ChatEvent::text("Hel"));
    tx.send(Ok(ChatEvent::ReasoningDelta { text: "r".into() }))
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatEvent::ReasoningDelta { text: "r".into() }
    );
    tx.send(Ok(ChatEvent::finish(FinishReason::Length)))
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatEvent::finish(FinishReason::Length)
    );
    assert!(stream.next().await.is_none());
}

trait LayerService {
    fn layer_service<S>(self, inner: S) -> tower_chat_function_invocation::FunctionInvocation<S>;
}

impl LayerService for FunctionInvocationLayer {
    fn layer_service<S>(self, inner: S) -> tower_chat_function_invocation::FunctionInvocation<S> {
        tower::Layer::layer(&self, inner)
    }
}

/// A tool that sleeps a per-call time and tracks how many bodies run at once.
fn slow_tool(
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
) -> tower_chat_function_invocation::CompiledTool {
    tool_json(
        "slow",
        "sleeps",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        move |args: Value, ctx: ToolContext| {
            let running = running.clone();
            let peak = peak.clone();
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap())).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, String>(format!("done {}", ctx.call_id()))
            }
        },
    )
    .compile()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_run_concurrently_up_to_the_limit_and_report_in_call_order() {
    for shape in SHAPES {
        for (limit, expected_peak) in [(None, 3), (Some(2), 2), (Some(1), 1)] {
            let running = counter();
            let peak = counter();
            let (inner, script) = scripted(
                shape,
                vec![
                    calls(&[
                        ("c1", "slow", json!({"ms": 300})),
                        ("c2", "slow", json!({"ms": 10})),
                        ("c3", "slow", json!({"ms": 100})),
                    ]),
                    answer("done"),
                ],
            );
            let mut layer = FunctionInvocationLayer::new()
                .tool(slow_tool(running, peak.clone()))
                .unwrap();
            if let Some(limit) = limit {
                layer = layer.max_concurrency(limit);
            }
            let (events, error) = run(stack(layer, inner), user("go")).await;
            assert!(error.is_none());
            assert_eq!(count(&peak), expected_peak, "{shape:?} {limit:?}");
            let ids: Vec<String> = tool_results(&events)
                .into_iter()
                .map(|r| r.call_id)
                .collect();
            assert_eq!(ids, ["c1", "c2", "c3"], "{shape:?} {limit:?}");
            let sent: Vec<String> = tool_messages(&script.sent(1))
                .into_iter()
                .map(|m| m.content.to_string())
                .collect();
            assert_eq!(sent, ["done c1", "done c2", "done c3"]);
        }
    }
}

#[tokio::test]
async fn max_rounds_ends_with_max_rounds_and_a_complete_history() {
    for shape in SHAPES {
        let runs = counter();
        let round = |id: &str| calls(&[(id, "weather", json!({"city": "Oslo"}))]);
        let (inner, script) = scripted(shape, vec![round("a"), round("b"), round("c")]);
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap()
            .max_rounds(2);
        let (events, error) = run(stack(layer, inner), user("loop")).await;
        assert!(error.is_none());
        assert_eq!(script.calls(), 2, "{shape:?}");
        assert_eq!(count(&runs), 2);
        assert_eq!(finish_reasons(&events), vec![FinishReason::MaxRounds]);
        assert_eq!(usages(&events)[0].input_tokens, 20);
        let response = tower_chat::ResponseBuilder::new();
        let mut response = response;
        for event in &events {
            response.push(event);
        }
        assert_eq!(
            response.finish().messages.len(),
            4,
            "two calls, two results"
        );
    }
}

#[tokio::test]
async fn final_round_without_tools_lets_the_model_answer() {
    for shape in SHAPES {
        let runs = counter();
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[("a", "weather", json!({"city": "Oslo"}))]),
                answer("Best I can say: sunny."),
            ],
        );
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap()
            .max_rounds(1)
            .final_round_without_tools(true);
        let (events, error) = run(stack(layer, inner), user("loop")).await;
        assert!(error.is_none());
        assert_eq!(script.calls(), 2);
        let requests = script.requests();
        assert_eq!(requests[0].options.tool_choice, None);
        assert_eq!(requests[1].options.tool_choice, Some(ToolChoice::None));
        assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);

        // A model that calls tools anyway gets nothing run.
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[("a", "weather", json!({"city": "Oslo"}))]),
                calls(&[("b", "weather", json!({"city": "Oslo"}))]),
            ],
        );
        let runs = counter();
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap()
            .max_rounds(1)
            .final_round_without_tools(true);
        let (events, _) = run(stack(layer, inner), user("loop")).await;
        assert_eq!(script.calls(), 2);
        assert_eq!(count(&runs), 1);
        assert_eq!(finish_reasons(&events), vec![FinishReason::MaxRounds]);
    }
}

#[tokio::test]
async fn max_tool_calls_caps_bodies_run_and_answers_the_rest() {
    for shape in SHAPES {
        let runs = counter();
        let two = |a: &str, b: &str| {
            calls(&[
                (a, "weather", json!({"city": "Oslo"})),
                (b, "weather", json!({"city": "Rome"})),
            ])
        };
        let (inner, script) = scripted(shape, vec![two("a", "b"), two("c", "d"), answer("x")]);
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap()
            .max_tool_calls(3);
        let (events, error) = run(stack(layer, inner), user("go")).await;
        assert!(error.is_none());
        assert_eq!(count(&runs), 3, "{shape:?}");
        assert_eq!(script.calls(), 2);
        assert_eq!(finish_reasons(&events), vec![FinishReason::MaxRounds]);
        let results = tool_results(&events);
        assert_eq!(results.len(), 4);
        assert!(results[3].is_error);
        assert!(
            results[3]
                .content
                .to_string()
                .contains("limit of 3 tool calls"),
            "{}",
            results[3].content
        );
    }
}

#[tokio::test]
async fn return_direct_ends_with_the_results_when_every_call_is_direct() {
    for shape in SHAPES {
        let runs = counter();
        let direct = tool_json(
            "lookup",
            "",
            json!({"type": "object"}),
            |_v: Value, _c| async { Ok::<_, String>("the record") },
        )
        .with_return_direct()
        .compile()
        .unwrap();
        let (inner, script) = scripted(
            shape,
            vec![calls(&[
                ("a", "lookup", json!({})),
                ("b", "lookup", json!({})),
            ])],
        );
        let layer = FunctionInvocationLayer::new()
            .tool(direct.clone())
            .unwrap()
            .tool(weather(runs.clone()))
            .unwrap();
        let (events, error) = run(stack(layer.clone(), inner), user("go")).await;
        assert!(error.is_none());
        assert_eq!(script.calls(), 1, "{shape:?}");
        assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);
        assert_eq!(tool_results(&events).len(), 2);

        // One ordinary call in the round: the model gets the results as usual.
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[
                    ("a", "lookup", json!({})),
                    ("b", "weather", json!({"city": "Oslo"})),
                ]),
                answer("ok"),
            ],
        );
        let (events, _) = run(stack(layer, inner), user("go")).await;
        assert_eq!(script.calls(), 2, "{shape:?}");
        assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);
        assert_eq!(count(&runs), 1);
    }
}

#[tokio::test]
async fn model_errors_pass_through_and_a_missing_finish_is_a_protocol_error() {
    for shape in SHAPES {
        let (inner, _) = scripted_items(
            shape,
            vec![vec![
                Ok(ChatEvent::text("par")),
                Err(ChatError::new(ErrorKind::Connection, "reset")),
            ]],
        );
        let (events, error) = run(stack(FunctionInvocationLayer::new(), inner), user("x")).await;
        assert_eq!(events, vec![ChatEvent::text("par")]);
        assert_eq!(error.unwrap().kind(), &ErrorKind::Connection);

        let (inner, _) = scripted(shape, vec![vec![ChatEvent::text("par")]]);
        let (_, error) = run(stack(FunctionInvocationLayer::new(), inner), user("x")).await;
        assert_eq!(error.unwrap().kind(), &ErrorKind::Protocol);
    }
}

#[tokio::test]
async fn a_refused_model_call_is_a_service_error_first_and_a_stream_error_later() {
    let attempts = counter();
    let seen = attempts.clone();
    let inner = tower::service_fn(move |_req: ChatRequest| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Ok(scripted_stream(
                    Delivery::AllAtOnce,
                    calls(&[("a", "weather", json!({"city": "Oslo"}))])
                        .into_iter()
                        .map(Ok)
                        .collect(),
                ))
            } else {
                Err(ChatError::new(
                    ErrorKind::RateLimited { retry_after: None },
                    "slow down",
                ))
            }
        }
    });
    let service = FunctionInvocationLayer::new()
        .tool(weather(counter()))
        .unwrap()
        .layer_service(inner);
    let stream = service.clone().oneshot(user("x")).await.unwrap();
    let (events, error) = drain(stream).await;
    assert_eq!(tool_results(&events).len(), 1);
    assert!(matches!(
        error.unwrap().kind(),
        ErrorKind::RateLimited { .. }
    ));
    let refused = service.oneshot(user("x")).await.err().unwrap();
    assert!(matches!(refused.kind(), ErrorKind::RateLimited { .. }));
}

/// A model that panics when called without being polled ready first, and is not ready on the first poll.
#[derive(Clone)]
struct Strict {
    ready: bool,
    polls: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    shape: Delivery,
}

impl Service<ChatRequest> for Strict {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<ChatStream, ChatError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        if self.polls.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: ChatRequest) -> Self::Future {
        assert!(std::mem::take(&mut self.ready), "called without poll_ready");
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let events = if n < 2 {
            calls(&[(&format!("c{n}"), "weather", json!({"city": "Oslo"}))])
        } else {
            answer("done")
        };
        let stream = scripted_stream(self.shape, events.into_iter().map(Ok).collect());
        Box::pin(async move { Ok(stream) })
    }
}

#[tokio::test]
async fn every_model_call_waits_for_poll_ready() {
    for shape in SHAPES {
        let strict = Strict {
            ready: false,
            polls: counter(),
            calls: counter(),
            shape,
        };
        let polls = strict.polls.clone();
        let service = FunctionInvocationLayer::new()
            .tool(weather(counter()))
            .unwrap()
            .layer_service(strict);
        let response = service
            .oneshot(user("x"))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "done");
        // Three model calls, each after one Pending and one Ready poll.
        assert_eq!(count(&polls), 6, "{shape:?}");
    }
}

#[tokio::test]
async fn without_tools_the_layer_is_transparent() {
    for shape in SHAPES {
        let (inner, script) = scripted(shape, vec![answer("plain")]);
        let (events, error) = run(stack(FunctionInvocationLayer::new(), inner), user("x")).await;
        assert!(error.is_none());
        assert_eq!(events, answer("plain"));
        assert!(script.requests()[0].options.tools.is_empty());
    }
}
