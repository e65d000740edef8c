//! `POST /v1/messages`: Anthropic Messages. The request (`system`, `messages` with text, image, document,
//! `tool_use`, `tool_result`, `thinking` and `redacted_thinking` blocks, `cache_control`, custom `tools`,
//! `tool_choice`, `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `top_k`, `thinking`, `metadata`,
//! `output_config.format` or its earlier name `output_format`)
//! parsed into a [`ChatRequest`]; the answer as a `message` object with content blocks, or the SSE event sequence
//! `message_start`, `ping`, `content_block_start` / `content_block_delta` (`text_delta`, `thinking_delta`,
//! `signature_delta`, `input_json_delta`) /
//! `content_block_stop` per block, `message_delta`, `message_stop`; errors as
//! `{"type": "error", "error": {"type", "message"}}`.
//!
//! `thinking`, `output_config.effort` and `metadata.user_id` become the request's typed reasoning settings and
//! end-user id, which every leaf maps to its provider's own field (the gateway README's "Fields across formats"
//! table); `top_k`, Anthropic's alone, goes to an Anthropic upstream only. A `system` message inside `messages`
//! is a system message in its place.

use std::collections::HashMap;

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tower_chat::{
    ApiFormat, AssistantMessage, Carried, ChatRequest, Content, Continuation, FinishReason,
    HostedTool, Message, Part, PlacedPart, ProviderExtra, ProviderPart, ReasoningOptions,
    ReasoningPart, ResponseFormat, ToolCall, ToolChoice, ToolMessage, ToolSpec, Usage,
};

use crate::error::{anthropic_body, anthropic_response, ApiError};
use crate::format::{
    arguments_value, effort_level, from_body, name_tool_results, schema, sse_event, Encoder,
    Ending, Folded, Inbound, InboundRoute, ParseContext, TowerChatRequest, Visible, WireFormat,
};
use crate::format::{Piece, UpstreamFormat};
use crate::parts::{
    anthropic_document, anthropic_image, anthropic_text, cache_hint, InCacheControl, InSource,
};
use crate::sealed_reasoning::{seal, unseal};

/// The Anthropic Messages format (see the [module docs](self)).
#[derive(Debug)]
pub struct AnthropicMessages;

impl WireFormat for AnthropicMessages {
    const ROUTE: InboundRoute = InboundRoute::Messages;
    type Encoder = MessageEncoder;

    fn parse(body: &[u8], context: &ParseContext) -> Result<(Inbound, MessageEncoder), ApiError> {
        let request: MessagesRequest = from_body(body)?;
        let (messages, calls) = raw_counts(&request);
        context.limits.check_counts(messages, calls)?;
        Ok((into_inbound(request, context)?, MessageEncoder::new()))
    }

    fn error_response(error: ApiError) -> Response {
        anthropic_response(error)
    }
}

/// The body of `POST /v1/messages`. Fields the gateway does not model are carried for an Anthropic upstream,
/// verbatim and in order, and left out (and named) for any other ([`tower_chat::Carried`]).
#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: String,
    /// Required, as Anthropic requires it.
    max_tokens: u32,
    messages: Vec<InMessage>,
    #[serde(default)]
    system: Option<System>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<u32>,
    #[serde(default)]
    /// Client tools (read as [`InTool`]) and server tools (kept as sent).
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<InToolChoice>,
    #[serde(default)]
    thinking: Option<Thinking>,
    #[serde(default)]
    metadata: Option<Metadata>,
    /// Structured outputs: `{"format": {"type": "json_schema", "schema": …}}`.
    #[serde(default)]
    output_config: Option<OutputConfig>,
    /// The earlier (beta) spelling of `output_config.format`, which Anthropic's SDKs still send.
    #[serde(default)]
    output_format: Option<OutputFormat>,
    /// The gateway's own extension (approval decisions).
    #[serde(default)]
    tower_chat: Option<TowerChatRequest>,
    /// Everything else, in the client's order.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputConfig {
    #[serde(default)]
    format: Option<OutputFormat>,
    #[serde(default)]
    effort: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum OutputFormat {
    JsonSchema { schema: Value },
}

