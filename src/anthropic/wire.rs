//! The Messages API request body.

use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::content::{Content, DataUrl, MediaSource, Part};
use crate::error::{ChatError, ErrorKind};
use crate::forced_answer::force_answer_tool;
use crate::message::Message;
use crate::output_schema::{normalise, NormalisedSchema, SchemaDialect};
use crate::reasoning_options::{ReasoningEffort, ReasoningOptions, Thinking};
use crate::request::{
    ChatOptions, ChatRequest, ResponseFormat, SystemMessagesInPlace, ToolChoice, ToolSpec,
};
use crate::tool_kind::ToolKind;
use crate::transport::{cannot_serialize, extra_fields, merge_extra, resolve_model, ToolsJson};
use crate::ApiFormat;

mod assistant;
mod block;

use block::{cache_control, Block, CacheControl, Source, ToolResultContent};

#[derive(Serialize)]
struct Body<'a> {
    /// Absent on Vertex AI, whose URL names the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    /// Vertex AI's API version, which it reads from the body instead of a header.
    #[serde(skip_serializing_if = "Option::is_none")]
    anthropic_version: Option<&'a str>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "System::is_empty")]
    system: System<'a>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata<'a>>,
    stream: bool,
}

/// `output_config`: structured outputs (`format`) and the effort level, on the models that have them.
#[derive(Serialize)]
struct OutputConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<OutputFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'static str>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    user_id: &'a str,
}

#[derive(Serialize)]
struct OutputFormat<'a> {
    r#type: &'static str,
    schema: &'a Value,
}

/// How a JSON answer is asked of the model.
enum JsonAnswer {
    /// No JSON asked for.
    Free,
    /// Structured outputs: `output_config.format` with the schema rewritten for it.
    OutputFormat(Arc<NormalisedSchema>),
    /// A forced tool call whose input is the answer (models before structured outputs, and "any object").
    ForcedTool,
}

/// Model families released before structured outputs (`output_config.format`): they get a forced tool instead.
const WITHOUT_OUTPUT_FORMAT: [&str; 7] = [
    "claude-2",
    "claude-instant",
    "claude-3",
    "claude-sonnet-4-0",
    "claude-sonnet-4-2025",
    "claude-opus-4-0",
    "claude-opus-4-2025",
];

