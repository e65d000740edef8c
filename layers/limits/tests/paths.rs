//! Every way a call can go through the layer reserves before it is sent and settles after: a call dropped while
//! a networked store decides, and a call admitted unchecked when the store fails (fail-open), which is charged
//! its real usage once it ends. A store double wraps the in-process store to answer later or fail on demand.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, UNIX_EPOCH};

use futures_util::FutureExt;
use tokio::sync::Notify;
use tower::{service_fn, Service, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, Cost,
    FinishReason, ModelPrice, PriceTable, Usage,
};
use tower_chat_limits::{
    Admission, CounterKind, CounterUsage, Demand, LimitPolicy, LimitStore, LimitStoreError,
    Limited, Limits, LimitsLayer, ManualClock, MemoryStore, Scope, ScopeKey, StoreFailure,
    StoreReply, Ticket, WindowLimit,
};

const MODEL: &str = "gpt-4o-mini";

/// The in-process store, answering reservations only when `gate` opens, or failing them while `failing`.
#[derive(Debug, Default)]
struct Doubled {
    inner: MemoryStore,
    gate: Option<Arc<Notify>>,
    failing: AtomicBool,
}

impl LimitStore for Doubled {
    fn resolve(&self, scope: &ScopeKey) -> Option<Arc<dyn Any + Send + Sync>> {
        self.inner.resolve(scope)
    }

    fn reserve(&self, ticket: &Ticket) -> StoreReply<Admission> {
        if self.failing.load(Ordering::SeqCst) {
            return StoreReply::Ready(Err(LimitStoreError::new("the store is down")));
        }
        // Reserved now, answered later: as a networked store whose script ran before its reply arrived.
        let answer = self.inner.reserve(ticket);
        match &self.gate {
            Some(gate) => {
                let gate = gate.clone();
                StoreReply::Pending(Box::pin(async move {
                    gate.notified().await;
                    answer.wait().await
                }))
            }
            None => answer,
        }
    }

    fn settle(&self, ticket: &Ticket, actual: &Demand) -> StoreReply<()> {
        self.inner.settle(ticket, actual)
    }

    fn usage(&self, scope: &Scope, now: u64) -> StoreReply<Vec<CounterUsage>> {
        self.inner.usage(scope, now)
    }
}

fn layer(store: Arc<Doubled>) -> LimitsLayer {
    let limits = Limits::none()
        .requests(WindowLimit::per_minute(10))
        .cost_per_day(Cost::from_usd(1.0))
        .concurrent(2);
    LimitsLayer::new(
        LimitPolicy::new(limits)
            .team("research", Limits::none().cost_per_day(Cost::from_usd(1.0)))
            .member("alice", "research"),
    )
    .store_shared(store)
    .clock(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_795_860_030),
    ))
    // $1 per million tokens: a token is 1,000 nano-dollars.
    .prices(PriceTable::new().with(MODEL, ModelPrice::per_million_usd(1.0, 1.0)))
    .default_max_output_tokens(100)
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![])
        .model(MODEL)
        .with_extension(CallerIdentity::new("alice"))
}

fn model(
    calls: Arc<AtomicUsize>,
) -> impl Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send> + Clone + Send
{
    service_fn(move |_req: ChatRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let usage = Usage {
            output_tokens: 30,
            ..Usage::default()
        };
        let items = vec![
            Ok(ChatEvent::text("Hi")),
            Ok(ChatEvent::finish(FinishReason::Stop)),
            Ok(ChatEvent::Usage { usage }),
        ];
        async move { Ok::<_, ChatError>(scripted_stream(Delivery::OneByOne, items)) }
    })
}

/// `(requests, cost_per_day, concurrent)` of alice, and the team's cost.
async fn counters(limits: &LimitsLayer) -> (u64, u64, u64, u64) {
    let report = limits.usage("alice").await.unwrap();
    let used = |kind| report.counter(kind).unwrap().used;
    let team = report.scopes.last().unwrap();
    assert_eq!(team.team.as_deref(), Some("research"));
    (
        used(CounterKind::Requests),
        used(CounterKind::CostPerDay),
        used(CounterKind::Concurrent),
        team.counters[0].used,
    )
}

#[tokio::test]
async fn a_call_dropped_while_the_store_decides_gives_back_its_reservation() {
    let gate = Arc::new(Notify::new());
    let store = Arc::new(Doubled {
        gate: Some(gate.clone()),
        ..Doubled::default()
    });
    let limits = layer(store);
    let calls = Arc::new(AtomicUsize::new(0));
    let mut chat = Limited::new(model(calls.clone()), limits.clone());
    let mut future = chat.call(request()).boxed();
    // Polled once: the store has reserved and the answer is on its way.
    let pending =
        std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_pending())).await;
    assert!(pending);
    // Reserved in the store: one request, 100 tokens' estimate, a slot, the team's estimate too.
    assert_eq!(counters(&limits).await, (1, 100_000, 1, 100_000));
    drop(future);
    gate.notify_one();
    limits.settled().await;
    // The call never reached the model: its request stays counted, the rest is given back.
    assert_eq!(counters(&limits).await, (1, 0, 0, 0));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_call_admitted_unchecked_is_charged_its_real_usage_when_it_ends() {
    let store = Arc::new(Doubled::default());
    let limits = layer(store.clone()).on_store_error(StoreFailure::FailOpen);
    let calls = Arc::new(AtomicUsize::new(0));
    let chat = Limited::new(model(calls.clone()), limits.clone());
    // A checked call first, so every counter has a window.
    chat.clone()
        .oneshot(request())
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(counters(&limits).await, (1, 30_000, 0, 30_000));
    store.failing.store(true, Ordering::SeqCst);
    let stream = chat.clone().oneshot(request()).await.unwrap();
    assert_eq!(limits.stats().admitted_unchecked, 1);
    store.failing.store(false, Ordering::SeqCst);
    stream.collect_response().await.unwrap();
    limits.settled().await;
    // The unchecked call's 30 tokens are charged to alice and her team; it held no slot and frees none.
    assert_eq!(counters(&limits).await, (1, 60_000, 0, 60_000));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
