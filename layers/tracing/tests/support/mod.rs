//! Shared test helpers: an in-process span capture and scripted inner services.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use futures_util::stream;
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, ModelInfo, ModelMetadata, Usage,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One captured span.
#[derive(Clone, Debug)]
pub struct SpanRecord {
    pub name: &'static str,
    pub fields: BTreeMap<String, String>,
    /// Index of the parent span in [`Captured::spans`].
    pub parent: Option<usize>,
    pub closed: bool,
}

impl SpanRecord {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// One captured event.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub fields: BTreeMap<String, String>,
    /// Index of the span the event happened in.
    pub parent: Option<usize>,
}

#[derive(Debug, Default)]
pub struct Captured {
    pub spans: Vec<SpanRecord>,
    pub events: Vec<EventRecord>,
}

/// A `tracing_subscriber::Layer` that records span names, fields, parents and closes, and events.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Captured>>);

/// The index of a span in the capture, kept in the span's extensions (span ids are reused after close).
struct Index(usize);

struct FieldVisitor<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("new span is registered");
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Index>().map(|i| i.0));
        let mut fields = BTreeMap::new();
        attrs.record(&mut FieldVisitor(&mut fields));
        let mut captured = self.0.lock().unwrap();
        captured.spans.push(SpanRecord {
            name: attrs.metadata().name(),
            fields,
            parent,
            closed: false,
        });
        span.extensions_mut()
            .insert(Index(captured.spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("recorded span is registered");
        let index = span.extensions().get::<Index>().map(|i| i.0).unwrap();
        let mut captured = self.0.lock().unwrap();
        values.record(&mut FieldVisitor(&mut captured.spans[index].fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let parent = ctx
            .event_span(event)
            .and_then(|s| s.extensions().get::<Index>().map(|i| i.0));
        let mut fields = BTreeMap::new();
        event.record(&mut FieldVisitor(&mut fields));
        self.0
            .lock()
            .unwrap()
            .events
            .push(EventRecord { fields, parent });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("closed span is registered");
        let index = span.extensions().get::<Index>().map(|i| i.0).unwrap();
        self.0.lock().unwrap().spans[index].closed = true;
    }
}

impl Capture {
    /// Install a registry with this capture as the thread's default subscriber.
    pub fn install() -> (Capture, tracing::subscriber::DefaultGuard) {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, guard)
    }

    pub fn spans(&self) -> Vec<SpanRecord> {
        self.0.lock().unwrap().spans.clone()
    }

    pub fn events(&self) -> Vec<EventRecord> {
        self.0.lock().unwrap().events.clone()
    }

    /// The spans named `name`, with their indices.
    pub fn named(&self, name: &str) -> Vec<(usize, SpanRecord)> {
        self.spans()
            .into_iter()
            .enumerate()
            .filter(|(_, s)| s.name == name)
            .collect()
    }

    /// The one span named `name`.
    pub fn only(&self, name: &str) -> (usize, SpanRecord) {
        let mut spans = self.named(name);
        assert_eq!(spans.len(), 1, "expected one {name} span: {spans:#?}");
        spans.remove(0)
    }

    /// Every captured value (span fields and event fields), for searching.
    pub fn all_text(&self) -> String {
        let captured = self.0.lock().unwrap();
        let mut text = String::new();
        for span in &captured.spans {
            for (k, v) in &span.fields {
                text.push_str(&format!("{k}={v}\n"));
            }
        }
        for event in &captured.events {
            for (k, v) in &event.fields {
                text.push_str(&format!("{k}={v}\n"));
            }
        }
        text
    }
}

/// Whether the inner service yields its events all at once or over several polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Non-streaming: one ready stream.
    Ready,
    /// Streaming: the stream is pending before every event.
    Streaming,
}

pub const SHAPES: [Shape; 2] = [Shape::Ready, Shape::Streaming];

/// A scripted stream of the given shape.
pub fn script(events: Vec<Result<ChatEvent, ChatError>>, shape: Shape) -> ChatStream {
    match shape {
        Shape::Ready => Box::pin(stream::iter(events)),
        Shape::Streaming => Box::pin(stream::unfold(
            events.into_iter(),
            |mut events| async move {
                tokio::task::yield_now().await;
                events.next().map(|event| (event, events))
            },
        )),
    }
}

pub fn usage(input: u64, output: u64) -> ChatEvent {
    ChatEvent::Usage {
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        },
    }
}

/// A complete answer: metadata, two text deltas, usage in two increments, finish.
pub fn answer() -> Vec<Result<ChatEvent, ChatError>> {
    vec![
        Ok(ChatEvent::ResponseMetadata {
            id: Some("resp-1".into()),
            model: Some("gpt-4o-mini-2024-07-18".into()),
        }),
        Ok(ChatEvent::text("Hello")),
        Ok(ChatEvent::text(", world")),
        Ok(usage(10, 2)),
        Ok(usage(0, 3)),
        Ok(ChatEvent::finish(FinishReason::Stop)),
    ]
}

/// A service with [`ModelInfo`], answering each call with `reply(request)`.
#[derive(Clone)]
pub struct Scripted<F> {
    pub reply: F,
    pub metadata: ModelMetadata,
}

pub fn openai_metadata() -> ModelMetadata {
    ModelMetadata {
        provider: "openai".into(),
        model_id: Some("gpt-4o-mini".into()),
        endpoint: Some("https://api.openai.com/v1".into()),
        supports_tools: true,
        supports_parallel_tool_calls: true,
        supports_streaming_usage: true,
        context_window: Some(128_000),
    }
}

impl<F> ModelInfo for Scripted<F> {
    fn model_metadata(&self) -> ModelMetadata {
        self.metadata.clone()
    }
}

impl<F, Fut> tower::Service<ChatRequest> for Scripted<F>
where
    F: FnMut(ChatRequest) -> Fut,
    Fut: std::future::Future<Output = Result<ChatStream, ChatError>>,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Fut;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ChatError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Fut {
        (self.reply)(request)
    }
}
