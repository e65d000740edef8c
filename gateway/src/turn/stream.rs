//! [`KeptStream`]: the stack's events on their way to the client, and what the turn leaves for a later request
//! when it ends — a turn paused for approval, or a hand-back of the client's own calls, in the [`PendingStore`].
//!
//! ```text
//!   inner event ──▶ builder (everything the stack did, hidden rounds included)
//!        │
//!        ├─ ApprovalRequest ──▶ held until the finish
//!        ├─ Finish(awaiting_approval) ──▶ pause: held requests go out under the ids the client answers with,
//!        │                                then the Finish
//!        ├─ Finish(tool_calls) ──▶ hand the client's calls back, then the Finish
//!        └─ any other ──▶ out as it came
//! ```

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_util::Stream;
use tower_chat::{
    ApprovalRequest, CallerIdentity, ChatError, ChatEvent, ChatStream, ConversationId,
    FinishReason, Message, ResponseBuilder, Shared,
};
use tower_chat_cache::CacheOutcome;
use tower_chat_wire::extensions::ResponseHeaders;

use crate::edge::in_flight::MediaPermit;
use crate::turn::pending::PendingStore;

/// What a turn keeps when it ends, settled before the stack was called.
pub(super) struct Kept {
    pub(super) caller: Option<CallerIdentity>,
    pub(super) conversation: ConversationId,
    /// Hidden messages this turn continues from (a resumed pause).
    pub(super) hidden: Vec<Message>,
    /// The request's messages: its last user message is what an operator reads beside a paused call.
    pub(super) sent: Shared<Vec<Message>>,
    pub(super) pending: Arc<PendingStore>,
    /// The names of the tools the client declared: their calls are handed back.
    pub(super) client_tools: Vec<String>,
    /// `[cache]`: whether the first model call was served from the cache, for the answer's `x-cache`.
    pub(super) cache: Option<(CacheOutcome, ResponseHeaders)>,
    /// Held until the answer's last event: a stream keeps its request's media alive (the call record, a tool
    /// loop's later rounds) as long as it runs.
    pub(super) _media: MediaPermit,
}

/// See the [module docs](self).
pub(crate) struct KeptStream {
    inner: ChatStream,
    kept: Kept,
    builder: ResponseBuilder,
    /// The approval requests of the turn, held back until it ends (a pause names them by the ids it issues).
    held: Vec<ApprovalRequest>,
    /// The ids of the client's own calls.
    client_calls: Vec<String>,
    /// Events to send before reading the inner stream again: the held requests, then the finish.
    queued: VecDeque<ChatEvent>,
    /// Nothing came through yet: the first item settles the answer's head.
    first: bool,
}

impl KeptStream {
    pub(super) fn new(inner: ChatStream, kept: Kept) -> Self {
        KeptStream {
            inner,
            kept,
            builder: ResponseBuilder::new(),
            held: Vec::new(),
            client_calls: Vec::new(),
            queued: VecDeque::new(),
            first: true,
        }
    }

    /// The answer's `x-cache`, once the first model call has said which.
    fn name_cache_outcome(&self) {
        if let Some((outcome, headers)) = &self.kept.cache {
            crate::stack::cache::outcome_header(outcome, headers);
        }
    }

    /// The turn ended with `reason`: keep a pause or a hand-back; returns the held approval requests, under
    /// the ids the client answers with.
    fn end(&mut self, reason: &FinishReason) -> Vec<ApprovalRequest> {
        let mut held = std::mem::take(&mut self.held);
        let pausing = *reason == FinishReason::AwaitingApproval && !held.is_empty();
        let handing_back = *reason == FinishReason::ToolCalls && !self.client_calls.is_empty();
        if !pausing && !handing_back {
            return held;
        }
        let messages = std::mem::take(&mut self.builder).finish().messages;
        let mut hidden = std::mem::take(&mut self.kept.hidden);
        hidden.extend(messages);
        let kept = &self.kept;
        if pausing {
            let notices = kept.pending.pause(
                kept.caller.clone(),
                kept.conversation.clone(),
                hidden,
                &held,
                last_user_text(&kept.sent).as_deref(),
            );
            for (request, notice) in held.iter_mut().zip(notices) {
                request.id = notice.id;
            }
        } else {
            kept.pending
                .hand_back(kept.caller.clone(), &self.client_calls, hidden);
        }
        held
    }
}

impl Stream for KeptStream {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.queued.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            let item = ready!(this.inner.as_mut().poll_next(cx));
            let first = std::mem::take(&mut this.first);
            let event = match item {
                None => return Poll::Ready(None),
                Some(Err(error)) if first => {
                    return Poll::Ready(Some(Err(super::failed_chat(error))))
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(super::worded(error)))),
                Some(Ok(event)) => event,
            };
            if first {
                this.name_cache_outcome();
            }
            this.builder.push(&event);
            match event {
                ChatEvent::ApprovalRequest { request } => this.held.push(*request),
                ChatEvent::ToolCallEnd { ref call, .. }
                    if this.kept.client_tools.contains(&call.name) =>
                {
                    this.client_calls.push(call.id.clone());
                    return Poll::Ready(Some(Ok(event)));
                }
                ChatEvent::Finish { ref reason } => {
                    // A whole answer's head is written after its last event.
                    this.name_cache_outcome();
                    let held = this.end(reason);
                    if held.is_empty() {
                        return Poll::Ready(Some(Ok(event)));
                    }
                    this.queued.extend(held.into_iter().map(|request| {
                        ChatEvent::ApprovalRequest {
                            request: Box::new(request),
                        }
                    }));
                    this.queued.push_back(event);
                }
                event => return Poll::Ready(Some(Ok(event))),
            }
        }
    }
}

