//! The building blocks every format is made of, for a server that handles turns itself (the gateway: approvals,
//! stored conversations, server-side tools) and calls the formats' own parsers and encoders.
//!
//! Every format does two things, and only those: [`WireFormat::parse`] turns a request body into an [`Inbound`]
//! (a [`ChatRequest`] plus what a server needs to know about the turn) and an [`Encoder`]; the encoder turns
//! what the client may see of the stack's events ([`Visible`], folded by the shared translator in
//! [`crate::respond`]) into that format's SSE events or whole answer. Everything else — which tool calls the
//! client sees, usage summed over the turn, the error event of a stream that fails — is shared, so a fourth
//! format is one new module and one route, and touches none of the others.
//!
//! | format | route |
//! | --- | --- |
//! | [`ChatCompletions`](crate::chat_completions::ChatCompletions) | `POST /v1/chat/completions` (OpenAI Chat Completions) |
//! | [`AnthropicMessages`](crate::anthropic_messages::AnthropicMessages) | `POST /v1/messages` (Anthropic Messages) |
//! | [`Responses`](crate::responses::Responses) | `POST /v1/responses` (OpenAI Responses, function-calling subset) |

use std::collections::HashMap;

use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_chat::{
    ApprovalRequest, ChatRequest, FinishReason, Message, ReasoningEffort, ToolArguments, ToolCall,
    Usage,
};

use crate::error::ApiError;
use crate::limits::RequestLimits;

/// What a format's parser learned from a request body, besides the format-specific answer shape.
#[derive(Debug)]
pub struct Inbound {
    /// The stack's request (model passed through unchanged; the upstream streams when the client does).
    pub request: ChatRequest,
    /// The `model` field as sent.
    pub model: String,
    /// Whether the client wants SSE.
    pub stream: bool,
    /// Approval decisions (`"tower_chat": {"approvals": [...]}`), when the request resumes a paused turn.
    pub approvals: Vec<ApprovalAnswer>,
    /// A stored response whose conversation this request continues (Responses' `previous_response_id`).
    pub previous_response_id: Option<String>,
    /// The id the turn's call record is stored under, so a later `previous_response_id` finds it; `None`
    /// stores nothing retrievable (the record keeps a random id of its own).
    pub record_id: Option<String>,
    /// What the parser left out of the request because the core has no place for it (an assistant block of
    /// an unmodelled type), named as in [`DROPPED_HEADER`].
    pub dropped: Vec<String>,
}

/// The response header naming, comma-separated, what of the request did not reach the upstream: fields, blocks
/// (`content:<type>`) and headers of the client's format that an upstream of another format has no place for.
pub const DROPPED_HEADER: &str = "x-tower-chat-dropped";

impl Inbound {
    /// A parsed request: `stream` also sets the stack request's own `stream` option.
    pub fn new(mut request: ChatRequest, model: String, stream: bool) -> Self {
        // A non-streaming client's calls go upstream unstreamed: one JSON answer to parse instead of a chunk
        // per token through every layer, and what such a client asked of the gateway.
        request.options.stream = stream;
        Inbound {
            request,
            model,
            stream,
            approvals: Vec::new(),
            previous_response_id: None,
            record_id: None,
            dropped: Vec::new(),
        }
    }
}

/// What a parser may need to know about the server: options some formats carry that only one upstream
/// understands (`thinking`, `top_k`) are forwarded to that upstream and dropped for the other; the counts a
/// body may carry, checked on the raw body before any item is converted.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParseContext {
    /// The API the stack's upstream speaks.
    pub upstream: UpstreamFormat,
    /// The per-request limits.
    pub limits: RequestLimits,
    /// Whether the server keeps Responses answers for a later `previous_response_id` (the gateway does;
    /// [`WireRouter`](crate::WireRouter) keeps nothing). Without it an answer says `"store": false` whatever
    /// the request asked, and names no record.
    pub stores_responses: bool,
}

/// The API a stack's upstream speaks: options only it understands (Anthropic's `thinking` and `top_k`) are
/// forwarded to it and dropped for the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UpstreamFormat {
    /// OpenAI Chat Completions or Responses (OpenAI, vLLM, Ollama, DeepSeek, …), the default.
    #[default]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// The inbound format a request came in, in its extensions: content policies apply per route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InboundRoute {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/responses`.
    Responses,
}