/// How `format` is asked of `model`; a schema over the default limits is refused.
fn json_answer(format: Option<&ResponseFormat>, model: &str) -> Result<JsonAnswer, ChatError> {
    Ok(match format {
        None | Some(ResponseFormat::Text) => JsonAnswer::Free,
        Some(ResponseFormat::JsonObject) => JsonAnswer::ForcedTool,
        Some(ResponseFormat::JsonSchema { .. })
            if WITHOUT_OUTPUT_FORMAT
                .iter()
                .any(|old| model.starts_with(old)) =>
        {
            JsonAnswer::ForcedTool
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            JsonAnswer::OutputFormat(normalise(schema, SchemaDialect::Anthropic)?)
        }
    })
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// `system`: one string, or text blocks when a part carries a cache hint.
#[derive(Serialize)]
#[serde(untagged)]
enum System<'a> {
    Text(String),
    Blocks(Vec<Block<'a>>),
}

impl System<'_> {
    fn is_empty(&self) -> bool {
        match self {
            System::Text(text) => text.is_empty(),
            System::Blocks(blocks) => blocks.is_empty(),
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireTool<'a> {
    Function {
        name: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        description: &'a str,
        input_schema: &'a Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    /// A server tool (`web_search_20250305`, …) as the client wrote it: only Messages tools reach this leaf
    /// (the leaf drops or refuses another format's before encoding).
    Hosted(&'a Value),
}

/// The provider name in errors about content this format cannot carry.
const PROVIDER: &str = "the Anthropic Messages API";

pub(crate) struct EncodeOptions<'a> {
    pub(crate) default_model: Option<&'a str>,
    /// `None`: the model's own maximum.
    pub(crate) default_max_tokens: Option<u32>,
    /// The provider's cache of the last tools list's JSON.
    pub(crate) tools: &'a ToolsJson,
    /// Vertex AI's `anthropic_version`: when set, the body carries it and no `model` (the URL names it).
    pub(crate) anthropic_version: Option<&'a str>,
}

/// Serialize a request to the JSON body of `POST {base}/messages`.
pub(crate) fn encode(
    request: &ChatRequest,
    opts: &EncodeOptions<'_>,
) -> Result<Vec<u8>, ChatError> {
    let model = resolve_model(&request.options, opts.default_model)?;
    let answer = json_answer(request.options.response_format.as_ref(), model)?;
    let forced: ChatOptions;
    let options: &ChatOptions = match (&answer, &request.options.response_format) {
        (JsonAnswer::ForcedTool, Some(ResponseFormat::JsonSchema { name, schema, .. })) => {
            let mut with_tool = (*request.options).clone();
            let schema = normalise(schema, SchemaDialect::Anthropic)?;
            force_answer_tool(&mut with_tool, name, &schema.schema)?;
            forced = with_tool;
            &forced
        }
        (JsonAnswer::ForcedTool, _) => {
            let mut with_tool = (*request.options).clone();
            force_answer_tool(
                &mut with_tool,
                "json_object",
                &serde_json::json!({"type": "object"}),
            )?;
            forced = with_tool;
            &forced
        }
        _ => &request.options,
    };
    let tools = opts
        .tools
        .get(&options.tools, wire_tool)
        .map_err(cannot_serialize)?;
    // The leading system messages are the `system` field; later ones stay in their place when the caller sent
    // them so in this API's own format (the models that take them refuse nothing else about them).
    let leading = match request.extensions.get::<SystemMessagesInPlace>() {
        Some(_) => request
            .messages
            .iter()
            .take_while(|m| matches!(m, Message::System { .. }))
            .count(),
        None => request.messages.len(),
    };
    let system = system(&request.messages[..leading])?;
    let mut messages: Vec<WireMessage<'_>> = Vec::with_capacity(request.messages.len());
    for (i, message) in request.messages.iter().enumerate() {
        let (role, blocks) = match message {
            Message::System { content } if i >= leading => ("system", blocks(content)?),
            Message::System { .. } => continue,
            Message::User { content } => ("user", blocks(content)?),
            Message::Assistant(a) => ("assistant", assistant::blocks(a)),
            Message::Tool(t) => (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: &t.call_id,
                    content: match t.content.as_text() {
                        Some(text) => ToolResultContent::Text(text),
                        None => ToolResultContent::Blocks(blocks(&t.content)?),
                    },
                    is_error: t.is_error,
                }],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        // The API wants alternating roles: tool results and the next user text share one user message.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    let body = Body {
        model: opts.anthropic_version.is_none().then_some(model),
        anthropic_version: opts.anthropic_version,
        max_tokens: options
            .max_output_tokens
            .or(opts.default_max_tokens)
            .unwrap_or_else(|| crate::output_limits::max_output_tokens(model)),
        system,
        messages,
        tools: tools.as_deref(),
        tool_choice: tool_choice(options.tool_choice.as_ref(), options.parallel_tool_calls),
        temperature: options.temperature,
        top_p: options.top_p,
        stop_sequences: &options.stop,
        output_config: output_config(&answer, options.reasoning.as_ref()),
        thinking: options.reasoning.as_ref().and_then(thinking),
        metadata: options
            .end_user
            .as_deref()
            .map(|user_id| Metadata { user_id }),
        stream: options.stream,
    };
    let extra = extra_fields(options, ApiFormat::Messages);
    let serialized = if extra.is_empty() {
        crate::transport::to_body(&body, &request.messages)
    } else {
        merge_extra(&body, extra)
    };
    serialized.map_err(cannot_serialize)
}

/// `output_config`: the answer's schema, and the effort level as given (`thinking` carries a budget of its own).
fn output_config<'a>(
    answer: &'a JsonAnswer,
    reasoning: Option<&ReasoningOptions>,
) -> Option<OutputConfig<'a>> {
    let format = match answer {
        JsonAnswer::OutputFormat(schema) => Some(OutputFormat {
            r#type: "json_schema",
            schema: &schema.schema,
        }),
        _ => None,
    };
    let effort = reasoning
        .and_then(|r| r.effort)
        .and_then(ReasoningEffort::anthropic);
    (format.is_some() || effort.is_some()).then_some(OutputConfig { format, effort })
}

/// `thinking` as the caller gave it; an effort of `none` alone is thinking disabled.
fn thinking(reasoning: &ReasoningOptions) -> Option<Thinking> {
    match (reasoning.thinking, reasoning.effort) {
        (Some(thinking), _) => Some(thinking),
        (None, Some(ReasoningEffort::None)) => Some(Thinking::Disabled),
        (None, _) => None,
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    match &tool.kind {
        ToolKind::Hosted(hosted) => WireTool::Hosted(&hosted.definition),
        _ => WireTool::Function {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
            cache_control: cache_control(tool.cache.as_ref()),
        },
    }
}

/// Every system message's text, joined; text blocks instead when a part carries a cache hint.
fn system(messages: &[Message]) -> Result<System<'_>, ChatError> {
    let contents = messages.iter().filter_map(|message| match message {
        Message::System { content } => Some(content),
        _ => None,
    });
    let mut cached = false;
    for content in contents.clone() {
        for part in content.parts() {
            match part {
                Part::Text(text) => cached |= text.cache.is_some(),
                other => {
                    return Err(ChatError::unsupported(
                        PROVIDER,
                        format_args!("a {} part in a system message", other.kind()),
                    ))
                }
            }
        }
    }
    if cached {
        let mut blocks = Vec::new();
        for content in contents {
            blocks.extend(self::blocks(content)?);
        }
        return Ok(System::Blocks(blocks));
    }
    let mut system = String::new();
    for content in contents {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(&content.joined_text());
    }
    Ok(System::Text(system))
}

/// A content's parts as Messages API blocks.
fn blocks(content: &Content) -> Result<Vec<Block<'_>>, ChatError> {
    content.parts().iter().map(block).collect()
}

