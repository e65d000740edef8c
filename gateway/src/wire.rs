//! The OpenAI Chat Completions wire format as the gateway serves it: the request body parsed into a
//! [`ChatRequest`], and `chat.completion` / `chat.completion.chunk` objects built from the stack's events.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tower_chat::{
    AssistantMessage, ChatRequest, FinishReason, Message, ResponseFormat, ToolArguments, ToolCall,
    ToolChoice, ToolMessage, ToolSpec, Usage,
};

use crate::error::ApiError;

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
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
    /// The gateway's own extension (approval decisions); standard clients never send it.
    #[serde(default)]
    tower_chat: Option<TowerChatRequest>,
    /// Anything else (`seed`, `user`, `frequency_penalty`, …) goes upstream unchanged.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// `"tower_chat": {"approvals": [...]}` in a request.
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
        content: Content,
    },
    Developer {
        content: Content,
    },
    User {
        content: Content,
    },
    Assistant {
        #[serde(default)]
        content: Option<Content>,
        #[serde(default)]
        tool_calls: Option<Vec<WireToolCall>>,
    },
    Tool {
        tool_call_id: String,
        content: Content,
    },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct ContentPart {
    r#type: String,
    #[serde(default)]
    text: Option<String>,
}

impl Content {
    fn into_text(self, at: &str) -> Result<String, ApiError> {
        match self {
            Content::Text(text) => Ok(text),
            Content::Parts(parts) => {
                let mut text = String::new();
                for part in parts {
                    match (part.r#type.as_str(), part.text) {
                        ("text", Some(t)) => text.push_str(&t),
                        ("text", None) => {
                            return Err(schema(format!("{at}: a text part needs `text`")))
                        }
                        (other, _) => {
                            return Err(schema(format!(
                            "{at}: content parts of type `{other}` are not supported (text only)"
                        )))
                        }
                    }
                }
                Ok(text)
            }
        }
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
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

fn schema(message: String) -> ApiError {
    ApiError::invalid_request("invalid_request_schema", message)
}

/// A parsed request: what goes to the stack, and how the client wants the answer.
#[derive(Debug)]
pub struct Parsed {
    /// The stack's request (model passed through unchanged).
    pub request: ChatRequest,
    /// The `model` field as sent.
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Approval decisions, if the request resumes a paused call.
    pub approvals: Vec<ApprovalAnswer>,
}

/// Parse a request body. Malformed JSON and schema violations are 400s whose message says what and where.
pub fn parse_request(body: &[u8]) -> Result<Parsed, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let request: CompletionRequest = match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(request) => request,
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
        return Err(ApiError::invalid_request(
            "invalid_json",
            "the body has trailing data after the JSON object",
        ));
    }
    into_parsed(request)
}

