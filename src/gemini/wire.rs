//! The `generateContent` request body: the system instruction, `contents` with `user` and `model` turns,
//! `functionDeclarations` with their schemas in the configured [`SchemaForm`], `toolConfig` and
//! `generationConfig`; function calls go back with their `thoughtSignature`.

use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::schema::to_gemini_schema;
use super::signature::{self, GEMINI};
use super::SchemaForm;
use crate::content::{Content, DataUrl, MediaSource, Part};
use crate::error::{ChatError, ErrorKind};
use crate::message::{Message, ToolArguments, ToolMessage};
use crate::output_schema::{cached, normalise, SchemaDialect};
use crate::request::{ChatRequest, ResponseFormat, ToolChoice, ToolSpec};
use crate::schema_limits::SchemaLimits;

/// The cache slot of [`to_gemini_schema`]'s results (beside the [`SchemaDialect`]s).
const GEMINI_OPENAPI: u8 = 200;
use crate::transport::{cannot_serialize, merge_extra, provider_fields, ToolsJson};

/// The provider name in errors about content this format cannot carry.
const PROVIDER: &str = "the Gemini API";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    contents: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Turn<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    generation_config: Map<String, Value>,
}

#[derive(Serialize)]
struct Turn<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    parts: Vec<WirePart<'a>>,
}

/// One part; `thoughtSignature` sits beside the part's data, as Gemini sends it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(flatten)]
    data: PartData<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum PartData<'a> {
    Text(&'a str),
    InlineData {
        #[serde(rename = "mimeType")]
        mime_type: &'a str,
        data: &'a str,
    },
    FileData {
        #[serde(rename = "mimeType")]
        mime_type: &'a str,
        #[serde(rename = "fileUri")]
        file_uri: &'a str,
    },
    FunctionCall {
        name: &'a str,
        args: &'a Value,
    },
    FunctionResponse {
        name: &'a str,
        response: Value,
    },
    /// A part a Gemini-format client sent, as it came.
    #[serde(untagged)]
    Raw(&'a Value),
}

impl<'a> From<PartData<'a>> for WirePart<'a> {
    fn from(data: PartData<'a>) -> Self {
        WirePart {
            data,
            thought_signature: None,
        }
    }
}

/// A tool in `functionDeclarations`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Declaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters_json_schema: Option<Value>,
}

/// Serialises a tool with its schema in `form`; a schema Gemini cannot take fails the serialisation, and the
/// message says which tool and where (see `encode`).
struct WireTool<'a>(&'a ToolSpec, SchemaForm);

impl Serialize for WireTool<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let WireTool(tool, form) = *self;
        let refused = |e: &dyn std::fmt::Display| {
            serde::ser::Error::custom(format!("the schema of tool {:?} {e}", tool.name))
        };
        // A tool without parameters: Gemini refuses an object schema without properties.
        let empty = tool.parameters.is_null()
            || (tool
                .parameters
                .get("properties")
                .is_none_or(|p| p.as_object().is_some_and(Map::is_empty))
                && tool.parameters.get("type").and_then(Value::as_str) == Some("object"));
        let (mut parameters, mut parameters_json_schema) = (None, None);
        if !empty && form == SchemaForm::OpenApiSubset {
            parameters = Some(to_gemini_schema(&tool.parameters).map_err(|e| refused(&e))?);
        } else if !empty {
            SchemaLimits::DEFAULT
                .check(&tool.parameters)
                .map_err(|e| refused(&format_args!("at /: {e}")))?;
            parameters_json_schema = Some(without_dialect(&tool.parameters));
        }
        Declaration {
            name: &tool.name,
            description: &tool.description,
            parameters,
            parameters_json_schema,
        }
        .serialize(serializer)
    }
}

