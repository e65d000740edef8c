//! [`ChatRequest`]: the messages, the options, and the cross-layer context of one chat call.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::carried::Carried;
use crate::context::{CallerIdentity, ConversationId};
use crate::message::Message;
use crate::reasoning_options::ReasoningOptions;
use crate::tool_kind::{HostedTool, ToolKind};
use crate::CancellationToken;

/// A value shared by the copies of a request until one of them changes it (copy on write).
///
/// Retry and fallback layers keep a copy of the request to send it again; with the conversation, the tools and
/// the context behind a `Shared`, that copy is a reference-count increment instead of a deep clone. Reading goes
/// through `Deref` (`req.messages.len()`, `&req.messages[..]`, `for m in &req.messages`); changing goes through
/// `DerefMut` (`req.messages.push(..)`), which first copies the value if another request still shares it.
/// An empty value is not allocated at all (it reads as a static empty one), so a request without tools or context
/// costs nothing more, and a `Shared` is one pointer wide. Associated functions, not methods, so that none hides
/// a method of the value: [`Shared::into_inner`], [`Shared::ptr_eq`].
pub struct Shared<T>(Option<Arc<T>>);

mod sealed {
    /// What a [`Shared`](super::Shared) can hold: a value with a static empty one to read while nothing is
    /// allocated.
    pub trait Empty: Clone + Default + 'static {
        /// The empty value.
        fn empty() -> &'static Self;
    }
}
use sealed::Empty;

impl<T: Clone + 'static> Empty for Vec<T> {
    fn empty() -> &'static Self {
        const { &Vec::new() }
    }
}

impl Empty for http::Extensions {
    fn empty() -> &'static Self {
        static EMPTY: OnceLock<http::Extensions> = OnceLock::new();
        EMPTY.get_or_init(http::Extensions::new)
    }
}

impl Empty for ChatOptions {
    fn empty() -> &'static Self {
        static DEFAULT: OnceLock<ChatOptions> = OnceLock::new();
        DEFAULT.get_or_init(ChatOptions::default)
    }
}

impl<T> Shared<T> {
    /// Share `value`.
    pub fn new(value: T) -> Self {
        Shared(Some(Arc::new(value)))
    }

    /// Whether two handles share one allocated value (no comparison of contents; two empty values never do).
    pub fn ptr_eq(this: &Self, other: &Self) -> bool {
        match (&this.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl<T: Empty> Shared<T> {
    /// The value, copied only if another handle still shares it.
    pub fn into_inner(this: Self) -> T {
        match this.0 {
            Some(value) => Arc::unwrap_or_clone(value),
            None => T::default(),
        }
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: Empty> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.0 {
            Some(value) => value,
            None => T::empty(),
        }
    }
}

impl<T: Empty> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }
}

impl<T: Empty> AsRef<T> for Shared<T> {
    fn as_ref(&self) -> &T {
        self
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared(None)
    }
}

impl<T: Empty + fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: Empty + PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Shared::ptr_eq(self, other) || **self == **other
    }
}

impl<T: Empty + PartialEq> PartialEq<T> for Shared<T> {
    fn eq(&self, other: &T) -> bool {
        **self == *other
    }
}

impl<T: Empty + Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Shared::new)
    }
}

impl<'a, T: Empty> IntoIterator for &'a Shared<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        (**self).into_iter()
    }
}

impl<T> FromIterator<T> for Shared<Vec<T>> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Shared::new(iter.into_iter().collect())
    }
}

/// One chat call: what to send, how, and the context layers share.
///
/// `extensions` carries typed context between layers, as `http::Request::extensions` does for HTTP:
/// [`ConversationId`], [`CallerIdentity`], a [`CancellationToken`], [`crate::ApprovalDecisions`], or any type of
/// your own.
///
/// Cloning a request is cheap: the messages, the options and the extensions are [`Shared`] (copied on write), so
/// a layer that keeps a copy to send again pays a few reference counts, not a deep copy of the conversation.
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    /// The conversation so far, oldest first.
    pub messages: Shared<Vec<Message>>,
    /// Model, tools and sampling options.
    pub options: Shared<ChatOptions>,
    /// Typed cross-layer context.
    pub extensions: Shared<http::Extensions>,
}

