//! `POST /v1/responses`: OpenAI Responses, the function-calling subset. `input` as a string or items
//! (messages whose content is text or `input_text` / `input_image` / `input_file` / `input_audio` parts,
//! `function_call` and `custom_tool_call`, their outputs with a string or parts, `reasoning`), `instructions`,
//! `tools` (function, freeform `custom`, and hosted types kept as sent: [`tower_chat::ToolKind`]),
//! `tool_choice`, `max_output_tokens`, `text.format`, `include: ["reasoning.encrypted_content"]`,
//! `previous_response_id`, `store`; the answer as a `response` object with `reasoning`, `message`
//! (`output_text`), `function_call` and `custom_tool_call` output items, or the SSE events `response.created`,
//! `response.in_progress`, `response.output_item.added`, `response.reasoning_summary_part.added`,
//! `response.reasoning_summary_text.delta` / `.done`, `response.reasoning_summary_part.done`,
//! `response.content_part.added`, `response.output_text.delta` / `.done`, `response.content_part.done`,
//! `response.function_call_arguments.delta` / `.done`, `response.custom_tool_call_input.delta` / `.done`,
//! `response.output_item.done`, then
//! `response.completed` (or `response.incomplete`), or `error`.
//!
//! Content parts are read by `parts.rs`, as the other formats' are; how reasoning from any upstream survives a
//! round trip through a Responses client is in `responses/reasoning.rs`.
//!
//! A response's id names its call record (unless `store: false`), so `previous_response_id` continues the
//! stored conversation; the lookup is in `server.rs`, scoped to the caller.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tower_chat::{
    ApiFormat, Carried, ChatRequest, HostedTool, Message, ReasoningOptions, ResponseFormat,
    ToolChoice, ToolSpec,
};

use crate::error::ApiError;
use crate::format::{
    effort_level, from_body, name_tool_results, schema, Inbound, InboundRoute, ParseContext,
    TowerChatRequest, WireFormat,
};
use input::{input_messages, raw_counts, str_field};
pub use output::ResponseEncoder;

mod input;
mod output;
mod reasoning;

/// The Responses format (see the [module docs](self)).
#[derive(Debug)]
pub struct Responses;

impl WireFormat for Responses {
    const ROUTE: InboundRoute = InboundRoute::Responses;
    type Encoder = ResponseEncoder;

    fn parse(body: &[u8], context: &ParseContext) -> Result<(Inbound, ResponseEncoder), ApiError> {
        let request: ResponsesRequest = from_body(body)?;
        if let Some(Input::Items(items)) = &request.input {
            let (messages, calls) = raw_counts(items);
            context.limits.check_counts(messages, calls)?;
        }
        into_inbound(request, context)
    }
}

/// The body of `POST /v1/responses`. Fields the gateway does not model (`prompt_cache_key`, `client_metadata`,
/// …) are carried for a Responses upstream, verbatim and in order, and left out (and named) for any other
/// ([`tower_chat::Carried`]).
#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    model: String,
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    text: Option<TextOptions>,
    #[serde(default)]
    reasoning: Option<Reasoning>,
    /// Extra output to include; `reasoning.encrypted_content` is the one the gateway serves.
    #[serde(default)]
    include: Option<Vec<String>>,
    /// The gateway's own extension (approval decisions).
    #[serde(default)]
    tower_chat: Option<TowerChatRequest>,
    /// Everything else, in the client's order.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// `input`: a string or a list of items. Read by hand rather than as an untagged enum, which would first copy
/// the whole list into serde's buffer and then convert it: twice the work and memory on the largest field.
#[derive(Debug)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InputVisitor;

        impl<'de> serde::de::Visitor<'de> for InputVisitor {
            type Value = Input;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a list of input items")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Input, E> {
                Ok(Input::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Input, E> {
                Ok(Input::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Input, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Input::Items(items))
            }
        }

        deserializer.deserialize_any(InputVisitor)
    }
}

#[derive(Debug, Deserialize)]
struct TextOptions {
    #[serde(default)]
    format: Option<Value>,
    /// `verbosity` and whatever else: carried like unknown top-level fields, merged into the leaf's `text`.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Reasoning {
    #[serde(default)]
    effort: Option<String>,
    #[serde(default)]
    summary: Option<String>,
}

