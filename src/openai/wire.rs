//! The Chat Completions request body, serialized straight from borrowed [`ChatRequest`] data.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::content::{Content, ImageDetail, MediaSource, MediaUrl, Part};
use crate::error::ChatError;
use crate::message::{Message, ToolCall};
use crate::output_schema::{normalise, SchemaDialect};
use crate::request::{ChatRequest, ResponseFormat, ToolChoice, ToolSpec};
use crate::transport::{cannot_serialize, extra_fields, merge_extra, resolve_model, ToolsJson};
use crate::ApiFormat;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
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
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: WireContent<'a>,
    },
    User {
        content: WireContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: WireContent<'a>,
    },
}

/// A message's `content`: a string for one text, else an array of parts.
#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text {
        text: &'a str,
    },
    ImageUrl {
        image_url: WireImageUrl<'a>,
    },
    InputAudio {
        input_audio: WireAudio<'a>,
    },
    File {
        file: WireFile<'a>,
    },
    /// A part an OpenAI-format client sent that no layer understands, as it came.
    #[serde(untagged)]
    Raw(&'a Value),
}

#[derive(Serialize)]
struct WireImageUrl<'a> {
    url: MediaUrl<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'static str>,
}

#[derive(Serialize)]
struct WireAudio<'a> {
    data: &'a str,
    format: &'a str,
}

#[derive(Serialize)]
struct WireFile<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    file_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<MediaUrl<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    filename: Option<&'a str>,
}

/// The provider name in errors about content this format cannot carry.
const PROVIDER: &str = "the OpenAI Chat Completions API";

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: &'a Value,
}

/// How the output token limit is spelled on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`: understood by every OpenAI-compatible server.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models.
    MaxCompletionTokens,
}

pub(crate) struct EncodeOptions<'a> {
    pub(crate) default_model: Option<&'a str>,
    pub(crate) max_tokens_field: MaxTokensField,
    pub(crate) include_usage: bool,
    /// The provider's cache of the last tools list's JSON.
    pub(crate) tools: &'a ToolsJson,
}

/// Serialize a request to the JSON body of `POST /chat/completions`.
pub(crate) fn encode(
    request: &ChatRequest,
    opts: &EncodeOptions<'_>,
) -> Result<Vec<u8>, ChatError> {
    let options = &request.options;
    let model = resolve_model(options, opts.default_model)?;
    let tools = opts
        .tools
        .get(&options.tools, wire_tool)
        .map_err(cannot_serialize)?;
    let (max_tokens, max_completion_tokens) = match opts.max_tokens_field {
        MaxTokensField::MaxTokens => (options.max_output_tokens, None),
        MaxTokensField::MaxCompletionTokens => (None, options.max_output_tokens),
    };
    let body = Body {
        model,
        messages: wire_messages(&request.messages)?,
        stream: options.stream,
        stream_options: (options.stream && opts.include_usage).then_some(StreamOptions {
            include_usage: true,
        }),
        tools: tools.as_deref(),
        tool_choice: options.tool_choice.as_ref().map(tool_choice),
        parallel_tool_calls: options.parallel_tool_calls,
        temperature: options.temperature,
        top_p: options.top_p,
        max_tokens,
        max_completion_tokens,
        stop: &options.stop,
        response_format: options
            .response_format
            .as_ref()
            .map(response_format)
            .transpose()?,
        // Adaptive thinking asks for the model's own default: no level sent.
        reasoning_effort: options
            .reasoning
            .as_ref()
            .and_then(|r| r.level())
            .map(|level| level.openai()),
        user: options.end_user.as_deref(),
    };
    let extra = extra_fields(options, ApiFormat::ChatCompletions);
    let serialized = if extra.is_empty() {
        crate::transport::to_body(&body, &request.messages)
    } else {
        merge_extra(&body, extra)
    };
    serialized.map_err(cannot_serialize)
}

