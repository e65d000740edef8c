//! The limits layer against scripted inner services (both delivery shapes), a real OpenAI leaf over loopback
//! HTTP, and a real tool loop, with an injected clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::json;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{scripted_stream, Delivery, Reply, ScriptedProvider};
use tower_chat::{
    CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, Cost, ErrorKind,
    FinishReason, Message, ModelPrice, PriceTable, ToolCall, Usage,
};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};
use tower_chat_limits::{
    CounterKind, LimitPolicy, Limited, Limits, LimitsLayer, ManualClock, Rejection, WindowLimit,
    CONCURRENT_RETRY_AFTER,
};
use tower_chat_testkit::hanging;

const MODEL: &str = "gpt-4o-mini";

/// 2026-11-30T10:00:30Z: thirty seconds into a minute.
fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_795_860_030)
}

fn prices() -> PriceTable {
    PriceTable::new().with(MODEL, ModelPrice::per_million_usd(0.15, 0.6))
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn request(caller: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user("What is the capital of France?")])
        .model(MODEL)
        .with_extension(CallerIdentity::new(caller))
}

/// A model answering `events` (delivered as `delivery`), counting its calls.
fn model(
    events: Vec<ChatEvent>,
    delivery: Delivery,
    calls: Arc<AtomicUsize>,
) -> impl Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send> + Clone + Send
{
    service_fn(move |_req: ChatRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let items = events.iter().cloned().map(Ok).collect();
        async move { Ok::<_, ChatError>(scripted_stream(delivery, items)) }
    })
}

fn answer(input: u64, output: u64) -> Vec<ChatEvent> {
    vec![
        ChatEvent::text("Paris."),
        ChatEvent::finish(FinishReason::Stop),
        ChatEvent::Usage {
            usage: usage(input, output),
        },
    ]
}

async fn used(layer: &LimitsLayer, caller: &str, kind: CounterKind) -> u64 {
    let report = layer.usage(caller).await.unwrap();
    report.counter(kind).map_or(0, |c| c.used)
}

#[tokio::test]
async fn over_the_request_limit_is_refused_before_any_upstream_call_with_retry_after() {
    let clock = ManualClock::new(start());
    let policy = LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(3)));
    let layer = LimitsLayer::new(policy).clock(clock.clone());
    let calls = Arc::new(AtomicUsize::new(0));
    let chat = Limited::new(
        model(answer(10, 2), Delivery::OneByOne, calls.clone()),
        layer.clone(),
    );
    for _ in 0..3 {
        let response = chat.clone().oneshot(request("alice")).await.unwrap();
        response.collect_response().await.unwrap();
    }
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    // Thirty seconds into the minute: the window ends in thirty seconds.
    assert_eq!(
        error.kind(),
        &ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(30))
        }
    );
    let rejection = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<Rejection>())
        .expect("the rejection is the source");
    assert_eq!(rejection.kind, CounterKind::Requests);
    assert_eq!(&*rejection.scope.caller, "alice");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "refused before the upstream call"
    );
    // Another caller has counters of their own.
    drop(chat.clone().oneshot(request("bob")).await.unwrap());
    assert_eq!(layer.stats().rejected, 1);
    assert_eq!(layer.stats().admitted, 4);
}

#[tokio::test]
async fn a_window_rollover_admits_again() {
    let clock = ManualClock::new(start());
    let policy = LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(1)));
    let layer = LimitsLayer::new(policy).clock(clock.clone());
    let chat = Limited::new(
        model(answer(1, 1), Delivery::AllAtOnce, Default::default()),
        layer.clone(),
    );
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
    clock.advance(Duration::from_millis(29_999));
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    assert_eq!(error.retry_after(), Some(Duration::from_millis(1)));
    clock.advance(Duration::from_millis(1));
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
    assert_eq!(used(&layer, "alice", CounterKind::Requests).await, 1);
}

/// 2027-01-31T23:59:00Z.
fn end_of_january() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_801_439_940)
}