/// A function tool; a freeform (`custom`) tool; any other type is one the provider hosts (`web_search`,
/// `tool_search`, …) or a group of tools (`namespace`), kept as sent for a Responses upstream (a leaf of
/// another format offers a namespace's function tools under their joined names).
fn tool(value: &Value, i: usize) -> Result<ToolSpec, ApiError> {
    let at = format!("tools[{i}]");
    match value.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some("custom") => {
            let format = value.get("format").filter(|f| !f.is_null()).cloned();
            if format.as_ref().is_some_and(|f| !f.is_object()) {
                return Err(schema(format!("{at}: `format` must be an object")));
            }
            return Ok(ToolSpec::custom(
                str_field(value, "name", &at)?,
                value
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                format,
            ));
        }
        Some(_) => {
            return Ok(ToolSpec::hosted(HostedTool::new(
                ApiFormat::Responses,
                value.clone(),
            )))
        }
        None => return Err(schema(format!("{at}: `type` is required"))),
    }
    Ok(ToolSpec::new(
        str_field(value, "name", &at)?,
        value
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        value
            .get("parameters")
            .filter(|p| !p.is_null())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    ))
}

fn tool_choice(value: &Value) -> Result<ToolChoice, ApiError> {
    match value {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(schema(format!("unknown `tool_choice` `{other}`"))),
        },
        // A namespace's tool is chosen by its joined name, the name every upstream is offered it under.
        Value::Object(_) if value["type"] == "function" || value["type"] == "custom" => {
            let name = value["name"].as_str().ok_or_else(|| {
                schema("`tool_choice` of type `function` or `custom` needs `name`")
            })?;
            Ok(ToolChoice::Tool(match value.get("namespace") {
                Some(Value::String(namespace)) => tower_chat::namespaced_tool_name(namespace, name),
                None | Some(Value::Null) => name.to_owned(),
                Some(_) => return Err(schema("`tool_choice.namespace` must be a string")),
            }))
        }
        _ => Err(schema(
            "`tool_choice` must be `auto`, `none`, `required` or {\"type\": \"function\" or \"custom\", \"name\": …}",
        )),
    }
}

