//! [`CachedAnswer`]: a completed answer as its event sequence, what may be stored, and how it is replayed.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tower_chat::{ChatEvent, ChatStream, FinishReason};

/// A completed answer: the events the model streamed, in order, ending with its finish, and what the call left
/// out of its request ([`DroppedFields`](tower_chat::DroppedFields): a hit names it again, as the call did). Clones share the events.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedAnswer {
    events: Arc<[ChatEvent]>,
    dropped: Arc<[String]>,
}

/// The stored form of an answer that names what its call left out (one that names nothing is its events alone,
/// as every entry was before).
#[derive(Serialize, Deserialize)]
struct Stored {
    events: Vec<ChatEvent>,
    dropped: Vec<String>,
}

impl CachedAnswer {
    /// The answer made of `events`, if it may be stored: it ends with a finish event whose reason is a
    /// complete answer (not filtered or refused — a refusal is a content-filter finish —, not waiting for an
    /// approval), and holds no approval request (bound to the caller and conversation that saw it).
    pub fn storable(events: Vec<ChatEvent>) -> Option<CachedAnswer> {
        let finished = matches!(
            events.last(),
            Some(ChatEvent::Finish { reason }) if !matches!(
                reason,
                FinishReason::ContentFilter | FinishReason::AwaitingApproval
            )
        );
        let asks_approval = events
            .iter()
            .any(|event| matches!(event, ChatEvent::ApprovalRequest { .. }));
        (finished && !asks_approval).then(|| CachedAnswer {
            events: events.into(),
            dropped: Arc::new([]),
        })
    }

    /// The answer, naming what its call left out of the request.
    pub fn with_dropped(mut self, dropped: Vec<String>) -> Self {
        self.dropped = dropped.into();
        self
    }

    /// What the call left out of its request, in the order it was named.
    pub fn dropped(&self) -> &[String] {
        &self.dropped
    }

    /// The events, as the model produced them.
    pub fn events(&self) -> &[ChatEvent] {
        &self.events
    }

