//! Holding a response back until its first content event: the moment after which nothing may be retried.
//!
//! A chat stream may open with events that carry no content ([`ChatEvent::ResponseMetadata`],
//! [`ChatEvent::Usage`]); a connection that breaks after them has shown the caller nothing yet, so the call can
//! still be retried or sent elsewhere. [`FirstContent`] polls a stream until its first content event (or its end,
//! or an error), keeping the events before it, and [`Peeked::into_stream`] hands all of them on unchanged.

use std::collections::VecDeque;
use std::mem::ManuallyDrop;
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

/// The events held before a stream is handed on: a few inline (a stream usually opens with one metadata event
/// and then content), more spill to the heap.
#[derive(Default)]
pub(crate) struct Head {
    /// Only `start..end` hold events (the rest are `None`), so dropping drops just those ([`Drop`] below)
    /// instead of testing every slot on every call.
    slots: ManuallyDrop<[Option<ChatEvent>; 3]>,
    start: usize,
    end: usize,
    /// `None` until needed: an empty `VecDeque` still costs a few dozen instructions to drop, on every call.
    spill: Option<VecDeque<ChatEvent>>,
}

impl Drop for Head {
    fn drop(&mut self) {
        for slot in &mut self.slots[self.start..self.end] {
            drop(slot.take());
        }
    }
}

impl Head {
    pub(crate) fn push_back(&mut self, event: ChatEvent) {
        match &mut self.spill {
            None if self.end < self.slots.len() => {
                self.slots[self.end] = Some(event);
                self.end += 1;
            }
            spill => spill.get_or_insert_with(VecDeque::new).push_back(event),
        }
    }

    pub(crate) fn push_front(&mut self, event: ChatEvent) {
        if self.start > 0 {
            self.start -= 1;
            self.slots[self.start] = Some(event);
        } else {
            // Rare (a fallback naming the model): everything moves to the heap, in order.
            let mut all: VecDeque<ChatEvent> = self.slots[self.start..self.end]
                .iter_mut()
                .filter_map(Option::take)
                .collect();
            if let Some(spill) = &mut self.spill {
                all.append(spill);
            }
            all.push_front(event);
            self.spill = Some(all);
            (self.start, self.end) = (0, 0);
        }
    }

    pub(crate) fn pop_front(&mut self) -> Option<ChatEvent> {
        if self.start < self.end {
            self.start += 1;
            return self.slots[self.start - 1].take();
        }
        self.spill.as_mut()?.pop_front()
    }

    /// Whether any held event satisfies `f`: a plain loop per part instead of a chained iterator (measured: ~20
    /// instructions less per call).
    pub(crate) fn any(&self, f: impl Fn(&ChatEvent) -> bool) -> bool {
        self.slots[self.start..self.end].iter().flatten().any(&f)
            || self
                .spill
                .as_ref()
                .is_some_and(|spill| spill.iter().any(&f))
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ChatEvent> {
        self.slots[self.start..self.end]
            .iter()
            .flatten()
            .chain(self.spill.iter().flatten())
    }
}

/// A stream polled up to (and including) its first content event.
pub(crate) struct Peeked {
    /// The held events and the rest, already in the box the caller's stream will be.
    prefixed: Box<Prefixed>,
}

impl Peeked {
    /// The events taken so far, the first content event last (all events, when the stream ended first).
    pub(crate) fn head(&mut self) -> &mut Head {
        &mut self.prefixed.head
    }

    /// The whole stream again: the held events, then the rest. No copy: the box was made when the peek began.
    pub(crate) fn into_stream(self) -> ChatStream {
        Box::into_pin(self.prefixed)
    }
}

/// Polls a stream until its first content event. An `Err` item before it fails the peek with that error.
///
/// The held events go straight into the [`Prefixed`] box handed on afterwards, so a future holding a
/// `FirstContent` stays one pointer wide and nothing is moved when the peek ends.
pub(crate) struct FirstContent {
    prefixed: Option<Box<Prefixed>>,
}

impl FirstContent {
    pub(crate) fn new(stream: ChatStream) -> Self {
        FirstContent {
            prefixed: Some({
                // Made empty in place, then given the stream: `Box::new(Prefixed { .. })` built the ~380 bytes on
                // the stack and copied them into the box.
                let mut prefixed = Box::<Prefixed>::default();
                prefixed.rest = Some(stream);
                prefixed
            }),
        }
    }

    pub(crate) fn poll_peek(&mut self, cx: &mut Context<'_>) -> Poll<Result<Peeked, ChatError>> {
        let prefixed = self
            .prefixed
            .as_mut()
            .expect("FirstContent polled after completion");
        let Prefixed { head, rest, .. } = &mut **prefixed;
        let stream = rest
            .as_mut()
            .expect("the stream is held until the peek ends");
        loop {
            match ready!(stream.as_mut().poll_next(cx)) {
                Some(Ok(event)) => {
                    let content = is_content(&event);
                    head.push_back(event);
                    if content {
                        break;
                    }
                }
                Some(Err(error)) => {
                    self.prefixed = None;
                    return Poll::Ready(Err(error));
                }
                None => {
                    *rest = None;
                    break;
                }
            }
        }
        let prefixed = self.prefixed.take().expect("checked above");
        Poll::Ready(Ok(Peeked { prefixed }))
    }
}

/// Held events first, then the rest of the stream.
#[derive(Default)]
struct Prefixed {
    head: Head,
    rest: Option<ChatStream>,
    /// The rest ended (or failed): it is dropped at the next poll, which then ends the stream.
    ended: bool,
}

impl Stream for Prefixed {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(event) = self.head.pop_front() {
            return Poll::Ready(Some(Ok(event)));
        }
        let this = &mut *self;
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Ready(None);
        };
        if this.ended {
            this.rest = None;
            return Poll::Ready(None);
        }
        // Returned as polled, with nothing that may unwind between the poll and the return (the end only sets a
        // flag), so the 100-byte event is written once, straight into the caller's slot: this runs for every
        // event of every answered stream.
        let next = rest.as_mut().poll_next(cx);
        this.ended = matches!(next, Poll::Ready(None | Some(Err(_))));
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_keeps_order_inline_and_spilled() {
        let text = |t: &str| ChatEvent::text(t);
        let mut head = Head::default();
        for t in ["a", "b", "c", "d"] {
            head.push_back(text(t));
        }
        head.push_front(text("0"));
        let all: Vec<ChatEvent> = std::iter::from_fn(|| head.pop_front()).collect();
        assert_eq!(all, ["0", "a", "b", "c", "d"].map(text));

        let mut head = Head::default();
        head.push_back(text("a"));
        assert_eq!(head.pop_front(), Some(text("a")));
        head.push_front(text("0"));
        head.push_back(text("b"));
        assert_eq!(
            head.iter().cloned().collect::<Vec<_>>(),
            ["0", "b"].map(text)
        );
    }
}
