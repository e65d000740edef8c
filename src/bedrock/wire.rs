//! The Converse / ConverseStream request body: `system` blocks, `messages` of `user` and `assistant` turns with
//! `text`, `image`, `document`, `toolUse`, `toolResult` and `reasoningContent` blocks, a `cachePoint` after each
//! part, tool or system text that carries a cache hint, `toolConfig` and `inferenceConfig`; a JSON answer
//! (`response_format`) as a forced tool call whose input is the answer, decoded back into text.

use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::content::{CacheHint, Content, DataUrl, MediaSource, Part};
use crate::error::{ChatError, ErrorKind};
use crate::forced_answer::{force_answer_tool, FORCED_ANSWER_TOOL};
use crate::message::{Message, ToolArguments, ToolMessage};
use crate::reasoning::Continuation;
use crate::request::{ChatRequest, ResponseFormat, ToolChoice, ToolSpec};
use crate::transport::{cannot_serialize, merge_extra, provider_fields, ToolsJson};

/// The provider name in errors about content this format cannot carry.
const PROVIDER: &str = "Amazon Bedrock's Converse API";

/// The provider family of Bedrock's reasoning continuations and parts.
pub(crate) const BEDROCK: &str = "bedrock";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    inference_config: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    additional_model_request_fields: Option<Value>,
}

#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    tools: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
}