/// The answer's JSON schema as a response format. Anthropic decodes against the schema (strict), so other
/// upstreams are asked for strict mode too.
fn output_format(
    config: Option<OutputConfig>,
    beta: Option<OutputFormat>,
) -> Result<Option<ResponseFormat>, ApiError> {
    let format = match (config.and_then(|c| c.format), beta) {
        (Some(_), Some(_)) => return Err(schema(
            "give either `output_config.format` or `output_format` (its earlier name), not both",
        )),
        (Some(format), None) | (None, Some(format)) => format,
        (None, None) => return Ok(None),
    };
    let OutputFormat::JsonSchema { schema: answer } = format;
    if !answer.is_object() {
        return Err(schema(
            "`output_config.format.schema` must be a JSON Schema object",
        ));
    }
    Ok(Some(ResponseFormat::JsonSchema {
        name: "answer".into(),
        schema: answer,
        strict: Some(true),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum System {
    Text(String),
    Blocks(Vec<TextBlock>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TextBlock {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
    /// A mid-conversation system message (Claude Opus 4.8 and later take them after a user turn).
    System,
}

#[derive(Debug, Deserialize)]
struct InMessage {
    role: Role,
    /// A string or a list of blocks; read by [`blocks`] so an unsupported block is named with its place.
    content: Value,
}

fn blocks(content: Value, i: usize) -> Result<Vec<InBlock>, ApiError> {
    match content {
        Value::String(text) => Ok(vec![InBlock::Text {
            text,
            cache_control: None,
        }]),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(j, block)| {
                if !block
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|kind| KNOWN_BLOCKS.contains(&kind))
                {
                    return Ok(InBlock::Other(block));
                }
                serde_json::from_value(block)
                    .map_err(|e| schema(format!("messages[{i}].content[{j}]: {e}")))
            })
            .collect(),
        _ => Err(schema(format!(
            "messages[{i}].content: must be a string or a list of content blocks"
        ))),
    }
}

/// The block types [`InBlock`] models; a block of another type (`search_result`, server tool blocks, …) is
/// [`InBlock::Other`].
const KNOWN_BLOCKS: [&str; 7] = [
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
];

/// A content block.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InBlock {
    /// A block of a type the gateway does not model, as sent: kept for an Anthropic upstream.
    #[serde(skip)]
    Other(Value),
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
    Image {
        source: InSource,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
    Document {
        source: InSource,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<ResultContent>,
        #[serde(default)]
        is_error: Option<bool>,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ResultContent {
    Text(String),
    /// Read one by one by [`result_blocks`], so a block of a type the gateway does not model is carried.
    Blocks(Vec<Value>),
}

/// The block types [`ResultBlock`] models; a block of another type (`search_result`, `tool_reference`, …) is
/// carried as a provider part.
const KNOWN_RESULT_BLOCKS: [&str; 3] = ["text", "image", "document"];

/// A block of a `tool_result`'s content.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResultBlock {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
    Image {
        source: InSource,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
    Document {
        source: InSource,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        cache_control: Option<InCacheControl>,
    },
}

#[derive(Debug, Deserialize)]
struct InTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<Value>,
    #[serde(default)]
    cache_control: Option<InCacheControl>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InToolChoice {
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    None {},
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Thinking {
    Enabled { budget_tokens: u32 },
    Adaptive {},
    Disabled {},
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    #[serde(default)]
    user_id: Option<String>,
}

/// At least how many messages and tool calls `request` becomes, counted on the raw blocks: a system block is a
/// message, an assistant message one message, each `tool_result` block a message of its own and a user
/// message with any other block at least one more; each `tool_use` block a call.
fn raw_counts(request: &MessagesRequest) -> (usize, usize) {
    let mut messages = match &request.system {
        Some(System::Blocks(blocks)) => blocks.len(),
        Some(System::Text(_)) => 1,
        None => 0,
    };
    let mut calls = 0;
    for message in &request.messages {
        let Value::Array(blocks) = &message.content else {
            messages += 1;
            continue;
        };
        let mut others = matches!(message.role, Role::Assistant | Role::System);
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => messages += 1,
                Some("tool_use") => calls += 1,
                _ => others = true,
            }
        }
        messages += usize::from(others);
    }
    (messages, calls)
}

fn into_inbound(body: MessagesRequest, context: &ParseContext) -> Result<Inbound, ApiError> {
    if body.model.trim().is_empty() {
        return Err(schema("`model` must not be empty"));
    }
    if body.messages.is_empty() {
        return Err(schema("`messages` must not be empty"));
    }
    if body.max_tokens == 0 {
        return Err(schema("`max_tokens` must be at least 1"));
    }
    let mut messages = Vec::with_capacity(body.messages.len() + 1);
    match body.system {
        Some(System::Text(text)) if !text.is_empty() => messages.push(Message::system(text)),
        Some(System::Blocks(blocks)) => {
            for (
                j,
                TextBlock::Text {
                    text,
                    cache_control,
                },
            ) in blocks.into_iter().enumerate()
            {
                let part = anthropic_text(text, cache_control, &format!("system[{j}]"))?;
                messages.push(Message::system(part));
            }
        }
        _ => {}
    }
    let in_place = body.messages.iter().any(|m| matches!(m.role, Role::System));
    for (i, message) in body.messages.into_iter().enumerate() {
        let blocks = blocks(message.content, i)?;
        match message.role {
            Role::User => user_blocks(blocks, i, &mut messages)?,
            Role::Assistant => messages.push(assistant_blocks(blocks, i)?),
            Role::System => messages.push(system_blocks(blocks, i)?),
        }
    }
    name_tool_results(&mut messages);
    let mut request = ChatRequest::new(messages);
    if in_place {
        request.extensions.insert(tower_chat::SystemMessagesInPlace);
    }
    let options = &mut request.options;
    options.model = Some(body.model.clone());
    options.max_output_tokens = Some(body.max_tokens);
    options.stop = body.stop_sequences.unwrap_or_default();
    options.temperature = body.temperature;
    options.top_p = body.top_p;
    let effort = body
        .output_config
        .as_ref()
        .and_then(|c| c.effort.as_deref())
        .map(|effort| effort_level(effort, "output_config.effort"))
        .transpose()?;
    options.reasoning = reasoning(body.thinking.as_ref(), effort);
    options.end_user = body.metadata.and_then(|m| m.user_id);
    options.response_format = output_format(body.output_config, body.output_format)?;
    for (i, tool) in body.tools.unwrap_or_default().into_iter().enumerate() {
        // A tool of a type other than a client tool's (`custom`) is one the provider runs, or one it defines
        // (`bash_…`, `text_editor_…`): an Anthropic upstream takes it as it came.
        if tool
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|kind| kind != "custom")
        {
            options
                .tools
                .push(ToolSpec::hosted(HostedTool::new(ApiFormat::Messages, tool)));
            continue;
        }
        let tool: InTool = serde_json::from_value(tool)
            .map_err(|e| schema(format!("invalid request at `tools[{i}]`: {e}")))?;
        let parameters = tool
            .input_schema
            .ok_or_else(|| schema(format!("tools[{i}]: `input_schema` is required")))?;
        let mut spec = ToolSpec::new(tool.name, tool.description.unwrap_or_default(), parameters);
        spec.cache = cache_hint(tool.cache_control, &format!("tools[{i}]"))?;
        options.tools.push(spec);
    }
    if let Some(choice) = body.tool_choice {
        let (choice, no_parallel) = match choice {
            InToolChoice::Auto {
                disable_parallel_tool_use,
            } => (ToolChoice::Auto, disable_parallel_tool_use),
            InToolChoice::Any {
                disable_parallel_tool_use,
            } => (ToolChoice::Required, disable_parallel_tool_use),
            InToolChoice::Tool {
                name,
                disable_parallel_tool_use,
            } => (ToolChoice::Tool(name), disable_parallel_tool_use),
            InToolChoice::None {} => (ToolChoice::None, None),
        };
        options.tool_choice = Some(choice);
        if no_parallel == Some(true) {
            options.parallel_tool_calls = Some(false);
        }
    }
    if let (UpstreamFormat::Anthropic, Some(top_k)) = (context.upstream, body.top_k) {
        options.extra.insert("top_k".into(), top_k.into());
    }
    if !body.rest.is_empty() {
        options.carried = Some(Carried {
            format: ApiFormat::Messages,
            fields: body.rest,
        });
    }
    let mut inbound = Inbound::new(request, body.model, body.stream.unwrap_or(false));
    inbound.approvals = body.tower_chat.map(|t| t.approvals).unwrap_or_default();
    Ok(inbound)
}

/// `thinking` and `output_config.effort`, mapped by each upstream ([`ReasoningOptions`] has the table).
fn reasoning(
    thinking: Option<&Thinking>,
    effort: Option<tower_chat::ReasoningEffort>,
) -> Option<ReasoningOptions> {
    let thinking = thinking.map(|thinking| match *thinking {
        Thinking::Enabled { budget_tokens } => tower_chat::Thinking::Enabled { budget_tokens },
        Thinking::Adaptive {} => tower_chat::Thinking::Adaptive,
        Thinking::Disabled {} => tower_chat::Thinking::Disabled,
    });
    (thinking.is_some() || effort.is_some()).then(|| ReasoningOptions {
        thinking,
        effort,
        ..ReasoningOptions::default()
    })
}

/// A mid-conversation system message: text blocks only, as Anthropic takes them.
fn system_blocks(blocks: Vec<InBlock>, i: usize) -> Result<Message, ApiError> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (j, block) in blocks.into_iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match block {
            InBlock::Text {
                text,
                cache_control,
            } => parts.push(anthropic_text(text, cache_control, &at)?),
            _ => {
                return Err(schema(format!(
                    "{at}: a system message carries text blocks only"
                )))
            }
        }
    }
    Ok(Message::system(Content::from_parts(parts)))
}

/// A user message: its tool results become tool messages, its other blocks one user message of parts, in
/// the order given.
fn user_blocks(blocks: Vec<InBlock>, i: usize, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let mut parts: Vec<Part> = Vec::new();
    // Text blocks stay separate parts, as the client sent them: an Anthropic upstream gets them back as blocks,
    // and a content policy reads adjacent parts as one text (a key split over two blocks is still a key).
    let flush = |parts: &mut Vec<Part>, out: &mut Vec<Message>| {
        if !parts.is_empty() {
            out.push(Message::user(Content::from_parts(std::mem::take(parts))));
        }
    };
    for (j, block) in blocks.into_iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match block {
            InBlock::Text {
                text,
                cache_control,
            } => parts.push(anthropic_text(text, cache_control, &at)?),
            InBlock::Image {
                source,
                cache_control,
            } => parts.push(anthropic_image(source, cache_control, &at)?),
            InBlock::Document {
                source,
                title,
                cache_control,
            } => parts.push(anthropic_document(source, title, cache_control, &at)?),
            InBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                cache_control,
            } => {
                flush(&mut parts, out);
                let mut content = match content {
                    None => Content::text(String::new()),
                    Some(ResultContent::Text(text)) => Content::text(text),
                    Some(ResultContent::Blocks(blocks)) => result_blocks(blocks, &at)?,
                };
                // A breakpoint on the result block covers the whole result: it goes on its last part.
                if let Some(hint) = cache_hint(cache_control, &at)? {
                    set_cache(&mut content, hint);
                }
                out.push(Message::Tool(ToolMessage {
                    call_id: tool_use_id,
                    name: String::new(),
                    content,
                    is_error: is_error.unwrap_or(false),
                }));
            }
            InBlock::Other(value) => parts.push(Part::from(ProviderPart {
                provider: "anthropic".into(),
                value,
            })),
            InBlock::ToolUse { .. }
            | InBlock::Thinking { .. }
            | InBlock::RedactedThinking { .. } => {
                return Err(schema(format!(
                    "{at}: a user message cannot carry this block (assistant only)"
                )))
            }
        }
    }
    flush(&mut parts, out);
    Ok(())
}

