//! `POST /v1/chat/completions`: OpenAI Chat Completions. The request body parsed into a [`ChatRequest`], and
//! `chat.completion` / `chat.completion.chunk` objects (SSE `data:` lines ending with `data: [DONE]`) built from
//! what the client may see of the stack's events.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tower_chat::{
    ApiFormat, AssistantMessage, Carried, ChatRequest, Content, FinishReason, Message, Part,
    ProviderExtra, ReasoningOptions, ResponseFormat, ToolCall, ToolChoice, ToolMessage, ToolSpec,
    Usage,
};

use crate::error::ApiError;
use crate::format::ExtraFields;
use crate::format::{
    arguments_text, begin_sse_data, effort_level, end_sse, from_body, schema, sse_data,
    unserved_tool, write_json, ApprovalNotice, CallNames, Encoder, Ending, Folded, Inbound,
    InboundRoute, ParseContext, TowerChatRequest, Visible, WireFormat, ROUND_BREAK,
};

/// The Chat Completions format (see the [module docs](self)).
#[derive(Debug)]
pub struct ChatCompletions;

impl WireFormat for ChatCompletions {
    const ROUTE: InboundRoute = InboundRoute::ChatCompletions;
    type Encoder = ChunkEncoder;

    fn parse(body: &[u8], context: &ParseContext) -> Result<(Inbound, ChunkEncoder), ApiError> {
        let request: CompletionRequest = from_body(body)?;
        // Each wire message is one message; each tool call one call.
        let calls = request
            .messages
            .iter()
            .map(|message| match message {
                WireMessage::Assistant {
                    tool_calls: Some(calls),
                    ..
                } => calls.len(),
                _ => 0,
            })
            .sum();
        context.limits.check_counts(request.messages.len(), calls)?;
        let include_usage = request
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let inbound = into_inbound(request)?;
        Ok((inbound, ChunkEncoder::new(include_usage)))
    }
}

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: String,
    messages: Vec<WireMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    tools: Option<Vec<WireTool>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    n: Option<u32>,
    /// Mapped to each upstream's reasoning setting ([`tower_chat::ReasoningOptions`]).
    #[serde(default)]
    reasoning_effort: Option<String>,
    /// The end user's id: OpenAI's `user`, Anthropic's `metadata.user_id`, left out elsewhere.
    #[serde(default)]
    user: Option<String>,
    /// The gateway's own extension (approval decisions); standard clients never send it.
    #[serde(default)]
    tower_chat: Option<TowerChatRequest>,
    /// Anything else (`seed`, `user`, `frequency_penalty`, …), in the client's order: carried to a Chat
    /// Completions upstream unchanged, left out (and named) for another.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage {
    System {
        content: WireContent,
    },
    Developer {
        content: WireContent,
    },
    User {
        content: WireContent,
    },
    Assistant {
        #[serde(default)]
        content: Option<WireContent>,
        #[serde(default)]
        tool_calls: Option<Vec<WireToolCall>>,
    },
    Tool {
        tool_call_id: String,
        content: WireContent,
    },
}

/// A message's `content`: a string or a list of parts ([`crate::parts::chat_completions_content`]).
#[derive(Debug, Deserialize)]
#[serde(transparent)]
struct WireContent(Value);

impl WireContent {
    fn into_content(self, at: &str) -> Result<Content, ApiError> {
        crate::parts::chat_completions_content(self.0, at)
    }

    /// The text of an assistant message: a string or text parts (a `refusal` part is the refusal's text).
    fn into_text(self, at: &str) -> Result<String, ApiError> {
        let content = self.into_content(at)?;
        let mut text = String::new();
        for part in content.into_parts() {
            match part {
                Part::Text(part) => text.push_str(&part.text),
                Part::Provider(raw) if raw.value.get("type") == Some(&Value::from("refusal")) => {
                    text.push_str(raw.value["refusal"].as_str().unwrap_or_default())
                }
                other => {
                    return Err(schema(format!(
                        "{at}: an assistant message takes text parts only, not `{}`",
                        other.kind()
                    )))
                }
            }
        }
        Ok(text)
    }
}