/// The text of the last user message of `messages` that has any, as an approval's context keeps it.
fn last_user_text(messages: &[Message]) -> Option<String> {
    messages.iter().rev().find_map(|message| match message {
        Message::User { content } => {
            tower_chat_approval::ApprovalContext::kept(&content.joined_text())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;
    use serde_json::json;
    use tower_chat::{AssistantMessage, ToolCall};
    use tower_chat_wire::format::ApprovalAnswer;

    use super::*;
    use crate::edge::in_flight::{ConnectionLimits, MediaInFlight};

    fn kept(pending: &Arc<PendingStore>, client_tools: &[&str]) -> Kept {
        Kept {
            caller: None,
            conversation: ConversationId::new("conv"),
            hidden: Vec::new(),
            sent: vec![Message::user("write a")].into(),
            pending: pending.clone(),
            client_tools: client_tools.iter().map(|t| t.to_string()).collect(),
            cache: None,
            _media: MediaInFlight::new(&ConnectionLimits::default())
                .admit(0)
                .unwrap(),
        }
    }

    async fn through(events: Vec<ChatEvent>, kept: Kept) -> Vec<ChatEvent> {
        let inner: ChatStream = Box::pin(futures_util::stream::iter(events.into_iter().map(Ok)));
        KeptStream::new(inner, kept)
            .map(Result::unwrap)
            .collect()
            .await
    }

    fn call(id: &str, name: &str) -> ChatEvent {
        ChatEvent::ToolCallEnd {
            index: 0,
            call: ToolCall::new(id, name, json!({})),
        }
    }

    #[tokio::test]
    async fn a_pause_goes_out_under_the_ids_the_client_answers_and_is_kept() {
        let pending = Arc::new(PendingStore::new(Duration::from_secs(60)));
        let request = ApprovalRequest {
            id: "call_1".into(),
            call: ToolCall::new("call_1", "write_file", json!({"path": "a"})),
            reason: None,
        };
        let events = vec![
            ChatEvent::text("Writing it."),
            call("call_1", "write_file"),
            ChatEvent::ApprovalRequest {
                request: Box::new(request),
            },
            ChatEvent::Usage {
                usage: Default::default(),
            },
            ChatEvent::finish(FinishReason::AwaitingApproval),
        ];
        let out = through(events, kept(&pending, &[])).await;
        // Held until the turn ended, then sent just before the finish under the id the store issued.
        let kinds: Vec<&str> = out.iter().map(ChatEvent::kind).collect();
        assert_eq!(
            kinds,
            [
                "text_delta",
                "tool_call_end",
                "usage",
                "approval_request",
                "finish"
            ]
        );
        let ChatEvent::ApprovalRequest { request } = &out[3] else {
            unreachable!()
        };
        assert!(request.id.starts_with("apr_"), "{}", request.id);
        let answer = ApprovalAnswer {
            id: request.id.clone(),
            approved: true,
            reason: None,
        };
        let resumed = pending.resume(None, &[answer]).unwrap();
        assert_eq!(resumed.conversation.as_str(), "conv");
        assert!(matches!(
            &resumed.hidden[0],
            Message::Assistant(AssistantMessage { content, .. }) if content == "Writing it."
        ));
        assert_eq!(resumed.decisions.0[0].approval_id, "call_1");
    }

    #[tokio::test]
    async fn client_calls_are_handed_back_and_other_turns_keep_nothing() {
        let pending = Arc::new(PendingStore::new(Duration::from_secs(60)));
        let events = vec![
            call("s1", "add"),
            call("c1", "weather"),
            ChatEvent::finish(FinishReason::ToolCalls),
        ];
        let out = through(events.clone(), kept(&pending, &["weather"])).await;
        assert_eq!(out, events);
        let visible = Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall::new("c1", "weather", json!({}))],
            ..AssistantMessage::default()
        });
        let mut messages = vec![visible.clone()];
        pending.splice_handoffs(None, &mut messages);
        assert_ne!(
            messages,
            vec![visible.clone()],
            "the hidden round is spliced in"
        );
        // Without a client tool among the calls, nothing is kept.
        let pending = Arc::new(PendingStore::new(Duration::from_secs(60)));
        through(events, kept(&pending, &[])).await;
        let mut messages = vec![visible.clone()];
        pending.splice_handoffs(None, &mut messages);
        assert_eq!(messages, vec![visible]);
    }
}
