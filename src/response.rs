//! [`ChatResponse`]: a whole event stream folded into messages, usage and a finish reason.

use serde::{Deserialize, Serialize};

use crate::approval::ApprovalRequest;
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::message::{AssistantMessage, Message, ToolCall};
use crate::reasoning::ReasoningPart;

/// Everything a chat call produced, ready to extend a conversation's history with
/// (`history.extend(response.messages)`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message(s) and tool messages, in order. A tool loop produces one assistant message per
    /// round, each followed by the tool messages that answer its calls.
    pub messages: Vec<Message>,
    /// Tokens used, summed over every model call.
    pub usage: Usage,
    /// Why the response ended; `None` when the stream ended without saying (an error, or a partial response).
    pub finish_reason: Option<FinishReason>,
    /// Tool calls waiting for a decision (with [`FinishReason::AwaitingApproval`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_requests: Vec<ApprovalRequest>,
    /// The provider's id of the (last) response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The model that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl ChatResponse {
    /// The text of the last assistant message (empty if there is none).
    pub fn text(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Assistant(a) => Some(a.content.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }

    /// The last assistant message, if any.
    pub fn last_assistant(&self) -> Option<&AssistantMessage> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::Assistant(a) => Some(a),
            _ => None,
        })
    }
}

/// Folds events into a [`ChatResponse`] one at a time, so that a consumer (a persistence layer, a gateway) can keep
/// the partial response of a stream that fails or is dropped.
#[derive(Clone, Debug, Default)]
pub struct ResponseBuilder {
    response: ChatResponse,
    current: AssistantMessage,
    /// Reasoning text streamed since the last complete reasoning part.
    reasoning: String,
    /// Tool calls whose start arrived and whose end has not yet (none once a stream is complete).
    open_calls: Vec<OpenCall>,
}

/// A tool call still streaming: what its start and argument fragments said so far.
#[derive(Clone, Debug)]
struct OpenCall {
    index: usize,
    id: String,
    name: String,
    arguments: String,
}