impl InboundRoute {
    /// A route by its format's name (`chat_completions`, `messages`, `responses`) or its path.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "chat_completions" | "/v1/chat/completions" => Some(InboundRoute::ChatCompletions),
            "messages" | "/v1/messages" => Some(InboundRoute::Messages),
            "responses" | "/v1/responses" => Some(InboundRoute::Responses),
            _ => None,
        }
    }
}

/// One wire format: its parser, its encoder, its error shape.
pub trait WireFormat: Send + Sync + 'static {
    /// The route this format is served on.
    const ROUTE: InboundRoute;

    /// Turns visible events into this format's answer.
    type Encoder: Encoder;

    /// Parse a request body. Malformed JSON and schema violations are 400s whose message says what and where.
    fn parse(body: &[u8], context: &ParseContext) -> Result<(Inbound, Self::Encoder), ApiError>;

    /// An error as this format's clients expect it (OpenAI's shape unless overridden).
    fn error_response(error: ApiError) -> Response {
        error.into_response()
    }
}

/// What the client may see of one stack event: text, reasoning, and the calls of its own tools (renumbered
/// from 0 per model round; server-side calls are never shown).
#[derive(Debug)]
pub enum Visible {
    /// Answer text.
    Text(String),
    /// Reasoning text.
    Reasoning(String),
    /// The reasoning since the last end is one block; what its provider needs to continue from it.
    ReasoningEnd(tower_chat::Continuation),
    /// A client tool call starts (arguments follow as [`Visible::CallArguments`]).
    CallStart {
        /// The call's index among the client's calls of this round.
        index: usize,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// A fragment of a client call's argument text.
    CallArguments {
        /// The call's index among the client's calls of this round.
        index: usize,
        /// The next piece of the argument text.
        delta: String,
    },
    /// A client call is complete.
    CallEnd {
        /// The call's index among the client's calls of this round.
        index: usize,
        /// The whole call.
        call: ToolCall,
    },
    /// The text that follows is a later tool round's: a format with blocks or items starts a new one, a format
    /// with one text joins it after [`ROUND_BREAK`].
    RoundBreak,
    /// A whole block of a type no layer models, as the upstream sent it: written back by the format it is in,
    /// left out (and logged) by the others.
    ProviderBlock {
        /// The format the block is written in.
        format: tower_chat::ApiFormat,
        /// The block.
        block: Value,
    },
    /// Something else of the upstream's format no layer models ([`tower_chat::ProviderExtra`]): written back in
    /// its place by the format it is in, left out (and logged) by the others.
    ProviderExtra {
        /// The format it is written in.
        format: tower_chat::ApiFormat,
        /// What it is.
        extra: tower_chat::ProviderExtra,
    },
}

/// A block of a type no layer models, and where in the answer it came.
#[derive(Debug)]
pub struct PlacedBlock {
    /// How much of [`Folded::content`] came before it.
    pub at: usize,
    /// The format the block is written in.
    pub format: tower_chat::ApiFormat,
    /// The block, as the upstream sent it.
    pub block: Value,
}

/// What joins the text of successive tool rounds where a format has only one text (Chat Completions' `content`):
/// a blank line, so `Adding both.` and `3 and 30 make 33.` do not run together.
pub const ROUND_BREAK: &str = "\n\n";

/// How the turn ended, as the shared translator saw it.
#[derive(Debug)]
pub struct Ending {
    /// The stack's finish reason.
    pub reason: FinishReason,
    /// Pending approvals, when the turn paused.
    pub notices: Vec<ApprovalNotice>,
    /// Operators decide them (the gateway's `--operator-keys-file`), not the client.
    pub operators_decide: bool,
}

impl Ending {
    /// The plain-text notice standard clients show for pending approvals ("" when none).
    pub fn notice_text(&self) -> String {
        if self.operators_decide {
            operator_approval_text(&self.notices)
        } else {
            approval_text(&self.notices)
        }
    }

