//! A scripted model, counted tools and helpers for the approval layer's tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, ApprovalRequest, AssistantMessage, CallerIdentity,
    ChatError, ChatEvent, ChatRequest, ChatStream, ConversationId, ErrorKind, FinishReason,
    Message, ResponseBuilder, ToolCall, ToolMessage,
};
use tower_chat_approval::{ApprovalLayer, ApprovalRefused, RefusalKind};
use tower_chat_function_invocation::{
    tool_json, CompiledTool, FunctionInvocationLayer, ToolContext,
};

/// How the inner model delivers a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Non-streaming: every event at once, in one ready stream.
    Whole,
    /// Streaming: each event after a `Pending` poll.
    Trickle,
}

pub const SHAPES: [Shape; 2] = [Shape::Whole, Shape::Trickle];

fn make_stream(shape: Shape, events: Vec<ChatEvent>) -> ChatStream {
    let delivery = match shape {
        Shape::Whole => Delivery::AllAtOnce,
        Shape::Trickle => Delivery::OneByOne,
    };
    scripted_stream(delivery, events.into_iter().map(Ok).collect())
}

pub type Chat = BoxCloneService<ChatRequest, ChatStream, ChatError>;

/// The model: on a user turn it makes `calls`; once tool results follow, it answers with them, joined.
/// Deterministic in the request, so any number of stacks (or processes) behave alike.
#[derive(Clone)]
pub struct Model {
    pub requests: Arc<Mutex<Vec<ChatRequest>>>,
}

impl Model {
    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn last_request(&self) -> ChatRequest {
        self.requests.lock().unwrap().last().unwrap().clone()
    }
}

pub fn model(shape: Shape, calls: Vec<ToolCall>) -> (Chat, Model) {
    let handle = Model {
        requests: Arc::default(),
    };
    let recorder = handle.clone();
    let service = tower::service_fn(move |request: ChatRequest| {
        let recorder = recorder.clone();
        let calls = calls.clone();
        async move {
            recorder.requests.lock().unwrap().push(request.clone());
            let events = match request.messages.last() {
                Some(Message::Tool(_)) => {
                    let results: Vec<String> = request
                        .messages
                        .iter()
                        .rev()
                        .map_while(|m| match m {
                            Message::Tool(t) => Some(format!("{}={}", t.name, t.content)),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    vec![
                        ChatEvent::text("Results: "),
                        ChatEvent::text(results.join(", ")),
                        ChatEvent::finish(FinishReason::Stop),
                    ]
                }
                _ => {
                    let mut events = vec![ChatEvent::text("Working on it.")];
                    for (index, call) in calls.into_iter().enumerate() {
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
            Ok::<_, ChatError>(make_stream(shape, events))
        }
    });
    (BoxCloneService::new(service), handle)
}

pub fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

pub fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
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
    BoxCloneService::new(
        FunctionInvocationLayer::new()
            .tool(counted("delete", runs.delete.clone()))
            .unwrap()
            .tool(counted("weather", runs.weather.clone()))
            .unwrap()
            .layer(inner),
    )
}

pub fn stack(layer: &ApprovalLayer, runs: &Runs, inner: Chat) -> Chat {
    BoxCloneService::new(layer.layer(tool_loop(runs, inner)))
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

/// Everything the stream yields, and the error that ended it.
pub async fn drain(mut stream: ChatStream) -> (Vec<ChatEvent>, Option<ChatError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(
                    stream.next().await.is_none(),
                    "the stream went on after an error"
                );
                return (events, Some(error));
            }
        }
    }
    (events, None)
}

pub async fn run(chat: &Chat, request: ChatRequest) -> Result<Vec<ChatEvent>, ChatError> {
    let stream = chat.clone().oneshot(request).await?;
    match drain(stream).await {
        (events, None) => Ok(events),
        (_, Some(error)) => Err(error),
    }
}

pub fn messages(events: &[ChatEvent]) -> Vec<Message> {
    let mut builder = ResponseBuilder::new();
    events.iter().for_each(|e| builder.push(e));
    builder.finish().messages
}

pub fn approvals(events: &[ChatEvent]) -> Vec<ApprovalRequest> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ApprovalRequest { request } => Some(ApprovalRequest::clone(request)),
            _ => None,
        })
        .collect()
}

pub fn finish(events: &[ChatEvent]) -> Option<FinishReason> {
    events.iter().rev().find_map(|e| match e {
        ChatEvent::Finish { reason } => Some(reason.clone()),
        _ => None,
    })
}

pub fn tool_results(events: &[ChatEvent]) -> Vec<ToolMessage> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolResult { result } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

pub fn text(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The first leg: the model calls `calls`; returns the events and the history to resume with.
pub async fn pause(chat: &Chat, history: Vec<Message>) -> (Vec<ChatEvent>, Vec<Message>) {
    let events = run(chat, request(history.clone()))
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

pub fn user(text: &str) -> Vec<Message> {
    vec![Message::user(text)]
}