/// The messages on the wire. A tool message is text only in Chat Completions: the images and files a tool
/// returned follow the run of tool messages as one user message, in the order of their calls.
fn wire_messages(messages: &[Message]) -> Result<Vec<WireMessage<'_>>, ChatError> {
    let mut wire = Vec::with_capacity(messages.len());
    let mut tool_media: Vec<WirePart<'_>> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        match message {
            Message::System { content } => {
                if let Some(part) = content.parts().iter().find(|p| !matches!(p, Part::Text(_))) {
                    return Err(ChatError::unsupported(
                        PROVIDER,
                        format_args!("a {} part in a system message", part.kind()),
                    ));
                }
                wire.push(WireMessage::System {
                    content: wire_content(content)?,
                })
            }
            Message::User { content } => wire.push(WireMessage::User {
                content: wire_content(content)?,
            }),
            Message::Assistant(a) => {
                if let Some(provider) = a.reasoning.iter().find_map(|r| r.provider()) {
                    tracing::debug!(
                        from = provider,
                        "reasoning left out of a Chat Completions request: the API takes none back"
                    );
                }
                wire.push(WireMessage::Assistant {
                    // OpenAI wants `null`, not "", on a message that only calls tools.
                    content: (!a.content.is_empty() || a.tool_calls.is_empty())
                        .then_some(a.content.as_str()),
                    tool_calls: a.tool_calls.iter().map(wire_tool_call).collect(),
                })
            }
            Message::Tool(t) => {
                let content = if t.content.is_text_only() {
                    wire_content(&t.content)?
                } else {
                    let mut text = Vec::new();
                    for part in t.content.parts() {
                        match part {
                            Part::Text(part) => text.push(WirePart::Text { text: &part.text }),
                            other => tool_media.push(wire_part(other)?),
                        }
                    }
                    WireContent::Parts(text)
                };
                wire.push(WireMessage::Tool {
                    tool_call_id: &t.call_id,
                    content,
                });
                let run_ends = !matches!(messages.get(i + 1), Some(Message::Tool(_)));
                if run_ends && !tool_media.is_empty() {
                    wire.push(WireMessage::User {
                        content: WireContent::Parts(std::mem::take(&mut tool_media)),
                    });
                }
            }
        }
    }
    Ok(wire)
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
        Part::Text(text) => WirePart::Text { text: &text.text },
        Part::Image(image) => WirePart::ImageUrl {
            image_url: WireImageUrl {
                url: match &image.source {
                    MediaSource::Url { url } => MediaUrl::Url(url),
                    MediaSource::Data(blob) => blob.data_url(),
                    MediaSource::FileId { .. } => {
                        return Err(ChatError::unsupported(PROVIDER, "an image by file id"))
                    }
                },
                // Chat Completions takes low, high and auto.
                detail: image.detail.map(|detail| match detail {
                    ImageDetail::Original => ImageDetail::High.as_str(),
                    other => other.as_str(),
                }),
            },
        },
        Part::Audio(audio) => WirePart::InputAudio {
            input_audio: WireAudio {
                data: audio.data.base64(),
                format: audio.format(),
            },
        },
        Part::File(file) => WirePart::File {
            file: match &file.source {
                MediaSource::Data(blob) => WireFile {
                    file_id: None,
                    file_data: Some(blob.data_url()),
                    filename: file.name.as_deref(),
                },
                MediaSource::FileId { id } => WireFile {
                    file_id: Some(id),
                    file_data: None,
                    filename: None,
                },
                MediaSource::Url { .. } => {
                    return Err(ChatError::unsupported(
                        PROVIDER,
                        "a file by URL (send its bytes or an uploaded file id)",
                    ))
                }
            },
        },
        Part::Provider(raw) if raw.provider == "openai" => WirePart::Raw(&raw.value),
        Part::Provider(raw) => {
            return Err(ChatError::unsupported(
                PROVIDER,
                format_args!("a part in {}'s format", raw.provider),
            ))
        }
    })
}

fn wire_tool_call(call: &ToolCall) -> WireToolCall<'_> {
    WireToolCall {
        id: &call.id,
        r#type: "function",
        function: WireFunctionCall {
            name: &call.name,
            arguments: call.arguments.to_wire_string(),
        },
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        r#type: "function",
        function: WireFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
        },
    }
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => Value::from("auto"),
        ToolChoice::None => Value::from("none"),
        ToolChoice::Required => Value::from("required"),
        ToolChoice::Tool(name) => {
            serde_json::json!({"type": "function", "function": {"name": name}})
        }
    }
}

/// `response_format`; with `strict: true` the schema is rewritten for strict mode
/// ([`SchemaDialect::OpenAiStrict`], computed once per schema); a schema over the default limits is refused.
fn response_format(format: &ResponseFormat) -> Result<Value, ChatError> {
    Ok(match format {
        ResponseFormat::Text => serde_json::json!({"type": "text"}),
        ResponseFormat::JsonObject => serde_json::json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            let mut inner = serde_json::json!({"name": name});
            match strict {
                Some(true) => {
                    inner["schema"] = normalise(schema, SchemaDialect::OpenAiStrict)?
                        .schema
                        .clone();
                    inner["strict"] = Value::Bool(true);
                }
                Some(false) => {
                    inner["schema"] = schema.clone();
                    inner["strict"] = Value::Bool(false);
                }
                None => inner["schema"] = schema.clone(),
            }
            serde_json::json!({"type": "json_schema", "json_schema": inner})
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::message::{AssistantMessage, ToolMessage};
    use crate::request::ChatOptions;
    use serde_json::json;

    fn encode_value(request: &ChatRequest) -> Value {
        let opts = EncodeOptions {
            default_model: Some("default-model"),
            max_tokens_field: MaxTokensField::MaxTokens,
            include_usage: true,
            tools: &ToolsJson::default(),
        };
        serde_json::from_slice(&encode(request, &opts).unwrap()).unwrap()
    }

    #[test]
    fn a_tool_conversation_encodes_as_chat_completions_expects() {
        let mut request = ChatRequest::new(vec![
            Message::system("sys"),
            Message::user("add 2 and 3"),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::new("call_1", "add", json!({"a": 2, "b": 3}))],
                ..AssistantMessage::default()
            }),
            Message::Tool(ToolMessage::success("call_1", "add", "5")),
        ]);
        *request.options = ChatOptions {
            tools: vec![ToolSpec::new("add", "adds", json!({"type": "object"}))].into(),
            tool_choice: Some(ToolChoice::Required),
            max_output_tokens: Some(50),
            extra: json!({"seed": 1, "temperature": 0.5})
                .as_object()
                .unwrap()
                .clone(),
            ..ChatOptions::default()
        };
        let body = encode_value(&request);
        assert_eq!(body["model"], "default-model");
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":2,\"b\":3}"
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "5"})
        );
        assert_eq!(body["tools"][0]["function"]["name"], "add");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["seed"], 1);
        assert_eq!(body["temperature"], 0.5);
    }

    #[test]
    fn non_streaming_requests_do_not_ask_for_stream_options() {
        let body = encode_value(&ChatRequest::new(vec![Message::user("hi")]).stream(false));
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn a_missing_model_is_an_invalid_request() {
        let opts = EncodeOptions {
            default_model: None,
            max_tokens_field: MaxTokensField::MaxTokens,
            include_usage: true,
            tools: &ToolsJson::default(),
        };
        let err = encode(&ChatRequest::new(vec![Message::user("hi")]), &opts).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    }
}