/// A `tool_result`'s blocks as parts, in order: a block of a type the gateway does not model is a provider part
/// in its place (an Anthropic upstream gets it as it came, another leaf leaves it out and names it).
fn result_blocks(blocks: Vec<Value>, at: &str) -> Result<Content, ApiError> {
    let parts = blocks
        .into_iter()
        .enumerate()
        .map(|(k, block)| {
            let at = format!("{at}.content[{k}]");
            if !block.is_object() {
                return Err(schema(format!("{at}: must be a content block object")));
            }
            if !block
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|kind| KNOWN_RESULT_BLOCKS.contains(&kind))
            {
                return Ok(Part::from(ProviderPart {
                    provider: "anthropic".into(),
                    value: block,
                }));
            }
            let block: ResultBlock =
                serde_json::from_value(block).map_err(|e| schema(format!("{at}: {e}")))?;
            match block {
                ResultBlock::Text {
                    text,
                    cache_control,
                } => anthropic_text(text, cache_control, &at),
                ResultBlock::Image {
                    source,
                    cache_control,
                } => anthropic_image(source, cache_control, &at),
                ResultBlock::Document {
                    source,
                    title,
                    cache_control,
                } => anthropic_document(source, title, cache_control, &at),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Content::from_parts(parts))
}

/// Put `hint` on the content's last part that can carry one.
fn set_cache(content: &mut Content, hint: tower_chat::CacheHint) {
    if let Some(part) = content
        .parts_mut()
        .iter_mut()
        .rev()
        .find_map(Part::cache_slot)
    {
        *part = Some(hint);
    }
}

/// An assistant message. A block of a type the gateway does not model (a server tool's `server_tool_use`, its
/// result) is kept in its place among the others, for an Anthropic upstream; another leaf leaves it out.
fn assistant_blocks(blocks: Vec<InBlock>, i: usize) -> Result<Message, ApiError> {
    let mut message = AssistantMessage::default();
    for (j, block) in blocks.into_iter().enumerate() {
        match block {
            InBlock::Other(value) => {
                let part = ProviderPart {
                    provider: "anthropic".into(),
                    value,
                };
                message
                    .provider_parts
                    .push(PlacedPart::at_end_of(&message, part));
            }
            InBlock::Text { text, .. } => message.content.push_str(&text),
            InBlock::ToolUse { id, name, input } => {
                message.tool_calls.push(ToolCall::new(id, name, input))
            }
            // Kept with its signature: an Anthropic upstream continues from it unchanged, any other drops it.
            // Another upstream's reasoning comes back sealed in the signature (`sealed_reasoning.rs`).
            InBlock::Thinking {
                thinking,
                signature,
            } => {
                let at = format!("messages[{i}].content[{j}]");
                let part = match signature.as_deref().map(|s| unseal(s, &at, "signature")) {
                    Some(unsealed) => unsealed?,
                    None => None,
                };
                message.reasoning.push(part.unwrap_or_else(|| ReasoningPart {
                    text: thinking,
                    continuation: signature
                        .filter(|signature| !signature.is_empty())
                        .map(|signature| Continuation::AnthropicThinking { signature }),
                }))
            }
            InBlock::RedactedThinking { data } => message.reasoning.push(ReasoningPart {
                text: String::new(),
                continuation: Some(Continuation::AnthropicRedacted { data }),
            }),
            InBlock::ToolResult { .. } | InBlock::Image { .. } | InBlock::Document { .. } => {
                return Err(schema(format!(
                    "messages[{i}].content[{j}]: an assistant message cannot carry this block (user only)"
                )))
            }
        }
    }
    Ok(Message::Assistant(message))
}

/// Anthropic's `stop_reason`. Reasons it has no word for (a pause for approval, the tool loop's limit, a
/// malformed tool call, which made no call) are `end_turn`, and a recitation stop is `refusal` (the provider's
/// policy ended the answer), each with the gateway's own reason in the `tower_chat` field. A stop-sequence hit is `stop_sequence`
/// when the upstream named the sequence (Anthropic does); an OpenAI-compatible upstream reports it as a plain
/// stop, so it is `end_turn` there.
fn stop_reason(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::StopSequence(_) => "stop_sequence",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter | FinishReason::Recitation => "refusal",
        _ => "end_turn",
    }
}