    /// The gateway's `tower_chat` field when the format's own finish reason cannot say why the turn ended
    /// (`awaiting_approval`, `max_rounds`, …): `None` for plain endings.
    pub fn tower_chat_field(&self, said: &str) -> Option<Value> {
        let native = self.reason.as_str();
        if native == said && self.notices.is_empty() {
            return None;
        }
        let mut field = serde_json::json!({"finish_reason": native});
        if !self.notices.is_empty() {
            field["approval_requests"] = serde_json::json!(self.notices);
        }
        Some(field)
    }
}

/// Everything the client saw over the turn, for whole (non-streaming) answers and closing events.
#[derive(Debug, Default)]
pub struct Folded {
    /// The model that answered (the upstream's word, else the request's).
    pub model: String,
    /// The answer text: every round's, joined by [`ROUND_BREAK`].
    pub content: String,
    /// Where each [`ROUND_BREAK`] begins in `content` (one per later round with text), for formats that keep
    /// each round's text apart ([`Folded::text_pieces`]).
    pub round_breaks: Vec<usize>,
    /// The reasoning text.
    pub reasoning: String,
    /// The turn's complete reasoning blocks with their continuations (Anthropic signatures), in order; reasoning
    /// text after the last of them is only in `reasoning`.
    pub reasoning_parts: Vec<tower_chat::ReasoningPart>,
    /// How much of `reasoning` the parts cover.
    pub reasoning_covered: usize,
    /// The client's own tool calls of the last round.
    pub client_calls: Vec<ToolCall>,
    /// Summed over every model call of the turn.
    pub usage: Usage,
    /// Blocks of types no layer models, in order, each with its place among the text.
    pub provider_blocks: Vec<PlacedBlock>,
    /// Where the upstream's text blocks ended ([`tower_chat::ProviderExtra::TextBlockEnd`]), in order: how much
    /// of `content` came before, the format, and the block's citations.
    pub text_block_ends: Vec<(usize, tower_chat::ApiFormat, Vec<Value>)>,
    /// Answer fields no layer models ([`tower_chat::ProviderExtra::Fields`]), each format's merged over the
    /// turn (lists joined, other values replaced by later ones).
    pub extra_fields: Vec<(tower_chat::ApiFormat, ExtraFields)>,
}

/// The fields of an answer no layer models, of one format, merged.
#[derive(Debug, Default)]
pub struct ExtraFields {
    /// The message's.
    pub message: serde_json::Map<String, Value>,
    /// The choice's.
    pub choice: serde_json::Map<String, Value>,
}

impl ExtraFields {
    /// Merge `more` into `into`: a list joins the list there, any other value replaces what is there.
    pub fn merge(into: &mut serde_json::Map<String, Value>, more: &serde_json::Map<String, Value>) {
        for (key, value) in more {
            match (into.get_mut(key), value) {
                (Some(Value::Array(list)), Value::Array(more)) => list.extend(more.iter().cloned()),
                _ => {
                    into.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

/// A piece of a whole answer: text, or a block no layer models in its place.
#[derive(Debug, PartialEq)]
pub enum Piece<'a> {
    /// A round's text, or the part of it before or after a block.
    Text(&'a str),
    /// A block, as the upstream sent it.
    Block(Value),
}

impl Folded {
    /// `text` cut as [`text_pieces`](Self::text_pieces), with the `blocks` in `format` between the text that came
    /// before and after them (others left out); empty texts are left out.
    pub fn pieces_with_blocks<'a>(
        text: &'a str,
        breaks: &[usize],
        blocks: Vec<PlacedBlock>,
        format: tower_chat::ApiFormat,
    ) -> Vec<Piece<'a>> {
        let mut blocks = blocks
            .into_iter()
            .filter(|placed| placed.format == format)
            .peekable();
        let mut pieces = Vec::new();
        for piece in Folded::text_pieces(text, breaks) {
            let mut start = piece.as_ptr() as usize - text.as_ptr() as usize;
            let mut rest = piece;
            while let Some(placed) = blocks.next_if(|p| p.at <= start + rest.len()) {
                let (before, after) =
                    rest.split_at(placed.at.saturating_sub(start).min(rest.len()));
                if !before.is_empty() {
                    pieces.push(Piece::Text(before));
                }
                pieces.push(Piece::Block(placed.block));
                start += before.len();
                rest = after;
            }
            if !rest.is_empty() {
                pieces.push(Piece::Text(rest));
            }
        }
        pieces.extend(blocks.map(|placed| Piece::Block(placed.block)));
        pieces
    }

    /// `text` (the content, perhaps with a notice after it) cut at `breaks` into each round's text, without the
    /// [`ROUND_BREAK`]s; a break past the end of `text` is ignored.
    pub fn text_pieces<'a>(text: &'a str, breaks: &[usize]) -> Vec<&'a str> {
        let mut pieces = Vec::with_capacity(breaks.len() + 1);
        let mut start = 0;
        for &at in breaks {
            let Some(piece) = text.get(start..at) else {
                break;
            };
            pieces.push(piece);
            start = at + ROUND_BREAK.len();
        }
        pieces.push(text.get(start..).unwrap_or_default());
        pieces
    }
}

/// A format's answer builder. The shared stream driver calls [`open`](Encoder::open) once before the first
/// bytes, [`visible`](Encoder::visible) per visible event, then exactly one of [`close`](Encoder::close) or
/// [`error`](Encoder::error); a non-streaming answer is [`whole`](Encoder::whole) alone.
pub trait Encoder: Send + 'static {
    /// The SSE events that open a stream.
    fn open(&mut self, folded: &Folded, out: &mut Vec<u8>);
    /// One visible event as SSE.
    fn visible(&mut self, folded: &Folded, event: Visible, out: &mut Vec<u8>);
    /// The closing events of a stream that finished.
    fn close(&mut self, folded: &Folded, ending: &Ending, out: &mut Vec<u8>);
    /// The last event of a stream that failed after it started.
    fn error(&mut self, error: &ApiError, out: &mut Vec<u8>);
    /// The whole answer: one JSON object, serialised.
    fn whole(&mut self, folded: Folded, ending: &Ending) -> Vec<u8>;
}

pub(crate) use crate::sse::{
    begin_sse_data, begin_sse_event, end_sse, sse_data, sse_event, write_json,
};

/// Deserialize `body` into `T` with paths in the error (`messages[0].content`): malformed JSON is
/// `invalid_json`, a schema violation `invalid_request_schema`, trailing data after the object `invalid_json`.
///
/// A body is parsed once without tracking paths; only a body that fails is parsed again to find where (tracking
/// every field's path costs about as much as the parse itself, and almost every body is valid).
pub(crate) fn from_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    if let Ok(value) = T::deserialize(&mut deserializer) {
        return match deserializer.end() {
            Ok(()) => Ok(value),
            Err(_) => Err(trailing_data()),
        };
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(value) => value,
        Err(error) => {
            let path = error.path().to_string();
            let inner = error.into_inner();
            return Err(if inner.is_syntax() || inner.is_eof() {
                ApiError::invalid_request(
                    "invalid_json",
                    format!("the body is not valid JSON: {inner}"),
                )
            } else if path == "." {
                schema(format!("invalid request: {inner}"))
            } else {
                schema(format!("invalid request at `{path}`: {inner}"))
            });
        }
    };
    if deserializer.end().is_err() {
        return Err(trailing_data());
    }
    Ok(value)
}

