//! The `Metrics` sink: one record per call, whatever way the call ends.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use support::*;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ErrorKind, FinishReason, Message,
    Usage,
};
use tower_chat_tracing::{CallRecord, Outcome, TracingLayer};

/// An owned copy of a [`CallRecord`].
#[derive(Clone, Debug)]
struct Recorded {
    provider: String,
    request_model: Option<String>,
    response_model: Option<String>,
    server: (Option<String>, Option<u16>),
    outcome: Outcome,
    error_type: Option<String>,
    duration: Duration,
    ttfc: Option<Duration>,
    usage: Option<Usage>,
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<Recorded>>>);

impl Sink {
    fn layer(&self) -> TracingLayer<impl Fn(&CallRecord<'_>) + Clone + Send + Sync + 'static> {
        let records = self.0.clone();
        TracingLayer::new().metrics(move |call: &CallRecord<'_>| {
            assert_eq!(call.operation, "chat");
            records.lock().unwrap().push(Recorded {
                provider: call.provider.to_owned(),
                request_model: call.request_model.map(str::to_owned),
                response_model: call.response_model.map(str::to_owned),
                server: (call.server_address.map(str::to_owned), call.server_port),
                outcome: call.outcome,
                error_type: call.error_type.map(str::to_owned),
                duration: call.duration,
                ttfc: call.time_to_first_chunk,
                usage: call.usage,
            })
        })
    }

    fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn one(&self) -> Recorded {
        let mut records = self.take();
        assert_eq!(records.len(), 1, "{records:#?}");
        records.remove(0)
    }
}

/// An answer whose first output arrives after `delay`.
fn slow_answer(delay: Duration) -> ChatStream {
    Box::pin(futures_util::stream::unfold(0, move |step| async move {
        if step == 1 {
            tokio::time::sleep(delay).await;
        }
        complete_answer()
            .into_iter()
            .nth(step)
            .map(|event| (event, step + 1))
    }))
}

fn leaf(
    delay: Duration,
) -> Scripted<impl FnMut(ChatRequest) -> std::future::Ready<Result<ChatStream, ChatError>> + Clone>
{
    Scripted {
        reply: move |_req: ChatRequest| std::future::ready(Ok(slow_answer(delay))),
        metadata: openai_metadata(),
    }
}

// No subscriber is installed in this file: metrics do not depend on the span being enabled. The tests that read
// durations run on paused time: a sleep advances the clock by exactly its length, at once.

#[tokio::test(start_paused = true)]
async fn a_completed_call_records_duration_time_to_first_chunk_and_usage() {
    let sink = Sink::default();
    let service = sink.layer().layer(leaf(Duration::from_millis(30)));
    let stream = service
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    stream.collect_response().await.unwrap();

    let record = sink.one();
    assert_eq!(record.provider, "openai");
    assert_eq!(record.request_model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        record.response_model.as_deref(),
        Some("gpt-4o-mini-2024-07-18")
    );
    assert_eq!(record.server, (Some("api.openai.com".into()), Some(443)));
    assert_eq!(record.outcome, Outcome::Completed);
    assert_eq!(record.error_type, None);
    let ttfc = record
        .ttfc
        .expect("a streaming call has a time to first chunk");
    assert!(ttfc >= Duration::from_millis(30), "{ttfc:?}");
    assert!(record.duration >= ttfc);
    let usage = record.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (10, 5));
}

#[tokio::test]
async fn a_non_streaming_request_has_no_time_to_first_chunk() {
    let sink = Sink::default();
    let service = sink.layer().layer(leaf(Duration::ZERO));
    let mut request = ChatRequest::new(vec![Message::user("hi")]);
    request.options.stream = false;
    service
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let record = sink.one();
    assert_eq!(record.outcome, Outcome::Completed);
    assert_eq!(record.ttfc, None);
}

#[tokio::test]
async fn failures_and_cancellations_are_recorded_once_with_their_error_type() {
    let sink = Sink::default();

    // The service fails.
    let failing = service_fn(|_req: ChatRequest| async {
        Err::<ChatStream, _>(ChatError::new(ErrorKind::Authentication, "bad key"))
    });
    let service = sink.layer().provider("openai").layer(failing);
    assert!(service.oneshot(ChatRequest::default()).await.is_err());
    let record = sink.one();
    assert_eq!(
        (record.outcome, record.error_type.as_deref()),
        (Outcome::Failed, Some("authentication"))
    );
    assert_eq!(record.usage, None);
    assert_eq!(record.request_model, None);

    // The stream fails; polling it further records nothing more.
    let broken = service_fn(|_req: ChatRequest| async {
        Ok::<_, ChatError>(scripted_stream(
            Delivery::OneByOne,
            vec![
                Ok(ChatEvent::text("a")),
                Err(ChatError::new(ErrorKind::Protocol, "bad frame")),
            ],
        ))
    });
    let service = sink.layer().provider("openai").layer(broken);
    let mut stream = service.oneshot(ChatRequest::default()).await.unwrap();
    while stream.next().await.is_some() {}
    assert!(stream.next().await.is_none());
    drop(stream);
    let record = sink.one();
    assert_eq!(
        (record.outcome, record.error_type.as_deref()),
        (Outcome::Failed, Some("protocol"))
    );
    assert!(record.ttfc.is_some());

    // The stream is dropped part-way.
    let service = sink.layer().layer(leaf(Duration::ZERO));
    let mut stream = service.oneshot(ChatRequest::default()).await.unwrap();
    stream.next().await.unwrap().unwrap();
    assert!(
        sink.take().is_empty(),
        "nothing is recorded before the call ends"
    );
    drop(stream);
    let record = sink.one();
    assert_eq!(
        (record.outcome, record.error_type.as_deref()),
        (Outcome::Cancelled, Some("cancelled"))
    );

    // The future is dropped before the service answered.
    let mut service = sink.layer().layer(leaf(Duration::ZERO));
    drop(service.ready().await.unwrap().call(ChatRequest::default()));
    let record = sink.one();
    assert_eq!(record.outcome, Outcome::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn a_stream_kept_after_its_finish_is_timed_to_the_finish() {
    let sink = Sink::default();
    let service = sink.layer().layer(leaf(Duration::ZERO));
    let mut stream = service.oneshot(ChatRequest::default()).await.unwrap();
    while let Some(event) = stream.next().await {
        if matches!(
            event,
            Ok(ChatEvent::Finish {
                reason: FinishReason::Stop
            })
        ) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    let record = sink.one();
    assert_eq!(record.outcome, Outcome::Completed);
    assert!(
        record.duration < Duration::from_millis(250),
        "{:?}",
        record.duration
    );
}