/// The `stop_sequence` field: the sequence that ended the message, else null.
fn stop_sequence(reason: &FinishReason) -> Value {
    match reason {
        FinishReason::StopSequence(sequence) => Value::String(sequence.clone()),
        _ => Value::Null,
    }
}

/// The finish reason as the `tower_chat` field compares it: Anthropic's words for the shared reasons.
fn said(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::StopSequence(_) => "stop_sequence",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        _ => "end_turn",
    }
}

/// Anthropic's usage: `input_tokens` excludes cache reads and writes (tower-chat counts every prompt token as
/// input).
fn usage(usage: &Usage) -> Value {
    let cached = usage.cached_input_tokens.unwrap_or(0);
    let written = usage.cache_write_input_tokens.unwrap_or(0);
    let mut value = json!({
        "input_tokens": usage.input_tokens.saturating_sub(cached).saturating_sub(written),
        "output_tokens": usage.output_tokens,
    });
    if let Some(cached) = usage.cached_input_tokens {
        value["cache_read_input_tokens"] = cached.into();
    }
    if let Some(written) = usage.cache_write_input_tokens {
        value["cache_creation_input_tokens"] = written.into();
    }
    value
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text(usize),
    Thinking(usize),
    ToolUse(usize),
    /// A block of a type no layer models, written whole.
    Carried(usize),
}

