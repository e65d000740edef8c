//! The Responses request body (`POST /responses`), serialized straight from borrowed [`ChatRequest`] data.
//!
//! The conversation becomes `input` items: system and user messages as `message` items, an assistant turn as its
//! `reasoning` items (the ones this API produced, exactly as received), its text as a `message` item and its tool
//! calls as `function_call` items (`custom_tool_call` for a freeform tool's), and each tool result as a
//! `function_call_output` item (`custom_tool_call_output` for a freeform call's). Freeform tools go as `custom`
//! tools, hosted tools as the client wrote them.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::content::{Content, DataUrl, MediaSource, MediaUrl, Part};
use crate::error::ChatError;
use crate::message::{AssistantMessage, CallKind, Message, ToolCall};
use crate::output_schema::{normalise, SchemaDialect};
use crate::reasoning::Continuation;
use crate::reasoning_options::ReasoningOptions;
use crate::request::{ChatRequest, ResponseFormat, ToolChoice, ToolSpec};
use crate::tool_kind::ToolKind;
use crate::transport::{
    cannot_serialize, extra_fields, resolve_model, set_field, ExtraField, ToolsJson,
};
use crate::ApiFormat;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    input: Vec<Item<'a>>,
    stream: bool,
    store: bool,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    include: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
}

/// One `input` item.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    Message {
        role: &'static str,
        content: WireContent<'a>,
    },
    Reasoning {
        id: &'a str,
        summary: Vec<Summary<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        /// The tool namespace the called tool belongs to.
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
        arguments: String,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: WireContent<'a>,
    },
    /// A call of a freeform tool: its input is the call's one string.
    CustomToolCall {
        call_id: &'a str,
        name: &'a str,
        /// The tool namespace the called tool belongs to.
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<&'a str>,
        input: String,
    },
    CustomToolCallOutput {
        call_id: &'a str,
        output: WireContent<'a>,
    },
    /// An item of a type no layer models, as the client sent it ([`ITEM_PROVIDER`]).
    #[serde(untagged)]
    Raw(&'a Value),
}

/// The [`ProviderPart::provider`](crate::ProviderPart) of a whole Responses input item kept as it came (a user
/// message holding only it): it goes back into `input` as an item of its own.
pub(crate) const ITEM_PROVIDER: &str = "openai-responses-item";

#[derive(Serialize)]
struct Summary<'a> {
    r#type: &'static str,
    text: &'a str,
}

