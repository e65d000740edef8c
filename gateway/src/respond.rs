//! Turning the stack's event stream into what the client asked for: one `chat.completion` object, or SSE
//! `chat.completion.chunk`s ending with `data: [DONE]`.
//!
//! Server-side tool calls and their results are not shown; the client's own tool calls are, renumbered from 0.
//! A pause for approval becomes a notice in the content plus the `tower_chat` fields (see the README).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tower_chat::{
    ApprovalRequest, CallerIdentity, ChatError, ChatEvent, ChatStream, ConversationId, ErrorKind,
    FinishReason, Message, ResponseBuilder, ToolCall, Usage,
};

use crate::error::ApiError;
use crate::pending::PendingStore;
use crate::wire::{self, ApprovalNotice};

/// Everything a response needs besides the events.
pub(crate) struct Turn {
    pub(crate) model: String,
    pub(crate) include_usage: bool,
    /// Names of the tools the client declared: only their calls are shown.
    pub(crate) client_tools: HashSet<String>,
    pub(crate) caller: Option<CallerIdentity>,
    pub(crate) conversation: ConversationId,
    /// Hidden messages this turn continues from (a resumed pause).
    pub(crate) hidden: Vec<Message>,
    pub(crate) pending: Arc<PendingStore>,
}

/// What one event means for the client.
enum Out {
    Content(String),
    Reasoning(String),
    ToolCall(Value),
}

/// Folds events: what the client sees, and (in a builder) everything the stack did, for pauses and hand-backs.
struct Translator {
    turn: Turn,
    id: String,
    created: u64,
    upstream_model: Option<String>,
    /// Round-local call index → client-visible index, for the client's own calls.
    visible: HashMap<usize, usize>,
    announced: HashSet<usize>,
    client_calls: Vec<ToolCall>,
    approvals: Vec<ApprovalRequest>,
    usage: Usage,
    content: String,
    reasoning: String,
    builder: ResponseBuilder,
}

/// The end of a turn, as the client sees it.
struct Ending {
    finish: &'static str,
    native: String,
    notices: Vec<ApprovalNotice>,
}

impl Translator {
    fn new(turn: Turn) -> Self {
        Translator {
            turn,
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            upstream_model: None,
            visible: HashMap::new(),
            announced: HashSet::new(),
            client_calls: Vec::new(),
            approvals: Vec::new(),
            usage: Usage::default(),
            content: String::new(),
            reasoning: String::new(),
            builder: ResponseBuilder::new(),
        }
    }

    fn model(&self) -> &str {
        self.upstream_model.as_deref().unwrap_or(&self.turn.model)
    }

    fn event(&mut self, event: &ChatEvent) -> Vec<Out> {
        self.builder.push(event);
        let mut out = Vec::new();
        match event {
            ChatEvent::ResponseMetadata { model: Some(m), .. } => {
                self.upstream_model = Some(m.clone())
            }
            ChatEvent::TextDelta { text } if !text.is_empty() => {
                self.content.push_str(text);
                out.push(Out::Content(text.clone()));
            }
            ChatEvent::ReasoningDelta { text } if !text.is_empty() => {
                self.reasoning.push_str(text);
                out.push(Out::Reasoning(text.clone()));
            }
            ChatEvent::ToolCallStart { index, id, name }
                if self.turn.client_tools.contains(name) =>
            {
                let visible = self.visible.len();
                self.visible.insert(*index, visible);
                self.announced.insert(*index);
                out.push(Out::ToolCall(
                    json!({"index": visible, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}),
                ));
            }
            ChatEvent::ToolCallDelta { index, arguments } => {
                if let Some(visible) = self.visible.get(index) {
                    out.push(Out::ToolCall(
                        json!({"index": visible, "function": {"arguments": arguments}}),
                    ));
                }
            }
            ChatEvent::ToolCallEnd { index, call }
                if self.turn.client_tools.contains(&call.name) =>
            {
                // A provider that sends only complete calls (non-streaming) never announced this one.
                if !self.announced.contains(index) {
                    let visible = self.visible.len();
                    self.visible.insert(*index, visible);
                    self.announced.insert(*index);
                    let mut value = wire::tool_call(call);
                    value["index"] = visible.into();
                    out.push(Out::ToolCall(value));
                }
                self.client_calls.push(call.clone());
            }
            ChatEvent::ToolResult { .. } => {
                // Results come between rounds; the next round numbers its calls from 0 again.
                self.visible.clear();
                self.announced.clear();
            }
            ChatEvent::ApprovalRequest { request } => {
                self.approvals.push(ApprovalRequest::clone(request))
            }
            ChatEvent::Usage { usage } => self.usage.add(usage),
            _ => {}
        }
        out
    }

