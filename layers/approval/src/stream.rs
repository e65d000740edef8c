//! The outgoing side: every approval request is recorded in the store before the caller sees it, under a fresh
//! unguessable id.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use futures_util::future::{BoxFuture, FutureExt};
use tower_chat::{
    ApprovalRequest, CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStream, ConversationId,
    ErrorKind, Message,
};
use tower_chat_function_invocation::ToolLoopPresence;

use crate::placement::ApprovalMisplaced;
use crate::record::{ApprovalContext, PendingApproval};
use crate::shared::Shared;

/// Who an approval issued for a request is bound to.
#[derive(Clone, Debug)]
pub(crate) struct Binding {
    pub(crate) conversation: Option<ConversationId>,
    pub(crate) caller: Option<CallerIdentity>,
    /// Marked by the tool loop under the layer when it takes the request.
    pub(crate) presence: Option<ToolLoopPresence>,
    /// The text of the request's last user message, kept with each approval for the approver.
    pub(crate) user_message: Option<String>,
}

impl Binding {
    pub(crate) fn of(request: &ChatRequest) -> Self {
        Binding {
            conversation: request.conversation_id().cloned(),
            caller: request.caller().cloned(),
            presence: request.extensions.get::<ToolLoopPresence>().cloned(),
            user_message: request
                .messages
                .iter()
                .rev()
                .find_map(|message| match message {
                    Message::User { content } => ApprovalContext::kept(&content.joined_text()),
                    _ => None,
                }),
        }
    }
}

const ID_PREFIX: &str = "apr_";

/// 122 random bits from the OS generator: ids cannot be guessed, only handed out.
pub(crate) fn new_approval_id() -> String {
    format!("{ID_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// Whether `id` has the shape of an id this layer issues (anything else is refused without a store lookup).
pub(crate) fn is_well_formed(id: &str) -> bool {
    id.strip_prefix(ID_PREFIX)
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The stream of [`Approval`](crate::Approval): passes events through, except that each
/// [`ChatEvent::ApprovalRequest`] is held until its [`PendingApproval`] is stored, and then reported with the
/// stored approval id instead of the call id. A store failure ends the stream with an
/// [`ErrorKind::Store`] error.
pub struct ApprovalStream {
    inner: ChatStream,
    shared: Arc<Shared>,
    binding: Binding,
    recording: Option<BoxFuture<'static, Result<PendingApproval, ChatError>>>,
    /// The answer text of the current model round so far (cut at [`ApprovalContext::MAX_BYTES`]): what the
    /// model said before a call that needs approval.
    round_text: String,
    /// A tool result came: the next thing the model says starts a new round.
    round_over: bool,
    done: bool,
}

impl ApprovalStream {
    pub(crate) fn new(inner: ChatStream, shared: Arc<Shared>, binding: Binding) -> Self {
        ApprovalStream {
            inner,
            shared,
            binding,
            recording: None,
            round_text: String::new(),
            round_over: false,
            done: false,
        }
    }

    fn record(
        &self,
        request: ApprovalRequest,
    ) -> BoxFuture<'static, Result<PendingApproval, ChatError>> {
        let Some(conversation) = self.binding.conversation.clone() else {
            let error = ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the call of `{}` needs approval, but the request has no ConversationId to bind the approval to",
                    request.call.name
                ),
            );
            return Box::pin(futures_util::future::ready(Err(error)));
        };
        let created_at = self.shared.clock.now();
        let pending = PendingApproval {
            approval_id: new_approval_id(),
            conversation_id: conversation,
            caller: self.binding.caller.clone(),
            call: request.call,
            reason: request.reason,
            created_at,
            expires_at: created_at + self.shared.ttl,
            decision: None,
            context: ApprovalContext {
                user_message: self.binding.user_message.clone(),
                model_text: ApprovalContext::kept(&self.round_text),
            },
        };
        let store = self.shared.store.clone();
        Box::pin(async move {
            store.insert_pending(&pending).await?;
            tracing::debug!(
                conversation = %pending.conversation_id,
                tool = %pending.call.name,
                "approval requested"
            );
            Ok(pending)
        })
    }
}

impl ApprovalStream {
    /// Follow the current round's answer text. Tool results end a round, but the results of a round's other
    /// calls may come before its approval requests: the text is dropped only when the model's next round says
    /// something. A rejected answer is discarded at once.
    fn note_text(&mut self, event: &ChatEvent) {
        match event {
            ChatEvent::TextDelta { .. }
            | ChatEvent::ToolCallStart { .. }
            | ChatEvent::ToolCallEnd { .. }
                if self.round_over =>
            {
                self.round_text.clear();
                self.round_over = false;
            }
            _ => {}
        }
        match event {
            ChatEvent::TextDelta { text } => {
                let room = ApprovalContext::MAX_BYTES.saturating_sub(self.round_text.len());
                let mut end = text.len().min(room);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                self.round_text.push_str(&text[..end]);
            }
            ChatEvent::ToolResult { .. } => self.round_over = true,
            ChatEvent::AnswerRejected { .. } => self.round_text.clear(),
            _ => {}
        }
    }
}

impl fmt::Debug for ApprovalStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalStream")
            .field("binding", &self.binding)
            .field("recording", &self.recording.is_some())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Stream for ApprovalStream {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(recording) = self.recording.as_mut() {
                let recorded = ready!(recording.poll_unpin(cx));
                self.recording = None;
                return Poll::Ready(Some(match recorded {
                    Ok(pending) => Ok(ChatEvent::ApprovalRequest {
                        request: Box::new(ApprovalRequest {
                            id: pending.approval_id,
                            call: pending.call,
                            reason: pending.reason,
                        }),
                    }),
                    Err(error) => {
                        // An approval nobody can answer is worse than an error the caller sees now.
                        self.done = true;
                        Err(error)
                    }
                }));
            }
            let item = ready!(self.inner.as_mut().poll_next(cx));
            // The loop marks the presence when it is called, before its stream yields anything: unmarked at the
            // first event means no loop applied this layer's policy.
            if let Some(presence) = self.binding.presence.take() {
                if item.is_some() && !presence.is_marked() {
                    self.done = true;
                    return Poll::Ready(Some(Err(ApprovalMisplaced::NoToolLoop.into())));
                }
            }
            match item {
                Some(Ok(ChatEvent::ApprovalRequest { request })) => {
                    self.recording = Some(self.record(*request));
                }
                Some(Err(error)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Some(Ok(event)) => {
                    self.note_text(&event);
                    return Poll::Ready(Some(Ok(event)));
                }
            }
        }
    }
}