#[tokio::test]
async fn cost_budgets_follow_the_utc_day_and_the_calendar_month() {
    let clock = ManualClock::new(end_of_january());
    // Each call: 1,000 input tokens and 1,000 output tokens = 150,000 + 600,000 nano-dollars.
    let per_call = Cost::from_nanos(750_000);
    let policy = LimitPolicy::new(
        Limits::none()
            .cost_per_day(Cost::from_nanos(per_call.as_nanos() * 2))
            .cost_per_month(Cost::from_nanos(per_call.as_nanos() * 3)),
    );
    let layer = LimitsLayer::new(policy)
        .clock(clock.clone())
        .prices(prices())
        .default_max_output_tokens(1);
    let chat = Limited::new(
        model(answer(1_000, 1_000), Delivery::OneByOne, Default::default()),
        layer.clone(),
    );
    for _ in 0..2 {
        let response = chat.clone().oneshot(request("alice")).await.unwrap();
        response.collect_response().await.unwrap();
    }
    assert_eq!(
        used(&layer, "alice", CounterKind::CostPerDay).await,
        2 * per_call.as_nanos()
    );
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    // The day budget is spent; it resets at midnight, in one minute.
    assert_eq!(error.retry_after(), Some(Duration::from_secs(60)));

    // February 1st: a new day and a new month.
    clock.advance(Duration::from_secs(60));
    let response = chat.clone().oneshot(request("alice")).await.unwrap();
    response.collect_response().await.unwrap();
    assert_eq!(
        used(&layer, "alice", CounterKind::CostPerMonth).await,
        per_call.as_nanos()
    );

    // Later in February, the month keeps counting across days.
    clock.advance(Duration::from_secs(86_400));
    let response = chat.clone().oneshot(request("alice")).await.unwrap();
    response.collect_response().await.unwrap();
    clock.advance(Duration::from_secs(86_400));
    let response = chat.clone().oneshot(request("alice")).await.unwrap();
    response.collect_response().await.unwrap();
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    let rejection = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<Rejection>())
        .unwrap();
    assert_eq!(rejection.kind, CounterKind::CostPerMonth);
    // February 2027 has 28 days: from Feb 3rd 00:00 the month ends in 26 days.
    assert_eq!(error.retry_after(), Some(Duration::from_secs(26 * 86_400)));
}

#[tokio::test]
async fn usage_is_settled_exactly_on_both_delivery_shapes() {
    for delivery in [Delivery::AllAtOnce, Delivery::OneByOne] {
        let policy = LimitPolicy::new(
            Limits::none()
                .input_tokens(WindowLimit::per_minute(100_000))
                .output_tokens(WindowLimit::per_minute(100_000))
                .cost_per_day(Cost::from_usd(1.0)),
        );
        let layer = LimitsLayer::new(policy)
            .clock(ManualClock::new(start()))
            .prices(prices());
        // Usage in two increments, one of them after `Finish`, as OpenAI streams it.
        let events = vec![
            ChatEvent::Usage {
                usage: usage(300, 0),
            },
            ChatEvent::text("Paris."),
            ChatEvent::finish(FinishReason::Stop),
            ChatEvent::Usage {
                usage: usage(0, 40),
            },
        ];
        let chat = Limited::new(model(events, delivery, Default::default()), layer.clone());
        let response = chat.oneshot(request("alice")).await.unwrap();
        // While the stream is open, the estimate (4,096 output tokens by default) is reserved.
        assert_eq!(
            used(&layer, "alice", CounterKind::OutputTokens).await,
            4_096
        );
        response.collect_response().await.unwrap();
        assert_eq!(
            used(&layer, "alice", CounterKind::InputTokens).await,
            300,
            "{delivery:?}"
        );
        assert_eq!(used(&layer, "alice", CounterKind::OutputTokens).await, 40);
        assert_eq!(
            used(&layer, "alice", CounterKind::CostPerDay).await,
            300 * 150 + 40 * 600
        );
    }
}

#[tokio::test]
async fn usage_from_a_real_openai_leaf_over_http_is_settled() {
    let provider =
        ScriptedProvider::start(|_request, _index| Reply::openai_text("Paris is the capital."))
            .await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("test-key")
        .model(MODEL)
        .build()
        .unwrap();
    let policy = LimitPolicy::new(Limits::none().cost_per_month(Cost::from_usd(10.0)));
    let layer = LimitsLayer::new(policy).prices(prices());
    let chat = layer.layer(leaf);
    let response = chat.oneshot(request("alice")).await.unwrap();
    let response = response.collect_response().await.unwrap();
    assert_eq!(response.text(), "Paris is the capital.");
    // The scripted provider reports 12 prompt and 5 completion tokens.
    assert_eq!(
        used(&layer, "alice", CounterKind::CostPerMonth).await,
        12 * 150 + 5 * 600
    );
}