impl Block {
    fn index(self) -> usize {
        match self {
            Block::Text(i) | Block::Thinking(i) | Block::ToolUse(i) | Block::Carried(i) => i,
        }
    }
}

/// Builds `message` objects and the Messages SSE event sequence.
#[derive(Debug)]
pub struct MessageEncoder {
    id: String,
    /// The content block open now; at most one at a time, as Anthropic streams them.
    open: Option<Block>,
    next_block: usize,
    /// Client-visible call index → its block.
    call_blocks: HashMap<usize, usize>,
    wrote_text: bool,
}

impl MessageEncoder {
    fn new() -> Self {
        MessageEncoder {
            id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
            open: None,
            next_block: 0,
            call_blocks: HashMap::new(),
            wrote_text: false,
        }
    }

    /// The open thinking block's index, opening one if another block (or none) is open.
    fn thinking_block(&mut self, out: &mut Vec<u8>) -> usize {
        match self.open {
            Some(Block::Thinking(index)) => index,
            _ => self.start(
                Block::Thinking,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                out,
            ),
        }
    }

    /// End the thinking block with its `signature` (opened here when its reasoning had no text).
    fn end_thinking(&mut self, signature: &str, out: &mut Vec<u8>) {
        let index = self.thinking_block(out);
        block_delta(index, DeltaBody::Signature { signature }, out);
        self.stop_open(out);
    }

    fn stop_open(&mut self, out: &mut Vec<u8>) {
        if let Some(block) = self.open.take() {
            sse_event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": block.index()}),
                out,
            );
        }
    }

    fn start(&mut self, block: fn(usize) -> Block, content: Value, out: &mut Vec<u8>) -> usize {
        self.stop_open(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some(block(index));
        sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": content}),
            out,
        );
        index
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        let index = match self.open {
            Some(Block::Text(index)) => index,
            _ => self.start(Block::Text, json!({"type": "text", "text": ""}), out),
        };
        self.wrote_text = true;
        block_delta(index, DeltaBody::Text { text }, out);
    }
}

/// A `content_block_delta` event, serialised from borrowed fields: the event a streamed answer sends per
/// token, so no `json!` tree is built for it.
fn block_delta(index: usize, delta: DeltaBody<'_>, out: &mut Vec<u8>) {
    let event = BlockDelta {
        kind: "content_block_delta",
        index,
        delta,
    };
    sse_event("content_block_delta", &event, out);
}

#[derive(Serialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    delta: DeltaBody<'a>,
}

/// A `content_block_delta`'s `delta`, tagged `text_delta`, `thinking_delta` or `input_json_delta`.
#[derive(Serialize)]
#[serde(tag = "type")]
enum DeltaBody<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
    #[serde(rename = "signature_delta")]
    Signature { signature: &'a str },
}