impl ResponseBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        ResponseBuilder::default()
    }

    /// Fold one event in.
    pub fn push(&mut self, event: &ChatEvent) {
        match event {
            ChatEvent::ResponseMetadata { id, model } => {
                if id.is_some() {
                    self.response.response_id.clone_from(id);
                }
                if model.is_some() {
                    self.response.model.clone_from(model);
                }
            }
            ChatEvent::TextDelta { text } => self.current.content.push_str(text),
            ChatEvent::ReasoningDelta { text } => self.reasoning.push_str(text),
            ChatEvent::ReasoningEnd { continuation } => {
                let text = std::mem::take(&mut self.reasoning);
                self.current.reasoning.push(ReasoningPart {
                    text,
                    continuation: Some(continuation.clone()),
                });
            }
            ChatEvent::ToolCallStart { index, id, name } => self.open(*index, id, name),
            ChatEvent::ToolCallDelta { index, arguments } => self.extend_open(*index, arguments),
            ChatEvent::ToolCallEnd { index, call } => {
                self.close(*index);
                self.current.tool_calls.push(call.clone());
            }
            ChatEvent::ToolResult { result } => {
                self.flush_assistant();
                self.response.messages.push(Message::Tool(result.clone()));
            }
            ChatEvent::ApprovalRequest { request } => self
                .response
                .approval_requests
                .push(ApprovalRequest::clone(request)),
            ChatEvent::AnswerRejected { .. } => self.current.content.clear(),
            // The text deltas carry the answer; a partial value of it adds nothing to keep.
            ChatEvent::PartialAnswer { .. } => {}
            // A block no layer models has no place in a message; a client of its format got it on the wire.
            ChatEvent::ProviderBlock { .. } | ChatEvent::ProviderExtra { .. } => {}
            ChatEvent::Usage { usage } => self.response.usage.add(usage),
            ChatEvent::Finish { reason } => self.response.finish_reason = Some(reason.clone()),
        }
    }

    /// Fold one event in, taking it: what [`push`](Self::push) would copy (tool calls and results, the first
    /// text delta, metadata) is moved instead. For a consumer that keeps nothing of the event after folding it.
    pub fn push_owned(&mut self, event: ChatEvent) {
        match event {
            ChatEvent::ResponseMetadata { id, model } => {
                if id.is_some() {
                    self.response.response_id = id;
                }
                if model.is_some() {
                    self.response.model = model;
                }
            }
            ChatEvent::TextDelta { text } => append(&mut self.current.content, text),
            ChatEvent::ReasoningDelta { text } => append(&mut self.reasoning, text),
            ChatEvent::ReasoningEnd { continuation } => {
                let text = std::mem::take(&mut self.reasoning);
                self.current.reasoning.push(ReasoningPart {
                    text,
                    continuation: Some(continuation),
                });
            }
            ChatEvent::ToolCallStart { index, id, name } => self.open(index, &id, &name),
            ChatEvent::ToolCallDelta { index, arguments } => self.extend_open(index, &arguments),
            ChatEvent::ToolCallEnd { index, call } => {
                self.close(index);
                self.current.tool_calls.push(call);
            }
            ChatEvent::ToolResult { result } => {
                self.flush_assistant();
                self.response.messages.push(Message::Tool(result));
            }
            ChatEvent::ApprovalRequest { request } => {
                self.response.approval_requests.push(*request);
            }
            ChatEvent::AnswerRejected { .. } => self.current.content.clear(),
            ChatEvent::PartialAnswer { .. } => {}
            // A block no layer models has no place in a message; a client of its format got it on the wire.
            ChatEvent::ProviderBlock { .. } | ChatEvent::ProviderExtra { .. } => {}
            ChatEvent::Usage { usage } => self.response.usage.add(&usage),
            ChatEvent::Finish { reason } => self.response.finish_reason = Some(reason),
        }
    }

    /// The response so far, without consuming the builder.
    pub fn snapshot(&self) -> ChatResponse {
        self.clone().finish()
    }

    /// The response so far.
    pub fn finish(mut self) -> ChatResponse {
        self.flush_assistant();
        self.response
    }

    /// The response so far, with the tool calls that were still streaming when it stopped: each as a call with
    /// the argument text received (usually [`crate::ToolArguments::Invalid`], the JSON being cut). For a record of
    /// a stream that was dropped or failed midway; a complete stream has no such calls, and
    /// [`finish`](Self::finish), which a tool loop's caller uses, never invents one.
    pub fn finish_with_open_calls(mut self) -> ChatResponse {
        for open in std::mem::take(&mut self.open_calls) {
            self.current.tool_calls.push(ToolCall::from_raw_arguments(
                open.id,
                open.name,
                open.arguments,
            ));
        }
        self.finish()
    }

    fn open(&mut self, index: usize, id: &str, name: &str) {
        self.close(index);
        self.open_calls.push(OpenCall {
            index,
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: String::new(),
        });
    }

    fn extend_open(&mut self, index: usize, arguments: &str) {
        if let Some(open) = self.open_calls.iter_mut().find(|c| c.index == index) {
            open.arguments.push_str(arguments);
        }
    }

    fn close(&mut self, index: usize) {
        self.open_calls.retain(|c| c.index != index);
    }

    fn flush_assistant(&mut self) {
        if !self.reasoning.is_empty() {
            let text = std::mem::take(&mut self.reasoning);
            self.current.reasoning.push(ReasoningPart::text(text));
        }
        if !self.current.is_empty() {
            let message = std::mem::take(&mut self.current);
            self.response.messages.push(Message::Assistant(message));
        }
    }
}

