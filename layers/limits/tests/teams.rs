//! Team scopes on the in-process store (a member's call counted in its own scopes and its team's, reserved and
//! settled together), the refusal that names the spend so far, and a policy replaced while calls are in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower::{service_fn, Service, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, Cost, ErrorKind,
    FinishReason, ModelPrice, PriceTable, Usage,
};
use tower_chat_limits::{
    CounterKind, LimitPolicy, Limited, Limits, LimitsLayer, ManualClock, Rejection, WindowLimit,
};

const MODEL: &str = "gpt-4o-mini";

/// 2026-11-30T10:00:30Z.
fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_795_860_030)
}

/// $1 per million input and output tokens: a token costs 1,000 nano-dollars.
fn prices() -> PriceTable {
    PriceTable::new().with(MODEL, ModelPrice::per_million_usd(1.0, 1.0))
}

/// An empty prompt, so a call's estimate is its output reservation alone.
fn request(caller: &str) -> ChatRequest {
    ChatRequest::new(vec![])
        .model(MODEL)
        .with_extension(CallerIdentity::new(caller))
}

/// A model that reports `output` tokens on both delivery shapes in turn, counting its calls.
fn model(
    output: u64,
    calls: Arc<AtomicUsize>,
) -> impl Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send> + Clone + Send
{
    service_fn(move |_req: ChatRequest| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let delivery = if n.is_multiple_of(2) {
            Delivery::OneByOne
        } else {
            Delivery::AllAtOnce
        };
        let usage = Usage {
            output_tokens: output,
            ..Usage::default()
        };
        let items = vec![
            Ok(ChatEvent::text("Hi")),
            Ok(ChatEvent::finish(FinishReason::Stop)),
            Ok(ChatEvent::Usage { usage }),
        ];
        async move { Ok::<_, ChatError>(scripted_stream(delivery, items)) }
    })
}

fn layer(policy: LimitPolicy, clock: &ManualClock) -> LimitsLayer {
    LimitsLayer::new(policy)
        .clock(clock.clone())
        .prices(prices())
        .default_max_output_tokens(100)
}

/// $1,000 of nano-dollars per token: `tokens` tokens' worth.
fn tokens(n: u64) -> Cost {
    Cost::from_nanos(n * 1_000)
}

async fn team_used(layer: &LimitsLayer, team: &str, kind: CounterKind) -> u64 {
    let report = layer.team_usage(team).await.unwrap().expect("team limits");
    assert_eq!(report.scopes[0].team.as_deref(), Some(team));
    report.counter(kind).unwrap().used
}

#[tokio::test]
async fn members_share_the_team_budget_and_the_refusal_names_the_team_and_its_spend() {
    let clock = ManualClock::new(start());
    // Each member may spend 1,000 tokens a day; the team 250 in all. A call reserves 100 and uses 60.
    let policy = LimitPolicy::new(Limits::none().cost_per_day(tokens(1_000)))
        .team("research", Limits::none().cost_per_day(tokens(250)))
        .member("alice", "research")
        .member("bob", "research");
    let limits = layer(policy, &clock);
    let calls = Arc::new(AtomicUsize::new(0));
    let chat = Limited::new(model(60, calls.clone()), limits.clone());

    for caller in ["alice", "bob", "alice", "bob"] {
        let answer = chat.clone().oneshot(request(caller)).await;
        match answer {
            Ok(stream) => drop(stream.collect_response().await.unwrap()),
            Err(error) => {
                // 4 × 60 = 240 used: the fourth call's 100 do not fit in 250.
                assert_eq!(calls.load(Ordering::SeqCst), 3, "{error}");
                assert!(matches!(error.kind(), ErrorKind::RateLimited { .. }));
                let rejection = std::error::Error::source(&error)
                    .and_then(|s| s.downcast_ref::<Rejection>())
                    .expect("the rejection is the source");
                assert!(rejection.scope.team);
                assert_eq!(&*rejection.scope.caller, "research");
                assert_eq!(rejection.used, tokens(180).as_nanos());
                assert!(
                    error.message().starts_with(
                        "team research is over its cost_per_day limit of $0.00025 ($0.00018 used so far, \
                         this call needs $0.0001)"
                    ),
                    "{error}"
                );
            }
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Settled with the real usage in the team's counter and in each member's own.
    assert_eq!(
        team_used(&limits, "research", CounterKind::CostPerDay).await,
        tokens(180).as_nanos()
    );
    let alice = limits.usage("alice").await.unwrap();
    assert_eq!(
        alice.counter(CounterKind::CostPerDay).unwrap().used,
        tokens(120).as_nanos()
    );
    let team = alice.scopes.last().unwrap();
    assert_eq!(team.team.as_deref(), Some("research"));
    assert_eq!(team.counters[0].used, tokens(180).as_nanos());
    // Nothing was charged for the refused call: not the member's own counter either.
    let bob = limits.usage("bob").await.unwrap();
    assert_eq!(
        bob.counter(CounterKind::CostPerDay).unwrap().used,
        tokens(60).as_nanos()
    );
    // A caller outside the team is not held by its budget.
    drop(
        chat.clone()
            .oneshot(request("carol"))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn a_team_and_a_caller_of_the_same_name_count_apart() {
    let clock = ManualClock::new(start());
    let policy = LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(2)))
        .team("ops", Limits::none().requests(WindowLimit::per_minute(2)))
        .member("alice", "ops");
    let limits = layer(policy, &clock);
    let chat = Limited::new(model(1, Arc::default()), limits.clone());
    for _ in 0..2 {
        drop(chat.clone().oneshot(request("ops")).await.unwrap());
    }
    // The caller named `ops` has used its two requests; the team `ops` has used none.
    assert_eq!(team_used(&limits, "ops", CounterKind::Requests).await, 0);
    drop(chat.clone().oneshot(request("alice")).await.unwrap());
    assert_eq!(team_used(&limits, "ops", CounterKind::Requests).await, 1);
    let caller = limits.usage("ops").await.unwrap();
    assert_eq!(caller.scopes.len(), 1, "the caller `ops` is in no team");
    assert_eq!(caller.counter(CounterKind::Requests).unwrap().used, 2);
}

#[tokio::test]
async fn a_member_calling_a_model_with_limits_counts_in_three_scopes_at_once() {
    let clock = ManualClock::new(start());
    let policy = LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(10)))
        .model(MODEL, Limits::none().requests(WindowLimit::per_minute(10)))
        .team(
            "research",
            Limits::none().requests(WindowLimit::per_minute(3)),
        )
        .member("alice", "research")
        .member("bob", "research");
    let limits = layer(policy, &clock);
    let chat = Limited::new(model(1, Arc::default()), limits.clone());
    for caller in ["alice", "bob", "alice"] {
        drop(chat.clone().oneshot(request(caller)).await.unwrap());
    }
    let error = chat.clone().oneshot(request("bob")).await.err().unwrap();
    assert!(
        error.message().starts_with(
            "team research is over its requests limit of 3 requests (3 requests used so far)"
        ),
        "{error}"
    );
    let alice = limits.usage("alice").await.unwrap();
    let used: Vec<(Option<&str>, Option<&str>, u64)> = alice
        .scopes
        .iter()
        .map(|s| (s.model.as_deref(), s.team.as_deref(), s.counters[0].used))
        .collect();
    assert_eq!(
        used,
        [
            (None, None, 2),
            (Some(MODEL), None, 2),
            (None, Some("research"), 3)
        ]
    );
}