impl Encoder for MessageEncoder {
    fn open(&mut self, folded: &Folded, out: &mut Vec<u8>) {
        sse_event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": folded.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": usage(&folded.usage),
            }}),
            out,
        );
        sse_event("ping", &json!({"type": "ping"}), out);
    }

    fn visible(&mut self, folded: &Folded, event: Visible, out: &mut Vec<u8>) {
        match event {
            Visible::Text(text) => self.text(&text, out),
            Visible::Reasoning(text) => {
                let index = self.thinking_block(out);
                block_delta(index, DeltaBody::Thinking { thinking: &text }, out);
            }
            // The client sends these blocks back on its next turn; Anthropic checks them unchanged.
            Visible::ReasoningEnd(Continuation::AnthropicThinking { signature }) => {
                self.end_thinking(&signature, out)
            }
            Visible::ReasoningEnd(Continuation::AnthropicRedacted { data }) => {
                self.start(
                    Block::Thinking,
                    json!({"type": "redacted_thinking", "data": data}),
                    out,
                );
                self.stop_open(out);
            }
            // Another upstream's reasoning (Bedrock, Gemini, OpenAI): its thinking block ends with the part sealed
            // as its signature, so the client's next round brings the upstream's own continuation back.
            Visible::ReasoningEnd(_) => {
                if let Some(part) = folded.reasoning_parts.last() {
                    self.end_thinking(&seal(part), out);
                }
            }
            Visible::CallStart { index, id, name } => {
                let block = self.start(
                    Block::ToolUse,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    out,
                );
                self.call_blocks.insert(index, block);
            }
            Visible::CallArguments { index, delta } => {
                if let Some(&block) = self.call_blocks.get(&index).filter(|_| !delta.is_empty()) {
                    let partial_json = &delta;
                    block_delta(block, DeltaBody::InputJson { partial_json }, out);
                }
            }
            // A later round's text is a text block of its own.
            Visible::RoundBreak => {
                if matches!(self.open, Some(Block::Text(_))) {
                    self.stop_open(out);
                }
            }
            // Written back whole, in its place: a start carrying the complete block, then its stop.
            Visible::ProviderBlock {
                format: ApiFormat::Messages,
                block,
            } => {
                self.start(Block::Carried, block, out);
                self.stop_open(out);
            }
            Visible::ProviderBlock { format, .. } => {
                tracing::debug!(
                    from = format.as_str(),
                    "an answer block left out of a Messages answer"
                );
            }
            Visible::ProviderExtra {
                format: ApiFormat::Messages,
                extra,
            } => self.extra(extra, out),
            Visible::ProviderExtra { format, extra } => tracing::debug!(
                from = format.as_str(),
                kind = extra.kind(),
                "an answer part left out of a Messages answer"
            ),
            Visible::CallEnd { index, .. } => {
                if let Some(block) = self.call_blocks.remove(&index) {
                    if self.open == Some(Block::ToolUse(block)) {
                        self.stop_open(out);
                    }
                }
            }
        }
    }

    fn close(&mut self, folded: &Folded, ending: &Ending, out: &mut Vec<u8>) {
        let notice = ending.notice_text();
        if !notice.is_empty() {
            let notice = if self.wrote_text {
                notice
            } else {
                notice.trim_start_matches('\n').to_owned()
            };
            self.text(&notice, out);
        }
        self.stop_open(out);
        let mut delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(&ending.reason), "stop_sequence": stop_sequence(&ending.reason)},
            "usage": usage(&folded.usage),
        });
        if let Some(field) = ending.tower_chat_field(said(&ending.reason)) {
            delta["tower_chat"] = field;
        }
        sse_event("message_delta", &delta, out);
        sse_event("message_stop", &json!({"type": "message_stop"}), out);
    }

    fn error(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        sse_event("error", &anthropic_body(error), out);
    }

    fn whole(&mut self, folded: Folded, ending: &Ending) -> Vec<u8> {
        serde_json::to_vec(&self.whole_value(folded, ending)).expect("a JSON value serialises")
    }
}

impl MessageEncoder {
    fn whole_value(&mut self, folded: Folded, ending: &Ending) -> Value {
        let mut content = Vec::new();
        for part in &folded.reasoning_parts {
            match &part.continuation {
                Some(Continuation::AnthropicThinking { signature }) => content.push(
                    json!({"type": "thinking", "thinking": part.text, "signature": signature}),
                ),
                Some(Continuation::AnthropicRedacted { data }) => {
                    content.push(json!({"type": "redacted_thinking", "data": data}))
                }
                Some(_) => content.push(
                    json!({"type": "thinking", "thinking": part.text, "signature": seal(part)}),
                ),
                None => {}
            }
        }
        let unsigned = &folded.reasoning[folded.reasoning_covered..];
        if !unsigned.is_empty() {
            content.push(json!({"type": "thinking", "thinking": unsigned, "signature": ""}));
        }
        let mut text = folded.content;
        let notice = ending.notice_text();
        text.push_str(if text.is_empty() {
            notice.trim_start_matches('\n')
        } else {
            &notice
        });
        // Blocks no layer models go back in their place: between the text before and after them.
        // Cited text blocks keep their citations, apart from the text around them.
        let blocks = folded.provider_blocks;
        let pieces =
            Folded::pieces_with_blocks(&text, &folded.round_breaks, blocks, ApiFormat::Messages);
        content.extend(content_blocks(&text, pieces, folded.text_block_ends));
        for call in &folded.client_calls {
            content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                                "input": arguments_value(call)}));
        }
        let mut body = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": folded.model,
            "content": content,
            "stop_reason": stop_reason(&ending.reason),
            "stop_sequence": stop_sequence(&ending.reason),
            "usage": usage(&folded.usage),
        });
        if let Some(field) = ending.tower_chat_field(said(&ending.reason)) {
            body["tower_chat"] = field;
        }
        body
    }
}