/// A message's `content` or a tool's `output`: a string for one text, else an array of parts.
#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    InputText {
        text: &'a str,
    },
    InputImage {
        #[serde(skip_serializing_if = "Option::is_none")]
        image_url: Option<MediaUrl<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_id: Option<&'a str>,
        /// Required by the API; `auto` unless the part names one.
        detail: &'static str,
    },
    InputFile {
        #[serde(skip_serializing_if = "Option::is_none")]
        file_data: Option<MediaUrl<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_url: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        filename: Option<&'a str>,
    },
    /// A Responses content part a client sent that no layer understands, as it came.
    #[serde(untagged)]
    Raw(&'a Value),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireTool<'a> {
    Function {
        name: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        description: &'a str,
        parameters: &'a Value,
        /// The Responses API validates strictly unless told otherwise, and strict mode refuses any schema not
        /// written for it (every property required, `additionalProperties: false`); a [`ToolSpec`] promises
        /// no such schema.
        strict: bool,
    },
    /// A freeform tool: the model writes one string, in `format`'s syntax.
    Custom {
        name: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        description: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        format: Option<&'a Value>,
    },
    /// A hosted tool as the client wrote it: only Responses tools reach this leaf (the leaf drops or refuses
    /// another format's before encoding).
    #[serde(untagged)]
    Hosted(&'a Value),
}

/// The provider name in errors about content this format cannot carry.
const PROVIDER: &str = "the OpenAI Responses API";

pub(crate) struct EncodeOptions<'a> {
    pub(crate) default_model: Option<&'a str>,
    pub(crate) store: bool,
    pub(crate) include: &'a [String],
    /// The provider's cache of the last tools list's JSON.
    pub(crate) tools: &'a ToolsJson,
}

/// Serialize a request to the JSON body of `POST /responses`.
pub(crate) fn encode(
    request: &ChatRequest,
    opts: &EncodeOptions<'_>,
) -> Result<Vec<u8>, ChatError> {
    let options = &request.options;
    let model = resolve_model(options, opts.default_model)?;
    if !options.stop.is_empty() {
        return Err(ChatError::unsupported(PROVIDER, "stop sequences"));
    }
    let tools = opts
        .tools
        .get(&options.tools, wire_tool)
        .map_err(cannot_serialize)?;
    let namespaced = crate::namespaced_tools(&options.tools);
    let mut input = input_items(&request.messages)?;
    if !namespaced.is_empty() {
        // A namespace's call goes back as it came: its namespace and its name in it.
        for item in &mut input {
            if let Item::FunctionCall {
                name, namespace, ..
            }
            | Item::CustomToolCall {
                name, namespace, ..
            } = item
            {
                if let Some((_, group, inner)) = namespaced.iter().find(|(flat, ..)| flat == name) {
                    *name = inner;
                    *namespace = Some(group);
                }
            }
        }
    }
    let body = Body {
        model,
        input,
        stream: options.stream,
        store: opts.store,
        include: opts.include,
        tools: tools.as_deref(),
        tool_choice: options
            .tool_choice
            .as_ref()
            .map(|choice| tool_choice(choice, &options.tools)),
        parallel_tool_calls: options.parallel_tool_calls,
        temperature: options.temperature,
        top_p: options.top_p,
        max_output_tokens: options.max_output_tokens,
        text: options
            .response_format
            .as_ref()
            .map(|format| text_format(format).map(|format| serde_json::json!({ "format": format })))
            .transpose()?,
        reasoning: options.reasoning.as_ref().and_then(reasoning),
        user: options.end_user.as_deref(),
    };
    let extra = extra_fields(options, ApiFormat::Responses);
    let serialized = if extra.is_empty() {
        crate::transport::to_body(&body, &request.messages)
    } else {
        merge_extra(&body, &extra)
    };
    serialized.map_err(cannot_serialize)
}

/// `reasoning`: the level (adaptive thinking sends none: the model's default) and the summary as given.
fn reasoning(options: &ReasoningOptions) -> Option<Value> {
    let mut reasoning = Map::new();
    if let Some(level) = options.level() {
        reasoning.insert("effort".into(), level.openai().into());
    }
    if let Some(summary) = &options.summary {
        reasoning.insert("summary".into(), summary.as_str().into());
    }
    (!reasoning.is_empty()).then_some(Value::Object(reasoning))
}

/// Provider-specific fields win over ours. `reasoning_effort`, Chat Completions' spelling (what a caller moving
/// from that API sends), becomes this API's `reasoning.effort` unless `reasoning` is set too.
fn merge_extra(body: &Body<'_>, extra: &[ExtraField<'_>]) -> serde_json::Result<Vec<u8>> {
    let mut value = serde_json::to_value(body)?;
    let sets_reasoning = extra.iter().any(|field| field.name == "reasoning");
    if let Value::Object(fields) = &mut value {
        for field in extra {
            if field.name == "reasoning_effort" && !sets_reasoning {
                fields.insert(
                    "reasoning".to_owned(),
                    serde_json::json!({ "effort": field.value }),
                );
            } else {
                set_field(fields, field);
            }
        }
    }
    serde_json::to_vec(&value)
}