fn text_format(format: &Value) -> Result<Option<ResponseFormat>, ApiError> {
    match format["type"].as_str() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => Ok(Some(ResponseFormat::JsonSchema {
            name: format["name"]
                .as_str()
                .ok_or_else(|| schema("`text.format.name` is required"))?
                .to_owned(),
            schema: format.get("schema").cloned().unwrap_or_else(|| json!({})),
            strict: format["strict"].as_bool(),
        })),
        _ => Err(schema(
            "`text.format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

fn into_inbound(
    body: ResponsesRequest,
    context: &ParseContext,
) -> Result<(Inbound, ResponseEncoder), ApiError> {
    if body.model.trim().is_empty() {
        return Err(schema("`model` must not be empty"));
    }
    let mut messages = Vec::new();
    if let Some(instructions) = body.instructions.as_ref().filter(|i| !i.is_empty()) {
        messages.push(Message::system(instructions.clone()));
    }
    let continues = body.previous_response_id.is_some()
        || body
            .tower_chat
            .as_ref()
            .is_some_and(|t| !t.approvals.is_empty());
    match body.input {
        Some(Input::Text(text)) => messages.push(Message::user(text)),
        Some(Input::Items(items)) => input_messages(items, &mut messages)?,
        None if continues => {}
        None => return Err(schema("`input` is required")),
    }
    if !continues
        && !messages
            .iter()
            .any(|m| !matches!(m, Message::System { .. }))
    {
        return Err(schema("`input` must not be empty"));
    }
    name_tool_results(&mut messages);
    let mut request = ChatRequest::new(messages);
    let options = &mut request.options;
    options.model = Some(body.model.clone());
    let tools = body.tools.unwrap_or_default();
    for (i, value) in tools.iter().enumerate() {
        options.tools.push(tool(value, i)?);
    }
    options.tool_choice = body.tool_choice.as_ref().map(tool_choice).transpose()?;
    options.parallel_tool_calls = body.parallel_tool_calls;
    options.max_output_tokens = body.max_output_tokens;
    options.temperature = body.temperature;
    options.top_p = body.top_p;
    if let Some(format) = body.text.as_ref().and_then(|t| t.format.as_ref()) {
        options.response_format = text_format(format)?;
    }
    if let Some(reasoning) = &body.reasoning {
        options.reasoning = Some(ReasoningOptions {
            effort: reasoning
                .effort
                .as_deref()
                .map(|effort| effort_level(effort, "reasoning.effort"))
                .transpose()?,
            summary: reasoning.summary.clone(),
            ..ReasoningOptions::default()
        })
        .filter(|r| *r != ReasoningOptions::default());
    }
    options.end_user = body.user.clone();
    let mut include_encrypted = false;
    for (i, field) in body.include.iter().flatten().enumerate() {
        match field.as_str() {
            "reasoning.encrypted_content" => include_encrypted = true,
            other => {
                return Err(schema(format!(
                    "include[{i}]: `{other}` is not supported (reasoning.encrypted_content only)"
                )))
            }
        }
    }
    // OpenAI stores by default; a server that keeps nothing says so rather than promise a later lookup.
    let store = context.stores_responses && body.store.unwrap_or(true);
    let id = format!("resp_{}", uuid::Uuid::new_v4().simple());
    let (text_format, text_rest) = match body.text {
        Some(text) => (text.format, text.rest),
        None => (None, Map::new()),
    };
    let echo = json!({
        "instructions": body.instructions,
        "tools": tools,
        "tool_choice": body.tool_choice.unwrap_or_else(|| "auto".into()),
        "parallel_tool_calls": body.parallel_tool_calls.unwrap_or(true),
        "max_output_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "previous_response_id": body.previous_response_id,
        "store": store,
        "metadata": body.metadata.unwrap_or_default(),
        "text": {"format": text_format.unwrap_or_else(|| json!({"type": "text"}))},
    });
    let mut carried = body.rest;
    if !text_rest.is_empty() {
        carried.insert("text".into(), Value::Object(text_rest));
    }
    if !carried.is_empty() {
        request.options.carried = Some(Carried {
            format: ApiFormat::Responses,
            fields: carried,
        });
    }
    let mut inbound = Inbound::new(request, body.model, body.stream.unwrap_or(false));
    inbound.approvals = body.tower_chat.map(|t| t.approvals).unwrap_or_default();
    inbound.previous_response_id = body.previous_response_id;
    if store {
        inbound.record_id = Some(id.clone());
    }
    let custom_tools = inbound
        .request
        .options
        .tools
        .iter()
        .filter(|tool| tool.is_custom())
        .map(|tool| tool.name.clone())
        .chain(tower_chat::namespaced_freeform_tools(
            &inbound.request.options.tools,
        ))
        .collect();
    let namespaced = tower_chat::namespaced_tools(&inbound.request.options.tools);
    let encoder = ResponseEncoder::new(id, echo, include_encrypted, custom_tools, namespaced);
    Ok((inbound, encoder))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::ToolMessage;

    fn parse(value: Value) -> Result<Inbound, ApiError> {
        let context = ParseContext {
            upstream: crate::format::UpstreamFormat::OpenAi,
            limits: crate::limits::RequestLimits::DEFAULT,
            stores_responses: true,
        };
        Responses::parse(value.to_string().as_bytes(), &context).map(|(inbound, _)| inbound)
    }

    #[test]
    fn input_items_map_onto_chat_request() {
        let inbound = parse(json!({
            "model": "gpt-x",
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "12C"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}
            ],
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "weather"},
            "max_output_tokens": 50,
            "store": false,
            "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}}
        }))
        .unwrap();
        assert!(!inbound.stream);
        assert_eq!(
            inbound.record_id, None,
            "store: false keeps nothing retrievable"
        );
        let request = &inbound.request;
        assert_eq!(request.messages[0], Message::system("be brief"));
        assert_eq!(request.messages[1], Message::user("weather?"));
        let Message::Assistant(assistant) = &request.messages[2] else {
            panic!("{:?}", request.messages[2]);
        };
        assert_eq!(assistant.content, "Checking.");
        assert_eq!(assistant.tool_calls[0].id, "call_1");
        assert_eq!(assistant.reasoning[0].provider(), Some("openai"));
        assert_eq!(
            request.messages[3],
            Message::Tool(ToolMessage::success("call_1", "weather", "12C"))
        );
        assert_eq!(request.messages[4], Message::user("thanks"));
        let options = &request.options;
        assert_eq!(
            options.tool_choice,
            Some(ToolChoice::Tool("weather".into()))
        );
        assert_eq!(options.max_output_tokens, Some(50));
        assert_eq!(
            options.reasoning.as_ref().unwrap().effort,
            Some(tower_chat::ReasoningEffort::Low)
        );
        assert!(matches!(
            options.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
        let stored = parse(json!({"model": "m", "input": "hi"})).unwrap();
        assert!(stored.record_id.unwrap().starts_with("resp_"));
    }

    #[test]
    fn unmodelled_fields_and_items_are_carried_in_order() {
        let item = json!({"type": "web_search_call", "id": "ws_1", "status": "completed"});
        let inbound = parse(json!({"model": "m", "prompt_cache_key": "k", "input": [
            {"role": "user", "content": "x"}, item], "client_metadata": {"a": 1}}))
        .unwrap();
        let carried = inbound.request.options.carried.as_ref().unwrap();
        assert_eq!(carried.format, ApiFormat::Responses);
        let names: Vec<&str> = carried.fields.keys().map(String::as_str).collect();
        assert_eq!(names, ["prompt_cache_key", "client_metadata"]);
        let Message::User { content } = &inbound.request.messages[1] else {
            panic!("{:?}", inbound.request.messages);
        };
        assert!(matches!(&content.parts()[0], tower_chat::Part::Provider(p) if p.value == item));
    }

    #[test]
    fn freeform_and_hosted_tools_and_custom_calls_are_modelled() {
        let grammar = json!({"type": "grammar", "syntax": "lark", "definition": "start: /.+/"});
        let inbound = parse(json!({"model": "m",
            "input": [
                {"role": "user", "content": "patch it"},
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"}
            ],
            "tools": [
                {"type": "custom", "name": "apply_patch", "description": "Edit.", "format": grammar},
                {"type": "web_search", "external_web_access": false}
            ],
            "tool_choice": {"type": "custom", "name": "apply_patch"}}))
        .unwrap();
        let request = &inbound.request;
        let tools = &request.options.tools;
        assert_eq!(
            tools[0].kind,
            tower_chat::ToolKind::Custom {
                format: Some(grammar)
            }
        );
        assert_eq!(tools[0].description, "Edit.");
        assert!(
            matches!(&tools[1].kind, tower_chat::ToolKind::Hosted(h) if h.tool_type() == "web_search"
                && h.definition["external_web_access"] == false),
            "{:?}",
            tools[1]
        );
        assert_eq!(
            request.options.tool_choice,
            Some(ToolChoice::Tool("apply_patch".into()))
        );
        let Message::Assistant(assistant) = &request.messages[1] else {
            panic!("{:?}", request.messages);
        };
        assert_eq!(
            assistant.tool_calls[0],
            tower_chat::ToolCall::custom("c1", "apply_patch", "*** Begin")
        );
        assert_eq!(
            request.messages[2],
            Message::Tool(ToolMessage::success("c1", "apply_patch", "done"))
        );
    }

    #[test]
    fn a_namespaced_choice_and_calls_go_by_their_joined_names() {
        let group = json!({"type": "namespace", "name": "mcp__docs", "description": "Docs.", "tools": [
            {"type": "function", "name": "search", "parameters": {"type": "object"}},
            {"type": "custom", "name": "edit"}]});
        let inbound = parse(json!({"model": "m", "tools": [group],
            "tool_choice": {"type": "custom", "namespace": "mcp__docs", "name": "edit"},
            "input": [
                {"type": "custom_tool_call", "call_id": "c1", "namespace": "mcp__docs", "name": "edit",
                 "input": "*** Begin"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"}]}))
        .unwrap();
        let request = &inbound.request;
        assert_eq!(
            request.options.tool_choice,
            Some(ToolChoice::Tool("mcp__docs__edit".into()))
        );
        let Message::Assistant(turn) = &request.messages[0] else {
            panic!("{:?}", request.messages)
        };
        assert_eq!(
            turn.tool_calls[0],
            tower_chat::ToolCall::custom("c1", "mcp__docs__edit", "*** Begin")
        );
        let bad = parse(json!({"model": "m", "input": "x",
            "tool_choice": {"type": "function", "namespace": 7, "name": "search"}}));
        assert!(bad.unwrap_err().message.contains("tool_choice.namespace"));
    }

    #[test]
    fn schema_errors_say_what_and_where() {
        let message = |body: Value| parse(body).unwrap_err().message;
        assert!(message(json!({"model": "m"})).contains("input"));
        let video = message(json!({"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "x"}, {"type": "input_video", "video_url": "x"}]}]}));
        assert!(
            video.contains("input[0].content[1]") && video.contains("input_video"),
            "{video}"
        );
        let include = message(json!({"model": "m", "input": "x",
            "include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}));
        assert!(
            include.contains("include[1]") && include.contains("logprobs"),
            "{include}"
        );
        let format = message(json!({"model": "m", "input": "x",
            "tools": [{"type": "custom", "name": "apply_patch", "format": "lark"}]}));
        assert!(
            format.contains("tools[0]") && format.contains("`format`"),
            "{format}"
        );
        let call =
            message(json!({"model": "m", "input": [{"type": "function_call", "name": "f"}]}));
        assert!(
            call.contains("input[0]") && call.contains("call_id"),
            "{call}"
        );
        // A continuation may carry no new input.
        assert!(parse(json!({"model": "m", "previous_response_id": "resp_1"})).is_ok());
    }
}