impl MessageEncoder {
    /// One [`ProviderExtra`] of a Messages upstream, as SSE: a text block's end stops the open text block after
    /// its `citations_delta`s (so the text after it opens another); an unknown event goes out as it came, named
    /// by its `type`.
    fn extra(&mut self, extra: ProviderExtra, out: &mut Vec<u8>) {
        match extra {
            ProviderExtra::TextBlockEnd { citations } => {
                if !citations.is_empty() {
                    let index = match self.open {
                        Some(Block::Text(index)) => index,
                        _ => self.start(Block::Text, json!({"type": "text", "text": ""}), out),
                    };
                    for citation in citations {
                        sse_event(
                            "content_block_delta",
                            &json!({"type": "content_block_delta", "index": index,
                                    "delta": {"type": "citations_delta", "citation": citation}}),
                            out,
                        );
                    }
                }
                if matches!(self.open, Some(Block::Text(_))) {
                    self.stop_open(out);
                }
            }
            ProviderExtra::Event { event } => match event.get("type").and_then(Value::as_str) {
                Some(name) if !name.is_empty() && !name.contains(['\n', '\r']) => {
                    sse_event(name, &event, out)
                }
                _ => tracing::debug!("a Messages stream event without a type left out"),
            },
            other => tracing::debug!(
                kind = other.kind(),
                "an answer part of another format left out of a Messages answer"
            ),
        }
    }
}

/// The content blocks of a whole answer's `pieces` (text and carried blocks, the text cut from `text`): each text
/// piece cut again where the upstream ended a text block (`ends`: how much of `text` came before each, the
/// format, the block's citations), a cited block carrying its `citations`.
fn content_blocks(
    text: &str,
    pieces: Vec<Piece<'_>>,
    ends: Vec<(usize, ApiFormat, Vec<Value>)>,
) -> Vec<Value> {
    let mut ends = ends
        .into_iter()
        .filter(|(_, format, _)| *format == ApiFormat::Messages)
        .map(|(at, _, citations)| (at, citations))
        .peekable();
    let mut content = Vec::new();
    for piece in pieces {
        let piece = match piece {
            Piece::Text(piece) => piece,
            Piece::Block(block) => {
                content.push(block);
                continue;
            }
        };
        let start = piece.as_ptr() as usize - text.as_ptr() as usize;
        let end = start + piece.len();
        let mut from = start;
        while let Some((at, citations)) = ends.next_if(|(at, _)| *at <= end) {
            // An end with no text of this piece before it ends a block already written (or one without text).
            if at <= from {
                continue;
            }
            content.push(text_block(&text[from..at], citations));
            from = at;
        }
        if from < end {
            content.push(text_block(&text[from..end], Vec::new()));
        }
    }
    content
}

