//! A tracing layer that records spans (name, fields, parent, closed) and events, for tests of what is traced.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One captured span.
#[derive(Clone, Debug)]
pub struct SpanRecord {
    /// The span's name.
    pub name: &'static str,
    /// Its fields as recorded (a field recorded again keeps the last value).
    pub fields: BTreeMap<String, String>,
    /// Index of the parent span in [`Captured::spans`].
    pub parent: Option<usize>,
    /// Whether the span has closed.
    pub closed: bool,
}

impl SpanRecord {
    /// The value of the field `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// One captured event.
#[derive(Clone, Debug)]
pub struct EventRecord {
    /// Its fields.
    pub fields: BTreeMap<String, String>,
    /// Index of the span the event happened in.
    pub parent: Option<usize>,
}

/// Everything captured so far.
#[derive(Debug, Default)]
pub struct Captured {
    /// The spans, in the order they were created.
    pub spans: Vec<SpanRecord>,
    /// The events, in order.
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

    /// The spans so far.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.0.lock().unwrap().spans.clone()
    }

    /// The events so far.
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
