//! Response bodies turned into chat events: the provider's event mapping ([`WireDecoder`]) over its body's
//! framing ([`Framing`]: SSE for most providers, AWS event-stream frames for Bedrock), fed bytes
//! ([`EventDecoder`]), and the streaming body with its idle deadline ([`SseChatStream`]).

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_core::Stream;
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::status::body_error;
use crate::error::{ChatError, ErrorKind, TimeoutPhase};
use crate::event::ChatEvent;
use crate::sse::{SseDecoder, SseEvent};
use crate::stream::ChatStream;

/// How a streamed body is cut into events: SSE for most providers ([`SseDecoder`]), binary frames for Bedrock.
pub trait Framing: Default + Send + Unpin + 'static {
    /// One event of the body, as the provider's [`WireDecoder`] reads it.
    type Frame;

    /// Decode from the front of `input` until one event completes and return it, leaving `input` just past it;
    /// `None` once `input` is used up (an unfinished event is kept for the next call).
    fn decode_next(&mut self, input: &mut &[u8]) -> Option<Self::Frame>;

    /// The body ended: an event still owed (SSE's last event without its blank line, or a framing error for a
    /// body cut inside a frame).
    fn finish(&mut self) -> Option<Self::Frame>;
}

impl Framing for SseDecoder {
    type Frame = SseEvent;

    fn decode_next(&mut self, input: &mut &[u8]) -> Option<SseEvent> {
        SseDecoder::decode_next(self, input)
    }

    fn finish(&mut self) -> Option<SseEvent> {
        SseDecoder::finish(self)
    }
}

/// The event type of a decoder's framing.
pub(crate) type FrameOf<D> = <<D as WireDecoder>::Framing as Framing>::Frame;

/// Maps one provider's streamed events to chat events.
pub trait WireDecoder: Send + Unpin + 'static {
    /// How the body is cut into events.
    type Framing: Framing;

    /// Map one event, pushing zero or more chat events.
    fn on_event(
        &mut self,
        event: FrameOf<Self>,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError>;
    /// The body ended: push what is still owed, or fail if the provider stopped before finishing.
    fn on_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError>;
    /// Whether the provider's end marker was seen (later bytes are read and ignored, so the connection can be
    /// reused).
    fn is_done(&self) -> bool;
}

/// The body's framing plus one provider's event mapping, fed bytes and drained of results; shared by the body stream
/// and the public byte-level decoders.
///
/// Decoding is pulled: a fed chunk is kept as it is and decoded one SSE event at a time as results are asked for,
/// so only one event's strings are alive at a time instead of a whole chunk's (a chunk often holds a hundred).
pub(crate) struct EventDecoder<D: WireDecoder> {
    framing: D::Framing,
    wire: D,
    /// Bytes fed but not decoded yet.
    pending: Bytes,
    /// Chat events mapped from the last SSE event, not taken yet.
    ready: VecDeque<ChatEvent>,
    failure: Option<ChatError>,
    /// Set with the first failure and kept after it is taken: nothing is decoded after a failure.
    failed: bool,
    ended: bool,
}

impl<D: WireDecoder> EventDecoder<D> {
    pub(crate) fn new(wire: D) -> Self {
        EventDecoder {
            framing: D::Framing::default(),
            wire,
            pending: Bytes::new(),
            ready: VecDeque::new(),
            failure: None,
            failed: false,
            ended: false,
        }
    }

    /// Whether nothing more is wanted from the body (the end marker was seen, or it failed).
    pub(crate) fn is_complete(&self) -> bool {
        self.wire.is_done() || self.failed
    }

    /// Queue the next chunk of the body; it is decoded as items are taken.
    pub(crate) fn push(&mut self, data: Bytes) {
        if self.is_complete() {
            return;
        }
        if !self.pending.is_empty() {
            // Fed again before the last chunk was drained: decode that one now to keep a single pending chunk.
            self.decode_pending();
        }
        self.pending = data;
    }

    /// Queue a chunk borrowed from the caller (copied).
    pub(crate) fn feed(&mut self, data: &[u8]) {
        self.push(Bytes::copy_from_slice(data));
    }

    /// Decode one event from the pending bytes, mapping it to chat events; `false` when no event completed.
    fn decode_one(&mut self) -> bool {
        let mut input = &self.pending[..];
        let event = self.framing.decode_next(&mut input);
        let used = self.pending.len() - input.len();
        self.pending.advance(used);
        let Some(event) = event else {
            return false;
        };
        if let Err(error) = self.wire.on_event(event, &mut self.ready) {
            self.fail(error);
        }
        true
    }

    fn decode_pending(&mut self) {
        while !self.is_complete() && self.decode_one() {}
        if self.is_complete() {
            // Bytes after the end marker or a failure are ignored.
            self.pending.clear();
        }
    }

