//! Server-side state that lets a client continue a turn whose tool rounds it never saw.
//!
//! - **Paused turns**: when `write_file` waits for approval, the turn's hidden messages (assistant messages with
//!   server-side calls, their results) are kept here under the approval ids (single-use, bound to the caller,
//!   expiring) — the ids an approval layer issued, or, with the tool loop alone, random ids issued here. The
//!   client answers with those ids; the gateway rebuilds the conversation the tool loop needs and passes the
//!   decisions on (to the approval layer under its ids, or to the loop keyed by call id).
//! - **Hand-backs**: when the model calls a client tool in a round that also ran server-side tools, the client
//!   sees only its own calls. The full assistant message and the server results are kept here under the client
//!   calls' ids, and spliced back in when the client sends its tool results.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower_chat::{
    ApprovalDecision, ApprovalDecisions, ApprovalRequest, CallerIdentity, ConversationId, Message,
    ToolArguments,
};

use tower_chat_approval::ApprovalContext;

use crate::error::ApiError;
use tower_chat_wire::format::{ApprovalAnswer, ApprovalNotice};

/// The most records kept; past it the oldest are dropped (a bound on what unauthenticated traffic can pin).
const MAX_RECORDS: usize = 10_000;

struct Paused {
    caller: Option<CallerIdentity>,
    conversation: ConversationId,
    hidden: Vec<Message>,
    /// Approval id shown to the client → the id the stack's decision must name.
    calls: Vec<(String, String)>,
    /// What the client was shown (and what an operator listing shows).
    notices: Vec<ApprovalNotice>,
    /// What led to each call, beside its notice (same order).
    contexts: Vec<ApprovalContext>,
    paused_at: std::time::SystemTime,
    expires: Instant,
}

/// One pending approval of a paused turn, as `GET /v1/approvals` lists it for operators.
#[derive(Clone, Debug)]
pub(crate) struct PausedApproval {
    pub(crate) notice: ApprovalNotice,
    pub(crate) caller: Option<CallerIdentity>,
    pub(crate) conversation: ConversationId,
    pub(crate) paused_at: std::time::SystemTime,
    pub(crate) expires_in: Duration,
    /// What led to the call, for the operator deciding it.
    pub(crate) context: ApprovalContext,
}

struct Handoff {
    caller: Option<CallerIdentity>,
    hidden: Vec<Message>,
    expires: Instant,
}

/// See the [module docs](self).
pub struct PendingStore {
    ttl: Duration,
    paused: Mutex<HashMap<String, Arc<Paused>>>,
    handoffs: Mutex<HashMap<String, Arc<Handoff>>>,
}

impl std::fmt::Debug for PendingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingStore")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// What a resuming request needs: the hidden messages to append and the decisions for the tool loop.
#[derive(Debug)]
pub struct Resumption {
    /// The turn's messages the client never saw.
    pub hidden: Vec<Message>,
    /// Whether `hidden` is the whole conversation (read back from the call records) rather than what follows
    /// the client's messages.
    pub whole_history: bool,
    /// The conversation the paused call belongs to (an approval layer binds its ids to it).
    pub conversation: ConversationId,
    /// Decisions keyed by call id.
    pub decisions: ApprovalDecisions,
}