fn block(part: &Part) -> Result<Block<'_>, ChatError> {
    Ok(match part {
        Part::Text(text) => Block::Text {
            text: &text.text,
            cache_control: cache_control(text.cache.as_ref()),
        },
        Part::Image(image) => Block::Image {
            source: match &image.source {
                MediaSource::Url { url } => match DataUrl::parse(url) {
                    // A data: URL (what OpenAI-format clients send) is the base64 source, taken as it is.
                    Ok(data) => Source::Base64 {
                        media_type: data.media_type,
                        data: data.base64,
                    },
                    Err(_) => Source::Url { url },
                },
                MediaSource::Data(blob) => Source::Base64 {
                    media_type: blob.media_type(),
                    data: blob.base64(),
                },
                MediaSource::FileId { id } => Source::File { file_id: id },
            },
            cache_control: cache_control(image.cache.as_ref()),
        },
        Part::File(file) => Block::Document {
            source: match &file.source {
                MediaSource::Data(blob) if blob.media_type() == "text/plain" => Source::Text {
                    media_type: "text/plain",
                    data: std::str::from_utf8(blob.bytes()).map_err(|_| {
                        ChatError::new(
                            ErrorKind::InvalidRequest,
                            "a text/plain document is not UTF-8",
                        )
                        .refused_before_sending()
                    })?,
                },
                MediaSource::Data(blob) if blob.media_type() == "application/pdf" => {
                    Source::Base64 {
                        media_type: blob.media_type(),
                        data: blob.base64(),
                    }
                }
                MediaSource::Data(blob) => {
                    return Err(ChatError::unsupported(
                        PROVIDER,
                        format_args!(
                            "a document of type {} (PDF and plain text only)",
                            blob.media_type()
                        ),
                    ))
                }
                MediaSource::Url { url } => match DataUrl::parse(url) {
                    Ok(data) if data.media_type == "application/pdf" => Source::Base64 {
                        media_type: data.media_type,
                        data: data.base64,
                    },
                    Ok(data) => {
                        return Err(ChatError::unsupported(
                            PROVIDER,
                            format_args!(
                                "a document data: URL of type {} (PDF only)",
                                data.media_type
                            ),
                        ))
                    }
                    Err(_) => Source::Url { url },
                },
                MediaSource::FileId { id } => Source::File { file_id: id },
            },
            title: file.name.as_deref(),
            cache_control: cache_control(file.cache.as_ref()),
        },
        Part::Audio(_) => return Err(ChatError::unsupported(PROVIDER, "an audio part")),
        Part::Provider(raw) if raw.provider == "anthropic" => Block::Raw(&raw.value),
        Part::Provider(raw) => {
            return Err(ChatError::unsupported(
                PROVIDER,
                format_args!("a part in {}'s format", raw.provider),
            ))
        }
    })
}