#[tokio::test]
async fn a_request_naming_no_model_counts_under_the_leafs_model_read_through_tower_middleware() {
    let provider =
        ScriptedProvider::start(|_request, _index| Reply::openai_text("Paris is the capital."))
            .await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("test-key")
        .model(MODEL)
        .build()
        .unwrap();
    // A cost budget needs a price: a request whose model is unknown is refused, so the call below succeeding
    // and being charged at MODEL's price shows the model came from the leaf, not from the request.
    let policy = LimitPolicy::new(Limits::none())
        .model(MODEL, Limits::none().requests(WindowLimit::per_minute(1)))
        .caller("alice", Limits::none().cost_per_month(Cost::from_usd(10.0)));
    let layer = LimitsLayer::new(policy).prices(prices());
    let chat = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .concurrency_limit(8)
        .service(leaf);
    assert_eq!(chat.default_model(), Some(MODEL));
    let unnamed = || {
        ChatRequest::new(vec![Message::user("What is the capital of France?")])
            .with_extension(CallerIdentity::new("alice"))
    };
    let response = chat.clone().oneshot(unnamed()).await.unwrap();
    response.collect_response().await.unwrap();
    assert_eq!(
        used(&layer, "alice", CounterKind::CostPerMonth).await,
        12 * 150 + 5 * 600
    );
    // MODEL's own limit (one request a minute) applies to the unnamed request too.
    let refused = chat.oneshot(unnamed()).await.err().unwrap();
    assert!(matches!(refused.kind(), ErrorKind::RateLimited { .. }));
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_dropped_mid_answer_is_charged_what_was_seen_and_frees_its_slot() {
    let policy = LimitPolicy::new(
        Limits::none()
            .concurrent(1)
            .input_tokens(WindowLimit::per_minute(100_000))
            .output_tokens(WindowLimit::per_minute(100_000)),
    );
    let layer = LimitsLayer::new(policy).clock(ManualClock::new(start()));
    let chat = Limited::new(
        service_fn(|_req: ChatRequest| async {
            // 12 characters of output, then silence: the provider's usage report never comes.
            Ok::<_, ChatError>(hanging(vec![Ok(ChatEvent::text("Paris is the"))]))
        }),
        layer.clone(),
    );
    let mut stream = chat.clone().oneshot(request("alice")).await.unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(ChatEvent::TextDelta { .. }))
    ));
    // One call in progress: a second one waits its turn.
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    // No window to wait for: the documented one-second wait (every 429 carries a Retry-After).
    assert_eq!(error.retry_after(), Some(CONCURRENT_RETRY_AFTER), "{error}");
    assert!(matches!(error.kind(), ErrorKind::RateLimited { .. }));
    let estimated_input = used(&layer, "alice", CounterKind::InputTokens).await;
    assert!(estimated_input > 0);
    drop(stream);
    assert_eq!(used(&layer, "alice", CounterKind::Concurrent).await, 0);
    // Charged the estimated prompt and 12 characters / 4 = 3 output tokens, not the 4,096 reserved.
    assert_eq!(
        used(&layer, "alice", CounterKind::InputTokens).await,
        estimated_input
    );
    assert_eq!(used(&layer, "alice", CounterKind::OutputTokens).await, 3);
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
}

#[tokio::test]
async fn a_stream_that_fails_counts_its_partial_usage() {
    for delivery in [Delivery::AllAtOnce, Delivery::OneByOne] {
        let policy =
            LimitPolicy::new(Limits::none().output_tokens(WindowLimit::per_minute(10_000)));
        let layer = LimitsLayer::new(policy)
            .clock(ManualClock::new(start()))
            .default_max_output_tokens(500);
        let chat = Limited::new(
            service_fn(move |_req: ChatRequest| async move {
                let items = vec![
                    Ok(ChatEvent::text("Par")),
                    Ok(ChatEvent::Usage {
                        usage: usage(20, 7),
                    }),
                    Err(ChatError::new(ErrorKind::Connection, "reset")),
                ];
                Ok::<_, ChatError>(scripted_stream(delivery, items))
            }),
            layer.clone(),
        );
        let response = chat.oneshot(request("alice")).await.unwrap();
        let error = response.collect_response().await.err().unwrap();
        assert_eq!(error.kind(), &ErrorKind::Connection);
        assert_eq!(
            used(&layer, "alice", CounterKind::OutputTokens).await,
            7,
            "{delivery:?}"
        );
    }
}

