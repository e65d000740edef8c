//! Server-side checks of structured answers: the `[structured]` table of the configuration file and the layer
//! built from it.
//!
//! Every inbound format's own JSON-answer field (Chat Completions `response_format`, Responses `text.format`,
//! Anthropic Messages `output_config.format`) reaches the upstream in that upstream's shape whether or not this
//! table is there. With it, the answer is also validated against the schema as the client wrote it (providers
//! take a subset of JSON Schema, so what they enforce can be looser) and asked for again with the violations when
//! it does not match. An answer that still does not match after the repairs is a typed error in the client's
//! format (`502`, code `answer_schema_mismatch`, the violations in its message).
//!
//! ```
//! use tower_chat_gateway::config_file::ConfigFile;
//!
//! let file = ConfigFile::parse(r#"
//! [structured]
//! validate = true           # the default once the table is there
//! repairs = 2               # model calls after the first when an answer breaks its schema
//!
//! [structured.models]       # per model (the name clients send), each key optional
//! "gpt-4o" = { repairs = 0 }
//! "fast" = { validate = false }
//!
//! [structured.routes]       # per inbound route (chat_completions, messages, responses), over the model's
//! responses = { repairs = 1 }
//! "#, "gateway.toml").unwrap();
//! let structured = file.structured.unwrap();
//! assert_eq!(structured.policy("gpt-4o").repairs, 0);
//! assert!(!structured.policy("fast").validate);
//! assert_eq!(structured.policy("other").repairs, 2);
//! ```
//!
//! The layer sits inside the tool loop, outside persistence and limits: each repair is a model call that is
//! recorded and charged like any other. While it checks an answer, the answer's text is held back until it
//! matches (a streaming client receives it in one piece at the end), so a client never sees text that is then
//! withdrawn.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_util::Stream;
use tower::Service;
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, ResponseFormat};
use tower_chat_structured_output::{StructuredOutput, StructuredOutputLayer};

pub use crate::config::structured::{StructuredModel, StructuredSection};
use crate::GatewayError;
use tower_chat_wire::format::InboundRoute;

/// What the layer does with one model's JSON answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Whether they are validated.
    pub validate: bool,
    /// How many repairs an answer gets.
    pub repairs: usize,
}

impl StructuredSection {
    /// The policy for requests naming `model`.
    pub fn policy(&self, model: &str) -> Policy {
        let entry = self.models.get(model).copied().unwrap_or_default();
        Policy {
            validate: entry.validate.unwrap_or(self.validate),
            repairs: entry.repairs.unwrap_or(self.repairs),
        }
    }

    /// The policy for requests naming `model` on `route`: the route's entry, then the model's, then the table.
    pub(crate) fn policy_on(
        &self,
        model: &str,
        route: Option<InboundRoute>,
        routes: &Routes,
    ) -> Policy {
        let of_model = self.policy(model);
        let entry = route
            .and_then(|route| routes.iter().find(|(r, _)| *r == route))
            .map(|(_, entry)| *entry)
            .unwrap_or_default();
        Policy {
            validate: entry.validate.unwrap_or(of_model.validate),
            repairs: entry.repairs.unwrap_or(of_model.repairs),
        }
    }

    /// The layer this table describes; an unknown route in `[structured.routes]` refuses the start.
    pub fn layer(&self) -> Result<CheckedAnswersLayer, GatewayError> {
        let routes = self
            .routes
            .iter()
            .map(|(name, entry)| {
                InboundRoute::parse(name).map(|route| (route, *entry)).ok_or_else(|| {
                    GatewayError::Config(format!(
                        "[structured.routes] \"{name}\": not a route (chat_completions, messages, responses)"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(CheckedAnswersLayer {
            section: Arc::new(self.clone()),
            routes: Arc::new(routes),
        })
    }
}

/// `[structured.routes]` read.
type Routes = Vec<(InboundRoute, StructuredModel)>;

/// Validates and repairs JSON answers as a [`StructuredSection`] says (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct CheckedAnswersLayer {
    section: Arc<StructuredSection>,
    routes: Arc<Routes>,
}

impl<S> tower::Layer<S> for CheckedAnswersLayer {
    type Service = CheckedAnswers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CheckedAnswers {
            inner,
            section: self.section.clone(),
            routes: self.routes.clone(),
        }
    }
}

/// The service [`CheckedAnswersLayer`] builds.
#[derive(Clone, Debug)]
pub struct CheckedAnswers<S> {
    inner: S,
    section: Arc<StructuredSection>,
    routes: Arc<Routes>,
}

type CallFuture = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

impl<S> Service<ChatRequest> for CheckedAnswers<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> CallFuture {
        let wants_json = matches!(
            request.options.response_format,
            Some(ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. })
        );
        let policy = self.section.policy_on(
            request.options.model.as_deref().unwrap_or_default(),
            request.extensions.get::<InboundRoute>().copied(),
            &self.routes,
        );
        // The ready service makes the call; its clone waits for the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if !wants_json || !policy.validate {
            return Box::pin(inner.call(request));
        }
        let mut checked =
            StructuredOutput::new(inner, StructuredOutputLayer::new().repairs(policy.repairs));
        let call = checked.call(request);
        Box::pin(async move {
            let events = call.await?;
            Ok(Box::pin(HeldAnswer::new(events)) as ChatStream)
        })
    }
}

/// The checked events with the answer text held back until the check passes: a rejected attempt's text is
/// dropped with its `AnswerRejected`, so the client only ever receives the answer that matched.
struct HeldAnswer {
    events: ChatStream,
    held: String,
    ready: VecDeque<Result<ChatEvent, ChatError>>,
}

impl HeldAnswer {
    fn new(events: ChatStream) -> Self {
        HeldAnswer {
            events,
            held: String::new(),
            ready: VecDeque::new(),
        }
    }