/// A JSON Schema as `parametersJsonSchema` takes it: without the root's `$schema`, which Gemini refuses
/// ("Unknown name \"$schema\""); everything else as written.
fn without_dialect(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) if fields.contains_key("$schema") => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| *key != "$schema")
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The tools list as Gemini's `tools` array, one entry of `functionDeclarations`.
fn tools_json(
    request: &ChatRequest,
    cache: &ToolsJson,
    form: SchemaForm,
) -> Result<Option<Arc<RawValue>>, ChatError> {
    let declarations = cache
        .get(&request.options.tools, |tool| WireTool(tool, form))
        .map_err(|e| {
            ChatError::new(
                ErrorKind::Unsupported,
                format!("{PROVIDER} cannot take {e}"),
            )
            .refused_before_sending()
        })?;
    let Some(declarations) = declarations else {
        return Ok(None);
    };
    let wrapped = format!(r#"[{{"functionDeclarations":{}}}]"#, declarations.get());
    RawValue::from_string(wrapped)
        .map(|raw| Some(Arc::from(raw)))
        .map_err(cannot_serialize)
}

/// Serialize a request to the JSON body of `generateContent` / `streamGenerateContent`.
pub(crate) fn encode(
    request: &ChatRequest,
    tools: &ToolsJson,
    form: SchemaForm,
) -> Result<Vec<u8>, ChatError> {
    let options = &request.options;
    let tools = tools_json(request, tools, form)?;
    let mut system = Vec::new();
    let mut contents: Vec<Turn<'_>> = Vec::with_capacity(request.messages.len());
    for message in request.messages.iter() {
        let (role, parts) = match message {
            Message::System { content } => {
                system.extend(parts(content)?);
                continue;
            }
            Message::User { content } => ("user", parts(content)?),
            Message::Assistant(assistant) => ("model", model_parts(assistant)),
            Message::Tool(result) => ("user", function_response(result)?),
        };
        if parts.is_empty() {
            continue;
        }
        // Turns alternate: function responses and the next user text share one user turn.
        match contents.last_mut() {
            Some(last) if last.role == Some(role) => last.parts.extend(parts),
            _ => contents.push(Turn {
                role: Some(role),
                parts,
            }),
        }
    }
    let body = Body {
        contents,
        system_instruction: (!system.is_empty()).then_some(Turn {
            role: None,
            parts: system,
        }),
        tools: tools.as_deref(),
        tool_config: tool_config(options.tool_choice.as_ref()),
        generation_config: generation_config(request, form)?,
    };
    merge_extra(&body, provider_fields(&options.extra)).map_err(cannot_serialize)
}

/// A model turn: its text and function calls, each with the signature it came with.
fn model_parts(assistant: &crate::message::AssistantMessage) -> Vec<WirePart<'_>> {
    static EMPTY_ARGS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let signatures = signature::of_message(assistant);
    let mut parts = Vec::with_capacity(1 + assistant.tool_calls.len());
    if !assistant.content.is_empty() || signatures.text.is_some() {
        parts.push(WirePart {
            data: PartData::Text(&assistant.content),
            thought_signature: signatures.text,
        });
    }
    for call in &assistant.tool_calls {
        let args = match &call.arguments {
            ToolArguments::Json(value @ Value::Object(_)) => value,
            _ => EMPTY_ARGS.get_or_init(|| Value::Object(Map::new())),
        };
        parts.push(WirePart {
            data: PartData::FunctionCall {
                name: &call.name,
                args,
            },
            thought_signature: signatures.call(&call.id),
        });
    }
    parts
}

/// A tool result as a `functionResponse` (its text under `result`, or `error`), media parts after it.
fn function_response(result: &ToolMessage) -> Result<Vec<WirePart<'_>>, ChatError> {
    let text = result.content.joined_text();
    let key = if result.is_error { "error" } else { "result" };
    // A JSON object result goes as it is; anything else as text.
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(object)) if !result.is_error => Value::Object(object),
        _ => json!({ key: text }),
    };
    let mut parts = vec![WirePart::from(PartData::FunctionResponse {
        name: &result.name,
        response,
    })];
    for part in result.content.parts() {
        if !matches!(part, Part::Text(_)) {
            parts.push(media_part(part)?);
        }
    }
    Ok(parts)
}

/// The parts of user or system content.
fn parts(content: &Content) -> Result<Vec<WirePart<'_>>, ChatError> {
    content
        .parts()
        .iter()
        .filter(|part| !matches!(part, Part::Text(text) if text.text.is_empty()))
        .map(|part| match part {
            Part::Text(text) => Ok(PartData::Text(&text.text).into()),
            other => media_part(other),
        })
        .collect()
}