fn tool_choice(choice: Option<&ToolChoice>, parallel: Option<bool>) -> Option<Value> {
    let mut value = match choice {
        None if parallel == Some(false) => serde_json::json!({"type": "auto"}),
        None => return None,
        Some(ToolChoice::Auto) => serde_json::json!({"type": "auto"}),
        Some(ToolChoice::None) => return Some(serde_json::json!({"type": "none"})),
        Some(ToolChoice::Required) => serde_json::json!({"type": "any"}),
        Some(ToolChoice::Tool(name)) => serde_json::json!({"type": "tool", "name": name}),
    };
    if parallel == Some(false) {
        value["disable_parallel_tool_use"] = Value::Bool(true);
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AssistantMessage, ToolCall, ToolMessage};
    use crate::request::ChatOptions;
    use serde_json::json;

    #[test]
    fn tool_round_encodes_as_the_messages_api_expects() {
        let mut request = ChatRequest::new(vec![
            Message::system("be brief"),
            Message::user("weather in Oslo and Rome?"),
            Message::Assistant(AssistantMessage {
                content: "Checking.".into(),
                tool_calls: vec![
                    ToolCall::new("tu_1", "weather", json!({"city": "Oslo"})),
                    ToolCall::new("tu_2", "weather", json!({"city": "Rome"})),
                ],
                ..AssistantMessage::default()
            }),
            Message::Tool(ToolMessage::success("tu_1", "weather", "12C")),
            Message::Tool(ToolMessage::error("tu_2", "weather", "service down")),
            Message::user("thanks"),
        ]);
        *request.options = ChatOptions {
            tools: vec![ToolSpec::new("weather", "w", json!({"type": "object"}))].into(),
            tool_choice: Some(ToolChoice::Required),
            parallel_tool_calls: Some(false),
            stop: vec!["END".into()],
            ..ChatOptions::default()
        };
        let opts = EncodeOptions {
            default_model: Some("claude-sonnet-4-5"),
            default_max_tokens: Some(1024),
            tools: &ToolsJson::default(),
            anthropic_version: None,
        };
        let body: Value = serde_json::from_slice(&encode(&request, &opts).unwrap()).unwrap();
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 1024);
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);
        assert_eq!(
            body["messages"][1]["content"][1],
            json!({"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}})
        );
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "12C"},
                {"type": "tool_result", "tool_use_id": "tu_2", "content": "service down", "is_error": true},
                {"type": "text", "text": "thanks"}
            ])
        );
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(
            body["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
        assert_eq!(body["stop_sequences"], json!(["END"]));
    }

    fn encode_json(model: &str, format: ResponseFormat) -> Result<Value, ChatError> {
        let mut request = ChatRequest::new(vec![Message::user("hi")]).model(model);
        request.options.response_format = Some(format);
        let opts = EncodeOptions {
            default_model: None,
            default_max_tokens: Some(1024),
            tools: &ToolsJson::default(),
            anthropic_version: None,
        };
        encode(&request, &opts).map(|body| serde_json::from_slice(&body).unwrap())
    }

    fn city_schema() -> ResponseFormat {
        ResponseFormat::JsonSchema {
            name: "city".into(),
            schema: json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}},
                           "required": ["name"]}),
            strict: Some(true),
        }
    }

    #[test]
    fn a_schema_goes_in_output_config_closed_and_with_bounds_in_the_description() {
        let body = encode_json("claude-sonnet-4-5", city_schema()).unwrap();
        assert_eq!(
            body["output_config"],
            json!({"format": {"type": "json_schema", "schema": {"type": "object",
                "properties": {"name": {"type": "string", "description": "maxLength: 40"}},
                "required": ["name"], "additionalProperties": false}}})
        );
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn older_models_and_any_object_get_a_forced_answer_tool() {
        let body = encode_json("claude-3-5-haiku-latest", city_schema()).unwrap();
        assert!(body.get("output_config").is_none());
        assert_eq!(body["tools"][0]["name"], "structured_answer");
        assert_eq!(
            body["tools"][0]["input_schema"]["additionalProperties"],
            false
        );
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "structured_answer"})
        );

        let body = encode_json("claude-sonnet-4-5", ResponseFormat::JsonObject).unwrap();
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn a_forced_answer_beside_tools_of_its_own_requires_some_call_and_refuses_a_forced_one() {
        let mut request = ChatRequest::new(vec![Message::user("hi")])
            .model("claude-3-opus")
            .tool(ToolSpec::new("add", "adds", json!({"type": "object"})));
        request.options.response_format = Some(city_schema());
        let tools = ToolsJson::default();
        let opts = EncodeOptions {
            default_model: None,
            default_max_tokens: Some(1024),
            tools: &tools,
            anthropic_version: None,
        };
        let body: Value = serde_json::from_slice(&encode(&request, &opts).unwrap()).unwrap();
        assert_eq!(body["tools"][0]["name"], "add");
        assert_eq!(body["tools"][1]["name"], "structured_answer");
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        request.options.tool_choice = Some(ToolChoice::Tool("add".into()));
        let err = encode(&request, &opts).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
        assert!(err.to_string().contains("`add`"), "{err}");
    }
}
