//! Overhead of the tracing layer per call and per event, against the bare inner service.
//!
//! `cargo bench -p tower-chat-tracing -- --warm-up-time 1 --measurement-time 3`
//!
//! Times are the benchmark thread's CPU time, not wall time: on a shared machine wall time mostly measures how
//! often the thread was descheduled, which swamps differences of a few nanoseconds per event.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use cpu_time::ThreadTime;
use criterion::{criterion_group, criterion_main, Bencher, BenchmarkId, Criterion, Throughput};
use futures_util::stream;
use futures_util::task::noop_waker_ref;
use tower::{service_fn, Layer, Service};
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, Message};
use tower_chat_tracing::TracingLayer;
use tracing_subscriber::layer::SubscriberExt;

/// Drive a future that is ready without waiting (everything here is).
fn now<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(noop_waker_ref()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the scripted service never waits"),
    }
}

/// Call the service and drain its stream; returns the number of events.
fn run<S>(service: &mut S, request: &ChatRequest) -> usize
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let mut stream = now(service.call(request.clone())).unwrap();
    let mut cx = Context::from_waker(noop_waker_ref());
    let mut n = 0;
    while let Poll::Ready(Some(item)) = stream.as_mut().poll_next(&mut cx) {
        item.unwrap();
        n += 1;
    }
    n
}

/// Time `iters` calls in CPU time of this thread.
fn bench_calls<S>(b: &mut Bencher<'_>, service: &mut S, request: &ChatRequest, events: usize)
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    b.iter_custom(|iters| {
        let start = ThreadTime::now();
        for _ in 0..iters {
            assert_eq!(run(service, request), events);
        }
        start.elapsed()
    })
}

fn leaf(
    deltas: usize,
) -> impl Service<
    ChatRequest,
    Response = ChatStream,
    Error = ChatError,
    Future = std::future::Ready<Result<ChatStream, ChatError>>,
> + Clone {
    service_fn(move |_req: ChatRequest| {
        let events = (0..deltas)
            .map(|_| Ok(ChatEvent::text("tok")))
            .chain(std::iter::once(Ok(ChatEvent::finish(FinishReason::Stop))));
        std::future::ready(Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events))))
    })
}

fn overhead(c: &mut Criterion) {
    let request = ChatRequest::new(vec![Message::user("hello")]).model("gpt-4o-mini");
    for deltas in [0usize, 256] {
        let events = deltas + 1;
        let mut group = c.benchmark_group(format!("call_{events}_events"));
        group.throughput(Throughput::Elements(events as u64));

        let mut bare = leaf(deltas);
        group.bench_function(BenchmarkId::from_parameter("bare"), |b| {
            bench_calls(b, &mut bare, &request, events)
        });

        let mut traced = TracingLayer::new().provider("openai").layer(leaf(deltas));
        group.bench_function(BenchmarkId::from_parameter("traced_no_subscriber"), |b| {
            bench_calls(b, &mut traced, &request, events)
        });

        // A subscriber that enables every span and event and throws them away.
        tracing::subscriber::with_default(tracing_subscriber::registry(), || {
            group.bench_function(
                BenchmarkId::from_parameter("traced_discarding_subscriber"),
                |b| bench_calls(b, &mut traced, &request, events),
            );
            let mut content = TracingLayer::new()
                .provider("openai")
                .record_content(true)
                .layer(leaf(deltas));
            group.bench_function(
                BenchmarkId::from_parameter("traced_content_discarding_subscriber"),
                |b| bench_calls(b, &mut content, &request, events),
            );
        });

        // What OTLP export adds (the gateway with OTEL_EXPORTER_OTLP_ENDPOINT set): every span turned into an
        // OpenTelemetry span by `tracing-opentelemetry` and handed to a batch processor (whose exporter drops
        // the batches: the network is not measured), and the GenAI histograms recorded into the SDK.
        {
            use opentelemetry::trace::TracerProvider as _;
            let spans = opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_batch_exporter(opentelemetry_sdk::testing::trace::NoopSpanExporter::new())
                .build();
            let meters = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
                // Collected once an hour: never during the run, so only recording is measured.
                .with_reader(
                    opentelemetry_sdk::metrics::PeriodicReader::builder(
                        opentelemetry_sdk::metrics::InMemoryMetricExporter::default(),
                    )
                    .with_interval(std::time::Duration::from_secs(3600))
                    .build(),
                )
                .build();
            let mut exported = TracingLayer::new()
                .provider("openai")
                .metrics(tower_chat_tracing::OpenTelemetryMetrics::new(
                    &opentelemetry::metrics::MeterProvider::meter(&meters, "bench"),
                ))
                .layer(leaf(deltas));
            // As `Otlp::tracing_layer` sets it up (no busy / idle tracking, no context activation), and with the
            // crate's defaults.
            let subscriber = tracing_subscriber::registry().with(
                tracing_opentelemetry::layer()
                    .with_tracer(spans.tracer("bench"))
                    .with_tracked_inactivity(false)
                    .with_context_activation(false),
            );
            tracing::subscriber::with_default(subscriber, || {
                group.bench_function(BenchmarkId::from_parameter("traced_otlp_export"), |b| {
                    bench_calls(b, &mut exported, &request, events)
                });
            });
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(spans.tracer("bench")));
            tracing::subscriber::with_default(subscriber, || {
                group.bench_function(
                    BenchmarkId::from_parameter("traced_otlp_export_library_defaults"),
                    |b| bench_calls(b, &mut exported, &request, events),
                );
            });
            spans.shutdown().ok();
        }

        // A subscriber whose level filter turns the (INFO) call span off.
        let filtered =
            tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::WARN);
        tracing::subscriber::with_default(filtered, || {
            group.bench_function(BenchmarkId::from_parameter("traced_filtered_out"), |b| {
                bench_calls(b, &mut traced, &request, events)
            });
        });
        group.finish();
    }
}

criterion_group!(benches, overhead);
criterion_main!(benches);