impl PendingStore {
    /// A store whose records live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        PendingStore {
            ttl,
            paused: Mutex::new(HashMap::new()),
            handoffs: Mutex::new(HashMap::new()),
        }
    }

    /// Keep a paused turn; returns what the client is shown. Requests that carry the bare call id (the tool
    /// loop's own protocol) get a fresh random id here, translated back on resume; requests whose id an approval
    /// layer already issued keep it, and decisions are passed on under it for that layer to verify.
    /// `user_message` (the request's last) is kept beside each call for the operators' listing, with the model's
    /// text of the answer that made the call.
    pub fn pause(
        &self,
        caller: Option<CallerIdentity>,
        conversation: ConversationId,
        hidden: Vec<Message>,
        requests: &[ApprovalRequest],
        user_message: Option<&str>,
    ) -> Vec<ApprovalNotice> {
        let mut notices = Vec::with_capacity(requests.len());
        let mut contexts = Vec::with_capacity(requests.len());
        let mut calls = Vec::with_capacity(requests.len());
        for request in requests {
            let (id, forward) = if request.id == request.call.id {
                let id = format!("apr_{}", uuid::Uuid::new_v4().simple());
                (id, request.call.id.clone())
            } else {
                (request.id.clone(), request.id.clone())
            };
            calls.push((id.clone(), forward));
            contexts.push(ApprovalContext {
                user_message: user_message.map(str::to_owned),
                model_text: hidden.iter().find_map(|message| match message {
                    Message::Assistant(a)
                        if a.tool_calls.iter().any(|c| c.id == request.call.id) =>
                    {
                        ApprovalContext::kept(&a.content)
                    }
                    _ => None,
                }),
            });
            notices.push(ApprovalNotice {
                id,
                tool: request.call.name.clone(),
                arguments: match &request.call.arguments {
                    ToolArguments::Json(value) => value.clone(),
                    ToolArguments::Invalid { raw, .. } => raw.clone().into(),
                },
                reason: request.reason.clone(),
            });
        }
        let record = Arc::new(Paused {
            caller,
            conversation,
            hidden,
            calls,
            notices: notices.clone(),
            contexts,
            paused_at: std::time::SystemTime::now(),
            expires: Instant::now() + self.ttl,
        });
        let mut paused = self.paused.lock().expect("pending lock");
        prune(&mut paused, |r| r.expires);
        for (id, _) in &record.calls {
            paused.insert(id.clone(), record.clone());
        }
        notices
    }

    /// The caller of the paused turn holding approval `id`, when one is paused here and unexpired (`Some(None)`
    /// for a turn without a caller).
    pub(crate) fn paused_caller(&self, id: &str) -> Option<Option<CallerIdentity>> {
        let paused = self.paused.lock().expect("pending lock");
        paused
            .get(id)
            .filter(|r| r.expires > Instant::now())
            .map(|r| r.caller.clone())
    }

    /// Every unexpired pending approval of the turns paused here, oldest first.
    pub(crate) fn list(&self) -> Vec<PausedApproval> {
        let paused = self.paused.lock().expect("pending lock");
        let now = Instant::now();
        let mut list: Vec<PausedApproval> = paused
            .iter()
            .filter(|(_, r)| r.expires > now)
            .filter_map(|(id, r)| {
                let at = r.notices.iter().position(|n| n.id == *id)?;
                Some(PausedApproval {
                    notice: r.notices[at].clone(),
                    context: r.contexts.get(at).cloned().unwrap_or_default(),
                    caller: r.caller.clone(),
                    conversation: r.conversation.clone(),
                    paused_at: r.paused_at,
                    expires_in: r.expires - now,
                })
            })
            .collect();
        list.sort_by(|a, b| (a.paused_at, &a.notice.id).cmp(&(b.paused_at, &b.notice.id)));
        list
    }

    /// Take the paused turn the answers name (all answers must name the same turn). The record is removed:
    /// approval ids are single-use. Unknown, expired or foreign ids are one error, so ids cannot be probed.
    pub fn resume(
        &self,
        caller: Option<&CallerIdentity>,
        answers: &[ApprovalAnswer],
    ) -> Result<Resumption, ApiError> {
        let mut paused = self.paused.lock().expect("pending lock");
        let now = Instant::now();
        let mut record: Option<Arc<Paused>> = None;
        for answer in answers {
            let found = paused
                .get(&answer.id)
                .filter(|r| r.expires > now && r.caller.as_ref() == caller)
                .ok_or_else(|| {
                    ApiError::invalid_request(
                        "invalid_approval",
                        format!(
                            "unknown, expired or already used approval id `{}`",
                            answer.id
                        ),
                    )
                })?;
            match &record {
                Some(r) if !Arc::ptr_eq(r, found) => {
                    return Err(ApiError::invalid_request(
                        "invalid_approval",
                        "the approvals name different paused turns; answer one turn per request",
                    ))
                }
                Some(_) => {}
                None => record = Some(found.clone()),
            }
        }
        let Some(record) = record else {
            return Err(ApiError::invalid_request(
                "invalid_approval",
                "`tower_chat.approvals` is empty",
            ));
        };
        for (id, _) in &record.calls {
            paused.remove(id);
        }
        let decisions = answers
            .iter()
            .filter_map(|answer| {
                let call_id = record
                    .calls
                    .iter()
                    .find(|(id, _)| *id == answer.id)
                    .map(|(_, call)| call.clone())?;
                Some(ApprovalDecision {
                    approval_id: call_id,
                    approved: answer.approved,
                    reason: answer.reason.clone(),
                })
            })
            .collect();
        Ok(Resumption {
            hidden: record.hidden.clone(),
            whole_history: false,
            conversation: record.conversation.clone(),
            decisions: ApprovalDecisions(decisions),
        })
    }

    /// Keep a turn that handed client tool calls back, under those calls' ids.
    pub fn hand_back(
        &self,
        caller: Option<CallerIdentity>,
        client_call_ids: &[String],
        hidden: Vec<Message>,
    ) {
        let record = Arc::new(Handoff {
            caller,
            hidden,
            expires: Instant::now() + self.ttl,
        });
        let mut handoffs = self.handoffs.lock().expect("handoff lock");
        prune(&mut handoffs, |r| r.expires);
        for id in client_call_ids {
            handoffs.insert(id.clone(), record.clone());
        }
    }

    /// Replace each assistant message whose calls were handed back by the turn the model really had (earlier
    /// server-side rounds, the full call list, the server results). The client's tool messages stay after it.
    pub fn splice_handoffs(&self, caller: Option<&CallerIdentity>, messages: &mut Vec<Message>) {
        let handoffs = self.handoffs.lock().expect("handoff lock");
        if handoffs.is_empty() {
            return;
        }
        let now = Instant::now();
        let found = |message: &Message| match message {
            Message::Assistant(a) => a.tool_calls.iter().find_map(|call| {
                handoffs
                    .get(&call.id)
                    .filter(|r| r.expires > now && r.caller.as_ref() == caller)
            }),
            _ => None,
        };
        if !messages.iter().any(|message| found(message).is_some()) {
            return;
        }
        // Rebuilt in one pass: splicing in place would move the rest of the history once per hand-back.
        let mut spliced = Vec::with_capacity(messages.len());
        for message in messages.drain(..) {
            match found(&message) {
                Some(record) => spliced.extend(record.hidden.iter().cloned()),
                None => spliced.push(message),
            }
        }
        *messages = spliced;
    }
}