fn input_items(messages: &[Message]) -> Result<Vec<Item<'_>>, ChatError> {
    let mut items = Vec::with_capacity(messages.len());
    // A result answers a freeform call with an item of its own type: the ids of those calls so far.
    let mut custom_calls: Vec<&str> = Vec::new();
    for message in messages {
        match message {
            Message::System { content } => {
                if let Some(part) = content.parts().iter().find(|p| !matches!(p, Part::Text(_))) {
                    return Err(ChatError::unsupported(
                        PROVIDER,
                        format_args!("a {} part in a system message", part.kind()),
                    ));
                }
                items.push(Item::Message {
                    role: "system",
                    content: wire_content(content)?,
                });
            }
            Message::User { content } => match content.parts() {
                [Part::Provider(raw)] if raw.provider == ITEM_PROVIDER => {
                    items.push(Item::Raw(&raw.value))
                }
                _ => items.push(Item::Message {
                    role: "user",
                    content: wire_content(content)?,
                }),
            },
            Message::Assistant(assistant) => {
                custom_calls.extend(
                    assistant
                        .tool_calls
                        .iter()
                        .filter(|call| call.kind == CallKind::Custom)
                        .map(|call| call.id.as_str()),
                );
                assistant_items(assistant, &mut items)
            }
            Message::Tool(tool) if custom_calls.contains(&tool.call_id.as_str()) => {
                items.push(Item::CustomToolCallOutput {
                    call_id: &tool.call_id,
                    output: wire_content(&tool.content)?,
                })
            }
            Message::Tool(tool) => items.push(Item::FunctionCallOutput {
                call_id: &tool.call_id,
                output: wire_content(&tool.content)?,
            }),
        }
    }
    Ok(items)
}

/// An assistant turn: its reasoning items first, as the model produced them, then its text and its calls.
fn assistant_items<'a>(assistant: &'a AssistantMessage, items: &mut Vec<Item<'a>>) {
    for part in &assistant.reasoning {
        match &part.continuation {
            Some(Continuation::OpenAiReasoning {
                id,
                encrypted_content,
                summary,
            }) => items.push(Item::Reasoning {
                id,
                summary: summary
                    .iter()
                    .map(|text| Summary {
                        r#type: "summary_text",
                        text,
                    })
                    .collect(),
                encrypted_content: encrypted_content.as_deref(),
            }),
            Some(other) => tracing::debug!(
                from = other.provider(),
                "another provider's reasoning left out of a Responses request"
            ),
            // Text-only reasoning (DeepSeek's) has nothing this API could continue from.
            None => {}
        }
    }
    if !assistant.content.is_empty() || assistant.tool_calls.is_empty() {
        items.push(Item::Message {
            role: "assistant",
            content: WireContent::Text(&assistant.content),
        });
    }
    items.extend(assistant.tool_calls.iter().map(function_call));
}

fn function_call(call: &ToolCall) -> Item<'_> {
    match call.kind {
        CallKind::Custom => Item::CustomToolCall {
            call_id: &call.id,
            name: &call.name,
            namespace: None,
            input: call.custom_input(),
        },
        CallKind::Function => Item::FunctionCall {
            call_id: &call.id,
            name: &call.name,
            namespace: None,
            arguments: call.arguments.to_wire_string(),
        },
    }
}

fn wire_content(content: &Content) -> Result<WireContent<'_>, ChatError> {
    if let Some(text) = content.as_text() {
        return Ok(WireContent::Text(text));
    }
    let parts = content
        .parts()
        .iter()
        .map(wire_part)
        .collect::<Result<_, _>>()?;
    Ok(WireContent::Parts(parts))
}

