//! The layer over scripted models: replay in both shapes, what is never stored, single flight, failing stores,
//! per-request control, scopes, the tool loop inside, and budgets outside.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::json;
use tower::{Layer, Service, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    BoxChatService, CancellationToken, ChatError, ChatEvent, ChatRequest, ChatStream,
    ChatStreamExt, ErrorKind, FinishReason, Message, ModelMetadata, Usage,
};
use tower_chat_cache::{
    CacheControl, CacheKey, CacheLayer, CacheOutcome, CacheScope, CacheStatus, CacheStore,
    CacheStoreError, CacheTtl, CachedAnswer,
};

/// Call `service` with `request`, returning the cache's status and everything the stream yielded.
async fn call<S>(
    service: &S,
    request: ChatRequest,
) -> (CacheStatus, Vec<ChatEvent>, Option<ChatError>)
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone,
{
    let outcome = CacheOutcome::new();
    let (events, error) = run(service.clone(), request.with_extension(outcome.clone())).await;
    (outcome.get().expect("the cache decided"), events, error)
}

fn marked(events: &[ChatEvent]) -> Vec<ChatEvent> {
    events
        .iter()
        .cloned()
        .map(|event| match event {
            ChatEvent::Usage { mut usage } => {
                usage.from_response_cache = true;
                ChatEvent::Usage { usage }
            }
            other => other,
        })
        .collect()
}

#[tokio::test]
async fn a_hit_replays_the_answer_in_the_shape_each_request_asks() {
    for shape in SHAPES {
        for first_streamed in [true, false] {
            let layer = CacheLayer::new();
            let (cache, model) = cached_answer(&layer, shape, rich_answer());
            let first = ask("alice", "Hi").stream(first_streamed);
            let (status, events, error) = call(&cache, first).await;
            assert_eq!((status, error.is_none()), (CacheStatus::Miss, true));
            if first_streamed {
                assert_eq!(
                    events,
                    rich_answer(),
                    "the caller who paid sees the model's own events"
                );
            } else {
                assert_eq!(text(&events), "Hello!");
            }

            // Streamed: the same events, one by one, usage marked as replayed.
            let (status, streamed, _) = call(&cache, ask("alice", "Hi").stream(true)).await;
            assert_eq!(status, CacheStatus::Hit, "{shape:?}");
            assert_eq!(streamed, marked(&rich_answer()), "{shape:?}");

            // Whole: text and reasoning in one piece each.
            let (status, whole, _) = call(&cache, ask("alice", "Hi").stream(false)).await;
            assert_eq!(status, CacheStatus::Hit);
            assert_eq!(text(&whole), "Hello!");
            assert_eq!(
                whole
                    .iter()
                    .filter(|e| matches!(
                        e,
                        ChatEvent::TextDelta { .. } | ChatEvent::ReasoningDelta { .. }
                    ))
                    .count(),
                2,
                "{whole:?}"
            );
            let response = respond(cache.clone(), ask("alice", "Hi").stream(false)).await;
            assert_eq!(response.text(), "Hello!");
            assert!(response.usage.from_response_cache);
            assert_eq!(response.usage.input_tokens, 20);

            assert_eq!(model.calls(), 1, "{shape:?} {first_streamed}");
            let stats = layer.stats();
            assert_eq!((stats.misses, stats.hits, stats.stored), (1, 3, 1));
        }
    }
}

/// A model whose n-th call gets the n-th script (a service error, or the items of its stream).
fn answering(scripts: Vec<Result<Items, ErrorKind>>, calls: Arc<AtomicUsize>) -> BoxChatService {
    let scripts = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(
        scripts,
    )));
    let service = tower::service_fn(move |_req: ChatRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let script = scripts.lock().unwrap().pop_front().expect("scripted");
        async move {
            match script {
                Ok(items) => Ok(stalled_unless_ended(items)),
                Err(kind) => Err(ChatError::new(kind, "refused upstream")),
            }
        }
    });
    BoxChatService::with_metadata(service, ModelMetadata::new("openai").model(MODEL))
}