/// One content block; each variant is an object with one key, as Converse has them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Block<'a> {
    Text(&'a str),
    Image {
        format: &'static str,
        source: Source<'a>,
    },
    Document {
        format: &'static str,
        name: String,
        source: Source<'a>,
    },
    #[serde(rename_all = "camelCase")]
    ToolUse {
        tool_use_id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        tool_use_id: &'a str,
        content: Vec<Block<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'static str>,
    },
    Json(Value),
    ReasoningContent(Reasoning<'a>),
    CachePoint {
        r#type: &'static str,
    },
    /// A block a Converse-format client sent, as it came.
    #[serde(untagged)]
    Raw(&'a Value),
}

const CACHE_POINT: Block<'static> = Block::CachePoint { r#type: "default" };

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Reasoning<'a> {
    ReasoningText {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<&'a str>,
    },
    RedactedContent(&'a str),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Source<'a> {
    Bytes(&'a str),
    S3Location { uri: &'a str },
}

/// A tool in `toolConfig.tools`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum ToolEntry<'a> {
    ToolSpec(ToolSpecBody<'a>),
    CachePoint { r#type: &'static str },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSpecBody<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: InputSchema<'a>,
}

#[derive(Serialize)]
struct InputSchema<'a> {
    json: &'a Value,
}

static EMPTY_OBJECT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();

fn empty_object() -> &'static Value {
    EMPTY_OBJECT.get_or_init(|| json!({"type": "object", "properties": {}}))
}

fn tool_spec(tool: &ToolSpec) -> ToolEntry<'_> {
    ToolEntry::ToolSpec(ToolSpecBody {
        name: &tool.name,
        description: &tool.description,
        input_schema: InputSchema {
            // Converse wants a schema for every tool.
            json: if tool.parameters.is_null() {
                empty_object()
            } else {
                &tool.parameters
            },
        },
    })
}

/// The `tools` array: serialised once per tools list, except when a tool carries a cache hint (a `cachePoint`
/// follows it, so one tool is two entries).
fn tools_json(
    request: &ChatRequest,
    cache: &ToolsJson,
) -> Result<Option<Arc<RawValue>>, ChatError> {
    let tools = &request.options.tools;
    if !tools.iter().any(|tool| tool.cache.is_some()) {
        return cache.get(tools, tool_spec).map_err(cannot_serialize);
    }
    let mut entries = Vec::with_capacity(tools.len() + 1);
    for tool in tools.iter() {
        entries.push(tool_spec(tool));
        if tool.cache.is_some() {
            entries.push(ToolEntry::CachePoint { r#type: "default" });
        }
    }
    serde_json::value::to_raw_value(&entries)
        .map(|raw| Some(Arc::from(raw)))
        .map_err(cannot_serialize)
}

/// `toolChoice`: Converse has `auto`, `any` and `tool`; without a `none`, [`ToolChoice::None`] sends the tools
/// with no choice (the model decides), since a history holding tool calls needs the tools described.
fn tool_choice(choice: Option<&ToolChoice>) -> Option<Value> {
    match choice? {
        ToolChoice::Auto => Some(json!({"auto": {}})),
        ToolChoice::Required => Some(json!({"any": {}})),
        ToolChoice::Tool(name) => Some(json!({"tool": {"name": name}})),
        ToolChoice::None => None,
    }
}

/// A JSON answer asked for: Converse has no response-schema parameter that every model takes, so the request is
/// re-encoded with a forced tool whose input is the answer (the decoder turns its calls back into text). The
/// answer tool is forced by name even beside the request's own tools: with `any`, models on Converse call one of
/// the others and never answer.
fn forced_answer(request: &ChatRequest) -> Result<Option<ChatRequest>, ChatError> {
    let (name, schema) = match &request.options.response_format {
        None | Some(ResponseFormat::Text) => return Ok(None),
        Some(ResponseFormat::JsonObject) => ("json_object", json!({"type": "object"})),
        Some(ResponseFormat::JsonSchema { name, schema, .. }) => (name.as_str(), schema.clone()),
    };
    let mut options = (*request.options).clone();
    force_answer_tool(&mut options, name, &schema)?;
    options.tool_choice = Some(ToolChoice::Tool(FORCED_ANSWER_TOOL.to_owned()));
    options.response_format = None;
    let mut forced = request.clone();
    forced.options = options.into();
    Ok(Some(forced))
}

/// Serialize a request to the JSON body of `converse` / `converse-stream` (the model is in the URL).
pub(crate) fn encode(
    request: &ChatRequest,
    tools: &ToolsJson,
    model: Option<&str>,
) -> Result<Vec<u8>, ChatError> {
    if let Some(forced) = forced_answer(request)? {
        return encode(&forced, tools, model);
    }
    let options = &request.options;
    let mut system = Vec::new();
    let mut messages: Vec<Turn<'_>> = Vec::with_capacity(request.messages.len());
    for message in request.messages.iter() {
        let (role, content) = match message {
            Message::System { content } => {
                system_blocks(content, &mut system)?;
                continue;
            }
            Message::User { content } => ("user", blocks(content)?),
            Message::Assistant(assistant) => {
                let mut content =
                    Vec::with_capacity(assistant.reasoning.len() + 1 + assistant.tool_calls.len());
                for part in &assistant.reasoning {
                    match &part.continuation {
                        Some(Continuation::Other { provider, value }) if provider == BEDROCK => {
                            if let Some(block) = reasoning_block(&part.text, value) {
                                content.push(block);
                            }
                        }
                        Some(other) => tracing::debug!(
                            from = other.provider(),
                            "another provider's reasoning left out of a Bedrock request"
                        ),
                        None => {}
                    }
                }
                if !assistant.content.is_empty() {
                    content.push(Block::Text(&assistant.content));
                }
                for call in &assistant.tool_calls {
                    // Converse takes an object; arguments that were not one were answered with an error result
                    // already, so an empty object keeps the history well-formed.
                    let input = match &call.arguments {
                        ToolArguments::Json(value @ Value::Object(_)) => value,
                        _ => EMPTY_OBJECT_INPUT.get_or_init(|| Value::Object(Map::new())),
                    };
                    content.push(Block::ToolUse {
                        tool_use_id: &call.id,
                        name: &call.name,
                        input,
                    });
                }
                ("assistant", content)
            }
            Message::Tool(result) => ("user", vec![tool_result(result)?]),
        };
        if content.is_empty() {
            continue;
        }
        // Converse wants alternating roles: tool results and the next user text share one user turn.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => messages.push(Turn { role, content }),
        }
    }
    let tools = tools_json(request, tools)?;
    let body = Body {
        messages,
        system,
        inference_config: inference_config(request, model),
        tool_config: tools.as_deref().map(|tools| ToolConfig {
            tools,
            tool_choice: tool_choice(options.tool_choice.as_ref()),
        }),
        additional_model_request_fields: options
            .reasoning
            .as_ref()
            .and_then(|r| model_request_fields(r, model, options.max_output_tokens)),
    };
    let serialized = if options.extra.is_empty() {
        serde_json::to_vec(&body)
    } else {
        merge_extra(&body, provider_fields(&options.extra))
    };
    serialized.map_err(cannot_serialize)
}

/// `additionalModelRequestFields`: an Anthropic model's `thinking`, with the budget given or the effort
/// level's, kept under the output limit as Anthropic requires (at least its minimum of 1024, else left out).
/// Other Bedrock models spell reasoning their own way (or have none): left out, with a debug line.
fn model_request_fields(
    reasoning: &crate::ReasoningOptions,
    model: Option<&str>,
    max_tokens: Option<u32>,
) -> Option<Value> {
    if !model.is_some_and(|m| m.contains("anthropic.claude")) {
        tracing::debug!(
            model,
            "reasoning settings left out of a Bedrock request: only Anthropic models take them"
        );
        return None;
    }
    let budget = match (reasoning.thinking, reasoning.effort) {
        (Some(crate::Thinking::Adaptive), Some(effort)) => effort.budget_tokens(),
        _ => reasoning.budget_tokens(),
    }
    .filter(|b| *b > 0)?;
    let budget = max_tokens.map_or(budget, |max| budget.min(max.saturating_sub(1)));
    (budget >= 1024)
        .then(|| serde_json::json!({"thinking": {"type": "enabled", "budget_tokens": budget}}))
}

static EMPTY_OBJECT_INPUT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();

/// A kept reasoning block: `{"signature": …}` beside its text, or `{"redactedContent": …}`.
fn reasoning_block<'a>(text: &'a str, value: &'a Value) -> Option<Block<'a>> {
    if let Some(redacted) = value.get("redactedContent").and_then(Value::as_str) {
        return Some(Block::ReasoningContent(Reasoning::RedactedContent(
            redacted,
        )));
    }
    let signature = value.get("signature").and_then(Value::as_str);
    Some(Block::ReasoningContent(Reasoning::ReasoningText {
        text,
        signature,
    }))
}

fn inference_config(request: &ChatRequest, default_model: Option<&str>) -> Map<String, Value> {
    let options = &request.options;
    let mut config = Map::new();
    // Claude models on Converse stop at a low default without one: their own maximum, as on Anthropic's API.
    let max = options.max_output_tokens.or_else(|| {
        let model = options.model.as_deref().or(default_model)?;
        crate::output_limits::known_max_output_tokens(model)
    });
    if let Some(max) = max {
        config.insert("maxTokens".into(), json!(max));
    }
    if let Some(t) = options.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(p) = options.top_p {
        config.insert("topP".into(), json!(p));
    }
    if !options.stop.is_empty() {
        config.insert("stopSequences".into(), json!(options.stop));
    }
    config
}

fn system_blocks<'a>(content: &'a Content, system: &mut Vec<Block<'a>>) -> Result<(), ChatError> {
    for part in content.parts() {
        match part {
            Part::Text(text) => {
                if !text.text.is_empty() {
                    system.push(Block::Text(&text.text));
                }
                push_cache_point(text.cache.as_ref(), system);
            }
            other => {
                return Err(ChatError::unsupported(
                    PROVIDER,
                    format_args!("a {} part in a system message", other.kind()),
                ))
            }
        }
    }
    Ok(())
}

fn push_cache_point(hint: Option<&CacheHint>, blocks: &mut Vec<Block<'_>>) {
    if hint.is_some() {
        blocks.push(CACHE_POINT);
    }
}

/// A content's parts as Converse blocks, each part with a cache hint followed by a `cachePoint`.
fn blocks(content: &Content) -> Result<Vec<Block<'_>>, ChatError> {
    let mut out = Vec::with_capacity(content.parts().len());
    for (index, part) in content.parts().iter().enumerate() {
        match part {
            Part::Text(text) if text.text.is_empty() => {}
            Part::Text(text) => out.push(Block::Text(&text.text)),
            Part::Image(image) => {
                let (media_type, source) = source(&image.source, "an image")?;
                out.push(Block::Image {
                    format: image_format(media_type)?,
                    source,
                });
            }
            Part::File(file) => {
                let (media_type, source) = source(&file.source, "a document")?;
                let media_type = match &file.source {
                    MediaSource::Url { .. } => file.media_type.as_deref().or(media_type),
                    _ => media_type.or(file.media_type.as_deref()),
                };
                out.push(Block::Document {
                    format: document_format(media_type)?,
                    name: document_name(file.name.as_deref(), index),
                    source,
                });
            }
            Part::Audio(_) => return Err(ChatError::unsupported(PROVIDER, "an audio part")),
            Part::Provider(raw) if raw.provider == BEDROCK => out.push(Block::Raw(&raw.value)),
            Part::Provider(raw) => {
                return Err(ChatError::unsupported(
                    PROVIDER,
                    format_args!("a part in {}'s format", raw.provider),
                ))
            }
        }
        push_cache_point(part.cache(), &mut out);
    }
    Ok(out)
}

/// Where media comes from: its bytes (from a blob or a `data:` URL) or an `s3://` location; the media type when
/// the source tells it.
fn source<'a>(
    media: &'a MediaSource,
    what: &str,
) -> Result<(Option<&'a str>, Source<'a>), ChatError> {
    match media {
        MediaSource::Data(blob) => Ok((Some(blob.media_type()), Source::Bytes(blob.base64()))),
        MediaSource::Url { url } if url.starts_with("s3://") => {
            Ok((media_type_of_key(url), Source::S3Location { uri: url }))
        }
        MediaSource::Url { url } => match DataUrl::parse(url) {
            Ok(data) => Ok((Some(data.media_type), Source::Bytes(data.base64))),
            Err(_) => Err(ChatError::unsupported(
                PROVIDER,
                format_args!("{what} by URL (bytes, data: URLs and s3:// locations only)"),
            )),
        },
        MediaSource::FileId { .. } => Err(ChatError::unsupported(
            PROVIDER,
            format_args!("{what} by file id"),
        )),
    }
}

/// The media type an S3 object's extension tells, for the formats Converse takes.
fn media_type_of_key(key: &str) -> Option<&'static str> {
    let extension = key.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "csv" => "text/csv",
        "doc" => "application/msword",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xls" => "application/vnd.ms-excel",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "html" | "htm" => "text/html",
        "txt" => "text/plain",
        "md" => "text/markdown",
        _ => return None,
    })
}

