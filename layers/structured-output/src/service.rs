//! [`StructuredOutput`]: the service that checks answers.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_chat::{ChatError, ChatRequest, ChatStream, ResponseFormat};
use tower_service::Service;

use crate::answer::AnswerSchema;
use crate::config::Config;
use crate::growing::PartialAnswers;
use crate::stream::{AnswerStream, Check};

/// Marks a request whose answer a structured-output service already checks, so that a second one inside it
/// passes the request through instead of checking (and repairing) the same answer twice.
#[derive(Clone, Copy, Debug)]
struct AnswerChecked;

/// Checks the answers of `S` (built by [`StructuredOutputLayer`](crate::StructuredOutputLayer)).
#[derive(Clone, Debug)]
pub struct StructuredOutput<S> {
    inner: S,
    config: Config,
}

impl<S> StructuredOutput<S> {
    /// `inner` with answers checked as `config` says.
    pub(crate) fn with_config(inner: S, config: Config) -> Self {
        StructuredOutput { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The response future: the first call's stream, wrapped.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

impl<S> Service<ChatRequest> for StructuredOutput<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let check = match request.options.response_format.as_ref() {
            _ if request.extensions.get::<AnswerChecked>().is_some() => None,
            Some(ResponseFormat::JsonObject) => Some(Ok(Check::Object)),
            Some(format @ ResponseFormat::JsonSchema { .. }) => {
                Some(AnswerSchema::from_format(format).map(|s| Check::Schema(s.expect("a schema"))))
            }
            Some(ResponseFormat::Text) | None => None,
        };
        let check = match check {
            None => return Box::pin(self.inner.call(request)),
            Some(Err(error)) => {
                return Box::pin(std::future::ready(Err(error.refused_before_sending())))
            }
            Some(Ok(check)) => check,
        };
        let partial_answers =
            self.config.partial_answers || request.extensions.get::<PartialAnswers>().is_some();
        let request = request.with_extension(AnswerChecked);
        // The ready service makes the first call; the clone left in its place waits for the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let first = inner.call(request.clone());
        let repairs = self.config.repairs;
        Box::pin(async move {
            let stream = first.await?;
            let answer = AnswerStream::new(inner, request, check, repairs, stream);
            Ok(Box::pin(answer.with_partial_answers(partial_answers)) as ChatStream)
        })
    }
}
