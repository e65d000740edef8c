//! `OpenTelemetryMetrics` against the OpenTelemetry SDK's in-memory exporter. Runs under a plain
//! `cargo test -p tower-chat-tracing`: the crate's dev-dependency on itself enables the `opentelemetry` feature.

mod support;

use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::Value;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, HistogramDataPoint, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use support::*;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{ChatError, ChatRequest, ChatStream, ChatStreamExt, ErrorKind, Message};
use tower_chat_tracing::{
    OpenTelemetryMetrics, TracingLayer, OPERATION_DURATION, TIME_TO_FIRST_CHUNK, TOKEN_USAGE,
};

/// One exported histogram point: its attributes, count and sum.
#[derive(Debug)]
struct Point {
    attributes: Vec<(String, String)>,
    count: u64,
    sum: f64,
    bounds: Vec<f64>,
}

impl Point {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn point<T: Copy>(p: &HistogramDataPoint<T>, to_f64: impl Fn(T) -> f64) -> Point {
    let mut attributes: Vec<(String, String)> = p
        .attributes()
        .map(|kv| {
            let value = match &kv.value {
                Value::String(s) => s.to_string(),
                other => other.to_string(),
            };
            (kv.key.to_string(), value)
        })
        .collect();
    attributes.sort();
    Point {
        attributes,
        count: p.count(),
        sum: to_f64(p.sum()),
        bounds: p.bounds().collect(),
    }
}

/// Every histogram exported: (name, unit, points).
fn export(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
) -> Vec<(String, String, Vec<Point>)> {
    provider.force_flush().unwrap();
    let mut out = Vec::new();
    for resource in exporter.get_finished_metrics().unwrap() {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                let points = match metric.data() {
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| point(p, |v| v)).collect()
                    }
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| point(p, |v| v as f64)).collect()
                    }
                    other => panic!("{} is not a histogram: {other:?}", metric.name()),
                };
                out.push((metric.name().to_owned(), metric.unit().to_owned(), points));
            }
        }
    }
    out
}

fn setup() -> (
    SdkMeterProvider,
    InMemoryMetricExporter,
    OpenTelemetryMetrics,
) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let metrics = OpenTelemetryMetrics::new(&provider.meter("test"));
    (provider, exporter, metrics)
}

fn by_name<'a>(exported: &'a [(String, String, Vec<Point>)], name: &str) -> (&'a str, &'a [Point]) {
    let (_, unit, points) = exported
        .iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("{name} not exported: {exported:#?}"));
    (unit, points)
}

#[tokio::test]
async fn calls_record_the_genai_client_histograms() {
    let (provider, exporter, metrics) = setup();
    let layer = TracingLayer::new().metrics(metrics);

    // Two completed streaming calls with usage.
    for _ in 0..2 {
        let leaf = Scripted {
            reply: |_req: ChatRequest| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(scripted_stream(Delivery::OneByOne, complete_answer()))
            },
            metadata: openai_metadata(),
        };
        let stream = layer
            .clone()
            .layer(leaf)
            .oneshot(ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap();
        stream.collect_response().await.unwrap();
    }
    // One failed call.
    let failing = service_fn(|_req: ChatRequest| async {
        Err::<ChatStream, _>(ChatError::new(
            ErrorKind::Timeout(tower_chat::TimeoutPhase::FirstByte),
            "slow",
        ))
    });
    let service = layer.clone().provider("anthropic").layer(failing);
    assert!(service
        .oneshot(ChatRequest::default().model("claude-x"))
        .await
        .is_err());

    let exported = export(&provider, &exporter);

    let (unit, durations) = by_name(&exported, OPERATION_DURATION);
    assert_eq!(unit, "s");
    assert_eq!(durations.len(), 2, "{durations:#?}");
    let ok = durations
        .iter()
        .find(|p| p.attr("error.type").is_none())
        .unwrap();
    assert_eq!(ok.count, 2);
    assert!(ok.sum >= 0.01, "two calls of at least 5 ms: {}", ok.sum);
    assert_eq!(ok.bounds.first(), Some(&0.01));
    assert_eq!(ok.attr("gen_ai.operation.name"), Some("chat"));
    assert_eq!(ok.attr("gen_ai.provider.name"), Some("openai"));
    assert_eq!(ok.attr("gen_ai.request.model"), Some("gpt-4o-mini"));
    assert_eq!(
        ok.attr("gen_ai.response.model"),
        Some("gpt-4o-mini-2024-07-18")
    );
    assert_eq!(ok.attr("server.address"), Some("api.openai.com"));
    assert_eq!(ok.attr("server.port"), Some("443"));
    let failed = durations
        .iter()
        .find(|p| p.attr("error.type").is_some())
        .unwrap();
    assert_eq!(failed.count, 1);
    assert_eq!(failed.attr("error.type"), Some("timeout"));
    assert_eq!(failed.attr("gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(failed.attr("gen_ai.request.model"), Some("claude-x"));

    let (unit, first_chunks) = by_name(&exported, TIME_TO_FIRST_CHUNK);
    assert_eq!(unit, "s");
    assert_eq!(
        first_chunks.len(),
        1,
        "only the streaming calls that produced output"
    );
    assert_eq!(first_chunks[0].count, 2);
    assert!(first_chunks[0].sum >= 0.01);
    assert!(first_chunks[0].sum <= ok.sum);

    let (unit, tokens) = by_name(&exported, TOKEN_USAGE);
    assert_eq!(unit, "{token}");
    let input = tokens
        .iter()
        .find(|p| p.attr("gen_ai.token.type") == Some("input"))
        .unwrap();
    let output = tokens
        .iter()
        .find(|p| p.attr("gen_ai.token.type") == Some("output"))
        .unwrap();
    assert_eq!((input.count, input.sum), (2, 20.0));
    assert_eq!((output.count, output.sum), (2, 10.0));
    assert_eq!(input.attr("error.type"), None);
    assert_eq!(input.bounds[..3], [1.0, 4.0, 16.0]);
    assert_eq!(tokens.len(), 2);
}
