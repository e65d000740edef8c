//! [`StructuredOutputLayer`]: configuration of the answer check.

use tower_layer::Layer;

use crate::config::Config;
use crate::service::StructuredOutput;

/// Validates JSON answers against the request's `response_format` and asks again when they do not match (see
/// the crate docs). Requests that ask for free text pass through untouched.
///
/// ```
/// use tower::ServiceBuilder;
/// use tower_chat_structured_output::StructuredOutputLayer;
/// # let leaf = tower::service_fn(|_req: tower_chat::ChatRequest| async {
/// #     Ok::<tower_chat::ChatStream, tower_chat::ChatError>(Box::pin(futures_util::stream::empty()))
/// # });
/// // The default: two repairs after the first answer.
/// let _checked = ServiceBuilder::new().layer(StructuredOutputLayer::new()).service(leaf.clone());
/// // No repair: the first answer that breaks the schema is an error.
/// let _strict = ServiceBuilder::new().layer(StructuredOutputLayer::new().repairs(0)).service(leaf.clone());
/// // The answer parsed so far as `ChatEvent::PartialAnswer` events while it streams.
/// let _growing = ServiceBuilder::new().layer(StructuredOutputLayer::new().partial_answers(true)).service(leaf);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StructuredOutputLayer {
    config: Config,
}

impl StructuredOutputLayer {
    /// A layer that repairs an answer at most twice.
    pub fn new() -> Self {
        StructuredOutputLayer {
            config: Config {
                repairs: 2,
                partial_answers: false,
            },
        }
    }

    /// How many times an answer that breaks the schema is asked for again (each a model call of its own).
    pub fn repairs(mut self, repairs: usize) -> Self {
        self.config.repairs = repairs;
        self
    }

    /// Whether checked answers also stream as [`tower_chat::ChatEvent::PartialAnswer`] events: the JSON parsed
    /// so far after each text delta that changed it (on large answers, once it has grown by an eighth; see
    /// [`crate::PartialAnswers`]), the validated answer last, and values starting again after each
    /// `AnswerRejected`. Off by default: the stream is then the text deltas alone, and no parsing is done while
    /// it streams. One request can ask for them with the [`crate::PartialAnswers`] extension.
    pub fn partial_answers(mut self, on: bool) -> Self {
        self.config.partial_answers = on;
        self
    }
}

impl Default for StructuredOutputLayer {
    fn default() -> Self {
        StructuredOutputLayer::new()
    }
}

impl<S> Layer<S> for StructuredOutputLayer {
    type Service = StructuredOutput<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StructuredOutput::with_config(inner, self.config)
    }
}

impl<S> StructuredOutput<S> {
    /// `inner` with answers checked as `layer` says.
    pub fn new(inner: S, layer: StructuredOutputLayer) -> Self {
        StructuredOutput::with_config(inner, layer.config)
    }
}