/// An image, audio or file part as `inlineData` (bytes, `data:` URLs) or `fileData` (URLs, uploaded files).
fn media_part(part: &Part) -> Result<WirePart<'_>, ChatError> {
    let (source, media_type) = match part {
        Part::Text(text) => return Ok(PartData::Text(&text.text).into()),
        Part::Image(image) => (&image.source, None),
        Part::File(file) => (&file.source, file.media_type.as_deref()),
        Part::Audio(audio) => {
            return Ok(PartData::InlineData {
                mime_type: audio.data.media_type(),
                data: audio.data.base64(),
            }
            .into())
        }
        Part::Provider(provider) if provider.provider == GEMINI => {
            return Ok(PartData::Raw(&provider.value).into())
        }
        Part::Provider(provider) => {
            return Err(ChatError::unsupported(
                PROVIDER,
                format_args!("a part in {}'s format", provider.provider),
            ))
        }
    };
    let data = match source {
        MediaSource::Data(blob) => PartData::InlineData {
            mime_type: blob.media_type(),
            data: blob.base64(),
        },
        MediaSource::Url { url } if url.starts_with("data:") => {
            let parsed = DataUrl::parse(url).map_err(|e| {
                ChatError::new(
                    ErrorKind::InvalidRequest,
                    format!("a {} part: {e}", part.kind()),
                )
                .refused_before_sending()
            })?;
            PartData::InlineData {
                mime_type: parsed.media_type,
                data: parsed.base64,
            }
        }
        MediaSource::Url { url: uri } | MediaSource::FileId { id: uri } => {
            let mime_type = media_type
                .or_else(|| guess_media_type(uri))
                .ok_or_else(|| {
                    ChatError::unsupported(
                        PROVIDER,
                        format_args!(
                            "a {} by URL without a media type (Gemini's fileData needs one): {uri}",
                            part.kind()
                        ),
                    )
                })?;
            PartData::FileData {
                mime_type,
                file_uri: uri,
            }
        }
    };
    Ok(data.into())
}

/// The media type of a URL by its extension, for the common image and document kinds.
fn guess_media_type(url: &str) -> Option<&'static str> {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .to_ascii_lowercase();
    let extension = path.rsplit_once('.')?.1;
    Some(match extension {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        _ => return None,
    })
}

fn tool_config(choice: Option<&ToolChoice>) -> Option<Value> {
    let config = match choice? {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    };
    Some(json!({ "functionCallingConfig": config }))
}

fn generation_config(
    request: &ChatRequest,
    form: SchemaForm,
) -> Result<Map<String, Value>, ChatError> {
    let options = &request.options;
    let mut config = Map::new();
    if let Some(t) = options.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(p) = options.top_p {
        config.insert("topP".into(), json!(p));
    }
    if let Some(max) = options.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if !options.stop.is_empty() {
        config.insert("stopSequences".into(), json!(options.stop));
    }
    if let Some(thinking) = options.reasoning.as_ref().and_then(thinking_config) {
        config.insert("thinkingConfig".into(), thinking);
    }
    match &options.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            // `responseJsonSchema` (JSON Schema itself); in the subset form `responseSchema` when the schema
            // can be lowered to it, `responseJsonSchema` otherwise (recursion, `not`, …). Each computed once per
            // schema. A schema over the limits is refused, not sent on in the other shape.
            SchemaLimits::DEFAULT.check(schema)?;
            let lowered = match form {
                SchemaForm::OpenApiSubset => {
                    cached(schema, GEMINI_OPENAPI, || to_gemini_schema(schema))
                        .as_ref()
                        .as_ref()
                        .ok()
                        .cloned()
                }
                _ => None,
            };
            match lowered {
                Some(converted) => config.insert("responseSchema".into(), converted),
                None => config.insert(
                    "responseJsonSchema".into(),
                    normalise(schema, SchemaDialect::GeminiJson)?.schema.clone(),
                ),
            };
        }
    }
    Ok(config)
}

/// `thinkingConfig`: the budget given or the effort level's (`-1`, the model's own choice, for adaptive
/// thinking; every Gemini 2.5 and 3 model takes a budget). Thinking off is left to the model's default: the Pro
/// models refuse a budget of 0. Thought summaries are asked for when the caller asked for a summary.
fn thinking_config(reasoning: &crate::ReasoningOptions) -> Option<Value> {
    let budget = match (reasoning.thinking, reasoning.effort) {
        (Some(crate::Thinking::Adaptive), Some(effort)) => effort.budget_tokens().map(i64::from),
        (Some(crate::Thinking::Adaptive), None) => Some(-1),
        _ => reasoning.budget_tokens().filter(|b| *b > 0).map(i64::from),
    };
    let mut config = Map::new();
    if let Some(budget) = budget {
        config.insert("thinkingBudget".into(), json!(budget));
    }
    if reasoning.summary.is_some() {
        config.insert("includeThoughts".into(), json!(true));
    }
    (!config.is_empty()).then_some(Value::Object(config))
}
