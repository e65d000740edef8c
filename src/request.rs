//! [`ChatRequest`]: the messages, the options, and the cross-layer context of one chat call.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::{CallerIdentity, ConversationId};
use crate::message::Message;
use crate::CancellationToken;

/// One chat call: what to send, how, and the context layers share.
///
/// `extensions` carries typed context between layers, as `http::Request::extensions` does for HTTP:
/// [`ConversationId`], [`CallerIdentity`], a [`CancellationToken`], [`crate::ApprovalDecisions`], or any type of
/// your own.
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Model, tools and sampling options.
    pub options: ChatOptions,
    /// Typed cross-layer context.
    pub extensions: http::Extensions,
}

impl ChatRequest {
    /// A request with these messages and default options (streaming on).
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            ..ChatRequest::default()
        }
    }

    /// Set the model (otherwise the leaf's default model is used).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.options.model = Some(model.into());
        self
    }

    /// Offer a tool to the model.
    pub fn tool(mut self, tool: ToolSpec) -> Self {
        self.options.tools.push(tool);
        self
    }

    /// Ask for a streaming (`true`, the default) or a non-streaming provider call. Either way the response is
    /// the same event stream.
    pub fn stream(mut self, stream: bool) -> Self {
        self.options.stream = stream;
        self
    }

    /// Insert a typed context value.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The conversation id from the context, if one was set.
    pub fn conversation_id(&self) -> Option<&ConversationId> {
        self.extensions.get()
    }

    /// The caller's identity from the context, if one was set.
    pub fn caller(&self) -> Option<&CallerIdentity> {
        self.extensions.get()
    }

    /// The cancellation token from the context, if one was set.
    pub fn cancellation(&self) -> Option<&CancellationToken> {
        self.extensions.get()
    }
}

/// How to call the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatOptions {
    /// The model id; `None` uses the leaf's default model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tools offered to the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether and which tool the model must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// The most tokens the model may produce.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Text, JSON object or JSON Schema output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Streaming (`true`) or non-streaming provider call.
    pub stream: bool,
    /// Provider-specific fields merged into the request body as they are (they win over ours).
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        ChatOptions {
            model: None,
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            stop: Vec::new(),
            response_format: None,
            stream: true,
            extra: Map::new(),
        }
    }
}

/// A tool as offered to the model: its name, what it does, and a JSON Schema of its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// A tool spec.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Whether and which tool the model must call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool must be called.
    Tool(String),
}

/// The shape of the model's text output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum ResponseFormat {
    /// Free text.
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// The schema's name.
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// Whether the provider must follow the schema strictly.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_round_trip_and_default_to_streaming() {
        let options = ChatOptions {
            model: Some("gpt-4o-mini".into()),
            tools: vec![ToolSpec::new("add", "adds", json!({"type": "object"}))],
            tool_choice: Some(ToolChoice::Tool("add".into())),
            temperature: Some(0.25),
            max_output_tokens: Some(100),
            stop: vec!["END".into()],
            response_format: Some(ResponseFormat::JsonSchema {
                name: "out".into(),
                schema: json!({"type": "object"}),
                strict: Some(true),
            }),
            extra: json!({"seed": 7}).as_object().unwrap().clone(),
            ..ChatOptions::default()
        };
        let text = serde_json::to_string(&options).unwrap();
        assert_eq!(serde_json::from_str::<ChatOptions>(&text).unwrap(), options);
        assert!(serde_json::from_str::<ChatOptions>("{}").unwrap().stream);
    }

    #[test]
    fn request_context_is_typed() {
        let req = ChatRequest::new(vec![Message::user("hi")])
            .with_extension(ConversationId::new("conv-1"))
            .with_extension(CallerIdentity::new("alice"));
        assert_eq!(req.conversation_id().unwrap().as_str(), "conv-1");
        assert_eq!(req.caller().unwrap().as_str(), "alice");
        assert!(req.cancellation().is_none());
    }
}