    /// The body ended (normally, or with `error`).
    pub(crate) fn end(&mut self, error: Option<ChatError>) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.decode_pending();
        if self.is_complete() {
            return;
        }
        if let Some(error) = error {
            self.fail(error);
            return;
        }
        if let Some(event) = self.framing.finish() {
            if let Err(error) = self.wire.on_event(event, &mut self.ready) {
                self.fail(error);
            }
        }
        if !self.is_complete() {
            if let Err(error) = self.wire.on_end(&mut self.ready) {
                self.fail(error);
            }
        }
    }

    fn fail(&mut self, error: ChatError) {
        self.failure = Some(error);
        self.failed = true;
    }

    /// The next decoded item: events first, then the failure that ended decoding; `None` when more bytes are
    /// needed (or everything was taken).
    pub(crate) fn next_item(&mut self) -> Option<Result<ChatEvent, ChatError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            if self.is_complete() || self.pending.is_empty() {
                break;
            }
            self.decode_one();
        }
        self.pending.clear();
        self.failure.take().map(Err)
    }
}

/// A streaming body cut into events by its framing and mapped to chat events, with an idle deadline between
/// chunks.
pub(crate) struct SseChatStream<D: WireDecoder> {
    body: Option<Incoming>,
    decoder: EventDecoder<D>,
    idle: Option<Duration>,
    idle_deadline: Option<Instant>,
    idle_timer: Option<Pin<Box<Sleep>>>,
    /// The waker the idle timer was last polled with (it wakes that one when it fires).
    idle_timer_waker: Option<Waker>,
}

impl<D: WireDecoder> SseChatStream<D> {
    pub(crate) fn new(body: Incoming, wire: D, idle: Option<Duration>) -> Self {
        SseChatStream {
            body: Some(body),
            decoder: EventDecoder::new(wire),
            idle,
            idle_deadline: None,
            idle_timer: None,
            idle_timer_waker: None,
        }
    }

    pub(crate) fn boxed(self) -> ChatStream {
        Box::pin(self)
    }

    /// Whether the idle deadline passed; re-arms the timer lazily so a busy stream costs one clock read per chunk
    /// instead of a timer-wheel update.
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.idle_deadline else {
            return false;
        };
        // A streamed body wakes this task once per chunk: while the timer still waits and holds this task's
        // waker, it will wake the task when it fires, so polling it again would only re-register the same waker
        // (about a third of what the idle deadline costs a streamed call).
        let armed_for_this_task = self
            .idle_timer
            .as_ref()
            .is_some_and(|timer| !timer.is_elapsed())
            && self
                .idle_timer_waker
                .as_ref()
                .is_some_and(|waker| wakes_the_same(waker, cx.waker()));
        if armed_for_this_task {
            return false;
        }
        match &mut self.idle_timer_waker {
            Some(waker) => waker.clone_from(cx.waker()),
            None => self.idle_timer_waker = Some(cx.waker().clone()),
        }
        let timer = self
            .idle_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if Instant::now() >= deadline {
                return true;
            }
            timer.as_mut().reset(deadline);
        }
    }
}

/// Whether two wakers wake the same task. `Waker::will_wake` compares vtable addresses, and tokio hands a task
/// wakers whose vtables are equal but stored at two addresses (the one it polls with and its clones), so it
/// answers `false` for every poll after the first; the same data pointer and the same four functions are the
/// same waker.
fn wakes_the_same(a: &Waker, b: &Waker) -> bool {
    a.will_wake(b) || (a.data() == b.data() && a.vtable() == b.vtable())
}

impl<D: WireDecoder> Stream for SseChatStream<D> {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.decoder.next_item() {
                if item.is_err() {
                    this.body = None;
                }
                return Poll::Ready(Some(item));
            }
            let Some(body) = this.body.as_mut() else {
                return Poll::Ready(None);
            };
            // After the end marker the rest of the body is still read (and ignored) while it is at hand, so
            // the connection goes back to the pool instead of being closed.
            if this.idle_deadline.is_none() {
                this.idle_deadline = this.idle.map(|idle| Instant::now() + idle);
            }
            match Pin::new(body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(idle) = this.idle {
                        this.idle_deadline = Some(Instant::now() + idle);
                    }
                    if let Ok(data) = frame.into_data() {
                        this.decoder.push(data);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    this.body = None;
                    this.decoder.end(Some(body_error(error)));
                }
                Poll::Ready(None) => {
                    this.body = None;
                    this.decoder.end(None);
                }
                // The end marker was seen but the body's last bytes are still on their way: end the stream now,
                // and let a task read the rest so the connection goes back to the pool instead of closing.
                Poll::Pending if this.decoder.is_complete() => {
                    if let Some(rest) = this.body.take() {
                        tokio::spawn(drain(rest));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if !this.idle_expired(cx) {
                        return Poll::Pending;
                    }
                    this.body = None;
                    let idle = this.idle.unwrap_or_default();
                    this.decoder.end(Some(ChatError::new(
                        ErrorKind::Timeout(TimeoutPhase::Idle),
                        format!("no data from the provider for {idle:?}"),
                    )));
                }
            }
        }
    }
}

/// Read what is left of a finished response (a few bytes: the chunked terminator, a trailing newline), bounded in
/// size and time, so hyper can reuse the connection.
async fn drain(mut body: Incoming) {
    const LIMIT: usize = 64 * 1024;
    let read_rest = async {
        let mut read = 0;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, Bytes::len);
            if read > LIMIT {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read_rest).await;
}
