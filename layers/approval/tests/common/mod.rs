//! The approval layer over the tool loop and a deterministic model, tools that count their runs, and the
//! requests and decisions of a paused conversation; the rest comes from the kit.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tower::Layer;
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, AssistantMessage, CallerIdentity, ChatError, ChatEvent,
    ChatRequest, ConversationId, ErrorKind, FinishReason, Message, ToolCall,
};
use tower_chat_approval::{ApprovalLayer, ApprovalRefused, RefusalKind};
use tower_chat_function_invocation::{
    tool_json, CompiledTool, FunctionInvocationLayer, ToolContext,
};
pub use tower_chat_testkit::*;

/// The model: on a user turn it makes `calls`; once tool results follow, it answers with them, joined.
/// Deterministic in the request, so any number of stacks (or processes) behave alike.
pub fn model(shape: Delivery, calls: Vec<ToolCall>) -> (Chat, Model) {
    tower_chat_testkit::model(shape, move |request: &ChatRequest| {
        let events = match request.messages.last() {
            Some(Message::Tool(_)) => {
                let results: Vec<String> = latest_tool_messages(&request.messages)
                    .iter()
                    .map(|t| format!("{}={}", t.name, t.content))
                    .collect();
                vec![
                    ChatEvent::text("Results: "),
                    ChatEvent::text(results.join(", ")),
                    ChatEvent::finish(FinishReason::Stop),
                ]
            }
            _ => {
                let mut events = vec![ChatEvent::text("Working on it.")];
                for (index, call) in calls.iter().cloned().enumerate() {
                    events.push(ChatEvent::ToolCallStart {
                        index,
                        id: call.id.clone(),
                        name: call.name.clone(),
                    });
                    events.push(ChatEvent::ToolCallEnd { index, call });
                }
                events.push(ChatEvent::finish(FinishReason::ToolCalls));
                events
            }
        };
        events.into_iter().map(Ok).collect()
    })
}

fn counted(name: &str, runs: Arc<AtomicUsize>) -> CompiledTool {
    let label = name.to_owned();
    tool_json(
        name,
        "test tool",
        json!({"type": "object"}),
        move |args: Value, _ctx: ToolContext| {
            let runs = runs.clone();
            let label = label.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("{label} done with {args}"))
            }
        },
    )
    .compile()
    .unwrap()
}

/// Tool bodies' run counts.
#[derive(Clone)]
pub struct Runs {
    pub delete: Arc<AtomicUsize>,
    pub weather: Arc<AtomicUsize>,
}

impl Runs {
    pub fn new() -> Self {
        Runs {
            delete: counter(),
            weather: counter(),
        }
    }

    pub fn deletes(&self) -> usize {
        count(&self.delete)
    }

    pub fn weathers(&self) -> usize {
        count(&self.weather)
    }
}

/// `delete` (flagged by the layer below) and `weather` (not flagged).
pub fn tool_loop(runs: &Runs, inner: Chat) -> Chat {
    Chat::new(
        FunctionInvocationLayer::new()
            .tool(counted("delete", runs.delete.clone()))
            .unwrap()
            .tool(counted("weather", runs.weather.clone()))
            .unwrap()
            .layer(inner),
    )
}

pub fn stack(layer: &ApprovalLayer, runs: &Runs, inner: Chat) -> Chat {
    Chat::new(layer.layer(tool_loop(runs, inner)))
}

pub fn flagged() -> ApprovalLayer {
    ApprovalLayer::new().require_approval_because("delete", "destructive")
}

pub fn delete_call(id: &str, path: &str) -> ToolCall {
    ToolCall::new(id, "delete", json!({"path": path}))
}

pub fn weather_call(id: &str) -> ToolCall {
    ToolCall::new(id, "weather", json!({"city": "Oslo"}))
}

pub const CONVERSATION: &str = "conv-1";
pub const CALLER: &str = "alice";

pub fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest::new(messages)
        .with_extension(ConversationId::new(CONVERSATION))
        .with_extension(CallerIdentity::new(CALLER))
}

pub fn decide(mut request: ChatRequest, decisions: Vec<ApprovalDecision>) -> ChatRequest {
    request.extensions.insert(ApprovalDecisions(decisions));
    request
}

/// The first leg: the model calls `calls`; returns the events and the history to resume with.
pub async fn pause(chat: &Chat, history: Vec<Message>) -> (Vec<ChatEvent>, Vec<Message>) {
    let events = try_run(chat.clone(), request(history.clone()))
        .await
        .expect("first leg");
    assert_eq!(finish(&events), Some(FinishReason::AwaitingApproval));
    let mut history = history;
    history.extend(messages(&events));
    (events, history)
}

/// The refusal kinds of an approval error (panics on any other error).
pub fn refusal_kinds(error: &ChatError) -> Vec<RefusalKind> {
    assert_eq!(error.kind(), &ErrorKind::Approval, "{error}");
    ApprovalRefused::of(error)
        .expect("the approval layer's error")
        .refusals()
        .iter()
        .map(|r| r.kind)
        .collect()
}

/// Replace the arguments of the call `id` in the history's assistant messages.
pub fn edit_call(history: &mut [Message], id: &str, edit: impl Fn(&mut ToolCall)) {
    for message in history.iter_mut() {
        if let Message::Assistant(AssistantMessage { tool_calls, .. }) = message {
            tool_calls.iter_mut().filter(|c| c.id == id).for_each(&edit);
        }
    }
}
