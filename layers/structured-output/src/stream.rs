//! [`AnswerStream`]: one structured answer over as many model calls as its repairs take.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, Message};

use crate::answer::{parse, AnswerSchema};
use crate::error::StructuredError;
use crate::growing::AnswerSoFar;

/// What an answer must be.
#[derive(Clone, Debug)]
pub(crate) enum Check {
    /// JSON matching this schema.
    Schema(AnswerSchema),
    /// Any JSON object (`response_format: json_object`).
    Object,
}

impl Check {
    /// `text` checked: the answer or what is wrong with it.
    fn violations(&self, text: &str) -> Result<serde_json::Value, Vec<String>> {
        match self {
            Check::Schema(schema) => schema.check(text),
            Check::Object => match parse(text)? {
                object @ serde_json::Value::Object(_) => Ok(object),
                other => Err(vec![format!("/: expected an object, found {other}")]),
            },
        }
    }
}

type CallFuture = Pin<Box<dyn Future<Output = Result<ChatStream, ChatError>> + Send>>;

//   ┌──────────────────────── repair: AnswerRejected, the request again with the violations ─────┐
//   ▼                                                                                              │
// Calling ──stream──► Streaming ──Finish──► the text checked ──matches──► Finish ──► Done         │
//                        │                        ├──breaks it, repairs left───────────────────────┘
//                        │                        └──breaks it, none left / a refusal──► Err ──► Done
//                        └──tool calls, approvals: not an answer, passed on as they are──► Done
enum State {
    Calling(CallFuture),
    Streaming(ChatStream),
    Done,
}

/// The events of the first call, then of each repair call, with the check between them (diagram above).
pub(crate) struct AnswerStream<S> {
    /// Boxed so that the stream is `Unpin` whatever `S` is.
    inner: Box<S>,
    request: ChatRequest,
    check: Check,
    repairs_left: usize,
    attempts: usize,
    /// The current attempt's answer text.
    text: String,
    /// Events decided but not yet yielded (a partial answer after its delta, a rejection or an error after the
    /// check).
    queue: VecDeque<Result<ChatEvent, ChatError>>,
    /// The current attempt's answer as it grows, when partial answers were asked for.
    growing: Option<AnswerSoFar>,
    state: State,
}

impl<S> AnswerStream<S>
where
    S: tower_service::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    pub(crate) fn new(
        inner: S,
        request: ChatRequest,
        check: Check,
        repairs: usize,
        first: ChatStream,
    ) -> Self {
        AnswerStream {
            inner: Box::new(inner),
            request,
            check,
            repairs_left: repairs,
            attempts: 1,
            text: String::new(),
            queue: VecDeque::new(),
            growing: None,
            state: State::Streaming(first),
        }
    }

    /// Also stream the answer parsed so far as `PartialAnswer` events (see [`crate::PartialAnswers`]).
    pub(crate) fn with_partial_answers(mut self, on: bool) -> Self {
        self.growing = on.then(AnswerSoFar::default);
        self
    }

    /// The response ended with `reason`: pass it on, ask again, or fail.
    fn settle(&mut self, reason: FinishReason) {
        if is_refusal(&reason) {
            let text = std::mem::take(&mut self.text);
            self.fail(StructuredError::Refused { reason, text });
            return;
        }
        if matches!(
            reason,
            FinishReason::ToolCalls | FinishReason::AwaitingApproval | FinishReason::MaxRounds
        ) {
            self.queue.push_back(Ok(ChatEvent::finish(reason)));
            self.state = State::Done;
            return;
        }
        let mut violations = match self.check.violations(&self.text) {
            Ok(answer) => {
                if let Some(value) = self.growing.as_ref().and_then(|g| g.last(answer)) {
                    self.queue.push_back(Ok(ChatEvent::PartialAnswer { value }));
                }
                self.queue.push_back(Ok(ChatEvent::finish(reason)));
                self.state = State::Done;
                return;
            }
            Err(violations) => violations,
        };
        if reason == FinishReason::Length {
            violations.push("the answer was cut off at the output token limit".to_owned());
        }
        if self.repairs_left == 0 {
            let raw = std::mem::take(&mut self.text);
            let attempts = self.attempts;
            self.fail(StructuredError::Invalid {
                raw,
                violations,
                attempts,
            });
            return;
        }
        self.repairs_left -= 1;
        self.attempts += 1;
        let repair = self.repair_request(&violations);
        self.queue
            .push_back(Ok(ChatEvent::AnswerRejected { violations }));
        self.text.clear();
        // The next attempt's values start from nothing.
        if let Some(growing) = &mut self.growing {
            *growing = AnswerSoFar::default();
        }
        let mut inner = (*self.inner).clone();
        self.state = State::Calling(Box::pin(async move {
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(repair).await
        }));
    }

    /// The first request, its answer, and what is wrong with the answer.
    fn repair_request(&self, violations: &[String]) -> ChatRequest {
        let mut request = self.request.clone();
        request.messages.push(Message::assistant(self.text.clone()));
        let mut note = String::from("Your answer does not match the requested JSON schema:\n");
        for violation in violations {
            note.push_str("- ");
            note.push_str(violation);
            note.push('\n');
        }
        note.push_str("Answer again with only the corrected JSON.");
        request.messages.push(Message::user(note));
        request
    }

    fn fail(&mut self, error: StructuredError) {
        self.queue.push_back(Err(error.into_chat()));
        self.state = State::Done;
    }
}

/// Whether a response that ended so is a refusal rather than an answer.
fn is_refusal(reason: &FinishReason) -> bool {
    match reason {
        FinishReason::ContentFilter => true,
        FinishReason::Other(other) => {
            let other = other.to_ascii_lowercase();
            other.contains("refusal") || other.contains("safety") || other.contains("blocked")
        }
        _ => false,
    }
}

impl<S> Stream for AnswerStream<S>
where
    S: tower_service::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.queue.pop_front() {
                return Poll::Ready(Some(item));
            }
            match &mut this.state {
                State::Calling(call) => match ready!(call.as_mut().poll(cx)) {
                    Ok(stream) => this.state = State::Streaming(stream),
                    Err(error) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(error)));
                    }
                },
                State::Streaming(stream) => match ready!(stream.as_mut().poll_next(cx)) {
                    Some(Ok(ChatEvent::TextDelta { text })) => {
                        this.text.push_str(&text);
                        if let Some(value) = this.growing.as_mut().and_then(|g| g.push(&text)) {
                            this.queue.push_back(Ok(ChatEvent::PartialAnswer { value }));
                        }
                        return Poll::Ready(Some(Ok(ChatEvent::TextDelta { text })));
                    }
                    Some(Ok(ChatEvent::Finish { reason })) => this.settle(reason),
                    Some(other) => return Poll::Ready(Some(other)),
                    // A stream that ends without a finish event ends here too.
                    None => this.state = State::Done,
                },
                State::Done => return Poll::Ready(None),
            }
        }
    }
}