#[derive(Debug, Deserialize)]
struct WireToolCall {
    id: String,
    #[serde(default)]
    r#type: Option<String>,
    function: WireFunctionCall,
}

#[derive(Debug, Deserialize)]
struct WireFunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct WireTool {
    r#type: String,
    /// Required of a `function` tool; other types (`custom`) carry their own object instead.
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

fn into_inbound(body: CompletionRequest) -> Result<Inbound, ApiError> {
    if body.model.trim().is_empty() {
        return Err(schema("`model` must not be empty"));
    }
    if body.messages.is_empty() {
        return Err(schema("`messages` must not be empty"));
    }
    if body.n.is_some_and(|n| n != 1) {
        return Err(schema("only `n: 1` is supported"));
    }
    let mut messages = Vec::with_capacity(body.messages.len());
    // Tool messages name their tool; OpenAI's carry only the call id, so find the call it answers.
    let mut call_names = CallNames::default();
    for (i, message) in body.messages.into_iter().enumerate() {
        let at = format!("messages[{i}]");
        messages.push(match message {
            WireMessage::System { content } | WireMessage::Developer { content } => {
                Message::System {
                    content: content.into_content(&at)?,
                }
            }
            WireMessage::User { content } => Message::User {
                content: content.into_content(&at)?,
            },
            WireMessage::Assistant {
                content,
                tool_calls,
            } => {
                let content = match content {
                    Some(content) if !content.0.is_null() => content.into_text(&at)?,
                    _ => String::new(),
                };
                let mut calls = Vec::new();
                for call in tool_calls.unwrap_or_default() {
                    if call.r#type.as_deref().is_some_and(|t| t != "function") {
                        return Err(schema(format!(
                            "{at}: only `function` tool calls are supported"
                        )));
                    }
                    calls.push(ToolCall::from_raw_arguments(
                        call.id,
                        call.function.name,
                        call.function.arguments,
                    ));
                }
                call_names.add(&calls);
                Message::Assistant(AssistantMessage {
                    content,
                    reasoning: Vec::new(),
                    tool_calls: calls,
                    provider_parts: Vec::new(),
                })
            }
            WireMessage::Tool {
                tool_call_id,
                content,
            } => {
                let name = call_names.get(&tool_call_id).unwrap_or_default().to_owned();
                Message::Tool(ToolMessage::success(
                    tool_call_id,
                    name,
                    content.into_content(&at)?,
                ))
            }
        });
    }
    let mut request = ChatRequest::new(messages);
    let options = &mut request.options;
    options.model = Some(body.model.clone());
    for (i, tool) in body.tools.unwrap_or_default().into_iter().enumerate() {
        if tool.r#type != "function" {
            return Err(unserved_tool(&format!("tools[{i}]"), &tool.r#type));
        }
        let function = tool
            .function
            .ok_or_else(|| schema(format!("tools[{i}]: `function` is required")))?;
        options.tools.push(ToolSpec::new(
            function.name,
            function.description.unwrap_or_default(),
            function
                .parameters
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        ));
    }
    options.tool_choice = body.tool_choice.map(tool_choice).transpose()?;
    options.parallel_tool_calls = body.parallel_tool_calls;
    options.temperature = body.temperature;
    options.top_p = body.top_p;
    options.max_output_tokens = body.max_completion_tokens.or(body.max_tokens);
    options.stop = match body.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    options.response_format = body.response_format.map(response_format).transpose()?;
    options.reasoning = body
        .reasoning_effort
        .as_deref()
        .map(|effort| effort_level(effort, "reasoning_effort"))
        .transpose()?
        .map(|effort| ReasoningOptions {
            effort: Some(effort),
            ..ReasoningOptions::default()
        });
    options.end_user = body.user;
    // The rest is carried for a Chat Completions upstream only.
    let fields = body.extra;
    if !fields.is_empty() {
        options.carried = Some(Carried {
            format: ApiFormat::ChatCompletions,
            fields,
        });
    }
    let mut inbound = Inbound::new(request, body.model, body.stream.unwrap_or(false));
    inbound.approvals = body.tower_chat.map(|t| t.approvals).unwrap_or_default();
    Ok(inbound)
}

fn tool_choice(value: Value) -> Result<ToolChoice, ApiError> {
    match &value {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(schema(format!("unknown `tool_choice` `{other}`"))),
        },
        Value::Object(_) => value["function"]["name"]
            .as_str()
            .map(|name| ToolChoice::Tool(name.to_owned()))
            .ok_or_else(|| schema("`tool_choice` object needs `function.name`")),
        _ => Err(schema("`tool_choice` must be a string or an object")),
    }
}

