//! OTLP export: the gateway program, started with `OTEL_EXPORTER_OTLP_ENDPOINT` naming a collector on loopback
//! (an axum app in this test decoding the protobuf bodies with `opentelemetry-proto`), serves a tool round, is
//! stopped with SIGTERM, and must have exported the `chat {model}` span with its `execute_tool` child and the
//! GenAI duration and token-usage metrics, with the resource the standard variables describe. Nothing is waited
//! on but the process's exit: what arrives was flushed at shutdown (the metric period is the SDK's 60 s).

use crate::common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use common::post as http_post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, HistogramDataPoint, Metric};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use prost::Message as _;
use serde_json::json;
use tower_chat::test_server::{Reply, ScriptedProvider};

/// A word that is only in the user's message: it may leave the gateway only when content recording is on.
const SECRET: &str = "zebra-quartz-41";

/// What the collector received: the raw bodies and their decoded forms.
#[derive(Default)]
struct Received {
    raw: Vec<Bytes>,
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

type Shared = Arc<Mutex<Received>>;

async fn traces(State(received): State<Shared>, body: Bytes) -> &'static [u8] {
    let request = ExportTraceServiceRequest::decode(body.clone()).expect("an OTLP trace request");
    let mut received = received.lock().unwrap();
    received.raw.push(body);
    received.traces.push(request);
    // An empty `Export*ServiceResponse`: full success.
    b""
}

async fn metrics(State(received): State<Shared>, body: Bytes) -> &'static [u8] {
    let request =
        ExportMetricsServiceRequest::decode(body.clone()).expect("an OTLP metrics request");
    let mut received = received.lock().unwrap();
    received.raw.push(body);
    received.metrics.push(request);
    b""
}