fn text_block(text: &str, citations: Vec<Value>) -> Value {
    if citations.is_empty() {
        json!({"type": "text", "text": text})
    } else {
        json!({"type": "text", "text": text, "citations": citations})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_output_parameters_become_a_strict_response_format() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let base =
            json!({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]});
        let with = |field: &str, value: Value| {
            let mut body = base.clone();
            body[field] = value;
            parse(body, UpstreamFormat::OpenAi)
        };
        let format = json!({"type": "json_schema", "schema": schema});
        for (field, value) in [
            ("output_config", json!({"format": format})),
            ("output_format", format.clone()),
        ] {
            let inbound = with(field, value).unwrap();
            assert_eq!(
                inbound.request.options.response_format,
                Some(ResponseFormat::JsonSchema {
                    name: "answer".into(),
                    schema: schema.clone(),
                    strict: Some(true)
                }),
                "{field}"
            );
        }
        let mut both = base.clone();
        both["output_config"] = json!({"format": format});
        both["output_format"] = format.clone();
        assert!(parse(both, UpstreamFormat::OpenAi)
            .unwrap_err()
            .message
            .contains("not both"));
        let text = with("output_format", json!({"type": "text"})).unwrap_err();
        assert_eq!(text.status, 400);
        let no_schema = with(
            "output_config",
            json!({"format": {"type": "json_schema", "schema": 7}}),
        );
        assert!(no_schema
            .unwrap_err()
            .message
            .contains("JSON Schema object"));
        assert!(with("output_config", json!({}))
            .unwrap()
            .request
            .options
            .response_format
            .is_none());
    }

    fn parse(value: Value, upstream: UpstreamFormat) -> Result<Inbound, ApiError> {
        let context = ParseContext {
            upstream,
            limits: crate::limits::RequestLimits::DEFAULT,
            stores_responses: false,
        };
        AnthropicMessages::parse(value.to_string().as_bytes(), &context).map(|(inbound, _)| inbound)
    }

    #[test]
    fn a_full_request_maps_onto_chat_request() {
        let body = json!({
            "model": "claude-x",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "12C"}]},
                    {"type": "text", "text": "and Rome?"}]}
            ],
            "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"],
            "temperature": 0.5,
            "top_k": 5,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "metadata": {"user_id": "u1"},
            "stream": true,
            "tower_chat": {"approvals": [{"id": "apr_1", "approved": true}]}
        });
        let inbound = parse(body.clone(), UpstreamFormat::Anthropic).unwrap();
        assert!(inbound.stream);
        assert_eq!(inbound.approvals[0].id, "apr_1");
        let request = &inbound.request;
        assert_eq!(
            request.messages[0],
            Message::system(Content::from_parts(vec![Part::Text(
                tower_chat::TextPart {
                    text: "be brief".into(),
                    cache: Some(tower_chat::CacheHint::default()),
                }
            )]))
        );
        assert_eq!(request.messages[1], Message::user("weather?"));
        let Message::Assistant(assistant) = &request.messages[2] else {
            panic!("{:?}", request.messages[2]);
        };
        assert_eq!(assistant.content, "Checking.");
        assert_eq!(assistant.reasoning_text().as_deref(), Some("hmm"));
        assert_eq!(assistant.tool_calls[0].name, "weather");
        assert_eq!(
            request.messages[3],
            Message::Tool(ToolMessage::success("toolu_1", "weather", "12C"))
        );
        assert_eq!(request.messages[4], Message::user("and Rome?"));
        let options = &request.options;
        assert_eq!(options.max_output_tokens, Some(64));
        assert_eq!(options.tool_choice, Some(ToolChoice::Required));
        assert_eq!(options.parallel_tool_calls, Some(false));
        assert_eq!(options.stop, vec!["END".to_owned()]);
        assert_eq!(
            options.reasoning.as_ref().unwrap().thinking,
            Some(tower_chat::Thinking::Enabled {
                budget_tokens: 2048
            })
        );
        assert_eq!(options.extra["top_k"], 5);
        assert_eq!(options.end_user.as_deref(), Some("u1"));
        // Each leaf maps the typed settings; only `top_k` is Anthropic's alone.
        let inbound = parse(body, UpstreamFormat::OpenAi).unwrap();
        let extra = &inbound.request.options.extra;
        assert!(extra.is_empty(), "{extra:?}");
    }

    #[test]
    fn unmodelled_fields_and_blocks_are_carried_in_order() {
        let body = json!({"model": "m", "max_tokens": 5, "service_tier": "auto",
            "context_management": {"edits": [{"type": "clear"}]}, "container": null,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "x"}, {"type": "search_result", "source": "s"}]},
                {"role": "assistant", "content": [
                    {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                    {"type": "text", "text": "y"}]}]});
        let inbound = parse(body, UpstreamFormat::OpenAi).unwrap();
        let carried = inbound.request.options.carried.clone().unwrap();
        assert_eq!(carried.format, ApiFormat::Messages);
        let names: Vec<&str> = carried.fields.keys().map(String::as_str).collect();
        assert_eq!(names, ["service_tier", "context_management", "container"]);
        let Message::User { content } = &inbound.request.messages[0] else {
            panic!("{:?}", inbound.request.messages[0]);
        };
        assert!(
            matches!(&content.parts()[1], Part::Provider(p) if p.value["type"] == "search_result")
        );
        // The assistant turn keeps its server tool block before the text; the leaf decides whether it goes.
        assert!(inbound.dropped.is_empty(), "{:?}", inbound.dropped);
        let Message::Assistant(assistant) = &inbound.request.messages[1] else {
            panic!("{:?}", inbound.request.messages[1]);
        };
        assert_eq!(assistant.content, "y");
        let [placed] = &assistant.provider_parts[..] else {
            panic!("{:?}", assistant.provider_parts);
        };
        assert_eq!(placed.part.provider, "anthropic");
        assert_eq!(placed.part.value["type"], "server_tool_use");
        assert_eq!(
            (
                placed.after_reasoning,
                placed.text_offset,
                placed.after_calls
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn schema_errors_say_what_and_where() {
        let message = |body: Value| parse(body, UpstreamFormat::OpenAi).unwrap_err().message;
        let missing =
            message(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}));
        assert!(missing.contains("max_tokens"), "{missing}");
        let image = message(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {}}]}]}),
        );
        assert!(image.contains("messages[0].content[0]"), "{image}");
        // A server tool is kept as sent, for the upstream to run or its leaf to drop or refuse.
        let server_tool =
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 2});
        let inbound = parse(
            json!({"model": "m", "max_tokens": 5, "tools": [server_tool.clone()],
                "messages": [{"role": "user", "content": "x"}]}),
            UpstreamFormat::OpenAi,
        )
        .unwrap();
        let tool = &inbound.request.options.tools[0];
        assert_eq!(tool.name, "web_search");
        assert!(
            matches!(&tool.kind, tower_chat::ToolKind::Hosted(h) if h.definition == server_tool
                && h.format == ApiFormat::Messages),
            "{tool:?}"
        );
        let misplaced = message(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "n", "input": {}}]}]}),
        );
        assert!(misplaced.contains("messages[0].content[0]"), "{misplaced}");
    }
}