/// The items, then the end if they hold a finish or an error; otherwise a stream that never ends (a stalled
/// upstream).
fn stalled_unless_ended(items: Items) -> ChatStream {
    let ends = items
        .iter()
        .any(|i| matches!(i, Err(_) | Ok(ChatEvent::Finish { .. })));
    if ends {
        scripted_stream(Delivery::OneByOne, items)
    } else {
        hanging(items)
    }
}

/// What the model does in each case of `failed_cancelled_refused_and_filtered_answers_are_never_stored`.
fn script(case: &str) -> Result<Items, ErrorKind> {
    match case {
        "failed" => Ok(vec![
            Ok(ChatEvent::text("Hel")),
            Err(ChatError::new(ErrorKind::Connection, "reset")),
        ]),
        "filtered or refused" => Ok(vec![
            Ok(ChatEvent::text("I can't")),
            Ok(ChatEvent::finish(FinishReason::ContentFilter)),
        ]),
        "refused upstream" => Err(ErrorKind::RateLimited { retry_after: None }),
        _ => Ok(vec![Ok(ChatEvent::text("Hel"))]),
    }
}

#[tokio::test]
async fn failed_cancelled_refused_and_filtered_answers_are_never_stored() {
    for name in [
        "failed",
        "filtered or refused",
        "refused upstream",
        "cancelled",
    ] {
        let calls = counter();
        let layer = CacheLayer::new();
        let cache = layer.layer(answering(vec![script(name), script(name)], calls.clone()));
        for round in 0..2 {
            let token = CancellationToken::new();
            let request = ask("alice", "Hi").with_extension(token.clone());
            let outcome = CacheOutcome::new();
            match cache
                .clone()
                .oneshot(request.with_extension(outcome.clone()))
                .await
            {
                Ok(mut stream) => {
                    let first = stream.next().await;
                    assert!(
                        matches!(first, Some(Ok(ChatEvent::TextDelta { .. }))),
                        "{name}"
                    );
                    if name == "cancelled" {
                        token.cancel();
                    }
                    let rest: Vec<_> = stream.collect().await;
                    if name != "filtered or refused" {
                        assert!(matches!(rest.last(), Some(Err(_))), "{name}: {rest:?}");
                    }
                }
                Err(error) => assert_eq!(error.message(), "refused upstream", "{name}"),
            }
            assert_eq!(
                outcome.get(),
                Some(CacheStatus::Miss),
                "{name} round {round}"
            );
            // The flight is over before the next identical call (a cancelled one once its task saw everyone leave).
            until("the call in flight ends", || async {
                layer.stats().in_flight == 0
            })
            .await;
        }
        assert_eq!(
            count(&calls),
            2,
            "{name}: the second call reached the model"
        );
        assert_eq!(layer.stats().stored, 0, "{name}");
    }
}

/// A leaf whose calls wait until `gate` opens before they are sent: identical calls pile up meanwhile.
fn gated(leaf: OpenAiChat, gate: tokio::sync::watch::Receiver<bool>) -> BoxChatService {
    let service = tower::service_fn(move |request: ChatRequest| {
        let mut gate = gate.clone();
        let leaf = leaf.clone();
        async move {
            let _ = gate.wait_for(|open| *open).await;
            leaf.oneshot(request).await
        }
    });
    BoxChatService::with_metadata(service, ModelMetadata::new("openai").model(MODEL))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_identical_calls_reach_the_provider_once() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hello from upstream")).await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-test")
        .model(MODEL)
        .build()
        .unwrap();
    let (open, gate) = tokio::sync::watch::channel(false);
    let layer = CacheLayer::new();
    let cache = layer.layer(gated(leaf, gate));

    let calls: Vec<_> = (0..100)
        .map(|i| {
            let cache = cache.clone();
            // Half ask for a stream, half for a whole response: one upstream call serves both shapes.
            let request = ask("alice", "Hi").stream(i % 2 == 0);
            tokio::spawn(async move { cache.oneshot(request).await?.collect_response().await })
        })
        .collect();
    until("99 calls join the first", || async {
        layer.stats().callers_in_flight == 100
    })
    .await;
    open.send_replace(true);
    for call in calls {
        let response = within("a call", call).await.unwrap().unwrap();
        assert_eq!(response.text(), "Hello from upstream");
    }
    assert_eq!(provider.requests().len(), 1, "one upstream call");
    let stats = layer.stats();
    assert_eq!((stats.misses, stats.joined, stats.hits), (1, 99, 0));
    until("the answer is stored", || async {
        layer.stats().stored == 1
    })
    .await;
    let (status, events, _) = call(&cache, ask("alice", "Hi")).await;
    assert_eq!(
        (status, text(&events).as_str()),
        (CacheStatus::Hit, "Hello from upstream")
    );
    assert_eq!(provider.requests().len(), 1);
}

