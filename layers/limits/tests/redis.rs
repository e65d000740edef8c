//! The Redis store against a real Redis (`REDIS_URL`; skipped with a message when unset), and an unreachable
//! one (a closed port) for both failure policies.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use tower::{service_fn, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, Cost, ErrorKind,
    FinishReason, Message, ModelPrice, PriceTable, Usage,
};
use tower_chat_limits::{
    CounterKind, LimitPolicy, Limited, Limits, LimitsLayer, ManualClock, RedisStore, StoreFailure,
    WindowLimit, CONCURRENT_RETRY_AFTER,
};
use tower_chat_testkit::redis_url;

const MODEL: &str = "gpt-4o-mini";

/// A key prefix of this test's own, so that tests running at once never share counters.
fn prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tower-chat-test:{test}:{nanos}:")
}

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_795_860_030)
}

fn prices() -> PriceTable {
    PriceTable::new().with(MODEL, ModelPrice::per_million_usd(0.15, 0.6))
}

fn request(caller: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hello")])
        .model(MODEL)
        .with_extension(CallerIdentity::new(caller))
}

fn layer(url: &str, prefix: &str, limits: Limits, clock: &ManualClock) -> LimitsLayer {
    let store = RedisStore::builder(url).prefix(prefix).build().unwrap();
    LimitsLayer::new(LimitPolicy::new(limits))
        .store(store)
        .clock(clock.clone())
        .prices(prices())
        .default_max_output_tokens(100)
}