fn image_format(media_type: Option<&str>) -> Result<&'static str, ChatError> {
    Ok(match media_type {
        Some("image/png") => "png",
        Some("image/jpeg" | "image/jpg") => "jpeg",
        Some("image/gif") => "gif",
        Some("image/webp") => "webp",
        other => {
            return Err(ChatError::unsupported(
                PROVIDER,
                format_args!(
                    "an image of type {} (PNG, JPEG, GIF and WebP only)",
                    other.unwrap_or("unknown")
                ),
            ))
        }
    })
}

fn document_format(media_type: Option<&str>) -> Result<&'static str, ChatError> {
    Ok(match media_type {
        Some("application/pdf") => "pdf",
        Some("text/csv") => "csv",
        Some("application/msword") => "doc",
        Some("application/vnd.openxmlformats-officedocument.wordprocessingml.document") => "docx",
        Some("application/vnd.ms-excel") => "xls",
        Some("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet") => "xlsx",
        Some("text/html") => "html",
        Some("text/plain") => "txt",
        Some("text/markdown") => "md",
        other => {
            return Err(ChatError::unsupported(
                PROVIDER,
                format_args!(
                    "a document of type {} (PDF, CSV, DOC, DOCX, XLS, XLSX, HTML, TXT and MD only)",
                    other.unwrap_or("unknown")
                ),
            ))
        }
    })
}