    /// The turn ended with `reason`: keep what a later request needs to continue it.
    fn end(&mut self, reason: &FinishReason) -> Ending {
        let mut hidden = std::mem::take(&mut self.turn.hidden);
        let response = std::mem::take(&mut self.builder).finish();
        hidden.extend(response.messages);
        let mut notices = Vec::new();
        if *reason == FinishReason::AwaitingApproval && !self.approvals.is_empty() {
            notices = self.turn.pending.pause(
                self.turn.caller.clone(),
                self.turn.conversation.clone(),
                hidden,
                &self.approvals,
            );
        } else if *reason == FinishReason::ToolCalls && !self.client_calls.is_empty() {
            let ids: Vec<String> = self.client_calls.iter().map(|c| c.id.clone()).collect();
            self.turn
                .pending
                .hand_back(self.turn.caller.clone(), &ids, hidden);
        }
        Ending {
            finish: wire::finish_reason(reason),
            native: wire::native_finish_reason(reason),
            notices,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model(),
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if self.turn.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    fn out_chunk(&self, out: Out) -> Value {
        match out {
            Out::Content(text) => self.chunk(json!({"content": text}), None),
            Out::Reasoning(text) => self.chunk(json!({"reasoning_content": text}), None),
            Out::ToolCall(call) => self.chunk(json!({"tool_calls": [call]}), None),
        }
    }
}

/// The whole response as one `chat.completion` object.
pub(crate) async fn complete(stream: ChatStream, turn: Turn) -> Result<Value, ApiError> {
    let mut translator = Translator::new(turn);
    let mut stream = stream;
    let mut finish = None;
    while let Some(item) = stream.next().await {
        let event = item.map_err(|e| ApiError::from_chat(&e))?;
        translator.event(&event);
        if let ChatEvent::Finish { reason } = event {
            finish = Some(reason);
        }
    }
    let Some(reason) = finish else {
        return Err(ApiError::from_chat(&incomplete()));
    };
    let ending = translator.end(&reason);
    let mut content = std::mem::take(&mut translator.content);
    content.push_str(wire::approval_text(&ending.notices).trim_start_matches('\n'));
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    let calls: Vec<Value> = translator
        .client_calls
        .iter()
        .map(wire::tool_call)
        .collect();
    message.insert(
        "content".into(),
        if content.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            content.into()
        },
    );
    if !translator.reasoning.is_empty() {
        message.insert(
            "reasoning_content".into(),
            std::mem::take(&mut translator.reasoning).into(),
        );
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), calls.into());
    }
    if !ending.notices.is_empty() {
        message.insert("tower_chat_approvals".into(), json!(ending.notices));
    }
    let mut body = json!({
        "id": translator.id,
        "object": "chat.completion",
        "created": translator.created,
        "model": translator.model(),
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": ending.finish}],
        "usage": wire::usage(&translator.usage),
    });
    if ending.finish != ending.native {
        body["tower_chat"] = tower_chat_field(&ending);
    }
    Ok(body)
}

fn tower_chat_field(ending: &Ending) -> Value {
    let mut field = json!({"finish_reason": ending.native});
    if !ending.notices.is_empty() {
        field["approval_requests"] = json!(ending.notices);
    }
    field
}

fn incomplete() -> ChatError {
    ChatError::new(
        ErrorKind::Protocol,
        "the response ended without a finish reason",
    )
}

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

enum Phase {
    Streaming,
    Done,
}

struct SseState {
    stream: ChatStream,
    translator: Translator,
    first: Option<ChatEvent>,
    phase: Phase,
    started: bool,
}

/// The response as SSE chunks. `first` is the stream's first event, already taken (so that an error before
/// anything was sent could still become an HTTP status).
pub(crate) fn stream(
    stream: ChatStream,
    first: ChatEvent,
    turn: Turn,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let state = SseState {
        stream,
        translator: Translator::new(turn),
        first: Some(first),
        phase: Phase::Streaming,
        started: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if let Phase::Done = state.phase {
            return None;
        }
        loop {
            let item = match state.first.take() {
                Some(event) => Some(Ok(event)),
                None => state.stream.next().await,
            };
            let mut out = Vec::new();
            if !state.started {
                state.started = true;
                let opening = state
                    .translator
                    .chunk(json!({"role": "assistant", "content": ""}), None);
                out.extend_from_slice(&sse(&opening));
            }
            match item {
                Some(Ok(ChatEvent::Finish { reason })) => {
                    state.translator.builder.push(&ChatEvent::Finish {
                        reason: reason.clone(),
                    });
                    finish_chunks(&mut state.translator, &reason, &mut out);
                    state.phase = Phase::Done;
                    return Some((Ok(Bytes::from(out)), state));
                }
                Some(Ok(event)) => {
                    for piece in state.translator.event(&event) {
                        out.extend_from_slice(&sse(&state.translator.out_chunk(piece)));
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(error = %error, "chat stream failed after the response started");
                    out.extend_from_slice(&sse(&ApiError::from_chat(&error).body()));
                    state.phase = Phase::Done;
                    return Some((Ok(Bytes::from(out)), state));
                }
                None => {
                    out.extend_from_slice(&sse(&ApiError::from_chat(&incomplete()).body()));
                    state.phase = Phase::Done;
                    return Some((Ok(Bytes::from(out)), state));
                }
            }
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), state));
            }
        }
    })
}

fn finish_chunks(translator: &mut Translator, reason: &FinishReason, out: &mut Vec<u8>) {
    let ending = translator.end(reason);
    let text = wire::approval_text(&ending.notices);
    if !text.is_empty() {
        let text = if translator.content.is_empty() {
            text.trim_start_matches('\n').to_owned()
        } else {
            text
        };
        out.extend_from_slice(&sse(&translator.chunk(json!({"content": text}), None)));
    }
    let mut last = translator.chunk(json!({}), Some(ending.finish));
    if ending.finish != ending.native {
        last["tower_chat"] = tower_chat_field(&ending);
    }
    out.extend_from_slice(&sse(&last));
    if translator.turn.include_usage {
        let usage = json!({
            "id": translator.id,
            "object": "chat.completion.chunk",
            "created": translator.created,
            "model": translator.model(),
            "choices": [],
            "usage": wire::usage(&translator.usage),
        });
        out.extend_from_slice(&sse(&usage));
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
}