fn answering(
    input: u64,
    output: u64,
    calls: Arc<AtomicUsize>,
) -> impl tower::Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send>
       + Clone
       + Send {
    service_fn(move |_req: ChatRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let usage = Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        };
        let items = vec![
            Ok(ChatEvent::text("Hi")),
            Ok(ChatEvent::Usage { usage }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ];
        async move { Ok::<_, ChatError>(scripted_stream(Delivery::OneByOne, items)) }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_share_the_cap() {
    let Some(url) = redis_url() else { return };
    let budgets = [
        Limits::none().requests(WindowLimit::per_minute(100)),
        // 100 estimates of 100 output tokens at $0.60/M (the prompt is empty).
        Limits::none().cost_per_day(Cost::from_nanos(100 * 60_000)),
    ];
    for (n, limits) in budgets.into_iter().enumerate() {
        let prefix = prefix(&format!("two-replicas-{n}"));
        let clock = ManualClock::new(start());
        let calls = Arc::new(AtomicUsize::new(0));
        // Two replicas: separate layers, separate connections, one Redis.
        let replicas = [
            Limited::new(
                answering(0, 100, calls.clone()),
                layer(&url, &prefix, limits.clone(), &clock),
            ),
            Limited::new(
                answering(0, 100, calls.clone()),
                layer(&url, &prefix, limits.clone(), &clock),
            ),
        ];
        let barrier = Arc::new(tokio::sync::Barrier::new(1_000));
        let tasks: Vec<_> = (0..1_000)
            .map(|i| {
                let chat = replicas[i % 2].clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    let request = ChatRequest::new(vec![])
                        .model(MODEL)
                        .with_extension(CallerIdentity::new("alice"));
                    match chat.oneshot(request).await {
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
    }
}

#[tokio::test]
async fn settlement_replaces_the_estimate_and_frees_the_slot() {
    let Some(url) = redis_url() else { return };
    let clock = ManualClock::new(start());
    let limits = Limits::none()
        .requests(WindowLimit::per_minute(10))
        .input_tokens(WindowLimit::per_minute(10_000))
        .output_tokens(WindowLimit::per_minute(10_000))
        .cost_per_month(Cost::from_usd(1.0))
        .concurrent(1);
    let limits_layer = layer(&url, &prefix("settle"), limits, &clock);
    let chat = Limited::new(answering(40, 7, Default::default()), limits_layer.clone());
    let stream = chat.clone().oneshot(request("alice")).await.unwrap();
    let report = limits_layer.usage("alice").await.unwrap();
    assert_eq!(report.counter(CounterKind::Concurrent).unwrap().used, 1);
    assert_eq!(report.counter(CounterKind::OutputTokens).unwrap().used, 100);
    // A second call while the first is in progress: no slot.
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    // No window to wait for: the documented one-second wait (every 429 carries a Retry-After).
    assert_eq!(error.retry_after(), Some(CONCURRENT_RETRY_AFTER), "{error}");
    assert!(matches!(error.kind(), ErrorKind::RateLimited { .. }));
    stream.collect_response().await.unwrap();
    limits_layer.settled().await;
    let report = limits_layer.usage("alice").await.unwrap();
    let used = |kind| report.counter(kind).unwrap().used;
    assert_eq!(used(CounterKind::Requests), 1);
    assert_eq!(used(CounterKind::InputTokens), 40);
    assert_eq!(used(CounterKind::OutputTokens), 7);
    assert_eq!(used(CounterKind::CostPerMonth), 40 * 150 + 7 * 600);
    assert_eq!(used(CounterKind::Concurrent), 0);
    assert_eq!(limits_layer.stats().settle_errors, 0);
}

#[tokio::test]
async fn a_stream_dropped_mid_answer_settles_in_redis() {
    let Some(url) = redis_url() else { return };
    let clock = ManualClock::new(start());
    let limits = Limits::none()
        .output_tokens(WindowLimit::per_minute(10_000))
        .concurrent(1);
    let limits_layer = layer(&url, &prefix("dropped"), limits, &clock);
    let chat = Limited::new(
        service_fn(|_req: ChatRequest| async {
            let events = futures_util::stream::iter([Ok(ChatEvent::text("12345678"))])
                .chain(futures_util::stream::pending());
            Ok::<ChatStream, ChatError>(Box::pin(events))
        }),
        limits_layer.clone(),
    );
    let mut stream = chat.clone().oneshot(request("alice")).await.unwrap();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    limits_layer.settled().await;
    let report = limits_layer.usage("alice").await.unwrap();
    assert_eq!(report.counter(CounterKind::Concurrent).unwrap().used, 0);
    assert_eq!(report.counter(CounterKind::OutputTokens).unwrap().used, 2);
    drop(chat.oneshot(request("alice")).await.unwrap());
}

#[tokio::test]
async fn windows_roll_over_in_redis() {
    let Some(url) = redis_url() else { return };
    let clock = ManualClock::new(start());
    let limits_layer = layer(
        &url,
        &prefix("rollover"),
        Limits::none().requests(WindowLimit::per_minute(1)),
        &clock,
    );
    let chat = Limited::new(answering(1, 1, Default::default()), limits_layer.clone());
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
    clock.advance(Duration::from_secs(30));
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
}

fn unreachable_layer(policy: StoreFailure) -> LimitsLayer {
    // Port 1 on loopback: nothing listens there, so connecting is refused at once.
    let store = RedisStore::builder("redis://127.0.0.1:1")
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    LimitsLayer::new(LimitPolicy::new(
        Limits::none().requests(WindowLimit::per_minute(1)),
    ))
    .store(store)
    .on_store_error(policy)
}

#[tokio::test]
async fn unreachable_redis_fail_closed_refuses_with_a_store_error() {
    let limits = unreachable_layer(StoreFailure::FailClosed);
    let calls = Arc::new(AtomicUsize::new(0));
    let chat = Limited::new(answering(1, 1, calls.clone()), limits.clone());
    let error = chat.oneshot(request("alice")).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Store, "{error}");
    assert!(error.message().contains("Redis reserve"), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(limits.stats().store_errors, 1);
    assert_eq!(limits.stats().admitted_unchecked, 0);
}

#[tokio::test]
async fn unreachable_redis_fail_open_admits_unchecked_and_counts_it() {
    let limits = unreachable_layer(StoreFailure::FailOpen);
    let calls = Arc::new(AtomicUsize::new(0));
    let chat = Limited::new(answering(1, 1, calls.clone()), limits.clone());
    // Over the limit of one per minute, yet admitted: nothing can be counted.
    for _ in 0..2 {
        let stream = chat.clone().oneshot(request("alice")).await.unwrap();
        stream.collect_response().await.unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(limits.stats().store_errors, 2);
    assert_eq!(limits.stats().admitted_unchecked, 2);
    assert_eq!(limits.stats().admitted, 0);
}

/// Two replicas, one team budget in Redis: members calling through either replica are held to it together,
/// the refusal names the team and what it has spent, and a caller named like the team counts apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_budget_in_redis_holds_across_replicas_and_members() {
    let Some(url) = redis_url() else { return };
    let prefix = prefix("team");
    let clock = ManualClock::new(start());
    // 20 estimates of 100 output tokens at $0.60/M (empty prompts); each call uses 100.
    let policy = LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(1_000)))
        .team(
            "research",
            Limits::none().cost_per_day(Cost::from_nanos(20 * 60_000)),
        )
        .member("alice", "research")
        .member("bob", "research");
    let replica = || {
        let store = RedisStore::builder(&url).prefix(&prefix).build().unwrap();
        LimitsLayer::new(policy.clone())
            .store(store)
            .clock(clock.clone())
            .prices(prices())
            .default_max_output_tokens(100)
    };
    let (one, two) = (replica(), replica());
    let calls = Arc::new(AtomicUsize::new(0));
    let replicas = [
        Limited::new(answering(0, 100, calls.clone()), one.clone()),
        Limited::new(answering(0, 100, calls.clone()), two.clone()),
    ];
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let chat = replicas[i % 2].clone();
            let caller = ["alice", "bob"][i / 2 % 2];
            tokio::spawn(async move {
                let request = ChatRequest::new(vec![])
                    .model(MODEL)
                    .with_extension(CallerIdentity::new(caller));
                match chat.oneshot(request).await {
                    Ok(stream) => {
                        stream.collect_response().await.unwrap();
                        None
                    }
                    Err(error) => Some(error),
                }
            })
        })
        .collect();
    let mut refusals = Vec::new();
    for task in tasks {
        refusals.extend(task.await.unwrap());
    }
    one.settled().await;
    two.settled().await;
    assert_eq!(calls.load(Ordering::SeqCst), 20);
    assert_eq!(refusals.len(), 180);
    for error in &refusals {
        assert!(
            matches!(error.kind(), ErrorKind::RateLimited { .. }),
            "{error}"
        );
        assert!(
            error.message().starts_with(
                "team research is over its cost_per_day limit of $0.0012 ($0.0012 used so far, this call \
                 needs $0.00006)"
            ),
            "{error}"
        );
    }
    let report = one.team_usage("research").await.unwrap().unwrap();
    assert_eq!(
        report.counter(CounterKind::CostPerDay).unwrap().used,
        20 * 60_000
    );
    let alice = two.usage("alice").await.unwrap();
    let bob = two.usage("bob").await.unwrap();
    let requests =
        |r: &tower_chat_limits::UsageReport| r.counter(CounterKind::Requests).unwrap().used;
    assert_eq!(requests(&alice) + requests(&bob), 20);
    // A caller named like the team has counters of its own in Redis: the team's spend is not theirs.
    let namesake = Limited::new(answering(0, 100, calls.clone()), one.clone());
    let request = ChatRequest::new(vec![])
        .model(MODEL)
        .with_extension(CallerIdentity::new("research"));
    namesake
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    one.settled().await;
    let namesake = one.usage("research").await.unwrap();
    assert_eq!(namesake.scopes.len(), 1);
    assert_eq!(namesake.counter(CounterKind::Requests).unwrap().used, 1);
}