#[tokio::test]
async fn a_refused_service_call_releases_tokens_but_keeps_the_request_count() {
    let policy = LimitPolicy::new(
        Limits::none()
            .requests(WindowLimit::per_minute(10))
            .output_tokens(WindowLimit::per_minute(10_000))
            .concurrent(1),
    );
    let layer = LimitsLayer::new(policy).clock(ManualClock::new(start()));
    let chat = Limited::new(
        service_fn(|_req: ChatRequest| async {
            Err::<ChatStream, _>(ChatError::new(ErrorKind::Upstream, "overloaded"))
        }),
        layer.clone(),
    );
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Upstream);
    assert_eq!(used(&layer, "alice", CounterKind::Requests).await, 1);
    assert_eq!(used(&layer, "alice", CounterKind::OutputTokens).await, 0);
    assert_eq!(used(&layer, "alice", CounterKind::Concurrent).await, 0);
}

#[tokio::test]
async fn a_response_future_dropped_before_the_answer_frees_its_slot() {
    let policy = LimitPolicy::new(Limits::none().concurrent(1));
    let layer = LimitsLayer::new(policy);
    let mut chat = Limited::new(
        service_fn(|_req: ChatRequest| {
            futures_util::future::pending::<Result<ChatStream, ChatError>>()
        }),
        layer.clone(),
    );
    let future = chat.ready().await.unwrap().call(request("alice"));
    assert_eq!(used(&layer, "alice", CounterKind::Concurrent).await, 1);
    drop(future);
    assert_eq!(used(&layer, "alice", CounterKind::Concurrent).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_against_a_budget_of_a_hundred_admit_exactly_a_hundred() {
    // Requests per window, and a cost budget that admits 100 estimates (each call reserves its estimate).
    let budgets = [
        Limits::none().requests(WindowLimit::per_minute(100)),
        Limits::none().cost_per_day(Cost::from_nanos(100 * 60_000)),
    ];
    for limits in budgets {
        let layer = LimitsLayer::new(LimitPolicy::new(limits.clone()))
            .clock(ManualClock::new(start()))
            .prices(prices())
            .default_max_output_tokens(100);
        let calls = Arc::new(AtomicUsize::new(0));
        // Every call reports the usage it was estimated at, so settling changes nothing.
        let chat = Limited::new(
            model(vec![], Delivery::OneByOne, calls.clone()),
            layer.clone(),
        );
        let barrier = Arc::new(tokio::sync::Barrier::new(1_000));
        let tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let chat = chat.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    // A prompt estimated at 0 tokens: 100 output tokens × $0.60/M = 60,000 nano-dollars.
                    let request = ChatRequest::new(vec![])
                        .model(MODEL)
                        .with_extension(CallerIdentity::new("alice"));
                    match chat.oneshot(request).await {
                        // Held until every task is done: usage settles only when a stream ends.
                        Ok(stream) => Some(stream),
                        Err(e) => {
                            assert!(matches!(e.kind(), ErrorKind::RateLimited { .. }), "{e}");
                            None
                        }
                    }
                })
            })
            .collect();
        let mut streams = Vec::new();
        for task in tasks {
            streams.extend(task.await.unwrap());
        }
        assert_eq!(streams.len(), 100, "{limits:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 100);
        assert_eq!(layer.stats().rejected, 900);
    }
}

