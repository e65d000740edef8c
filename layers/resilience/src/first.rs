//! Holding a response back until its first content event: the moment after which nothing may be retried.
//!
//! A chat stream may open with events that carry no content ([`ChatEvent::ResponseMetadata`],
//! [`ChatEvent::Usage`]); a connection that breaks after them has shown the caller nothing yet, so the call can
//! still be retried or sent elsewhere. [`FirstContent`] polls a stream until its first content event (or its end,
//! or an error), keeping the events before it, and [`Peeked::into_stream`] hands all of them on unchanged.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use tower_chat::{ChatError, ChatEvent, ChatStream};

/// Whether an event shows the caller something that a retry could duplicate.
pub(crate) fn is_content(event: &ChatEvent) -> bool {
    !matches!(
        event,
        ChatEvent::ResponseMetadata { .. } | ChatEvent::Usage { .. }
    )
}

/// A stream polled up to (and including) its first content event.
pub(crate) struct Peeked {
    /// The events taken so far, the first content event last (all events, when the stream ended first).
    pub(crate) head: VecDeque<ChatEvent>,
    /// The rest of the stream; `None` when it already ended.
    pub(crate) rest: Option<ChatStream>,
}

impl Peeked {
    /// The whole stream again: the held events, then the rest.
    pub(crate) fn into_stream(self) -> ChatStream {
        Box::pin(Prefixed {
            head: self.head,
            rest: self.rest,
        })
    }
}

/// Polls a stream until its first content event. An `Err` item before it fails the peek with that error.
pub(crate) struct FirstContent {
    stream: Option<ChatStream>,
    head: VecDeque<ChatEvent>,
}

impl FirstContent {
    pub(crate) fn new(stream: ChatStream) -> Self {
        FirstContent {
            stream: Some(stream),
            head: VecDeque::new(),
        }
    }

    pub(crate) fn poll_peek(&mut self, cx: &mut Context<'_>) -> Poll<Result<Peeked, ChatError>> {
        let stream = self
            .stream
            .as_mut()
            .expect("FirstContent polled after completion");
        loop {
            match ready!(stream.as_mut().poll_next(cx)) {
                Some(Ok(event)) => {
                    let content = is_content(&event);
                    self.head.push_back(event);
                    if content {
                        return Poll::Ready(Ok(Peeked {
                            head: std::mem::take(&mut self.head),
                            rest: self.stream.take(),
                        }));
                    }
                }
                Some(Err(error)) => {
                    self.stream = None;
                    return Poll::Ready(Err(error));
                }
                None => {
                    self.stream = None;
                    return Poll::Ready(Ok(Peeked {
                        head: std::mem::take(&mut self.head),
                        rest: None,
                    }));
                }
            }
        }
    }
}

/// Held events first, then the rest of the stream.
struct Prefixed {
    head: VecDeque<ChatEvent>,
    rest: Option<ChatStream>,
}

impl Stream for Prefixed {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(event) = self.head.pop_front() {
            return Poll::Ready(Some(Ok(event)));
        }
        let Some(rest) = self.rest.as_mut() else {
            return Poll::Ready(None);
        };
        let next = ready!(rest.as_mut().poll_next(cx));
        if !matches!(next, Some(Ok(_))) {
            self.rest = None;
        }
        Poll::Ready(next)
    }
}