/// A stream of `first`, then (once `gate` opens) `rest`.
fn in_two_steps(
    first: Vec<ChatEvent>,
    rest: Vec<ChatEvent>,
    gate: tokio::sync::watch::Receiver<bool>,
) -> ChatStream {
    let rest = futures_util::stream::once(async move {
        let mut gate = gate;
        let _ = gate.wait_for(|open| *open).await;
        futures_util::stream::iter(rest.into_iter().map(Ok))
    })
    .flatten();
    Box::pin(futures_util::stream::iter(first.into_iter().map(Ok)).chain(rest))
}

#[tokio::test]
async fn the_first_callers_cancellation_does_not_fail_the_callers_that_joined() {
    for leader_streams in [true, false] {
        let (open, gate) = tokio::sync::watch::channel(false);
        let (chat, model) = streaming_model(move |_| {
            let answer = answer("Hello!");
            in_two_steps(answer[..1].to_vec(), answer[1..].to_vec(), gate.clone())
        });
        let layer = CacheLayer::new();
        let cache = layer.layer(leaf(chat));

        let token = CancellationToken::new();
        let leader = ask("alice", "Hi")
            .stream(leader_streams)
            .with_extension(token.clone());
        let mut leading = cache.clone().oneshot(leader).await.unwrap();
        let joining = cache.clone();
        let follower =
            tokio::spawn(async move { call(&joining, ask("alice", "Hi").stream(true)).await });
        until("the second call joins", || async {
            layer.stats().joined == 1
        })
        .await;

        token.cancel();
        let cancelled: Vec<_> = leading.by_ref().collect().await;
        assert!(
            matches!(cancelled.last(), Some(Err(e)) if *e.kind() == ErrorKind::Cancelled),
            "{cancelled:?}"
        );
        drop(leading);
        open.send_replace(true);

        let (status, events, error) = within("the follower", follower).await.unwrap();
        assert_eq!(status, CacheStatus::Joined);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(events, marked(&answer("Hello!")));
        until("the answer is stored", || async {
            layer.stats().stored == 1
        })
        .await;
        assert_eq!(call(&cache, ask("alice", "Hi")).await.0, CacheStatus::Hit);
        assert_eq!(model.calls(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_joined_a_stuck_call_calls_the_model_itself() {
    let calls = counter();
    let counted = calls.clone();
    // The first call is never accepted; the second answers.
    let service = tower::service_fn(move |_req: ChatRequest| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                std::future::pending::<()>().await;
            }
            Ok::<_, ChatError>(scripted_stream(
                Delivery::AllAtOnce,
                answer("Hello!").into_iter().map(Ok).collect(),
            ))
        }
    });
    let layer = CacheLayer::new().follow_timeout(Duration::from_secs(5));
    let cache = layer.layer(BoxChatService::with_metadata(
        service,
        ModelMetadata::new("openai").model(MODEL),
    ));
    let stuck = tokio::spawn(cache.clone().oneshot(ask("alice", "Hi")));
    until("the first call is in flight", || async {
        count(&calls) == 1
    })
    .await;

    let (status, events, error) = call(&cache, ask("alice", "Hi")).await;
    assert_eq!((status, error.is_none()), (CacheStatus::Miss, true));
    assert_eq!(text(&events), "Hello!");
    assert_eq!(count(&calls), 2);
    assert!(!stuck.is_finished());
    stuck.abort();
}

/// A store that fails every operation, or never answers.
#[derive(Debug)]
struct BrokenStore {
    hangs: bool,
}

impl CacheStore for BrokenStore {
    fn get(&self, _key: CacheKey) -> BoxFuture<'_, Result<Option<CachedAnswer>, CacheStoreError>> {
        self.answer()
    }

    fn put(
        &self,
        _key: CacheKey,
        _answer: CachedAnswer,
        _ttl: Duration,
    ) -> BoxFuture<'_, Result<(), CacheStoreError>> {
        self.answer()
    }
}