fn response_format(value: Value) -> Result<ResponseFormat, ApiError> {
    match value["type"].as_str() {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let inner = &value["json_schema"];
            Ok(ResponseFormat::JsonSchema {
                name: inner["name"]
                    .as_str()
                    .ok_or_else(|| schema("`response_format.json_schema.name` is required"))?
                    .to_owned(),
                schema: inner.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: inner["strict"].as_bool(),
            })
        }
        _ => Err(schema(
            "`response_format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

/// OpenAI's spelling of a finish reason. Reasons OpenAI has no word for become the nearest one it has, and the
/// gateway says the real reason in the `tower_chat` field: a recitation stop is `content_filter` (the provider's
/// policy cut the answer, as OpenAI clients already handle); a malformed tool call is `stop` (no call was made,
/// and `tool_calls` with no calls would send a client's tool loop looking for ones that are not there); a pause
/// for approval and the tool loop's limit are `stop`.
fn finish_reason(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter | FinishReason::Recitation => "content_filter",
        _ => "stop",
    }
}

/// OpenAI's usage object (Chat Completions' names).
#[derive(Serialize)]
struct WireUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<CachedTokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens_details: Option<ReasoningTokens>,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl From<&Usage> for WireUsage {
    fn from(usage: &Usage) -> Self {
        WireUsage {
            prompt_tokens: usage.input_tokens,
            completion_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens(),
            prompt_tokens_details: usage
                .cached_input_tokens
                .map(|cached_tokens| CachedTokens { cached_tokens }),
            completion_tokens_details: usage
                .reasoning_tokens
                .map(|reasoning_tokens| ReasoningTokens { reasoning_tokens }),
        }
    }
}

/// A tool call in the OpenAI shape.
fn tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments_text(call)},
    })
}

/// Builds `chat.completion` / `chat.completion.chunk` objects.
#[derive(Debug)]
pub struct ChunkEncoder {
    id: String,
    created: u64,
    include_usage: bool,
    /// Whether any content was streamed (the approval notice then keeps its leading blank line).
    wrote_content: bool,
    /// What every chunk of the stream starts with, escaped once: `data: {"id":…,"object":…,"created":…,
    /// "model":…,"choices":[{"index":0,"delta":`. Serialising these fields for each chunk (keys included) cost
    /// about as much as the rest of the chunk.
    head: Vec<u8>,
    /// The model `head` names (the upstream's, known from its first chunk; rebuilt if it changes).
    head_model: Option<String>,
}

impl ChunkEncoder {
    fn new(include_usage: bool) -> Self {
        ChunkEncoder {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            include_usage,
            wrote_content: false,
            head: Vec::new(),
            head_model: None,
        }
    }

    /// One `chat.completion.chunk` as SSE, written straight into `out`: the stream's fixed head, then the
    /// chunk's own fields serialised from borrowed values (a `json!` tree per chunk cost ~16 k instructions).
    /// The bytes are exactly those of serialising the test-only `Chunk` struct.
    fn write_chunk(
        &mut self,
        folded: &Folded,
        delta: Delta<'_>,
        finish: Option<&str>,
        tower_chat: Option<Value>,
        out: &mut Vec<u8>,
    ) {
        if self.head_model.as_deref() != Some(folded.model.as_str()) {
            self.write_head(&folded.model);
        }
        out.extend_from_slice(&self.head);
        write_json(&delta, out);
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        write_json(&finish, out);
        out.extend_from_slice(b"}]");
        if self.include_usage {
            out.extend_from_slice(b",\"usage\":null");
        }
        if let Some(tower_chat) = tower_chat {
            out.extend_from_slice(b",\"tower_chat\":");
            write_json(&tower_chat, out);
        }
        out.push(b'}');
        end_sse(out);
    }