fn into_parsed(body: CompletionRequest) -> Result<Parsed, ApiError> {
    if body.model.trim().is_empty() {
        return Err(schema("`model` must not be empty".into()));
    }
    if body.messages.is_empty() {
        return Err(schema("`messages` must not be empty".into()));
    }
    if body.n.is_some_and(|n| n != 1) {
        return Err(schema("only `n: 1` is supported".into()));
    }
    let mut messages = Vec::with_capacity(body.messages.len());
    // Tool messages name their tool; OpenAI's carry only the call id, so find the call it answers.
    let mut call_names: Vec<(String, String)> = Vec::new();
    for (i, message) in body.messages.into_iter().enumerate() {
        let at = format!("messages[{i}]");
        messages.push(match message {
            WireMessage::System { content } | WireMessage::Developer { content } => {
                Message::System {
                    content: content.into_text(&at)?,
                }
            }
            WireMessage::User { content } => Message::User {
                content: content.into_text(&at)?,
            },
            WireMessage::Assistant {
                content,
                tool_calls,
            } => {
                let content = match content {
                    Some(content) => content.into_text(&at)?,
                    None => String::new(),
                };
                let mut calls = Vec::new();
                for call in tool_calls.unwrap_or_default() {
                    if call.r#type.as_deref().is_some_and(|t| t != "function") {
                        return Err(schema(format!(
                            "{at}: only `function` tool calls are supported"
                        )));
                    }
                    call_names.push((call.id.clone(), call.function.name.clone()));
                    calls.push(ToolCall {
                        id: call.id,
                        name: call.function.name,
                        arguments: ToolArguments::parse(call.function.arguments),
                    });
                }
                Message::Assistant(AssistantMessage {
                    content,
                    reasoning: None,
                    tool_calls: calls,
                })
            }
            WireMessage::Tool {
                tool_call_id,
                content,
            } => {
                let name = call_names
                    .iter()
                    .rev()
                    .find(|(id, _)| *id == tool_call_id)
                    .map(|(_, name)| name.clone())
                    .unwrap_or_default();
                Message::Tool(ToolMessage::success(
                    tool_call_id,
                    name,
                    content.into_text(&at)?,
                ))
            }
        });
    }
    let mut request = ChatRequest::new(messages);
    let options = &mut request.options;
    options.model = Some(body.model.clone());
    // Upstream calls always stream, whatever the client asked: tool rounds and idle timeouts work the same
    // for both shapes, and a non-streaming client simply gets the folded result.
    options.stream = true;
    for tool in body.tools.unwrap_or_default() {
        if tool.r#type != "function" {
            return Err(schema(format!(
                "tools of type `{}` are not supported (function only)",
                tool.r#type
            )));
        }
        options.tools.push(ToolSpec::new(
            tool.function.name,
            tool.function.description.unwrap_or_default(),
            tool.function
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
    options.extra = body
        .extra
        .into_iter()
        .filter(|(_, v)| !v.is_null())
        .collect();
    Ok(Parsed {
        request,
        model: body.model,
        stream: body.stream.unwrap_or(false),
        include_usage: body
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        approvals: body.tower_chat.map(|t| t.approvals).unwrap_or_default(),
    })
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
            .ok_or_else(|| schema("`tool_choice` object needs `function.name`".into())),
        _ => Err(schema("`tool_choice` must be a string or an object".into())),
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
                    .ok_or_else(|| schema("`response_format.json_schema.name` is required".into()))?
                    .to_owned(),
                schema: inner.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: inner["strict"].as_bool(),
            })
        }
        _ => Err(schema(
            "`response_format.type` must be `text`, `json_object` or `json_schema`".into(),
        )),
    }
}

/// OpenAI's spelling of a finish reason. Reasons OpenAI has no word for become `stop`: the answer is over and
/// the gateway says why elsewhere (an approval notice, a `tower_chat.finish_reason` field).
pub fn finish_reason(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        _ => "stop",
    }
}

/// The gateway's own name for a finish reason (`tower_chat.finish_reason`).
pub fn native_finish_reason(reason: &FinishReason) -> String {
    match reason {
        FinishReason::Stop => "stop".into(),
        FinishReason::Length => "length".into(),
        FinishReason::ToolCalls => "tool_calls".into(),
        FinishReason::ContentFilter => "content_filter".into(),
        FinishReason::AwaitingApproval => "awaiting_approval".into(),
        FinishReason::MaxRounds => "max_rounds".into(),
        FinishReason::Other(other) => other.clone(),
    }
}

/// OpenAI's usage object.
pub fn usage(usage: &Usage) -> Value {
    let mut value = json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens(),
    });
    if let Some(cached) = usage.cached_input_tokens {
        value["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    if let Some(reasoning) = usage.reasoning_tokens {
        value["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    value
}

/// A pending approval as the client sees it (`tower_chat_approvals` / `tower_chat.approval_requests`).
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

/// The plain-text line standard clients show for a pending approval.
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

/// A tool call in the OpenAI shape.
pub fn tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments.to_wire_string()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: Value) -> Result<Parsed, ApiError> {
        parse_request(value.to_string().as_bytes())
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
        assert!(parsed.stream && parsed.include_usage);
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
        assert_eq!(request.options.extra.get("seed"), Some(&json!(7)));
        assert!(!request.options.extra.contains_key("user"));
        assert!(!request.options.extra.contains_key("tower_chat"));
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
        assert!(err.message.contains("image_url"), "{}", err.message);
        let err =
            parse(json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "x"}]}))
                .unwrap_err();
        assert!(err.message.contains("n"), "{}", err.message);
        let err = parse_request(b"{\"model\": ").unwrap_err();
        assert_eq!(err.code, "invalid_json");
    }
}
