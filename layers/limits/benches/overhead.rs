//! What the limits layer adds to a call: a scripted in-process model (three events, usage included) bare, behind
//! the layer with the in-process store, and behind the layer with the Redis store (`REDIS_URL`, feature
//! `redis`).
//!
//! Criterion: `cargo bench -p tower-chat-limits --features redis --bench overhead`.
//!
//! Counting mode, for callgrind (instructions per call are the slope between two call counts):
//! `LIMITS_COUNT_VARIANT=bare|memory|redis LIMITS_COUNT_CALLS=N target/release/deps/overhead-<hash>`. The
//! `redis` variant also prints the Redis commands the server processed per call (`INFO stats`).

use std::hint::black_box;

use criterion::{criterion_group, Criterion};
use futures_util::StreamExt;
use tower::{service_fn, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, Cost, FinishReason, Message,
    ModelPrice, PriceTable, Usage,
};
use tower_chat_limits::{LimitPolicy, Limited, Limits, LimitsLayer, WindowLimit};

fn model() -> impl tower::Service<
    ChatRequest,
    Response = ChatStream,
    Error = ChatError,
    Future = impl std::future::Future<Output = Result<ChatStream, ChatError>> + Send,
> + Clone
       + Send {
    service_fn(|_req: ChatRequest| async {
        let usage = Usage {
            input_tokens: 12,
            output_tokens: 3,
            ..Usage::default()
        };
        let items = vec![
            Ok(ChatEvent::text("Hi!")),
            Ok(ChatEvent::Usage { usage }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ];
        Ok::<_, ChatError>(scripted_stream(Delivery::AllAtOnce, items))
    })
}

/// Every kind of limit, none of them reached: the layer does all its work on every call.
fn layer(store: Option<tower_chat_limits::MemoryStore>, redis: Option<&str>) -> LimitsLayer {
    let limits = Limits::none()
        .requests(WindowLimit::per_minute(u64::MAX / 4))
        .input_tokens(WindowLimit::per_minute(u64::MAX / 4))
        .output_tokens(WindowLimit::per_minute(u64::MAX / 4))
        .cost_per_day(Cost::from_nanos(u64::MAX / 4))
        .cost_per_month(Cost::from_nanos(u64::MAX / 4))
        .concurrent(1_000_000);
    let layer = LimitsLayer::new(LimitPolicy::new(limits))
        .prices(PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million_usd(0.15, 0.6)));
    match (store, redis) {
        (Some(store), _) => layer.store(store),
        #[cfg(feature = "redis")]
        (None, Some(url)) => {
            let prefix = format!("tower-chat-bench:{}:", std::process::id());
            layer.store(
                tower_chat_limits::RedisStore::builder(url)
                    .prefix(prefix)
                    .build()
                    .unwrap(),
            )
        }
        _ => layer,
    }
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Say hi")])
        .model("gpt-4o-mini")
        .with_extension(CallerIdentity::new("alice"))
}

async fn call<S>(service: S)
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let mut stream = service.oneshot(request()).await.unwrap();
    while let Some(event) = stream.next().await {
        black_box(event.unwrap());
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("limits");
    let bare = model();
    group.bench_function("bare", |b| b.iter(|| runtime.block_on(call(bare.clone()))));
    let memory =
        runtime.block_on(async { Limited::new(model(), layer(Some(Default::default()), None)) });
    group.bench_function("memory_store", |b| {
        b.iter(|| runtime.block_on(call(memory.clone())))
    });
    if let (true, Ok(url)) = (cfg!(feature = "redis"), std::env::var("REDIS_URL")) {
        let redis = runtime.block_on(async { Limited::new(model(), layer(None, Some(&url))) });
        let limits = redis.layer().clone();
        group.bench_function("redis_store", |b| {
            b.iter(|| {
                runtime.block_on(async {
                    call(redis.clone()).await;
                    // Settlements run as tasks: wait for them so each iteration is a whole call.
                    limits.settled().await;
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);

/// Run `LIMITS_COUNT_CALLS` calls of one variant and exit (for callgrind).
fn count(variant: &str) {
    let calls: usize = std::env::var("LIMITS_COUNT_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        match variant {
            "bare" => {
                let service = model();
                for _ in 0..calls {
                    call(service.clone()).await;
                }
            }
            "memory" => {
                let service = Limited::new(model(), layer(Some(Default::default()), None));
                for _ in 0..calls {
                    call(service.clone()).await;
                }
            }
            "redis" => {
                let url = std::env::var("REDIS_URL").expect("REDIS_URL");
                let client = redis::Client::open(url.as_str()).unwrap();
                let mut admin = client.get_multiplexed_async_connection().await.unwrap();
                let service = Limited::new(model(), layer(None, Some(&url)));
                let limits = service.layer().clone();
                // One call first, so the scripts are loaded and the connection is up.
                call(service.clone()).await;
                limits.settled().await;
                let before = commands(&mut admin).await;
                for _ in 0..calls {
                    call(service.clone()).await;
                    limits.settled().await;
                }
                let after = commands(&mut admin).await;
                // The second INFO counts the first one.
                let per_call = (after - before - 1) as f64 / calls as f64;
                println!("redis commands per call: {per_call:.3} ({calls} calls)");
            }
            other => panic!("unknown LIMITS_COUNT_VARIANT {other}"),
        }
    });
}

/// The server's `total_commands_processed`.
async fn commands(connection: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(connection)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

fn main() {
    if let Ok(variant) = std::env::var("LIMITS_COUNT_VARIANT") {
        count(&variant);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