/// Append `text` to `to`, taking it whole when `to` is still empty (the first delta of a message).
fn append(to: &mut String, text: String) {
    if to.is_empty() {
        *to = text;
    } else {
        to.push_str(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolMessage;
    use serde_json::json;

    #[test]
    fn a_call_cut_midway_is_kept_only_when_asked_for_open_calls() {
        let events = [
            ChatEvent::text("Let me look."),
            ChatEvent::ToolCallStart {
                index: 0,
                id: "done".into(),
                name: "add".into(),
            },
            ChatEvent::ToolCallEnd {
                index: 0,
                call: ToolCall::new("done", "add", json!({"a": 1})),
            },
            ChatEvent::ToolCallStart {
                index: 1,
                id: "cut".into(),
                name: "lookup".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 1,
                arguments: "{\"city\": ".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 1,
                arguments: "\"Par".into(),
            },
        ];
        for owned in [false, true] {
            let mut builder = ResponseBuilder::new();
            for event in &events {
                if owned {
                    builder.push_owned(event.clone());
                } else {
                    builder.push(event);
                }
            }
            let calls =
                |response: ChatResponse| response.last_assistant().unwrap().tool_calls.clone();
            assert_eq!(calls(builder.clone().finish()).len(), 1, "owned: {owned}");
            let kept = calls(builder.finish_with_open_calls());
            assert_eq!(kept.len(), 2, "owned: {owned}");
            assert_eq!(
                (kept[1].id.as_str(), kept[1].name.as_str()),
                ("cut", "lookup")
            );
            assert_eq!(
                kept[1].arguments,
                crate::ToolArguments::parse("{\"city\": \"Par".to_owned())
            );
        }
    }

    /// A tool round and the answer after it, as a loop streams them.
    fn tool_round(call: &ToolCall) -> Vec<ChatEvent> {
        vec![
            ChatEvent::ResponseMetadata {
                id: Some("r1".into()),
                model: Some("m".into()),
            },
            ChatEvent::ToolCallStart {
                index: 0,
                id: "c1".into(),
                name: "add".into(),
            },
            ChatEvent::ToolCallEnd {
                index: 0,
                call: call.clone(),
            },
            ChatEvent::ToolResult {
                result: ToolMessage::success("c1", "add", "5"),
            },
            ChatEvent::text("The sum "),
            ChatEvent::text("is 5."),
            ChatEvent::Usage {
                usage: Usage {
                    input_tokens: 20,
                    output_tokens: 7,
                    ..Usage::default()
                },
            },
            ChatEvent::finish(FinishReason::Stop),
        ]
    }

    #[test]
    fn a_tool_round_folds_into_assistant_tool_assistant() {
        let call = ToolCall::new("c1", "add", json!({"a": 2, "b": 3}));
        let events = tool_round(&call);
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let response = builder.finish();
        assert_eq!(
            response.messages,
            vec![
                Message::Assistant(AssistantMessage {
                    tool_calls: vec![call],
                    ..AssistantMessage::default()
                }),
                Message::tool_result("c1", "add", "5"),
                Message::assistant("The sum is 5."),
            ]
        );
        assert_eq!(response.text(), "The sum is 5.");
        assert_eq!(response.usage.total_tokens(), 27);
        assert_eq!(response.finish_reason, Some(FinishReason::Stop));
        assert_eq!(response.response_id.as_deref(), Some("r1"));
    }

    #[test]
    fn folding_owned_events_gives_what_folding_borrowed_ones_gives() {
        let call = ToolCall::new("c1", "add", json!({"a": 2, "b": 3}));
        let mut events = tool_round(&call);
        // Text and reasoning before the call, and an approval request before its result.
        events.splice(
            1..1,
            [
                ChatEvent::text("Let me add. "),
                ChatEvent::text("Adding."),
                ChatEvent::ReasoningDelta {
                    text: "2 and 3".into(),
                },
            ],
        );
        let result_at = events
            .iter()
            .position(|event| matches!(event, ChatEvent::ToolResult { .. }))
            .unwrap();
        events.insert(
            result_at,
            ChatEvent::ApprovalRequest {
                request: Box::new(crate::ApprovalRequest {
                    id: "a1".into(),
                    call: call.clone(),
                    reason: Some("gated".into()),
                }),
            },
        );
        let mut borrowed = ResponseBuilder::new();
        let mut owned = ResponseBuilder::new();
        for event in events {
            borrowed.push(&event);
            owned.push_owned(event);
        }
        let (borrowed, owned) = (borrowed.finish(), owned.finish());
        assert_eq!(owned, borrowed);
        assert_eq!(owned.text(), "The sum is 5.");
        assert_eq!(owned.approval_requests.len(), 1);
        assert_eq!(
            owned.messages[0],
            Message::Assistant(AssistantMessage {
                content: "Let me add. Adding.".into(),
                reasoning: vec![crate::ReasoningPart::text("2 and 3")],
                tool_calls: vec![call],
                provider_parts: Vec::new(),
            })
        );
    }

    #[test]
    fn partial_answers_add_nothing_to_the_text_and_a_rejection_voids_the_attempt() {
        let events = [
            ChatEvent::text(r#"{"name": 7"#),
            ChatEvent::PartialAnswer {
                value: json!({"name": 7}),
            },
            ChatEvent::AnswerRejected {
                violations: vec!["/name: expected string, found integer 7".into()],
            },
            ChatEvent::text(r#"{"name": "Os"#),
            ChatEvent::PartialAnswer {
                value: json!({"name": "Os"}),
            },
            ChatEvent::text(r#"lo"}"#),
            ChatEvent::PartialAnswer {
                value: json!({"name": "Oslo"}),
            },
            ChatEvent::finish(FinishReason::Stop),
        ];
        let mut borrowed = ResponseBuilder::new();
        let mut owned = ResponseBuilder::new();
        for event in events {
            borrowed.push(&event);
            owned.push_owned(event);
        }
        let (borrowed, owned) = (borrowed.finish(), owned.finish());
        assert_eq!(owned, borrowed);
        assert_eq!(
            owned.messages,
            vec![Message::assistant(r#"{"name": "Oslo"}"#)]
        );
    }
}