/// A document's name as Converse allows it (letters, digits, single spaces, hyphens, parentheses and square
/// brackets): other characters become hyphens, so `report.v2.pdf` is sent as `report-v2-pdf`.
fn document_name(name: Option<&str>, index: usize) -> String {
    let Some(name) = name.filter(|n| !n.trim().is_empty()) else {
        return format!("document-{}", index + 1);
    };
    let mut out = String::with_capacity(name.len());
    for c in name.trim().chars() {
        let c = match c {
            c if c.is_ascii_alphanumeric() || "-()[]".contains(c) => c,
            c if c.is_whitespace() => ' ',
            _ => '-',
        };
        if c == ' ' && out.ends_with(' ') {
            continue;
        }
        out.push(c);
    }
    out
}

/// A tool result: its text (a JSON object as a `json` block), images and documents; `status: error` for a
/// failure.
fn tool_result(result: &ToolMessage) -> Result<Block<'_>, ChatError> {
    let content = match result.content.as_text() {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) if !result.is_error => vec![Block::Json(value)],
            _ => vec![Block::Text(text)],
        },
        None => blocks(&result.content)?
            .into_iter()
            .filter(|block| !matches!(block, Block::CachePoint { .. }))
            .collect(),
    };
    let content = if content.is_empty() {
        // Converse refuses an empty result.
        vec![Block::Text("(no output)")]
    } else {
        content
    };
    Ok(Block::ToolResult {
        tool_use_id: &result.call_id,
        content,
        status: result.is_error.then_some("error"),
    })
}