#[tokio::test]
async fn inside_a_tool_loop_every_round_is_checked_and_settled() {
    let rounds = Arc::new(AtomicUsize::new(0));
    let model = {
        let rounds = rounds.clone();
        service_fn(move |request: ChatRequest| {
            rounds.fetch_add(1, Ordering::SeqCst);
            let answered = matches!(request.messages.last(), Some(Message::Tool(_)));
            async move {
                let events = if answered {
                    vec![
                        ChatEvent::text("It is 12°C."),
                        ChatEvent::Usage {
                            usage: usage(50, 6),
                        },
                        ChatEvent::finish(FinishReason::Stop),
                    ]
                } else {
                    let call = ToolCall::new("call-1", "weather", json!({"city": "Oslo"}));
                    vec![
                        ChatEvent::ToolCallEnd { index: 0, call },
                        ChatEvent::Usage {
                            usage: usage(30, 10),
                        },
                        ChatEvent::finish(FinishReason::ToolCalls),
                    ]
                };
                Ok::<_, ChatError>(scripted_stream(
                    Delivery::OneByOne,
                    events.into_iter().map(Ok).collect(),
                ))
            }
        })
    };
    let weather = tool_json(
        "weather",
        "Weather in a city",
        json!({"type": "object"}),
        |_args, _ctx| async { Ok::<_, String>("12°C") },
    )
    .compile()
    .unwrap();
    let policy = LimitPolicy::new(
        Limits::none()
            .requests(WindowLimit::per_minute(3))
            .input_tokens(WindowLimit::per_minute(100_000))
            .output_tokens(WindowLimit::per_minute(100_000)),
    );
    let limits = LimitsLayer::new(policy).clock(ManualClock::new(start()));
    let chat = FunctionInvocationLayer::new()
        .tool(weather)
        .unwrap()
        .layer(Limited::new(model, limits.clone()));
    let response = chat.clone().oneshot(request("alice")).await.unwrap();
    let response = response.collect_response().await.unwrap();
    assert_eq!(response.text(), "It is 12°C.");
    assert_eq!(used(&limits, "alice", CounterKind::Requests).await, 2);
    assert_eq!(used(&limits, "alice", CounterKind::InputTokens).await, 80);
    assert_eq!(used(&limits, "alice", CounterKind::OutputTokens).await, 16);

    // One request left in the window: the second turn's second round is refused, mid-loop.
    let response = chat.oneshot(request("alice")).await.unwrap();
    let error = response.collect_response().await.err().unwrap();
    assert!(
        matches!(error.kind(), ErrorKind::RateLimited { .. }),
        "{error}"
    );
    assert_eq!(rounds.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn impossible_calls_are_invalid_requests_not_rate_limits() {
    let policy = LimitPolicy::new(
        Limits::none()
            .output_tokens(WindowLimit::per_minute(1_000))
            .cost_per_day(Cost::from_usd(1.0)),
    );
    let layer = LimitsLayer::new(policy).prices(prices());
    let calls = Arc::new(AtomicUsize::new(0));
    let chat = Limited::new(
        model(answer(1, 1), Delivery::AllAtOnce, calls.clone()),
        layer.clone(),
    );
    let mut big = request("alice");
    big.options.max_output_tokens = Some(5_000);
    let error = chat.clone().oneshot(big).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    assert!(error.message().contains("output_tokens"), "{error}");
    // A cost budget needs a price.
    let error = chat
        .clone()
        .oneshot(request("alice").model("unpriced-model"))
        .await
        .err()
        .unwrap();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    assert!(error.message().contains("no price"), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn per_model_limits_apply_on_top_of_the_callers() {
    let policy = LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(10)))
        .model(
            "gpt-4o",
            Limits::none().requests(WindowLimit::per_minute(1)),
        )
        .caller("vip", Limits::none());
    let layer = LimitsLayer::new(policy).clock(ManualClock::new(start()));
    let chat = Limited::new(
        model(answer(1, 1), Delivery::AllAtOnce, Default::default()),
        layer.clone(),
    );
    drop(
        chat.clone()
            .oneshot(request("alice").model("gpt-4o"))
            .await
            .unwrap(),
    );
    let error = chat
        .clone()
        .oneshot(request("alice").model("gpt-4o"))
        .await
        .err()
        .unwrap();
    let rejection = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<Rejection>())
        .unwrap();
    assert_eq!(rejection.scope.model.as_deref(), Some("gpt-4o"));
    // Other models still have room under the caller's own limit.
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
    let report = layer.usage("alice").await.unwrap();
    assert_eq!(report.counter(CounterKind::Requests).unwrap().used, 2);
    assert_eq!(report.scopes[1].model.as_deref(), Some("gpt-4o"));
    assert_eq!(report.scopes[1].counters[0].used, 1);
    // `vip` has no caller limits, but the model limit still applies to it.
    drop(
        chat.clone()
            .oneshot(request("vip").model("gpt-4o"))
            .await
            .unwrap(),
    );
    assert!(chat
        .clone()
        .oneshot(request("vip").model("gpt-4o"))
        .await
        .is_err());
}

/// Options are methods on the layer; configuring a layer that was already cloned changes only the copy being
/// configured (the clone, and services built from it, keep the configuration and counters they had).
#[test]
fn options_on_a_cloned_layer_configure_a_copy() {
    let base = LimitsLayer::new(LimitPolicy::new(Limits::none().concurrent(1)));
    let priced = base.clone().prices(prices()).chars_per_token(0);
    assert_eq!(priced.price_table(), &prices());
    assert_eq!(base.price_table(), &PriceTable::new());
    // Both still count in the same store: a copy's configuration, not a second set of counters in the store.
    assert!(Arc::ptr_eq(base.limit_store(), priced.limit_store()));
}