    fn write_head(&mut self, model: &str) {
        let head = &mut self.head;
        head.clear();
        begin_sse_data(head);
        head.extend_from_slice(b"{\"id\":");
        write_json(&self.id, head);
        head.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        write_json(&self.created, head);
        head.extend_from_slice(b",\"model\":");
        write_json(model, head);
        head.extend_from_slice(b",\"choices\":[{\"index\":0,\"delta\":");
        self.head_model = Some(model.to_owned());
    }
}

/// A `chat.completion.chunk`: what [`ChunkEncoder::write_chunk`] writes, field by field (the test compares them).
#[cfg(test)]
#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChunkChoice<'a>; 1],
    /// `"usage": null` on every chunk but the last when the client asked for usage (what OpenAI sends).
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tower_chat: Option<Value>,
}

#[cfg(test)]
#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: (),
    finish_reason: Option<&'a str>,
}

/// A chunk's `delta` object.
#[derive(Clone, Serialize)]
#[serde(untagged)]
enum Delta<'a> {
    Opening {
        role: &'static str,
        content: &'static str,
    },
    Content {
        content: &'a str,
    },
    Reasoning {
        reasoning_content: &'a str,
    },
    Call {
        tool_calls: [CallFragment<'a>; 1],
    },
    Empty {},
}

/// A piece of a streamed tool call: the first names it, the rest carry argument text.
#[derive(Clone, Serialize)]
struct CallFragment<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionFragment<'a>,
}

#[derive(Clone, Serialize)]
struct FunctionFragment<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

impl Encoder for ChunkEncoder {
    fn open(&mut self, folded: &Folded, out: &mut Vec<u8>) {
        let opening = Delta::Opening {
            role: "assistant",
            content: "",
        };
        self.write_chunk(folded, opening, None, None, out);
    }

    fn visible(&mut self, folded: &Folded, event: Visible, out: &mut Vec<u8>) {
        let delta = match &event {
            // Chat Completions has no field for a reasoning block's signature.
            Visible::ReasoningEnd(_) => return,
            Visible::Text(text) => {
                self.wrote_content = true;
                Delta::Content { content: text }
            }
            Visible::Reasoning(text) => Delta::Reasoning {
                reasoning_content: text,
            },
            Visible::CallStart { index, id, name } => Delta::Call {
                tool_calls: [CallFragment {
                    index: *index,
                    id: Some(id),
                    kind: Some("function"),
                    function: FunctionFragment {
                        name: Some(name),
                        arguments: "",
                    },
                }],
            },
            Visible::CallArguments { index, delta } => Delta::Call {
                tool_calls: [CallFragment {
                    index: *index,
                    id: None,
                    kind: None,
                    function: FunctionFragment {
                        name: None,
                        arguments: delta,
                    },
                }],
            },
            Visible::CallEnd { .. } => return,
            // Chat Completions has no place for another format's block.
            Visible::ProviderBlock { format, .. } => {
                tracing::debug!(
                    from = format.as_str(),
                    "an answer block left out of a Chat Completions answer"
                );
                return;
            }
            Visible::ProviderExtra {
                format: ApiFormat::ChatCompletions,
                extra,
            } => return self.extra(folded, extra.clone(), out),
            Visible::ProviderExtra { format, extra } => {
                tracing::debug!(
                    from = format.as_str(),
                    kind = extra.kind(),
                    "an answer part left out of a Chat Completions answer"
                );
                return;
            }
            // One `content` for the whole turn: the rounds' texts are joined as `folded.content` joins them.
            Visible::RoundBreak => {
                self.wrote_content = true;
                Delta::Content {
                    content: ROUND_BREAK,
                }
            }
        };
        self.write_chunk(folded, delta, None, None, out);
    }