impl BrokenStore {
    fn answer<T: Send + 'static>(&self) -> BoxFuture<'static, Result<T, CacheStoreError>> {
        if self.hangs {
            Box::pin(std::future::pending())
        } else {
            let failed: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(std::future::ready(
                Err(CacheStoreError::new("disk on fire")),
            ));
            failed
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_or_hangs_is_a_miss() {
    for hangs in [false, true] {
        let layer = CacheLayer::new()
            .store(BrokenStore { hangs })
            .store_timeout(Duration::from_millis(100));
        let (cache, model) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
        for _ in 0..2 {
            let (status, events, error) = call(&cache, ask("alice", "Hi")).await;
            assert_eq!(
                (status, error.is_none()),
                (CacheStatus::Miss, true),
                "{hangs}"
            );
            assert_eq!(text(&events), "Hello!");
            until("the call in flight ends", || async {
                layer.stats().in_flight == 0
            })
            .await;
        }
        assert_eq!(model.calls(), 2);
        // Two reads and two writes, each failed or timed out.
        assert_eq!(layer.stats().store_errors, 4, "{hangs}");
    }
}

#[tokio::test]
async fn no_store_bypasses_and_no_cache_refreshes() {
    let layer = CacheLayer::new();
    let (cache, model) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
    let stored = |n| {
        let layer = layer.clone();
        async move { until("stored", || async { layer.stats().stored == n }).await }
    };
    assert_eq!(call(&cache, ask("alice", "Hi")).await.0, CacheStatus::Miss);
    stored(1).await;

    let bypass = ask("alice", "Hi").with_extension(CacheControl::NoStore);
    let (status, events, _) = call(&cache, bypass).await;
    assert_eq!(
        (status, status.header_value()),
        (CacheStatus::Bypass, "bypass")
    );
    assert_eq!(events, answer("Hello!"), "the model's own usage, unmarked");
    assert_eq!(model.calls(), 2);

    let refresh = ask("alice", "Hi").with_extension(CacheControl::NoCache);
    assert_eq!(call(&cache, refresh).await.0, CacheStatus::Miss);
    assert_eq!(model.calls(), 3);
    stored(2).await;

    let (status, _, _) = call(&cache, ask("alice", "Hi")).await;
    assert_eq!((status, status.header_value()), (CacheStatus::Hit, "hit"));
    assert_eq!(model.calls(), 3);
    assert_eq!(layer.stats().bypasses, 1);
}

#[tokio::test]
async fn a_zero_time_to_live_turns_caching_off_for_that_model() {
    let layer = CacheLayer::new().model_ttl("o3", Duration::ZERO);
    let (cache, model) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
    for _ in 0..2 {
        assert_eq!(
            call(&cache, ask("alice", "Hi").model("o3")).await.0,
            CacheStatus::Bypass
        );
    }
    assert_eq!(model.calls(), 2);
    // The default model keeps the default time to live.
    assert_eq!(call(&cache, ask("alice", "Hi")).await.0, CacheStatus::Miss);
    until("stored", || async { layer.stats().stored == 1 }).await;
    assert_eq!(
        call(&cache, ask("alice", "Hi").model(MODEL)).await.0,
        CacheStatus::Hit,
        "the default model named"
    );
}

#[tokio::test]
async fn a_requests_own_time_to_live_overrides_its_models() {
    let layer = CacheLayer::new().model_ttl("o3", Duration::ZERO);
    let (cache, model) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
    // A request's zero bypasses a model that is cached…
    for _ in 0..2 {
        let request = ask("alice", "Hi").with_extension(CacheTtl(Duration::ZERO));
        assert_eq!(call(&cache, request).await.0, CacheStatus::Bypass);
    }
    assert_eq!(model.calls(), 2);
    // …and a request's own time to live caches a model that is not.
    let keep = || {
        ask("alice", "Hi")
            .model("o3")
            .with_extension(CacheTtl(Duration::from_secs(60)))
    };
    assert_eq!(call(&cache, keep()).await.0, CacheStatus::Miss);
    until("stored", || async { layer.stats().stored == 1 }).await;
    assert_eq!(call(&cache, keep()).await.0, CacheStatus::Hit);
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn callers_never_share_answers_unless_the_scope_is_shared() {
    for (scope, bob) in [
        (CacheScope::Caller, CacheStatus::Miss),
        (CacheScope::Shared, CacheStatus::Hit),
    ] {
        let layer = CacheLayer::new().scope(scope.clone());
        let (cache, _) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
        assert_eq!(call(&cache, ask("alice", "Hi")).await.0, CacheStatus::Miss);
        until("stored", || async { layer.stats().stored == 1 }).await;
        assert_eq!(call(&cache, ask("bob", "Hi")).await.0, bob, "{scope:?}");
        assert_eq!(call(&cache, ask("alice", "Hi")).await.0, CacheStatus::Hit);
        assert_eq!(
            call(&cache, user("Hi")).await.0,
            bob,
            "anonymous, {scope:?}"
        );
    }
}

#[tokio::test]
async fn inside_the_tool_loop_hits_replay_model_calls_and_the_tools_still_run() {
    use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};
    for shape in SHAPES {
        let runs = counter();
        let ran = runs.clone();
        let weather = tool_json(
            "weather",
            "The weather in a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            move |_args, _ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, String>("sunny") }
            },
        );
        // Round one calls the tool; round two (with its result) answers.
        let (chat, model) = model(shape, |request| {
            let answered = matches!(request.messages.last(), Some(Message::Tool(_)));
            let events = if answered {
                answer("It is sunny.")
            } else {
                calls(&[("c1", "weather", json!({"city": "Oslo"}))])
            };
            events.into_iter().map(Ok).collect()
        });
        let layer = CacheLayer::new();
        let looped = FunctionInvocationLayer::new()
            .tool(weather)
            .unwrap()
            .layer(layer.layer(leaf(chat)));

        for turn in 0..2 {
            let response = respond(looped.clone(), ask("alice", "Weather in Oslo?")).await;
            assert_eq!(response.text(), "It is sunny.", "{shape:?} turn {turn}");
            assert_eq!(count(&runs), turn + 1, "the tool runs on every turn");
            assert_eq!(response.usage.from_response_cache, turn == 1, "{shape:?}");
            until("both rounds stored", || async { layer.stats().stored == 2 }).await;
        }
        assert_eq!(
            model.calls(),
            2,
            "{shape:?}: the second turn's rounds were both hits"
        );
        assert_eq!(layer.stats().hits, 2);
    }
}

#[tokio::test]
async fn a_budget_outside_the_cache_is_charged_nothing_for_a_hit() {
    use tower_chat_limits::{CounterKind, LimitPolicy, Limits, LimitsLayer, WindowLimit};
    let layer = CacheLayer::new();
    let (cache, _) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
    let limits = LimitsLayer::new(LimitPolicy::new(
        Limits::none()
            .input_tokens(WindowLimit::per_minute(100_000))
            .output_tokens(WindowLimit::per_minute(100_000)),
    ));
    let chat = limits.layer(cache);
    let used = |kind| {
        let limits = limits.clone();
        async move {
            limits
                .usage("alice")
                .await
                .unwrap()
                .counter(kind)
                .unwrap()
                .used
        }
    };

    assert_eq!(call(&chat, ask("alice", "Hi")).await.0, CacheStatus::Miss);
    until("stored", || async { layer.stats().stored == 1 }).await;
    let charged = (
        used(CounterKind::InputTokens).await,
        used(CounterKind::OutputTokens).await,
    );
    assert_eq!(charged, (20, 3));

    let (status, events, _) = call(&chat, ask("alice", "Hi")).await;
    assert_eq!(status, CacheStatus::Hit);
    assert_eq!(
        usages(&events),
        vec![Usage {
            input_tokens: 20,
            output_tokens: 3,
            from_response_cache: true,
            ..Usage::default()
        }]
    );
    let after = (
        used(CounterKind::InputTokens).await,
        used(CounterKind::OutputTokens).await,
    );
    assert_eq!(after, charged, "the replay charged no tokens");
}