fn wire_part(part: &Part) -> Result<WirePart<'_>, ChatError> {
    Ok(match part {
        // Cache hints are Anthropic's: OpenAI caches prompt prefixes on its own.
        Part::Text(text) => WirePart::InputText { text: &text.text },
        Part::Image(image) => {
            let (image_url, file_id) = match &image.source {
                MediaSource::Url { url } => (Some(MediaUrl::Url(url)), None),
                MediaSource::Data(blob) => (Some(blob.data_url()), None),
                MediaSource::FileId { id } => (None, Some(id.as_str())),
            };
            WirePart::InputImage {
                image_url,
                file_id,
                detail: image.detail.map_or("auto", |detail| detail.as_str()),
            }
        }
        Part::File(file) => {
            let filename = file.name.as_deref();
            match &file.source {
                MediaSource::Data(blob) => WirePart::InputFile {
                    file_data: Some(blob.data_url()),
                    file_id: None,
                    file_url: None,
                    filename,
                },
                MediaSource::FileId { id } => WirePart::InputFile {
                    file_data: None,
                    file_id: Some(id),
                    file_url: None,
                    filename: None,
                },
                // A data: URL is the file's bytes, not a place to fetch them from.
                MediaSource::Url { url } if DataUrl::parse(url).is_ok() => WirePart::InputFile {
                    file_data: Some(MediaUrl::Url(url)),
                    file_id: None,
                    file_url: None,
                    filename,
                },
                MediaSource::Url { url } => WirePart::InputFile {
                    file_data: None,
                    file_id: None,
                    file_url: Some(url),
                    filename: None,
                },
            }
        }
        Part::Audio(_) => return Err(ChatError::unsupported(PROVIDER, "an audio part")),
        // Only a part already in this API's shape (`input_*`) goes as it came: a Chat Completions part would be
        // refused by the provider after the request was sent.
        Part::Provider(raw)
            if raw.provider == "openai"
                && raw
                    .value
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|kind| kind.starts_with("input_")) =>
        {
            WirePart::Raw(&raw.value)
        }
        Part::Provider(raw) => {
            return Err(ChatError::unsupported(
                PROVIDER,
                format_args!("a part in {}'s format", raw.provider),
            ))
        }
    })
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    match &tool.kind {
        ToolKind::Function => WireTool::Function {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
            strict: false,
        },
        ToolKind::Custom { format } => WireTool::Custom {
            name: &tool.name,
            description: &tool.description,
            format: format.as_ref(),
        },
        ToolKind::Hosted(hosted) => WireTool::Hosted(&hosted.definition),
    }
}

fn tool_choice(choice: &ToolChoice, tools: &[ToolSpec]) -> Value {
    match choice {
        ToolChoice::Auto => Value::from("auto"),
        ToolChoice::None => Value::from("none"),
        ToolChoice::Required => Value::from("required"),
        ToolChoice::Tool(name) => {
            // A namespace's tool is chosen as the client chose it: its namespace and its name in it.
            if let Some((_, namespace, inner)) = crate::namespaced_tools(tools)
                .into_iter()
                .find(|(joined, ..)| joined == name)
            {
                let custom = crate::namespaced_freeform_tools(tools).contains(name);
                let kind = if custom { "custom" } else { "function" };
                return serde_json::json!({"type": kind, "name": inner, "namespace": namespace});
            }
            let custom = tools
                .iter()
                .any(|tool| tool.is_custom() && tool.name == *name);
            let kind = if custom { "custom" } else { "function" };
            serde_json::json!({"type": kind, "name": name})
        }
    }
}

/// `text.format`: this API names the JSON Schema fields beside `type`, not in a nested object. A schema over the
/// default limits is refused.
fn text_format(format: &ResponseFormat) -> Result<Value, ChatError> {
    Ok(match format {
        ResponseFormat::Text => serde_json::json!({"type": "text"}),
        ResponseFormat::JsonObject => serde_json::json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            let mut format = serde_json::json!({"type": "json_schema", "name": name});
            // Strict mode takes the rewritten schema (computed once per schema).
            format["schema"] = match strict {
                Some(true) => normalise(schema, SchemaDialect::OpenAiStrict)?
                    .schema
                    .clone(),
                _ => schema.clone(),
            };
            if let Some(strict) = strict {
                format["strict"] = Value::Bool(*strict);
            }
            format
        }
    })
}

#[cfg(test)]
mod tests;