    fn close(&mut self, folded: &Folded, ending: &Ending, out: &mut Vec<u8>) {
        let text = ending.notice_text();
        if !text.is_empty() {
            let text = if self.wrote_content {
                text
            } else {
                text.trim_start_matches('\n').to_owned()
            };
            self.write_chunk(folded, Delta::Content { content: &text }, None, None, out);
        }
        let finish = finish_reason(&ending.reason);
        let field = ending.tower_chat_field(finish);
        self.write_chunk(folded, Delta::Empty {}, Some(finish), field, out);
        if self.include_usage {
            let usage = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": folded.model,
                "choices": [],
                "usage": WireUsage::from(&folded.usage),
            });
            sse_data(&usage, out);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    fn error(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        // No `[DONE]` after it: the SDKs raise on the error chunk, and a truncated stream never looks complete.
        sse_data(&error.body(), out);
    }

    fn whole(&mut self, folded: Folded, ending: &Ending) -> Vec<u8> {
        let mut content = folded.content;
        content.push_str(ending.notice_text().trim_start_matches('\n'));
        let calls: Vec<Value> = folded.client_calls.iter().map(tool_call).collect();
        let finish = finish_reason(&ending.reason);
        let extra = of(&folded.extra_fields);
        let completion = Completion {
            id: &self.id,
            object: "chat.completion",
            created: self.created,
            model: &folded.model,
            choices: [CompletionChoice {
                index: 0,
                message: CompletionMessage {
                    role: "assistant",
                    content: (!content.is_empty() || calls.is_empty()).then_some(&content),
                    reasoning_content: (!folded.reasoning.is_empty()).then_some(&folded.reasoning),
                    tool_calls: calls,
                    tower_chat_approvals: &ending.notices,
                    extra: Extra {
                        map: extra.map(|e| &e.message),
                        own: MESSAGE_OWN,
                    },
                },
                logprobs: extra.and_then(|e| e.choice.get("logprobs")),
                finish_reason: finish,
                extra: Extra {
                    map: extra.map(|e| &e.choice),
                    own: CHOICE_OWN_WHOLE,
                },
            }],
            usage: WireUsage::from(&folded.usage),
            tower_chat: ending.tower_chat_field(finish),
        };
        serde_json::to_vec(&completion).expect("a completion serialises")
    }
}

/// A `chat.completion`, serialised from borrowed fields (no `json!` tree).
#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoice<'a>; 1],
    usage: WireUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    tower_chat: Option<Value>,
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    message: CompletionMessage<'a>,
    /// `null` unless the upstream sent its own.
    logprobs: Option<&'a Value>,
    finish_reason: &'a str,
    /// A Chat Completions upstream's own fields of the choice.
    #[serde(flatten)]
    extra: Extra<'a>,
}

/// The choice fields a whole answer writes itself.
const CHOICE_OWN_WHOLE: &[&str] = &["index", "message", "logprobs", "finish_reason"];

#[derive(Serialize)]
struct CompletionMessage<'a> {
    role: &'static str,
    /// `null` when the message only calls tools.
    content: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tower_chat_approvals: &'a [ApprovalNotice],
    /// A Chat Completions upstream's own fields of the message (`annotations`, …).
    #[serde(flatten)]
    extra: Extra<'a>,
}

/// The message fields the encoder writes itself: an upstream's of the same name are not written twice.
const MESSAGE_OWN: &[&str] = &[
    "role",
    "content",
    "reasoning_content",
    "tool_calls",
    "tower_chat_approvals",
];

/// The choice fields the encoder writes itself.
const CHOICE_OWN: &[&str] = &["index", "message", "delta", "finish_reason"];

/// Fields of `map` other than `own`, serialised into the object around them (`#[serde(flatten)]`).
struct Extra<'a> {
    map: Option<&'a Map<String, Value>>,
    own: &'static [&'static str],
}

