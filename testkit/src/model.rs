//! Scripted in-process models: tower services that answer with scripted events and record every request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::Value;
use tower::util::BoxCloneSyncService;
pub use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, Message, ToolCall, Usage,
};

/// Both delivery shapes, for a test that runs every case both ways.
pub const SHAPES: [Delivery; 2] = [Delivery::AllAtOnce, Delivery::OneByOne];

/// The items a scripted stream yields.
pub type Items = Vec<Result<ChatEvent, ChatError>>;

/// A boxed chat service, as the scripted models are (`Sync`, so `BoxChatService::with_metadata` takes one).
pub type Chat = BoxCloneSyncService<ChatRequest, ChatStream, ChatError>;

/// What a scripted model was sent (a cheap handle; clones share the record).
#[derive(Clone, Debug, Default)]
pub struct Model {
    requests: Arc<Mutex<Vec<ChatRequest>>>,
}

impl Model {
    /// Every request, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// How many times the model was called.
    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// The messages of the `n`-th request.
    pub fn sent(&self, n: usize) -> Vec<Message> {
        self.requests.lock().unwrap()[n].messages.to_vec()
    }

    /// The last request.
    pub fn last_request(&self) -> ChatRequest {
        self.requests
            .lock()
            .unwrap()
            .last()
            .expect("the model was called")
            .clone()
    }

    /// The names of the tools offered in the `n`-th request.
    pub fn offered(&self, n: usize) -> Vec<String> {
        self.requests.lock().unwrap()[n]
            .options
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }
}

/// A model answering each request with the stream `reply` makes of it.
pub fn streaming_model<F>(reply: F) -> (Chat, Model)
where
    F: Fn(&ChatRequest) -> ChatStream + Send + Sync + 'static,
{
    let handle = Model::default();
    let recorder = handle.clone();
    let reply = Arc::new(reply);
    let service = tower::service_fn(move |request: ChatRequest| {
        let stream = reply(&request);
        recorder.requests.lock().unwrap().push(request);
        async move { Ok::<_, ChatError>(stream) }
    });
    (Chat::new(service), handle)
}

/// A model answering each request with the items `reply` makes of it, delivered in `shape`.
pub fn model<F>(shape: Delivery, reply: F) -> (Chat, Model)
where
    F: Fn(&ChatRequest) -> Items + Send + Sync + 'static,
{
    streaming_model(move |request| scripted_stream(shape, reply(request)))
}

/// A model answering the n-th request with the n-th response (and failing the test if called more often).
pub fn scripted(shape: Delivery, responses: Vec<Vec<ChatEvent>>) -> (Chat, Model) {
    scripted_items(
        shape,
        responses
            .into_iter()
            .map(|r| r.into_iter().map(Ok).collect())
            .collect(),
    )
}

/// [`scripted`] with errors among the items.
pub fn scripted_items(shape: Delivery, responses: Vec<Items>) -> (Chat, Model) {
    let responses = Mutex::new(VecDeque::from(responses));
    model(shape, move |_| {
        responses
            .lock()
            .unwrap()
            .pop_front()
            .expect("the model was called more often than scripted")
    })
}

/// A stream that yields `items` and then never ends (an upstream that hangs; the caller drops it).
pub fn hanging(items: Items) -> ChatStream {
    Box::pin(futures_util::stream::iter(items).chain(futures_util::stream::pending()))
}

/// A request of one user message.
pub fn user(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)])
}

/// A tool call.
pub fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

/// A usage event.
pub fn usage(input: u64, output: u64) -> ChatEvent {
    ChatEvent::Usage {
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        },
    }
}

/// A model response that calls tools: metadata; per call start, its arguments in two fragments, end; then
/// usage (10 in, 5 out) and finish.
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

/// A model response that answers `text` in two deltas, then usage (20 in, 3 out) and finish.
pub fn answer(text: &str) -> Vec<ChatEvent> {
    let (a, b) = text.split_at(text.len() / 2);
    vec![
        ChatEvent::text(a),
        ChatEvent::text(b),
        usage(20, 3),
        ChatEvent::finish(FinishReason::Stop),
    ]
}
