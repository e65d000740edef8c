//! [`RecordingStream`]: passes events through untouched while folding them into the call's record.

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::SystemTime;

use futures_core::Stream;
use tower_chat::{ChatError, ChatEvent, ChatStream, ResponseBuilder};

use crate::draft::{outcome_of_error, Draft};
use crate::record::CallOutcome;
use crate::recorder::{FailurePolicy, Finalize, Recorder};
use crate::screening::{Judging, Screening};

enum State {
    /// Events flow; `draft` is taken when the record is handed over.
    Streaming,
    /// A text the policy outside judges whole ended, or a tool call or result it judges whole came: the
    /// judgement is awaited before the item is handled (see `screening.rs`). Boxed, so the state is no larger
    /// than its fail-closed write's (every recorded stream carries it, with a policy outside or not).
    Judging(Box<Awaiting>),
    /// Fail-closed: the inner stream ended and the record's write is awaited before the last item.
    Finalizing(Finalize),
    /// The record was handed over; nothing more comes.
    Done,
}

/// A judgement and the item that waits for it (`None`: the inner stream's end).
struct Awaiting {
    judgement: Judging,
    then: Option<Result<ChatEvent, ChatError>>,
}

/// The stream a [`crate::Persistence`] service returns.
///
/// Per event it does no I/O: it folds the event into a [`ResponseBuilder`] and yields it. The
/// [`ChatEvent::Finish`] event is held back until the inner stream ends, so the record is complete (usage after
/// finish included) and, in fail-closed mode, stored before the caller sees the call finish. If the inner
/// stream yields more after a `Finish`, the held `Finish` is released first and recording continues.
///
/// Dropped before its end, it hands its partial record to the writer from its `Drop` (outcome
/// [`CallOutcome::Cancelled`], or [`CallOutcome::Completed`] if the `Finish` had arrived), like tower-http's
/// `on_early_drop`.
pub struct RecordingStream {
    inner: ChatStream,
    draft: Option<Draft>,
    builder: ResponseBuilder,
    first_token_at: Option<SystemTime>,
    output_began: bool,
    finish_seen: bool,
    held: Option<ChatEvent>,
    /// An item to handle before the inner stream is polled again (`Some(None)`: its end).
    pending: Option<Option<Result<ChatEvent, ChatError>>>,
    recorder: Recorder,
    state: State,
    /// What a content policy outside lets through of the answer, when one asked (see `screening.rs`).
    screening: Option<Screening>,
}

impl fmt::Debug for RecordingStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Streaming => "streaming",
            State::Judging(_) => "judging",
            State::Finalizing(_) => "finalizing",
            State::Done => "done",
        };
        f.debug_struct("RecordingStream")
            .field("draft", &self.draft)
            .field("state", &state)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

/// A stream that has ended: what a dropped recording stream holds once its inner stream is gone (zero-sized:
/// boxing it allocates nothing).
struct Ended;

impl Stream for Ended {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(None)
    }
}

impl RecordingStream {
    pub(crate) fn new(inner: ChatStream, draft: Draft, recorder: Recorder) -> Self {
        let screening = draft.guarded.as_ref().and_then(Screening::of);
        RecordingStream {
            screening,
            inner,
            draft: Some(draft),
            builder: ResponseBuilder::new(),
            first_token_at: None,
            output_began: false,
            finish_seen: false,
            held: None,
            pending: None,
            recorder,
            state: State::Streaming,
        }
    }

    fn take_record(&mut self, mut outcome: CallOutcome) -> Option<crate::CallRecord> {
        let mut draft = self.draft.take()?;
        if let Some(screening) = &mut self.screening {
            draft.screened.append(&mut screening.verdicts);
            if screening.withheld {
                outcome = CallOutcome::Blocked;
            }
        }
        let builder = std::mem::take(&mut self.builder);
        Some(draft.finish(builder, self.first_token_at, outcome))
    }