impl Extra<'_> {
    fn entries(&self) -> impl Iterator<Item = (&String, &Value)> {
        let own = self.own;
        self.map
            .into_iter()
            .flatten()
            .filter(move |(key, _)| !own.contains(&key.as_str()))
    }
}

impl Serialize for Extra<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.entries() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// The Chat Completions fields of a whole answer ([`Folded::extra_fields`]), if any.
fn of(extra_fields: &[(ApiFormat, ExtraFields)]) -> Option<&ExtraFields> {
    extra_fields
        .iter()
        .find(|(format, _)| *format == ApiFormat::ChatCompletions)
        .map(|(_, fields)| fields)
}

impl ChunkEncoder {
    /// A Chat Completions upstream's chunk fields as a chunk of their own: the message's in its `delta`, the
    /// choice's beside it (its `logprobs` replacing the `null` other chunks carry). Other extras are left out.
    fn extra(&mut self, folded: &Folded, extra: ProviderExtra, out: &mut Vec<u8>) {
        let ProviderExtra::Fields { message, choice } = extra else {
            tracing::debug!(
                kind = extra.kind(),
                "an answer part left out of a Chat Completions answer"
            );
            return;
        };
        if self.head_model.as_deref() != Some(folded.model.as_str()) {
            self.write_head(&folded.model);
        }
        out.extend_from_slice(&self.head);
        write_json(
            &Extra {
                map: Some(&message),
                own: &["role"],
            },
            out,
        );
        let choice = Extra {
            map: Some(&choice),
            own: CHOICE_OWN,
        };
        let mut logprobs = false;
        for (key, value) in choice.entries() {
            logprobs |= key == "logprobs";
            out.push(b',');
            write_json(key, out);
            out.push(b':');
            write_json(value, out);
        }
        if !logprobs {
            out.extend_from_slice(b",\"logprobs\":null");
        }
        out.extend_from_slice(b",\"finish_reason\":null}]");
        if self.include_usage {
            out.extend_from_slice(b",\"usage\":null");
        }
        out.push(b'}');
        end_sse(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_written_as_its_struct_serialises() {
        let awkward = "a \"quoted\" line\nwith \\ and é and \u{1}";
        let deltas = [
            Delta::Opening {
                role: "assistant",
                content: "",
            },
            Delta::Content { content: awkward },
            Delta::Reasoning {
                reasoning_content: awkward,
            },
            Delta::Call {
                tool_calls: [CallFragment {
                    index: 1,
                    id: Some("call_\"1\""),
                    kind: Some("function"),
                    function: FunctionFragment {
                        name: Some("look\nup"),
                        arguments: "",
                    },
                }],
            },
            Delta::Call {
                tool_calls: [CallFragment {
                    index: 0,
                    id: None,
                    kind: None,
                    function: FunctionFragment {
                        name: None,
                        arguments: awkward,
                    },
                }],
            },
            Delta::Empty {},
        ];
        for include_usage in [false, true] {
            let mut encoder = ChunkEncoder::new(include_usage);
            // The model changes mid-stream once (the head is rebuilt), with characters that need escaping.
            for (turn, model) in ["gpt-\"x\"", "other/model\u{7f}"].iter().enumerate() {
                let folded = Folded {
                    model: (*model).to_owned(),
                    ..Folded::default()
                };
                for (n, delta) in deltas.iter().enumerate() {
                    let finish = (n % 2 == turn).then_some("tool_calls");
                    let tower_chat = (n == 3).then(|| json!({"approvals": [{"id": "a\"1"}]}));
                    let expected = {
                        let mut expected = Vec::new();
                        sse_data(
                            &Chunk {
                                id: &encoder.id,
                                object: "chat.completion.chunk",
                                created: encoder.created,
                                model,
                                choices: [ChunkChoice {
                                    index: 0,
                                    delta: delta.clone(),
                                    logprobs: (),
                                    finish_reason: finish,
                                }],
                                usage: include_usage.then_some(()),
                                tower_chat: tower_chat.clone(),
                            },
                            &mut expected,
                        );
                        expected
                    };
                    let mut written = b"before".to_vec();
                    encoder.write_chunk(&folded, delta.clone(), finish, tower_chat, &mut written);
                    assert_eq!(
                        String::from_utf8_lossy(&written[6..]),
                        String::from_utf8_lossy(&expected)
                    );
                    assert_eq!(&written[..6], b"before");
                }
            }
        }
    }

    const CONTEXT: ParseContext = ParseContext {
        upstream: crate::format::UpstreamFormat::OpenAi,
        limits: crate::limits::RequestLimits::DEFAULT,
        stores_responses: false,
    };

    fn parse(value: Value) -> Result<Inbound, ApiError> {
        parse_request(value.to_string().as_bytes())
    }

    fn parse_request(body: &[u8]) -> Result<Inbound, ApiError> {
        ChatCompletions::parse(body, &CONTEXT).map(|(inbound, _)| inbound)
    }

    #[test]
    fn reasoning_effort_and_user_are_typed_settings() {
        let parsed = parse(json!({"model": "m", "reasoning_effort": "low", "user": "u",
            "messages": [{"role": "user", "content": "x"}]}))
        .unwrap();
        let options = &parsed.request.options;
        assert_eq!(
            options.reasoning.as_ref().and_then(|r| r.effort),
            Some(tower_chat::ReasoningEffort::Low)
        );
        assert_eq!(options.end_user.as_deref(), Some("u"));
        assert!(options.extra.is_empty(), "{:?}", options.extra);
    }

    #[test]
    fn a_full_request_maps_onto_chat_request() {
        let parsed = parse(json!({
            "model": "gpt-4o-mini",
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "add "}, {"type": "text", "text": "2+3"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "12C"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "max_tokens": 20,
            "stop": "END",
            "seed": 7,
            "user": null,
            "tower_chat": {"approvals": [{"id": "apr_1", "approved": false, "reason": "no"}]}
        }))
        .unwrap();
        assert!(parsed.stream);
        let request = parsed.request;
        assert_eq!(request.options.model.as_deref(), Some("gpt-4o-mini"));
        assert_eq!(request.messages[0], Message::system("be brief"));
        assert_eq!(request.messages[1], Message::user("add 2+3"));
        assert_eq!(
            request.messages[3],
            Message::Tool(ToolMessage::success("c1", "weather", "12C"))
        );
        assert_eq!(request.options.tools[0].name, "weather");
        assert_eq!(
            request.options.tool_choice,
            Some(ToolChoice::Tool("weather".into()))
        );
        assert_eq!(request.options.max_output_tokens, Some(20));
        assert_eq!(request.options.stop, vec!["END".to_owned()]);
        let carried = request.options.carried.as_ref().unwrap();
        assert_eq!(carried.format, ApiFormat::ChatCompletions);
        assert_eq!(carried.fields.get("seed"), Some(&json!(7)));
        assert!(!carried.fields.contains_key("tower_chat"));
        assert_eq!(parsed.approvals[0].id, "apr_1");
    }

    #[test]
    fn schema_errors_say_where() {
        let err = parse(json!({"model": "m"})).unwrap_err();
        assert_eq!(err.status, 400);
        assert!(err.message.contains("messages"), "{}", err.message);
        let err = parse(json!({"model": "m", "messages": [{"role": "user"}]})).unwrap_err();
        assert!(err.message.contains("messages[0]"), "{}", err.message);
        let err = parse(json!({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}))
            .unwrap_err();
        assert!(err.message.contains("wizard"), "{}", err.message);
        let err = parse(
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}]}),
        )
        .unwrap_err();
        assert!(
            err.message.contains("messages[0].content[0]") && err.message.contains("URL"),
            "{}",
            err.message
        );
        let err =
            parse(json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "x"}]}))
                .unwrap_err();
        assert!(err.message.contains("n"), "{}", err.message);
        let err = parse_request(b"{\"model\": ").unwrap_err();
        assert_eq!(err.code, "invalid_json");
    }
}