    fn release(&mut self) {
        if !self.held.is_empty() {
            let text = std::mem::take(&mut self.held);
            self.ready.push_back(Ok(ChatEvent::TextDelta { text }));
        }
    }
}

impl Stream for HeldAnswer {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.ready.pop_front() {
                return Poll::Ready(Some(item));
            }
            match ready!(this.events.as_mut().poll_next(cx)) {
                Some(Ok(ChatEvent::TextDelta { text })) => this.held.push_str(&text),
                Some(Ok(ChatEvent::AnswerRejected { .. })) => this.held.clear(),
                // The check passed (a finish) or does not apply (a tool round): the text goes out first.
                Some(Ok(event @ (ChatEvent::Finish { .. } | ChatEvent::ToolCallStart { .. }))) => {
                    this.release();
                    this.ready.push_back(Ok(event));
                }
                // An answer that failed its check: its text is not the answer.
                Some(Err(error)) => {
                    this.held.clear();
                    return Poll::Ready(Some(Err(error)));
                }
                Some(Ok(other)) => return Poll::Ready(Some(Ok(other))),
                None => {
                    this.release();
                    return Poll::Ready(this.ready.pop_front());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_refused() {
        let error = toml::from_str::<StructuredSection>("repair = 1\n").unwrap_err();
        assert!(error.to_string().contains("repair"), "{error}");
        let error =
            toml::from_str::<StructuredSection>("[models.m]\nvalidated = false\n").unwrap_err();
        assert!(error.to_string().contains("validated"), "{error}");
    }

    /// The guide's example parses.
    #[test]
    fn the_documented_example_is_valid() {
        let page = include_str!("../../../docs/src/gateway/structured-output.md");
        let start = page.find("[structured]\nvalidate").unwrap();
        let end = start + page[start..].find("```").unwrap();
        let file =
            crate::config::file::ConfigFile::parse(&page[start..end], "structured-output.md")
                .unwrap();
        let section = file.structured.unwrap();
        assert_eq!(
            section.policy("gpt-4o"),
            Policy {
                validate: true,
                repairs: 0
            }
        );
        assert_eq!(
            section.policy("fast"),
            Policy {
                validate: false,
                repairs: 2
            }
        );
    }

    #[test]
    fn a_routes_entry_goes_over_the_models_and_unknown_routes_refuse_the_start() {
        let section: StructuredSection = toml::from_str(
            "repairs = 2\n[models]\nfast = { validate = false }\n[routes]\nresponses = { validate = true, repairs = 0 }\n",
        )
        .unwrap();
        let layer = section.layer().unwrap();
        let on = |model, route| section.policy_on(model, route, &layer.routes);
        assert_eq!(
            on("fast", Some(InboundRoute::Responses)),
            Policy {
                validate: true,
                repairs: 0
            }
        );
        assert!(!on("fast", Some(InboundRoute::ChatCompletions)).validate);
        assert_eq!(on("other", None).repairs, 2);
        let bad: StructuredSection = toml::from_str("[routes]\nembeddings = {}\n").unwrap();
        let error = bad.layer().unwrap_err().to_string();
        assert!(error.contains("embeddings"), "{error}");
    }

    #[test]
    fn an_empty_table_validates_with_two_repairs() {
        let section: StructuredSection = toml::from_str("").unwrap();
        assert_eq!(
            section.policy("any"),
            Policy {
                validate: true,
                repairs: 2
            }
        );
    }
}