fn trailing_data() -> ApiError {
    ApiError::invalid_request(
        "invalid_json",
        "the body has trailing data after the JSON object",
    )
}

/// A 400 for a request that breaks the schema.
pub(crate) fn schema(message: impl Into<String>) -> ApiError {
    ApiError::invalid_request("invalid_request_schema", message)
}

/// An effort level in any format's spelling (`none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `max`); any
/// other is refused naming the field, as each API refuses it.
pub(crate) fn effort_level(name: &str, field: &str) -> Result<ReasoningEffort, ApiError> {
    ReasoningEffort::parse(name).ok_or_else(|| {
        schema(format!(
            "`{field}` must be one of `none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `max`, not `{name}`"
        ))
    })
}

/// A Chat Completions tool of a type other than `function`: this format's requests carry function tools only
/// (freeform and hosted tools come in the Responses and Messages formats), so the request is refused naming
/// the tool rather than answered without it.
pub(crate) fn unserved_tool(at: &str, kind: &str) -> ApiError {
    ApiError::invalid_request(
        "invalid_request_schema",
        format!(
            "{at}: a tool of type `{kind}` cannot be served from a Chat Completions request (function tools \
             only); send freeform and hosted tools in the Responses (`POST /v1/responses`) or Messages format"
        ),
    )
}

/// `"tower_chat": {"approvals": [...]}` in a request, in every format.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TowerChatRequest {
    /// Decisions on pending approvals.
    #[serde(default)]
    pub approvals: Vec<ApprovalAnswer>,
}

