//! A scripted inner service that records what it was sent, and helpers to build model responses.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, Message, ToolCall, ToolMessage,
    Usage,
};
use tower_chat_function_invocation::{
    tool_json, CompiledTool, FunctionInvocation, FunctionInvocationLayer, ToolContext,
};

/// How the inner service delivers a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Non-streaming: every event at once, in one ready stream.
    Whole,
    /// Streaming: each event after a `Pending` poll.
    Trickle,
}

pub const SHAPES: [Shape; 2] = [Shape::Whole, Shape::Trickle];

pub fn make_stream(shape: Shape, items: Vec<Result<ChatEvent, ChatError>>) -> ChatStream {
    let delivery = match shape {
        Shape::Whole => Delivery::AllAtOnce,
        Shape::Trickle => Delivery::OneByOne,
    };
    scripted_stream(delivery, items)
}

/// The scripted model: answers the n-th request with the n-th script, records every request.
#[derive(Default)]
pub struct Script {
    responses: Mutex<VecDeque<Vec<Result<ChatEvent, ChatError>>>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl Script {
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// The messages of the n-th model request.
    pub fn sent(&self, n: usize) -> Vec<Message> {
        self.requests.lock().unwrap()[n].messages.to_vec()
    }
}

pub type Inner = BoxCloneService<ChatRequest, ChatStream, ChatError>;

pub fn scripted(shape: Shape, responses: Vec<Vec<ChatEvent>>) -> (Inner, Arc<Script>) {
    scripted_items(
        shape,
        responses
            .into_iter()
            .map(|r| r.into_iter().map(Ok).collect())
            .collect(),
    )
}

pub fn scripted_items(
    shape: Shape,
    responses: Vec<Vec<Result<ChatEvent, ChatError>>>,
) -> (Inner, Arc<Script>) {
    let script = Arc::new(Script {
        responses: Mutex::new(responses.into()),
        requests: Mutex::default(),
    });
    let recorder = script.clone();
    let service = tower::service_fn(move |request: ChatRequest| {
        let script = recorder.clone();
        async move {
            script.requests.lock().unwrap().push(request);
            let items = script
                .responses
                .lock()
                .unwrap()
                .pop_front()
                .expect("the model was called more often than scripted");
            Ok::<_, ChatError>(make_stream(shape, items))
        }
    });
    (BoxCloneService::new(service), script)
}

pub fn stack(layer: FunctionInvocationLayer, inner: Inner) -> FunctionInvocation<Inner> {
    layer.layer(inner)
}

/// A model response that calls tools: start, argument fragments split in two, end; then usage and finish.
pub fn calls(calls: &[(&str, &str, Value)]) -> Vec<ChatEvent> {
    let mut events = vec![ChatEvent::ResponseMetadata {
        id: Some("resp".into()),
        model: Some("scripted".into()),
    }];
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        let text = arguments.to_string();
        let (a, b) = text.split_at(text.len() / 2);
        events.push(ChatEvent::ToolCallStart {
            index,
            id: (*id).into(),
            name: (*name).into(),
        });
        for part in [a, b] {
            events.push(ChatEvent::ToolCallDelta {
                index,
                arguments: part.into(),
            });
        }
        events.push(ChatEvent::ToolCallEnd {
            index,
            call: ToolCall::new(*id, *name, arguments.clone()),
        });
    }
    events.push(usage(10, 5));
    events.push(ChatEvent::finish(FinishReason::ToolCalls));
    events
}

/// A model response that answers in text (in two deltas) and stops.
pub fn answer(text: &str) -> Vec<ChatEvent> {
    let (a, b) = text.split_at(text.len() / 2);
    vec![
        ChatEvent::text(a),
        ChatEvent::text(b),
        usage(20, 3),
        ChatEvent::finish(FinishReason::Stop),
    ]
}

pub fn usage(input: u64, output: u64) -> ChatEvent {
    ChatEvent::Usage {
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        },
    }
}

pub fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

/// Everything the stream yields, and the error that ended it, if one did.
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

/// Run one request through a service and drain its stream.
pub async fn run(
    service: FunctionInvocation<Inner>,
    request: ChatRequest,
) -> (Vec<ChatEvent>, Option<ChatError>) {
    let stream = service
        .oneshot(request)
        .await
        .expect("the call was refused");
    drain(stream).await
}

pub fn finish_reasons(events: &[ChatEvent]) -> Vec<FinishReason> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Finish { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
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

pub fn usages(events: &[ChatEvent]) -> Vec<Usage> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Usage { usage } => Some(*usage),
            _ => None,
        })
        .collect()
}

pub fn tool_messages(messages: &[Message]) -> Vec<ToolMessage> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

pub fn city_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": false
    })
}

/// A `weather` tool that counts its runs.
pub fn weather(runs: Arc<AtomicUsize>) -> CompiledTool {
    tool_json(
        "weather",
        "Weather in a city",
        city_schema(),
        move |args: Value, _ctx: ToolContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("sunny in {}", args["city"].as_str().unwrap()))
            }
        },
    )
    .compile()
    .unwrap()
}

/// A tool named `name` with any object arguments whose body counts runs and returns `result`.
pub fn counting(
    name: &str,
    runs: Arc<AtomicUsize>,
    result: Result<&'static str, &'static str>,
) -> CompiledTool {
    tool_json(
        name,
        "test tool",
        json!({"type": "object"}),
        move |_args: Value, _ctx: ToolContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                result.map(str::to_owned).map_err(str::to_owned)
            }
        },
    )
    .compile()
    .unwrap()
}

pub fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

pub fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

pub fn user(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)])
}
