//! [`StructuredExt`]: typed answers from any chat service, whole or growing.

use std::future::Future;
use std::pin::Pin;

use futures_core::Stream;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt};
use tower_layer::Layer;
use tower_service::Service;

use crate::answer::AnswerSchema;
use crate::error::StructuredError;
use crate::layer::StructuredOutputLayer;

/// One step of a streamed structured answer.
///
/// ```
/// # use serde::Deserialize;
/// # use serde_json::json;
/// # use tower_chat_structured_output::Partial;
/// #[derive(Debug, Deserialize, PartialEq)]
/// struct City {
///     name: String,
///     #[serde(default)]
///     population: Option<u64>,
/// }
/// // `{"name": "Os` has arrived: the value so far, and already a `City`, since its only required field is there.
/// let step: Partial<City> = Partial::growing(json!({"name": "Os"}));
/// assert_eq!(step.typed(), Some(&City { name: "Os".into(), population: None }));
/// // `{"popul` has not named `name` yet: a value, but no `City`.
/// assert_eq!(Partial::<City>::growing(json!({})).typed(), None);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Partial<T> {
    /// The answer so far: properties appear as their values start, strings grow, numbers and literals appear
    /// once complete. Not validated yet.
    Growing {
        /// The JSON so far.
        value: Value,
        /// The JSON so far read into `T`, when it reads (every required field present, each of its type).
        typed: Option<T>,
    },
    /// The answer so far broke the schema and is asked for again: what came before is void.
    Restarted {
        /// What was wrong with it.
        violations: Vec<String>,
    },
    /// The final answer, validated and read into `T`. Always the last item.
    Complete(T),
}

impl<T: DeserializeOwned> Partial<T> {
    /// A [`Partial::Growing`] step for `value`, read into `T` when it reads.
    pub fn growing(value: Value) -> Self {
        let typed = T::deserialize(&value).ok();
        Partial::Growing { value, typed }
    }
}

impl<T> Partial<T> {
    /// The JSON so far ([`Partial::Growing`]), if this step has one.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Partial::Growing { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The answer as a `T`: the final one, or the partial one when it already reads.
    pub fn typed(&self) -> Option<&T> {
        match self {
            Partial::Growing { typed, .. } => typed.as_ref(),
            Partial::Complete(answer) => Some(answer),
            Partial::Restarted { .. } => None,
        }
    }
}

/// A streamed structured answer.
pub type PartialStream<T> = Pin<Box<dyn Stream<Item = Result<Partial<T>, StructuredError>> + Send>>;

/// Typed answers from any chat service (implemented for every `Service<ChatRequest>` that is `Clone + Send`).
///
/// Each method wraps the service in a [`StructuredOutputLayer`] (two repairs) for the call, so the answer is
/// validated against the schema and repaired before it is read. The schema goes to the provider as a strict
/// `response_format`, which each leaf rewrites into its provider's dialect.
pub trait StructuredExt: Sized {
    /// The answer to `request` as a `T`, with the schema `schemars` derives for `T`.
    fn structured<T>(
        &self,
        request: ChatRequest,
    ) -> impl Future<Output = Result<T, StructuredError>> + Send
    where
        T: JsonSchema + DeserializeOwned + Send + 'static;

    /// The answer to `request` as JSON matching `schema` (a schema known only at run time).
    fn structured_value(
        &self,
        request: ChatRequest,
        schema: AnswerSchema,
    ) -> impl Future<Output = Result<Value, StructuredError>> + Send;

    /// The answer to `request` as it streams: [`Partial::Growing`] after each text chunk that changed the JSON
    /// so far (the value, and a `T` once it reads as one; on answers past a kilobyte, once it has grown by an
    /// eighth, see [`crate::PartialAnswers`]), [`Partial::Restarted`] when a repair starts it again, then
    /// [`Partial::Complete`] with the validated `T` (or an error as the last item). The steps are the layer's
    /// `ChatEvent::PartialAnswer` events, read into `T`.
    fn structured_stream<T>(&self, request: ChatRequest) -> PartialStream<T>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static;
}