#[tokio::test]
async fn an_estimate_over_the_team_budget_alone_names_the_team() {
    let clock = ManualClock::new(start());
    let policy = LimitPolicy::new(Limits::none())
        .team("research", Limits::none().cost_per_day(tokens(50)))
        .member("alice", "research");
    let chat = Limited::new(model(1, Arc::default()), layer(policy, &clock));
    let error = chat.oneshot(request("alice")).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest, "{error}");
    assert!(
        error
            .message()
            .contains("limit of team research ($0.00005)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_new_policy_applies_to_the_next_call_everywhere_and_calls_in_flight_settle_under_their_own(
) {
    let clock = ManualClock::new(start());
    let limits = layer(
        LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(1))),
        &clock,
    );
    let calls = Arc::new(AtomicUsize::new(0));
    // A service built before the swap, and one from a clone of the layer.
    let chat = Limited::new(model(40, calls.clone()), limits.clone());
    let other = Limited::new(model(40, calls.clone()), limits.clone());
    // A call in flight under the first policy (its plan cached), then refused: one request a minute.
    let in_flight = chat.clone().oneshot(request("alice")).await.unwrap();
    assert!(chat.clone().oneshot(request("alice")).await.is_err());

    // Raise the limit and add a team budget; the same services admit at once, and count in the team.
    limits.set_policy(
        LimitPolicy::new(Limits::none().requests(WindowLimit::per_minute(5)))
            .team("research", Limits::none().cost_per_day(tokens(150)))
            .member("alice", "research"),
    );
    assert!(limits.policy().team_of("alice") == Some("research"));
    let after = other.clone().oneshot(request("alice")).await.unwrap();
    assert_eq!(
        team_used(&limits, "research", CounterKind::CostPerDay).await,
        tokens(100).as_nanos()
    );
    // The call admitted before settles into the scopes it was admitted with (not the team's).
    drop(in_flight.collect_response().await.unwrap());
    assert_eq!(
        team_used(&limits, "research", CounterKind::CostPerDay).await,
        tokens(100).as_nanos()
    );
    drop(after.collect_response().await.unwrap());
    assert_eq!(
        team_used(&limits, "research", CounterKind::CostPerDay).await,
        tokens(40).as_nanos()
    );
    // The counters carried over: two requests of five used (the one before the swap and the one after).
    assert_eq!(
        limits
            .usage("alice")
            .await
            .unwrap()
            .counter(CounterKind::Requests)
            .unwrap()
            .used,
        2
    );
    // Lowering the budget takes effect on the next call too.
    limits.set_policy(
        LimitPolicy::new(Limits::none())
            .team("research", Limits::none().cost_per_day(tokens(120)))
            .member("alice", "research"),
    );
    let error = chat.clone().oneshot(request("alice")).await.err().unwrap();
    assert!(error.message().starts_with("team research"), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