/// What a request to `model` is refused for before sending, if anything: the model id goes in the URL path.
pub(crate) fn check_model(model: &str) -> Result<(), ChatError> {
    if model.is_empty() || model.contains(char::is_whitespace) {
        return Err(ChatError::new(
            ErrorKind::InvalidRequest,
            format!("{model:?} is not a Bedrock model id"),
        )
        .refused_before_sending());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::{FilePart, ImagePart, TextPart};
    use crate::message::{AssistantMessage, ToolCall};
    use crate::reasoning::ReasoningPart;
    use crate::request::ChatOptions;

    fn encoded(request: &ChatRequest) -> Value {
        serde_json::from_slice(&encode(request, &ToolsJson::default(), None).unwrap()).unwrap()
    }

    #[test]
    fn a_tool_round_with_reasoning_encodes_as_converse_expects() {
        let mut request = ChatRequest::new(vec![
            Message::system("be brief"),
            Message::user("weather in Oslo?"),
            Message::Assistant(AssistantMessage {
                content: "Checking.".into(),
                reasoning: vec![
                    ReasoningPart {
                        text: "The user wants weather.".into(),
                        continuation: Some(Continuation::Other {
                            provider: BEDROCK.into(),
                            value: json!({"signature": "sig-1"}),
                        }),
                    },
                    ReasoningPart {
                        text: String::new(),
                        continuation: Some(Continuation::Other {
                            provider: BEDROCK.into(),
                            value: json!({"redactedContent": "cmVkYWN0ZWQ="}),
                        }),
                    },
                    ReasoningPart {
                        text: "from elsewhere".into(),
                        continuation: Some(Continuation::AnthropicThinking {
                            signature: "x".into(),
                        }),
                    },
                ],
                tool_calls: vec![ToolCall::new("tu_1", "weather", json!({"city": "Oslo"}))],
                provider_parts: Vec::new(),
            }),
            Message::Tool(ToolMessage::success(
                "tu_1",
                "weather",
                r#"{"celsius": 12}"#,
            )),
            Message::Tool(ToolMessage::error("tu_2", "weather", "service down")),
            Message::user("thanks"),
        ]);
        *request.options = ChatOptions {
            tools: vec![ToolSpec::new(
                "weather",
                "Weather by city",
                json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            )]
            .into(),
            tool_choice: Some(ToolChoice::Required),
            max_output_tokens: Some(512),
            stop: vec!["END".into()],
            ..ChatOptions::default()
        };
        let body = encoded(&request);
        assert_eq!(body["system"], json!([{"text": "be brief"}]));
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);
        assert_eq!(
            body["messages"][1]["content"],
            json!([
                {"reasoningContent": {"reasoningText": {"text": "The user wants weather.", "signature": "sig-1"}}},
                {"reasoningContent": {"redactedContent": "cmVkYWN0ZWQ="}},
                {"text": "Checking."},
                {"toolUse": {"toolUseId": "tu_1", "name": "weather", "input": {"city": "Oslo"}}}
            ])
        );
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"toolResult": {"toolUseId": "tu_1", "content": [{"json": {"celsius": 12}}]}},
                {"toolResult": {"toolUseId": "tu_2", "content": [{"text": "service down"}], "status": "error"}},
                {"text": "thanks"}
            ])
        );
        assert_eq!(
            body["toolConfig"],
            json!({"tools": [{"toolSpec": {"name": "weather", "description": "Weather by city",
                "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}}],
                "toolChoice": {"any": {}}})
        );
        assert_eq!(
            body["inferenceConfig"],
            json!({"maxTokens": 512, "stopSequences": ["END"]})
        );
    }

    #[test]
    fn media_and_cache_hints_become_blocks_and_cache_points() {
        let hint = Some(CacheHint::default());
        let request = ChatRequest::new(vec![
            Message::System {
                content: Content::from(vec![Part::from(TextPart {
                    text: "long instructions".into(),
                    cache: hint.clone(),
                })]),
            },
            Message::User {
                content: Content::from(vec![
                    Part::from(ImagePart {
                        source: MediaSource::Data(crate::content::Blob::new(
                            &b"\x89PNG"[..],
                            "image/png",
                        )),
                        detail: None,
                        cache: None,
                    }),
                    Part::from(FilePart {
                        source: MediaSource::Data(crate::content::Blob::new(
                            &b"%PDF-1.7"[..],
                            "application/pdf",
                        )),
                        media_type: None,
                        name: Some("Q3 report.v2.pdf".into()),
                        cache: hint,
                    }),
                    Part::from(ImagePart {
                        source: MediaSource::Url {
                            url: "s3://bucket/cat.jpeg".into(),
                        },
                        detail: None,
                        cache: None,
                    }),
                ]),
            },
        ]);
        let mut request = request;
        request.options.tools = vec![ToolSpec {
            cache: Some(CacheHint::default()),
            ..ToolSpec::new("lookup", "", Value::Null)
        }]
        .into();
        let body = encoded(&request);
        assert_eq!(
            body["system"],
            json!([{"text": "long instructions"}, {"cachePoint": {"type": "default"}}])
        );
        let content = &body["messages"][0]["content"];
        assert_eq!(
            content[0],
            json!({"image": {"format": "png", "source": {"bytes": "iVBORw=="}}})
        );
        assert_eq!(
            content[1],
            json!({"document": {"format": "pdf", "name": "Q3 report-v2-pdf", "source": {"bytes": "JVBERi0xLjc="}}})
        );
        assert_eq!(content[2], json!({"cachePoint": {"type": "default"}}));
        assert_eq!(
            content[3],
            json!({"image": {"format": "jpeg", "source": {"s3Location": {"uri": "s3://bucket/cat.jpeg"}}}})
        );
        assert_eq!(
            body["toolConfig"]["tools"],
            json!([{"toolSpec": {"name": "lookup", "inputSchema": {"json": {"type": "object", "properties": {}}}}},
                {"cachePoint": {"type": "default"}}])
        );
    }

    #[test]
    fn what_converse_cannot_carry_is_refused_before_sending() {
        let web_image = ChatRequest::new(vec![Message::User {
            content: Content::from(vec![Part::from(ImagePart {
                source: MediaSource::Url {
                    url: "https://example.com/cat.png".into(),
                },
                detail: None,
                cache: None,
            })]),
        }]);
        let error = encode(&web_image, &ToolsJson::default(), None).unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Unsupported);
        assert!(error.message().contains("by URL"), "{}", error.message());
        let bmp = ChatRequest::new(vec![Message::User {
            content: Content::from(vec![Part::image(&b"BM"[..], "image/bmp")]),
        }]);
        let error = encode(&bmp, &ToolsJson::default(), None).unwrap_err();
        assert!(error.message().contains("image/bmp"), "{}", error.message());
    }

    #[test]
    fn a_json_answer_is_asked_for_as_a_forced_tool_call() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let mut request = ChatRequest::new(vec![Message::user("capital of Norway?")]);
        request.options.response_format = Some(ResponseFormat::JsonSchema {
            name: "place".into(),
            schema: schema.clone(),
            strict: Some(true),
        });
        let body = encoded(&request);
        let config = &body["toolConfig"];
        assert_eq!(config["tools"][0]["toolSpec"]["name"], "structured_answer");
        assert_eq!(
            config["tools"][0]["toolSpec"]["inputSchema"]["json"],
            schema
        );
        assert_eq!(
            config["toolChoice"],
            json!({"tool": {"name": "structured_answer"}})
        );
        let mut object = ChatRequest::new(vec![Message::user("hi")]);
        object.options.response_format = Some(ResponseFormat::JsonObject);
        let body = encoded(&object);
        assert_eq!(
            body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"],
            json!({"type": "object"})
        );
        // Beside the request's own tools the answer tool is still the one forced (with `any`, a model may call
        // another tool and never answer), and forcing one of the request's own is refused.
        request.options.tools = vec![ToolSpec::new("lookup", "", json!({"type": "object"}))].into();
        for choice in [None, Some(ToolChoice::Auto), Some(ToolChoice::Required)] {
            request.options.tool_choice = choice;
            let body = encoded(&request);
            assert_eq!(
                body["toolConfig"]["toolChoice"],
                json!({"tool": {"name": "structured_answer"}})
            );
            assert_eq!(
                body["toolConfig"]["tools"][1]["toolSpec"]["name"],
                "structured_answer"
            );
        }
        request.options.tool_choice = Some(ToolChoice::Tool("lookup".into()));
        let error = encode(&request, &ToolsJson::default(), None).unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    }
}