impl<S> StructuredExt for S
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    fn structured<T>(
        &self,
        request: ChatRequest,
    ) -> impl Future<Output = Result<T, StructuredError>> + Send
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let schema = AnswerSchema::of::<T>();
        let service = self.clone();
        async move {
            let value = service.structured_value(request, schema?).await?;
            read_as(value)
        }
    }

    fn structured_value(
        &self,
        request: ChatRequest,
        schema: AnswerSchema,
    ) -> impl Future<Output = Result<Value, StructuredError>> + Send {
        let service = self.clone();
        async move {
            let stream = start(service, request, &schema, false).await?;
            let response = stream.collect_response().await?;
            // The layer checked it: this only reads it again (a violation here means the layer was bypassed).
            schema
                .check(response.text())
                .map_err(|violations| StructuredError::Invalid {
                    raw: response.text().to_owned(),
                    violations,
                    attempts: 1,
                })
        }
    }

    fn structured_stream<T>(&self, request: ChatRequest) -> PartialStream<T>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let service = self.clone();
        Box::pin(
            futures_util::stream::once(async move {
                let schema = AnswerSchema::of::<T>()?;
                let stream = start(service, request, &schema, true).await?;
                Ok::<_, StructuredError>(partials::<T>(stream))
            })
            .flat_map(|started| match started {
                Ok(partials) => partials,
                Err(error) => Box::pin(futures_util::stream::iter([Err(error)])),
            }),
        )
    }
}

/// The first call through a structured-output layer (sending the answer as it grows, if `partial_answers`).
async fn start<S>(
    service: S,
    mut request: ChatRequest,
    schema: &AnswerSchema,
    partial_answers: bool,
) -> Result<ChatStream, StructuredError>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    request.options.response_format = Some(schema.response_format());
    let mut checked = StructuredOutputLayer::new()
        .partial_answers(partial_answers)
        .layer(service);
    std::future::poll_fn(|cx| checked.poll_ready(cx)).await?;
    Ok(checked.call(request).await?)
}

fn read_as<T: DeserializeOwned>(value: Value) -> Result<T, StructuredError> {
    T::deserialize(&value).map_err(|e| StructuredError::Type {
        raw: value.to_string(),
        message: e.to_string(),
    })
}

/// Partial values from a checked answer's events: its `PartialAnswer`s read into `T`, the last one (the validated
/// answer) completing it at `Finish`.
fn partials<T>(events: ChatStream) -> PartialStream<T>
where
    T: DeserializeOwned + Send + 'static,
{
    struct Reading {
        events: ChatStream,
        /// The latest value of this attempt: at `Finish`, the validated answer.
        latest: Option<Value>,
        done: bool,
    }
    let reading = Reading {
        events,
        latest: None,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(reading, |mut r| async move {
        if r.done {
            return None;
        }
        loop {
            let item = match r.events.next().await {
                Some(Ok(ChatEvent::PartialAnswer { value })) => {
                    // Kept for `Finish`: one more copy per value sent, which the layer already bounds.
                    r.latest = Some(value.clone());
                    Ok(Partial::growing(value))
                }
                Some(Ok(ChatEvent::AnswerRejected { violations })) => {
                    r.latest = None;
                    Ok(Partial::Restarted { violations })
                }
                Some(Ok(ChatEvent::Finish { reason })) => {
                    r.done = true;
                    match r.latest.take() {
                        Some(value) => read_as(value).map(Partial::Complete),
                        // The layer sends the validated answer before a `Finish` that ends one, so this was
                        // no answer (a tool round).
                        None => Err(StructuredError::Invalid {
                            raw: String::new(),
                            violations: vec![format!(
                                "the response ended ({reason}) without an answer"
                            )],
                            attempts: 1,
                        }),
                    }
                }
                Some(Ok(_)) => continue,
                Some(Err(error)) => {
                    r.done = true;
                    Err(StructuredError::from(error))
                }
                None => return None,
            };
            return Some((item, r));
        }
    }))
}