/// One decision: `{"id": "apr_…", "approved": true, "reason": "…"}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    /// The approval id the gateway issued.
    pub id: String,
    /// Run the call (`true`) or refuse it.
    pub approved: bool,
    /// Why; a refusal's reason is shown to the model.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A pending approval as the client sees it (`tower_chat.approval_requests`, in every format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalNotice {
    /// The id to answer with.
    pub id: String,
    /// The tool waiting.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// Why approval is needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalNotice {
    /// The notice of a pending approval, under the request's id.
    pub fn of(request: &ApprovalRequest) -> Self {
        ApprovalNotice {
            id: request.id.clone(),
            tool: request.call.name.clone(),
            arguments: match &request.call.arguments {
                ToolArguments::Json(value) => value.clone(),
                ToolArguments::Invalid { raw, .. } => raw.clone().into(),
            },
            reason: request.reason.clone(),
        }
    }
}

/// The plain-text lines standard clients show for pending approvals: each starts with a blank line.
pub fn approval_text(notices: &[ApprovalNotice]) -> String {
    let mut text = String::new();
    for notice in notices {
        text.push_str(&format!(
            "\n\n[approval required] `{}` wants to run with {}. Approval id: {}. To decide, resend the \
             conversation with \"tower_chat\": {{\"approvals\": [{{\"id\": \"{}\", \"approved\": true}}]}} \
             (or \"approved\": false).",
            notice.tool, notice.arguments, notice.id, notice.id
        ));
    }
    text
}

/// The notice when operators decide (`--operator-keys-file`): the client waits, then resends as it is. The
/// `Approval id: apr_…` phrase is what the resend is recognised by (`crate::operator::notice_ids`).
pub fn operator_approval_text(notices: &[ApprovalNotice]) -> String {
    let mut text = String::new();
    for notice in notices {
        text.push_str(&format!(
            "\n\n[approval required] `{}` wants to run with {}. Approval id: {}. An operator decides: wait with \
             GET /v1/approvals/{}?wait=30, then resend this conversation as it is to continue.",
            notice.tool, notice.arguments, notice.id, notice.id
        ));
    }
    text
}

/// A tool call's arguments as JSON text (what every format's `arguments` string carries).
pub(crate) fn arguments_text(call: &ToolCall) -> String {
    call.arguments.to_wire_string()
}

/// A tool call's arguments as a JSON value (Anthropic's `input`): invalid JSON becomes `{}`, as the model's
/// broken arguments were answered with an error result already.
pub(crate) fn arguments_value(call: &ToolCall) -> Value {
    match &call.arguments {
        ToolArguments::Json(value) => value.clone(),
        ToolArguments::Invalid { .. } => Value::Object(Default::default()),
    }
}

/// Name each tool result after the call it answers (formats whose results carry only the call id), looking at
/// the assistant messages before it: the whole history, a stored one included. The latest call with the id
/// wins. Linear in the messages: a body of N calls and N results that match none of them is N map look-ups,
/// not N² comparisons.
pub fn name_tool_results(messages: &mut [Message]) {
    let mut names = CallNames::default();
    for message in messages.iter_mut() {
        match message {
            Message::Assistant(a) => names.add(&a.tool_calls),
            Message::Tool(t) if t.name.is_empty() => {
                if let Some(name) = names.get(&t.call_id) {
                    t.name = name.to_owned();
                }
            }
            _ => {}
        }
    }
}

/// The names of the tool calls seen so far, by call id (a later call with the same id replaces an earlier one).
#[derive(Debug, Default)]
pub(crate) struct CallNames(HashMap<String, String>);

impl CallNames {
    pub(crate) fn add(&mut self, calls: &[ToolCall]) {
        for call in calls {
            self.0.insert(call.id.clone(), call.name.clone());
        }
    }