async fn collector() -> (SocketAddr, Shared) {
    let received = Shared::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

fn value(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// Run the gateway program against `collector` for one streamed and one whole tool turn, stop it with SIGTERM,
/// and return what the collector got.
async fn run_gateway(record_content: bool) -> (Shared, ScriptedProvider) {
    let (collector_addr, received) = collector().await;
    // Every turn: a call of the gateway's `add` tool, then the answer.
    let provider = ScriptedProvider::start(|_, n| match n % 2 {
        0 => Reply::openai_tool_calls(&[("call_add", "add", r#"{"a": 2, "b": 3}"#)]),
        _ => Reply::openai_text("The sum is 5"),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let log_path = dir.path().join("gateway.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"));
    command
        .arg("--listen")
        .arg(addr.to_string())
        .args(["--upstream", &provider.base_url(), "--no-upstream-key"])
        // The turn runs the gateway's own `add` tool, which is opt-in.
        .arg("--add-tool")
        .arg("--db")
        .arg(dir.path().join("gateway.db"))
        .env("RUST_LOG", "warn")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{collector_addr}"),
        )
        .env("OTEL_SERVICE_NAME", "gateway-under-test")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=ci,team=chat",
        )
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_METRICS_EXPORTER")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    if record_content {
        command.arg("--record-content");
    }
    let mut child =
        tower_chat_testkit::ProcessGroup::spawn(&mut command).expect("the gateway binary starts");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Ready when /healthz answers (the process's exit fails the test at once).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the gateway exited ({status}): {}", log());
        }
        if let Ok(Ok(response)) =
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await
        {
            drop(response);
            if common::get(&format!("http://{addr}/healthz")).await.status == 200 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no /healthz: {}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for stream in [true, false] {
        let body = json!({
            "model": "gpt-test",
            "stream": stream,
            "messages": [{"role": "user", "content": format!("What is 2 + 3? Say {SECRET}.")}],
        });
        let answer = http_post(
            &format!("http://{addr}/v1/chat/completions"),
            body.to_string(),
            &[],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let text = if stream {
            answer.streamed_text()
        } else {
            answer.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(text, "The sum is 5", "{}", answer.body);
    }

    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "the gateway exited with {status}: {}",
        log()
    );
    (received, provider)
}

fn spans(received: &Received) -> Vec<Span> {
    received
        .traces
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.iter().cloned())
        .collect()
}

fn metric<'a>(received: &'a Received, name: &str) -> Vec<&'a Metric> {
    received
        .metrics
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == name)
        .collect()
}

fn histogram_points(metrics: &[&Metric]) -> Vec<HistogramDataPoint> {
    metrics
        .iter()
        .flat_map(|m| match &m.data {
            Some(metric::Data::Histogram(h)) => h.data_points.clone(),
            other => panic!("{} is not a histogram: {other:?}", m.name),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_arrive_at_the_collector_without_content() {
    let (received, _provider) = run_gateway(false).await;
    let received = received.lock().unwrap();

    // The resource: the standard variables, and the SDK's own attributes.
    let resources: Vec<_> = received
        .traces
        .iter()
        .flat_map(|r| &r.resource_spans)
        .filter_map(|r| r.resource.as_ref())
        .map(|r| r.attributes.clone())
        .chain(
            received
                .metrics
                .iter()
                .flat_map(|r| &r.resource_metrics)
                .filter_map(|r| r.resource.as_ref())
                .map(|r| r.attributes.clone()),
        )
        .collect();
    assert!(!received.traces.is_empty(), "no trace export arrived");
    assert!(!received.metrics.is_empty(), "no metrics export arrived");
    for attributes in &resources {
        assert_eq!(
            value(attributes, "service.name").as_deref(),
            Some("gateway-under-test")
        );
        assert_eq!(
            value(attributes, "deployment.environment").as_deref(),
            Some("ci")
        );
        assert_eq!(value(attributes, "team").as_deref(), Some("chat"));
    }

    // One `chat gpt-test` client span per request, each with one `execute_tool add` child.
    let spans = spans(&received);
    let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat gpt-test").collect();
    assert_eq!(
        chats.len(),
        2,
        "spans: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    for chat in &chats {
        assert_eq!(chat.kind, SpanKind::Client as i32);
        let attr = |key| value(&chat.attributes, key);
        assert_eq!(attr("gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(attr("gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(attr("gen_ai.request.model").as_deref(), Some("gpt-test"));
        assert_eq!(attr("server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr("tower_chat.outcome").as_deref(), Some("completed"));
        // Both rounds' usage: 12 + 20 input, 5 + 9 output tokens (the scripted provider's figures).
        assert_eq!(attr("gen_ai.usage.input_tokens").as_deref(), Some("32"));
        assert_eq!(attr("gen_ai.usage.output_tokens").as_deref(), Some("14"));
        assert!(attr("gen_ai.conversation.id").is_some());
        assert_eq!(attr("gen_ai.input.messages"), None, "content is off");
        assert_eq!(attr("gen_ai.output.messages"), None, "content is off");
        let tools: Vec<&Span> = spans
            .iter()
            .filter(|s| s.parent_span_id == chat.span_id && s.trace_id == chat.trace_id)
            .collect();
        assert_eq!(tools.len(), 1, "one tool ran in this turn");
        let tool = tools[0];
        assert_eq!(tool.name, "execute_tool add");
        assert_eq!(
            value(&tool.attributes, "gen_ai.tool.name").as_deref(),
            Some("add")
        );
        assert_eq!(
            value(&tool.attributes, "gen_ai.tool.call.id").as_deref(),
            Some("call_add")
        );
        assert!(tool.start_time_unix_nano >= chat.start_time_unix_nano);
        assert!(tool.end_time_unix_nano <= chat.end_time_unix_nano);
    }
    assert_ne!(
        chats[0].trace_id, chats[1].trace_id,
        "one trace per request"
    );

    // The GenAI client metrics, flushed at shutdown.
    let durations = metric(&received, "gen_ai.client.operation.duration");
    assert!(durations.iter().all(|m| m.unit == "s"));
    let points = histogram_points(&durations);
    assert_eq!(points.iter().map(|p| p.count).sum::<u64>(), 2, "{points:?}");
    for point in &points {
        assert_eq!(
            value(&point.attributes, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            value(&point.attributes, "gen_ai.provider.name").as_deref(),
            Some("openai")
        );
        assert_eq!(
            value(&point.attributes, "gen_ai.request.model").as_deref(),
            Some("gpt-test")
        );
        assert_eq!(value(&point.attributes, "error.type"), None);
        assert!(point.sum.unwrap() > 0.0);
    }
    let usage = metric(&received, "gen_ai.client.token.usage");
    assert!(usage.iter().all(|m| m.unit == "{token}"));
    let points = histogram_points(&usage);
    let sum = |kind: &str| -> f64 {
        points
            .iter()
            .filter(|p| value(&p.attributes, "gen_ai.token.type").as_deref() == Some(kind))
            .map(|p| {
                assert_eq!(
                    value(&p.attributes, "gen_ai.request.model").as_deref(),
                    Some("gpt-test")
                );
                p.sum.unwrap()
            })
            .sum()
    };
    assert_eq!(sum("input"), 64.0, "{points:?}");
    assert_eq!(sum("output"), 28.0, "{points:?}");

    // Nothing of the conversation left the gateway: not in an attribute, an event, anywhere in the bodies.
    for body in &received.raw {
        assert!(
            !body.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "the user's message was exported with content recording off"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_exported_only_with_record_content() {
    let (received, _provider) = run_gateway(true).await;
    let received = received.lock().unwrap();
    let spans = spans(&received);
    let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat gpt-test").collect();
    assert_eq!(chats.len(), 2);
    for chat in chats {
        let input = value(&chat.attributes, "gen_ai.input.messages").expect("input messages");
        assert!(input.contains(SECRET), "{input}");
        let output = value(&chat.attributes, "gen_ai.output.messages").expect("output messages");
        assert!(output.contains("The sum is 5"), "{output}");
    }
}