    fn observe(&mut self, event: &ChatEvent) {
        self.output_began = true;
        if self.first_token_at.is_none()
            && matches!(
                event,
                ChatEvent::TextDelta { .. }
                    | ChatEvent::ReasoningDelta { .. }
                    | ChatEvent::ToolCallStart { .. }
                    | ChatEvent::ToolCallDelta { .. }
                    | ChatEvent::ToolCallEnd { .. }
            )
        {
            self.first_token_at = Some(SystemTime::now());
        }
        if matches!(event, ChatEvent::Finish { .. }) {
            self.finish_seen = true;
        }
        match &mut self.screening {
            Some(screening) => screening.observe(event, &mut self.builder),
            None => self.builder.push(event),
        }
    }

    /// The stream ended or failed: what the screens held back is decided (a dropped stream decides nothing: the
    /// client saw none of it).
    fn end_texts(&mut self) {
        if let Some(screening) = &mut self.screening {
            screening.end_texts(&mut self.builder);
        }
    }
}

impl Stream for RecordingStream {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Done => return Poll::Ready(None),
                State::Finalizing(write) => {
                    let stored = ready!(write.as_mut().poll(cx));
                    this.state = State::Done;
                    return Poll::Ready(match stored {
                        Ok(()) => this.held.take().map(Ok),
                        Err(error) => {
                            this.held = None;
                            Some(Err(error))
                        }
                    });
                }
                State::Judging(awaiting) => {
                    let judged = ready!(awaiting.judgement.as_mut().poll(cx));
                    if let State::Judging(awaiting) =
                        std::mem::replace(&mut this.state, State::Streaming)
                    {
                        this.pending = Some(awaiting.then);
                    }
                    if let Some(screening) = &mut this.screening {
                        screening.keep_judged(judged, &mut this.builder);
                    }
                }
                State::Streaming => {}
            }
            let item = match this.pending.take() {
                Some(item) => item,
                None => ready!(this.inner.as_mut().poll_next(cx)),
            };
            if let Some(screening) = &mut this.screening {
                let event = match &item {
                    Some(Ok(event)) => Some(event),
                    _ => None,
                };
                if let Some(judgement) = screening.judge(event, &mut this.builder) {
                    this.state = State::Judging(Box::new(Awaiting {
                        judgement,
                        then: item,
                    }));
                    continue;
                }
            }
            match item {
                Some(item) if this.held.is_some() => {
                    // `Finish` was not last after all: release it, then handle this item on the next poll.
                    this.pending = Some(Some(item));
                    return Poll::Ready(this.held.take().map(Ok));
                }
                Some(Ok(event)) => {
                    this.observe(&event);
                    if matches!(event, ChatEvent::Finish { .. }) {
                        this.held = Some(event);
                        continue;
                    }
                    return Poll::Ready(Some(Ok(event)));
                }
                Some(Err(error)) => {
                    this.end_texts();
                    // The call has failed already: the caller gets that error now, and a store failure can
                    // only be logged and counted.
                    let outcome = outcome_of_error(&error, this.output_began);
                    if let Some(record) = this.take_record(outcome) {
                        this.recorder.submit(record);
                    }
                    this.state = State::Done;
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
                    this.end_texts();
                    let outcome = if this.finish_seen {
                        CallOutcome::Completed
                    } else {
                        CallOutcome::Interrupted { error: None }
                    };
                    let Some(record) = this.take_record(outcome) else {
                        this.state = State::Done;
                        continue;
                    };
                    match this.recorder.policy() {
                        FailurePolicy::FailClosed => {
                            this.state = State::Finalizing(this.recorder.submit_and_wait(record));
                        }
                        FailurePolicy::FailOpen => {
                            this.recorder.submit(record);
                            this.state = State::Done;
                            return Poll::Ready(this.held.take().map(Ok));
                        }
                    }
                }
            }
        }
    }
}

impl Drop for RecordingStream {
    fn drop(&mut self) {
        if self.draft.is_none() {
            return;
        }
        // The inner stream first: what it settles as it goes (a limits layer's estimated charge) is then in the
        // record.
        self.inner = Box::pin(Ended);
        let outcome = if self.finish_seen {
            CallOutcome::Completed
        } else {
            CallOutcome::Cancelled
        };
        if let Some(record) = self.take_record(outcome) {
            self.recorder.submit(record);
        }
    }
}