    /// The answer as JSON (the form the Redis store keeps, compressed, and the in-process store weighs).
    pub fn to_json(&self) -> Vec<u8> {
        // Events serialise to JSON without failing: their maps have string keys.
        if self.dropped.is_empty() {
            return serde_json::to_vec(&*self.events).unwrap_or_default();
        }
        let stored = Stored {
            events: self.events.to_vec(),
            dropped: self.dropped.to_vec(),
        };
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// An answer read back from [`CachedAnswer::to_json`]; `None` when the bytes are not one (an entry written by
    /// another version, a damaged one): a miss.
    pub fn from_json(bytes: &[u8]) -> Option<CachedAnswer> {
        if bytes.first() == Some(&b'{') {
            let stored: Stored = serde_json::from_slice(bytes).ok()?;
            return CachedAnswer::storable(stored.events).map(|a| a.with_dropped(stored.dropped));
        }
        let events: Vec<ChatEvent> = serde_json::from_slice(bytes).ok()?;
        CachedAnswer::storable(events)
    }

    /// The answer as a response stream: event by event for a streamed request, merged into whole parts for a
    /// non-streamed one (one text, one reasoning text per block, each tool call's arguments in one piece), with
    /// every usage report marked [`tower_chat::Usage::from_response_cache`].
    pub fn replay(&self, streamed: bool) -> ChatStream {
        let events: Vec<ChatEvent> = if streamed {
            self.events.iter().cloned().map(replayed).collect()
        } else {
            whole(self.events.iter().cloned().map(replayed))
        };
        Box::pin(futures_util::stream::iter(events.into_iter().map(Ok)))
    }
}

/// `event`, with a usage report marked as replayed.
pub(crate) fn replayed(event: ChatEvent) -> ChatEvent {
    match event {
        ChatEvent::Usage { mut usage } => {
            usage.from_response_cache = true;
            ChatEvent::Usage { usage }
        }
        other => other,
    }
}

/// Events merged as a non-streaming provider call delivers them: consecutive text (and reasoning) deltas joined,
/// each tool call's argument fragments joined into the first one, within each model response; of the answer's
/// partial values only the last before the next other event (the whole answer, as one delta would have given).
pub(crate) fn whole(events: impl IntoIterator<Item = ChatEvent>) -> Vec<ChatEvent> {
    let mut out: Vec<ChatEvent> = Vec::new();
    // Where each tool call's first argument fragment is in `out`, for the current model response.
    let mut fragments: HashMap<usize, usize> = HashMap::new();
    let mut partial: Option<ChatEvent> = None;
    for event in events {
        if let ChatEvent::PartialAnswer { .. } = event {
            partial = Some(event);
            continue;
        }
        if !matches!(event, ChatEvent::TextDelta { .. }) {
            out.extend(partial.take());
        }
        match event {
            ChatEvent::TextDelta { text } => {
                if let Some(ChatEvent::TextDelta { text: joined }) = out.last_mut() {
                    joined.push_str(&text);
                } else {
                    out.push(ChatEvent::TextDelta { text });
                }
            }
            ChatEvent::ReasoningDelta { text } => {
                if let Some(ChatEvent::ReasoningDelta { text: joined }) = out.last_mut() {
                    joined.push_str(&text);
                } else {
                    out.push(ChatEvent::ReasoningDelta { text });
                }
            }
            ChatEvent::ToolCallDelta { index, arguments } => match fragments.get(&index) {
                Some(&at) => {
                    if let ChatEvent::ToolCallDelta {
                        arguments: joined, ..
                    } = &mut out[at]
                    {
                        joined.push_str(&arguments);
                    }
                }
                None => {
                    fragments.insert(index, out.len());
                    out.push(ChatEvent::ToolCallDelta { index, arguments });
                }
            },
            event => {
                // Tool call indices restart with each model response (after a tool result or a finish).
                if matches!(
                    event,
                    ChatEvent::ToolResult { .. } | ChatEvent::Finish { .. }
                ) {
                    fragments.clear();
                }
                out.push(event);
            }
        }
    }
    out.extend(partial);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::{ToolCall, Usage};

    fn finish(reason: FinishReason) -> ChatEvent {
        ChatEvent::finish(reason)
    }

    #[test]
    fn only_complete_answers_are_storable() {
        let text = || ChatEvent::text("Hi");
        assert!(CachedAnswer::storable(vec![text(), finish(FinishReason::Stop)]).is_some());
        assert!(CachedAnswer::storable(vec![text(), finish(FinishReason::Length)]).is_some());
        assert!(CachedAnswer::storable(vec![text()]).is_none(), "no finish");
        assert!(CachedAnswer::storable(vec![]).is_none());
        assert!(
            CachedAnswer::storable(vec![text(), finish(FinishReason::ContentFilter)]).is_none(),
            "filtered or refused"
        );
        assert!(CachedAnswer::storable(vec![finish(FinishReason::AwaitingApproval)]).is_none());
        assert!(
            CachedAnswer::storable(vec![finish(FinishReason::Stop), text()]).is_none(),
            "something after the finish"
        );
    }

    #[test]
    fn a_whole_replay_joins_deltas_per_call_and_marks_usage() {
        let events = vec![
            ChatEvent::ReasoningDelta { text: "th".into() },
            ChatEvent::ReasoningDelta { text: "ink".into() },
            ChatEvent::text("Hel"),
            ChatEvent::text("lo"),
            ChatEvent::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "f".into(),
            },
            ChatEvent::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "g".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"x\"".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 1,
                arguments: "{}".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: ":1}".into(),
            },
            ChatEvent::ToolCallEnd {
                index: 0,
                call: ToolCall::new("a", "f", serde_json::json!({"x": 1})),
            },
            ChatEvent::Usage {
                usage: Usage {
                    input_tokens: 3,
                    ..Usage::default()
                },
            },
            finish(FinishReason::ToolCalls),
        ];
        let answer = CachedAnswer::storable(events.clone()).unwrap();
        let merged = whole(answer.events().iter().cloned().map(replayed));
        assert_eq!(
            merged[0],
            ChatEvent::ReasoningDelta {
                text: "think".into()
            }
        );
        assert_eq!(merged[1], ChatEvent::text("Hello"));
        assert_eq!(
            merged[4],
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"x\":1}".into()
            }
        );
        assert_eq!(
            merged[5],
            ChatEvent::ToolCallDelta {
                index: 1,
                arguments: "{}".into()
            }
        );
        assert_eq!(merged.len(), events.len() - 3);
        match &merged[merged.len() - 2] {
            ChatEvent::Usage { usage } => assert!(usage.from_response_cache),
            other => panic!("expected usage, got {other:?}"),
        }
        // The stored events are the model's, unmarked.
        assert!(answer.events().iter().all(|e| match e {
            ChatEvent::Usage { usage } => !usage.from_response_cache,
            _ => true,
        }));
    }

    #[test]
    fn merged_events_keep_the_last_partial_answer_after_the_joined_text() {
        let partial = |value| ChatEvent::PartialAnswer { value };
        let events = vec![
            ChatEvent::text(r#"{"a": "#),
            ChatEvent::text(r#""x"#),
            partial(serde_json::json!({"a": "x"})),
            ChatEvent::text(r#"y"}"#),
            partial(serde_json::json!({"a": "xy"})),
            finish(FinishReason::Stop),
        ];
        assert_eq!(
            whole(events),
            [
                ChatEvent::text(r#"{"a": "xy"}"#),
                partial(serde_json::json!({"a": "xy"})),
                finish(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn json_round_trips_and_rejects_what_is_not_an_answer() {
        let answer =
            CachedAnswer::storable(vec![ChatEvent::text("Hi"), finish(FinishReason::Stop)])
                .unwrap();
        assert_eq!(
            CachedAnswer::from_json(&answer.to_json()),
            Some(answer.clone())
        );
        // An answer that names what its call left out keeps the names; one that names nothing is stored as
        // its events alone, the form entries written before names existed have.
        assert!(answer.to_json().starts_with(b"["));
        let named = answer.with_dropped(vec!["context_management".into(), "content:x".into()]);
        let back = CachedAnswer::from_json(&named.to_json()).unwrap();
        assert_eq!(back.dropped(), ["context_management", "content:x"]);
        assert_eq!(back, named);
        assert_eq!(CachedAnswer::from_json(b"not json"), None);
        assert_eq!(
            CachedAnswer::from_json(b"[{\"type\":\"text_delta\",\"text\":\"x\"}]"),
            None
        );
    }
}