impl ChatRequest {
    /// A request with these messages and default options (streaming on).
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages: Shared::new(messages),
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

/// In a request's extensions: system messages after the first turn stay in their place for a provider whose
/// API takes them there (Anthropic's `role: "system"` messages, which only some models accept), instead of
/// joining the leading system prompt. Set by a caller that sent them in that API's own format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SystemMessagesInPlace;

/// How to call the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatOptions {
    /// The model id; `None` uses the leaf's default model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tools offered to the model (shared by copies of the options until one changes them).
    #[serde(skip_serializing_if = "no_tools")]
    pub tools: Shared<Vec<ToolSpec>>,
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
    /// How much to reason, mapped by each leaf to its provider's setting ([`ReasoningOptions`] has the table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningOptions>,
    /// An opaque id of the end user, for the provider's abuse monitoring: OpenAI's `user`, Anthropic's
    /// `metadata.user_id`; left out for providers without such a field (Gemini, Bedrock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
    /// Provider-specific fields merged into the request body as they are (they win over ours).
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// Fields an inbound wire format does not model, kept in the client's order for an upstream that speaks
    /// the same format (see [`Carried`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        ChatOptions {
            model: None,
            tools: Shared::default(),
            tool_choice: None,
            parallel_tool_calls: None,
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            stop: Vec::new(),
            response_format: None,
            stream: true,
            reasoning: None,
            end_user: None,
            extra: Map::new(),
            carried: None,
        }
    }
}

fn no_tools(tools: &Shared<Vec<ToolSpec>>) -> bool {
    tools.is_empty()
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
    /// A prompt-cache breakpoint after this tool's definition (Anthropic `cache_control`; other providers
    /// cache on their own and ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::content::CacheHint>,
    /// A function tool, a freeform tool, or a tool the provider hosts ([`ToolKind`]).
    #[serde(default, skip_serializing_if = "ToolKind::is_function")]
    pub kind: ToolKind,
}

impl ToolSpec {
    /// A function tool.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
            cache: None,
            kind: ToolKind::Function,
        }
    }

    /// A freeform tool: the model writes one string, in `format`'s syntax when the client gave one. Its
    /// `parameters` are the schema of the function tool a provider without freeform tools gets: an object with
    /// one required string, `input`.
    pub fn custom(
        name: impl Into<String>,
        description: impl Into<String>,
        format: Option<Value>,
    ) -> Self {
        ToolSpec {
            kind: ToolKind::Custom { format },
            ..ToolSpec::new(
                name,
                description,
                serde_json::json!({
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The tool's whole input."}},
                    "required": ["input"],
                    "additionalProperties": false,
                }),
            )
        }
    }

    /// A tool the provider hosts, named by its definition's `name` (or else its `type`).
    pub fn hosted(tool: HostedTool) -> Self {
        let name = tool
            .definition
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(tool.tool_type())
            .to_owned();
        ToolSpec {
            kind: ToolKind::Hosted(tool),
            ..ToolSpec::new(
                name,
                "",
                serde_json::json!({"type": "object", "properties": {}}),
            )
        }
    }

    /// Whether this is a freeform tool.
    pub fn is_custom(&self) -> bool {
        matches!(self.kind, ToolKind::Custom { .. })
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
            tools: vec![ToolSpec::new("add", "adds", json!({"type": "object"}))].into(),
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

    #[test]
    fn a_copy_shares_until_it_changes() {
        let original = ChatRequest::new(vec![Message::user("hi")])
            .tool(ToolSpec::new("add", "adds", json!({"type": "object"})))
            .with_extension(ConversationId::new("conv-1"));
        let mut copy = original.clone();
        assert!(Shared::ptr_eq(&original.messages, &copy.messages));
        assert!(Shared::ptr_eq(&original.options.tools, &copy.options.tools));
        assert!(Shared::ptr_eq(&original.extensions, &copy.extensions));

        copy.messages.push(Message::user("more"));
        copy.options.tools.clear();
        copy.extensions.insert(ConversationId::new("conv-2"));
        assert!(!Shared::ptr_eq(&original.messages, &copy.messages));
        assert_eq!(original.messages.len(), 1);
        assert_eq!(copy.messages.len(), 2);
        assert_eq!(original.options.tools.len(), 1);
        assert!(copy.options.tools.is_empty());
        assert_eq!(original.conversation_id().unwrap().as_str(), "conv-1");
        assert_eq!(copy.conversation_id().unwrap().as_str(), "conv-2");
        assert_eq!(Shared::into_inner(copy.messages).len(), 2);
    }
}