fn prune<R>(map: &mut HashMap<String, Arc<R>>, expires: impl Fn(&R) -> Instant) {
    let now = Instant::now();
    map.retain(|_, r| expires(r) > now);
    if map.len() >= MAX_RECORDS {
        let mut by_age: Vec<(Instant, String)> =
            map.iter().map(|(k, r)| (expires(r), k.clone())).collect();
        by_age.sort();
        for (_, key) in by_age.into_iter().take(map.len() + 1 - MAX_RECORDS) {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tower_chat::{AssistantMessage, ToolCall};

    fn request(call: &str) -> ApprovalRequest {
        ApprovalRequest {
            id: call.into(),
            call: ToolCall::new(call, "write_file", json!({"path": "a", "content": "b"})),
            reason: None,
        }
    }

    fn answer(id: &str, approved: bool) -> ApprovalAnswer {
        ApprovalAnswer {
            id: id.into(),
            approved,
            reason: None,
        }
    }

    #[test]
    fn approval_ids_are_single_use_and_bound_to_the_caller() {
        let store = PendingStore::new(Duration::from_secs(60));
        let alice = CallerIdentity::new("alice");
        let hidden = vec![Message::assistant("x")];
        let notices = store.pause(
            Some(alice.clone()),
            ConversationId::new("conv"),
            hidden.clone(),
            &[request("c1")],
            None,
        );
        assert!(notices[0].id.starts_with("apr_") && notices[0].id.len() > 30);
        let bob = CallerIdentity::new("bob");
        assert!(store
            .resume(Some(&bob), &[answer(&notices[0].id, true)])
            .is_err());
        assert!(store.resume(None, &[answer(&notices[0].id, true)]).is_err());
        let resumed = store
            .resume(Some(&alice), &[answer(&notices[0].id, true)])
            .unwrap();
        assert_eq!(resumed.hidden, hidden);
        assert_eq!(resumed.conversation.as_str(), "conv");
        assert_eq!(resumed.decisions.0, vec![ApprovalDecision::approve("c1")]);
        let replay = store.resume(Some(&alice), &[answer(&notices[0].id, true)]);
        assert_eq!(replay.unwrap_err().code, "invalid_approval");
    }

    #[test]
    fn ids_an_approval_layer_issued_are_kept_and_passed_on_as_they_are() {
        let store = PendingStore::new(Duration::from_secs(60));
        let mut issued = request("c1");
        issued.id = "apr_from_the_layer".into();
        let notices = store.pause(None, ConversationId::new("conv"), vec![], &[issued], None);
        assert_eq!(notices[0].id, "apr_from_the_layer");
        let resumed = store
            .resume(None, &[answer("apr_from_the_layer", false)])
            .unwrap();
        assert_eq!(resumed.decisions.0[0].approval_id, "apr_from_the_layer");
        assert!(!resumed.decisions.0[0].approved);
    }

    #[test]
    fn the_listing_keeps_the_request_and_the_models_text_before_each_call() {
        let store = PendingStore::new(Duration::from_secs(60));
        let answer = Message::Assistant(AssistantMessage {
            content: "Writing it now.".into(),
            tool_calls: vec![ToolCall::new("c1", "write_file", json!({}))],
            ..AssistantMessage::default()
        });
        store.pause(
            None,
            ConversationId::new("conv"),
            vec![answer],
            &[request("c1"), request("c2")],
            Some("write a"),
        );
        let listed = store.list();
        assert_eq!(listed.len(), 2);
        let by_text: Vec<Option<&str>> = listed
            .iter()
            .map(|l| l.context.model_text.as_deref())
            .collect();
        assert!(by_text.contains(&Some("Writing it now.")), "{by_text:?}");
        assert!(
            by_text.contains(&None),
            "c2 was not in that answer: {by_text:?}"
        );
        assert!(listed
            .iter()
            .all(|l| l.context.user_message.as_deref() == Some("write a")));
    }

    #[test]
    fn expired_approvals_are_refused() {
        let store = PendingStore::new(Duration::from_millis(1));
        let notices = store.pause(
            None,
            ConversationId::new("conv"),
            vec![],
            &[request("c1")],
            None,
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(store
            .resume(None, &[answer(&notices[0].id, false)])
            .is_err());
    }

    #[test]
    fn handed_back_turns_are_spliced_in() {
        let store = PendingStore::new(Duration::from_secs(60));
        let full = Message::Assistant(AssistantMessage {
            tool_calls: vec![
                ToolCall::new("s1", "add", json!({"a": 1, "b": 2})),
                ToolCall::new("c1", "weather", json!({})),
            ],
            ..AssistantMessage::default()
        });
        let server_result = Message::tool_result("s1", "add", "3");
        store.hand_back(
            None,
            &["c1".into()],
            vec![full.clone(), server_result.clone()],
        );
        let visible = Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall::new("c1", "weather", json!({}))],
            ..AssistantMessage::default()
        });
        let client_result = Message::tool_result("c1", "weather", "sunny");
        let mut messages = vec![Message::user("hi"), visible, client_result.clone()];
        store.splice_handoffs(None, &mut messages);
        assert_eq!(
            messages,
            vec![Message::user("hi"), full, server_result, client_result]
        );
    }
}