    pub(crate) fn get(&self, call_id: &str) -> Option<&str> {
        self.0.get(call_id).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{anthropic_messages, chat_completions, responses};
    use serde_json::json;

    /// Each format's body of `calls` tool calls and as many results (answering other ids).
    fn calls_and_results(calls: usize) -> [(&'static str, Value); 3] {
        let ids = |prefix: &'static str| (0..calls).map(move |i| format!("{prefix}{i}"));
        let chat: Vec<Value> = ids("c")
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}))
            .collect();
        let mut chat_messages = vec![json!({"role": "assistant", "tool_calls": chat})];
        chat_messages
            .extend(ids("r").map(|id| json!({"role": "tool", "tool_call_id": id, "content": ""})));
        let uses: Vec<Value> = ids("c")
            .map(|id| json!({"type": "tool_use", "id": id, "name": "f", "input": {}}))
            .collect();
        let results: Vec<Value> = ids("r")
            .map(|id| json!({"type": "tool_result", "tool_use_id": id}))
            .collect();
        let mut items: Vec<Value> = ids("c")
            .map(|id| json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"}))
            .collect();
        items.extend(
            ids("r").map(|id| json!({"type": "function_call_output", "call_id": id, "output": ""})),
        );
        [
            (
                "chat_completions",
                json!({"model": "m", "messages": chat_messages}),
            ),
            (
                "anthropic_messages",
                json!({"model": "m", "max_tokens": 8, "messages": [
                    {"role": "assistant", "content": uses},
                    {"role": "user", "content": results},
                ]}),
            ),
            ("responses", json!({"model": "m", "input": items})),
        ]
    }

    fn parse(format: &str, body: &Value, limits: RequestLimits) -> Result<Inbound, ApiError> {
        let context = ParseContext {
            upstream: UpstreamFormat::OpenAi,
            limits,
            stores_responses: false,
        };
        let body = body.to_string();
        match format {
            "chat_completions" => {
                chat_completions::ChatCompletions::parse(body.as_bytes(), &context)
                    .map(|(inbound, _)| inbound)
            }
            "anthropic_messages" => {
                anthropic_messages::AnthropicMessages::parse(body.as_bytes(), &context)
                    .map(|(inbound, _)| inbound)
            }
            _ => responses::Responses::parse(body.as_bytes(), &context).map(|(inbound, _)| inbound),
        }
    }

    #[test]
    fn counts_are_refused_on_the_raw_body_before_any_item_is_converted() {
        // Ids too long for the limits: a body that got as far as conversion would be refused for its ids, so
        // a refusal for its counts shows the count came first.
        let strict = RequestLimits {
            max_messages: 4,
            max_id_bytes: 0,
            ..RequestLimits::DEFAULT
        };
        for (format, body) in calls_and_results(5) {
            let error = parse(format, &body, strict).unwrap_err();
            assert_eq!(error.code, "limit_exceeded", "{format}: {}", error.message);
            assert!(
                error.message.contains("(max_messages)"),
                "{format}: {}",
                error.message
            );
        }
        // Three calls and three results are four messages: within the limit, so the parse converts them (the
        // ids are refused later, by `RequestLimits::check`).
        for (format, body) in calls_and_results(3) {
            let parsed = parse(format, &body, strict);
            assert!(parsed.is_ok(), "{format}: {:?}", parsed.err());
        }
    }

    #[test]
    fn a_result_is_named_after_the_call_it_answers() {
        for (format, mut body) in calls_and_results(3) {
            // Results answering the calls' ids, one of them also answering nothing known.
            let text = body
                .to_string()
                .replace("\"r1\"", "\"c1\"")
                .replace("\"r2\"", "\"c2\"");
            body = serde_json::from_str(&text).unwrap();
            let request = parse(format, &body, RequestLimits::DEFAULT)
                .unwrap()
                .request;
            let names: Vec<(&str, &str)> = request
                .messages
                .iter()
                .filter_map(|m| match m {
                    Message::Tool(t) => Some((t.call_id.as_str(), t.name.as_str())),
                    _ => None,
                })
                .collect();
            assert_eq!(names, [("r0", ""), ("c1", "f"), ("c2", "f")], "{format}");
        }
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Probe {
        items: Vec<u32>,
    }

    #[test]
    fn a_body_is_read_whole_and_a_bad_one_says_where() {
        assert_eq!(
            from_body::<Probe>(b" {\"items\": [1, 2]} ").unwrap(),
            Probe { items: vec![1, 2] }
        );
        let trailing = from_body::<Probe>(b"{\"items\": []} {}").unwrap_err();
        assert_eq!(trailing.code, "invalid_json");
        assert!(
            trailing.message.contains("trailing"),
            "{}",
            trailing.message
        );
        let misplaced = from_body::<Probe>(b"{\"items\": [1, \"two\"]}").unwrap_err();
        assert_eq!(misplaced.code, "invalid_request_schema");
        assert!(
            misplaced.message.contains("`items[1]`"),
            "{}",
            misplaced.message
        );
        let cut = from_body::<Probe>(b"{\"items\": [1").unwrap_err();
        assert_eq!(cut.code, "invalid_json");
    }
}
