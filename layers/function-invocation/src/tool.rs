//! Tools: the [`Tool`] trait, typed tools from async functions, and [`CompiledTool`], a tool with its argument
//! validator ([`Schema`](crate::schema::Schema)) compiled once.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tower_chat::{BoxError, CancellationToken, ChatError, ErrorKind, ToolArguments, ToolSpec};

use crate::schema::Schema;

/// Everything a tool body may want to know about the call it serves.
#[derive(Clone, Debug)]
pub struct ToolContext {
    call_id: String,
    tool_name: String,
    round: usize,
    extensions: Arc<http::Extensions>,
    cancellation: CancellationToken,
}

impl ToolContext {
    /// A context, for running a tool outside the loop (tests, other executors).
    pub fn new(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        round: usize,
        extensions: Arc<http::Extensions>,
        cancellation: CancellationToken,
    ) -> Self {
        ToolContext {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            round,
            extensions,
            cancellation,
        }
    }

    /// The model's id of this call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The name the model called.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// Which tool round of the request this call belongs to (0 for the first).
    pub fn round(&self) -> usize {
        self.round
    }

    /// The extensions of the request that started the loop ([`tower_chat::ConversationId`],
    /// [`tower_chat::CallerIdentity`], your own types).
    pub fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }

    /// Cancelled when the caller drops the stream or cancels the request. The loop also drops a cancelled body's
    /// future, so a body only needs this to stop work it spawned elsewhere.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }
}

/// Why a tool body failed; the message is what the model sees (subject to the layer's
/// [`ErrorDetail`](crate::ErrorDetail)).
pub struct ToolError {
    message: String,
    invalid_arguments: bool,
    source: Option<BoxError>,
}

impl ToolError {
    /// A failure with a message.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            invalid_arguments: false,
            source: None,
        }
    }

    /// The arguments were well-formed JSON matching the schema but still unusable (a date in the past, an id that
    /// does not exist). Reported to the model in full, like a schema violation, so it can correct the call.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        ToolError {
            invalid_arguments: true,
            ..ToolError::new(message)
        }
    }

    /// Attach the underlying cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether this reports unusable arguments.
    pub fn is_invalid_arguments(&self) -> bool {
        self.invalid_arguments
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("message", &self.message)
            .field("invalid_arguments", &self.invalid_arguments)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A tool the loop can run.
///
/// Most tools are built with [`tool_fn`] (typed arguments, schema derived) or [`tool_json`] (hand-written schema);
/// implement this trait for tools that carry their own state. Turn a tool into a [`CompiledTool`] to use it.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and JSON Schema of the arguments, as offered to the model.
    fn spec(&self) -> ToolSpec;

    /// Whether every call needs a human decision before it runs.
    fn requires_approval(&self) -> bool {
        false
    }

    /// Whether the result goes straight to the caller instead of back to the model (Spring AI's
    /// `returnDirect`): when every call of a round is return-direct and succeeds, the loop ends with the results.
    fn return_direct(&self) -> bool {
        false
    }

    /// A time limit for one call, overriding the layer's [`tool_timeout`](crate::FunctionInvocationLayer::tool_timeout).
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// What the tool says about itself beyond its spec (MCP's tool annotations, where it comes from), for
    /// approval policies. Read once when the tool is compiled.
    fn hints(&self) -> ToolHints {
        ToolHints::default()
    }

    /// Run the tool on arguments that passed schema validation. The result is what the model sees: text, or
    /// parts (text and images, see [`ToolOutput`]).
    fn call(
        &self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;
}

/// What a tool returns: text (`ToolOutput::from("12C")`, or a `String` `.into()`), or parts such as text and an
/// image (`ToolOutput::from_parts(..)`). Providers whose tool messages take images get them in the tool result
/// (Anthropic's `tool_result` blocks); Chat Completions, whose tool messages are text, gets them in a user message
/// right after the tool messages.
pub type ToolOutput = tower_chat::Content;

/// Hints a tool gives about itself — MCP's tool annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
/// `openWorldHint`) and its origin — read by approval policies through [`CompiledTool::hints`].
///
/// These are claims of the tool's author, not guarantees: a policy may loosen a rule for a read-only tool of a
/// server it trusts, but should not trust the hints of a server it does not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolHints {
    /// The tool does not modify its environment (`None`: not said).
    pub read_only: Option<bool>,
    /// The tool may perform destructive updates (MCP's default when not said: `true`, unless read-only).
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    pub idempotent: Option<bool>,
    /// The tool interacts with an open world of external entities.
    pub open_world: Option<bool>,
    /// Where the tool comes from, e.g. the name of the MCP server that provides it.
    pub source: Option<String>,
    /// The tool's own name at its source, when the model knows it under another (a prefixed MCP tool).
    pub source_name: Option<String>,
}

type Handler = dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>>
    + Send
    + Sync
    + 'static;

/// A tool made from a closure by [`tool_fn`] or [`tool_json`]; set flags with the `with_*` methods, then
/// [`compile`](FnTool::compile) it.
pub struct FnTool {
    spec: ToolSpec,
    requires_approval: bool,
    return_direct: bool,
    timeout: Option<Duration>,
    handler: Box<Handler>,
}

impl FnTool {
    /// Require a human decision before every call.
    pub fn with_approval(mut self) -> Self {
        self.requires_approval = true;
        self
    }

    /// Hand results straight to the caller (see [`Tool::return_direct`]).
    pub fn with_return_direct(mut self) -> Self {
        self.return_direct = true;
        self
    }

    /// Limit one call's duration.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Compile the argument validator (see [`CompiledTool::new`]).
    pub fn compile(self) -> Result<CompiledTool, ChatError> {
        CompiledTool::new(self)
    }
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .field("requires_approval", &self.requires_approval)
            .field("return_direct", &self.return_direct)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    fn return_direct(&self) -> bool {
        self.return_direct
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn call(
        &self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        (self.handler)(arguments, context)
    }
}

/// A tool from an async function of typed arguments: the schema is derived from `A` with `schemars`, arguments
/// are deserialized with serde, and the output is serialized to JSON (a string output is sent as it is; a
/// [`ToolOutput`] is sent as its parts, so a tool can return images).
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use tower_chat_function_invocation::{tool_fn, ToolContext};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Add {
///     /// First addend.
///     a: i64,
///     /// Second addend.
///     b: i64,
/// }
///
/// let add = tool_fn("add", "Adds two integers", |args: Add, _ctx: ToolContext| async move {
///     Ok::<_, std::convert::Infallible>(args.a + args.b)
/// })
/// .compile()
/// .unwrap();
/// assert_eq!(add.spec().parameters["required"], serde_json::json!(["a", "b"]));
/// ```
pub fn tool_fn<A, F, Fut, R, E>(
    name: impl Into<String>,
    description: impl Into<String>,
    function: F,
) -> FnTool
where
    A: DeserializeOwned + schemars::JsonSchema,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: Serialize + 'static,
    E: fmt::Display + 'static,
{
    let mut schema = schemars::schema_for!(A).to_value();
    if let Some(object) = schema.as_object_mut() {
        // Providers want the bare schema; `$schema` and `title` only add tokens.
        object.remove("$schema");
        object.remove("title");
    }
    let handler = move |arguments: Value, context: ToolContext| {
        let parsed = serde_json::from_value::<A>(arguments);
        let future = parsed.map(|args| function(args, context));
        let boxed: BoxFuture<'static, Result<ToolOutput, ToolError>> = Box::pin(async move {
            let future = future.map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
            let output = future.await.map_err(into_tool_error)?;
            tool_output(output)
        });
        boxed
    };
    FnTool {
        spec: ToolSpec::new(name, description, schema),
        requires_approval: false,
        return_direct: false,
        timeout: None,
        handler: Box::new(handler),
    }
}

/// A tool with a hand-written JSON Schema whose body gets the arguments as JSON (already validated).
///
/// ```
/// use serde_json::json;
/// use tower_chat_function_invocation::tool_json;
///
/// let echo = tool_json(
///     "echo",
///     "Repeats the text",
///     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
///     |args, _ctx| async move { Ok::<_, String>(args["text"].clone()) },
/// )
/// .compile()
/// .unwrap();
/// assert_eq!(echo.name(), "echo");
/// ```
pub fn tool_json<F, Fut, R, E>(
    name: impl Into<String>,
    description: impl Into<String>,
    parameters: Value,
    function: F,
) -> FnTool
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: Serialize + 'static,
    E: fmt::Display + 'static,
{
    let handler = move |arguments: Value, context: ToolContext| {
        let future = function(arguments, context);
        let boxed: BoxFuture<'static, Result<ToolOutput, ToolError>> = Box::pin(async move {
            let output = future.await.map_err(into_tool_error)?;
            tool_output(output)
        });
        boxed
    };
    FnTool {
        spec: ToolSpec::new(name, description, parameters),
        requires_approval: false,
        return_direct: false,
        timeout: None,
        handler: Box::new(handler),
    }
}

/// A body's error as a [`ToolError`]: a `ToolError` is kept as it is (with its kind), anything else becomes its
/// message.
fn into_tool_error<E: fmt::Display + 'static>(error: E) -> ToolError {
    let mut slot = Some(error);
    if let Some(tool_error) =
        (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<ToolError>>()
    {
        if let Some(tool_error) = tool_error.take() {
            return tool_error;
        }
    }
    match slot {
        Some(error) => ToolError::new(error.to_string()),
        None => ToolError::new("the tool failed"),
    }
}

/// A body's output: a [`ToolOutput`] as it is, anything else as JSON text (a string as it is).
fn tool_output<R: Serialize + 'static>(output: R) -> Result<ToolOutput, ToolError> {
    let mut slot = Some(output);
    if let Some(content) =
        (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<ToolOutput>>()
    {
        if let Some(content) = content.take() {
            return Ok(content);
        }
    }
    let Some(output) = slot else {
        return Err(ToolError::new("the tool's output was taken"));
    };
    match serde_json::to_value(&output) {
        Ok(Value::String(text)) => Ok(text.into()),
        Ok(other) => Ok(other.to_string().into()),
        Err(e) => Err(ToolError::new(format!(
            "the tool's output could not be serialized: {e}"
        ))),
    }
}

/// The most schema violations listed in one error result.
const MAX_LISTED_VIOLATIONS: usize = 10;

struct Compiled {
    spec: ToolSpec,
    validator: Schema,
    requires_approval: bool,
    return_direct: bool,
    timeout: Option<Duration>,
    hints: ToolHints,
    tool: Box<dyn Tool>,
}

/// A tool ready for the loop: its spec read once and its JSON Schema compiled once into a validator. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct CompiledTool {
    inner: Arc<Compiled>,
}

impl CompiledTool {
    /// Read the tool's spec and compile its schema.
    ///
    /// Fails with [`ErrorKind::InvalidRequest`] when the name is not 1–64 characters of `a-z A-Z 0-9 _ -` (what
    /// providers accept), or the parameters are not a JSON object that compiles as a JSON Schema; in the latter
    /// case the error's [`source`](std::error::Error::source) is the [`SchemaError`](crate::schema::SchemaError)
    /// naming the keyword.
    pub fn new(tool: impl Tool) -> Result<Self, ChatError> {
        let spec = tool.spec();
        let name_ok = !spec.name.is_empty()
            && spec.name.len() <= 64
            && spec
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "invalid tool name {:?}: use 1-64 characters of a-z, A-Z, 0-9, _ and -",
                    spec.name
                ),
            ));
        }
        if !spec.parameters.is_object() {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the parameters of tool `{}` must be a JSON Schema object, got {}",
                    spec.name, spec.parameters
                ),
            ));
        }
        let validator = Schema::compile(&spec.parameters).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the parameters of tool `{}` are not a valid JSON Schema: {e}",
                    spec.name
                ),
            )
            .with_source(e)
        })?;
        Ok(CompiledTool {
            inner: Arc::new(Compiled {
                requires_approval: tool.requires_approval(),
                return_direct: tool.return_direct(),
                timeout: tool.timeout(),
                hints: tool.hints(),
                spec,
                validator,
                tool: Box::new(tool),
            }),
        })
    }

    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        &self.inner.spec.name
    }

    /// The spec offered to the model.
    pub fn spec(&self) -> &ToolSpec {
        &self.inner.spec
    }

    /// Whether every call needs a human decision.
    pub fn requires_approval(&self) -> bool {
        self.inner.requires_approval
    }

    /// Whether results go straight to the caller.
    pub fn return_direct(&self) -> bool {
        self.inner.return_direct
    }

    /// The tool's own time limit.
    pub fn timeout(&self) -> Option<Duration> {
        self.inner.timeout
    }

    /// What the tool says about itself (see [`Tool::hints`]).
    pub fn hints(&self) -> &ToolHints {
        &self.inner.hints
    }

    /// Check a call's arguments: the JSON value to run with, or a message for the model listing what is wrong.
    pub fn validate(&self, arguments: &ToolArguments) -> Result<Value, String> {
        let name = self.name();
        match arguments {
            ToolArguments::Invalid { error, .. } => Err(format!(
                "invalid arguments for tool `{name}`: not valid JSON ({error})"
            )),
            ToolArguments::Json(value) => {
                let Err(violations) = self.inner.validator.validate(value) else {
                    return Ok(value.clone());
                };
                let mut message = format!("invalid arguments for tool `{name}`:");
                for violation in violations.iter().take(MAX_LISTED_VIOLATIONS) {
                    message.push_str(&format!("\n- at {violation}"));
                }
                let more = violations.len().saturating_sub(MAX_LISTED_VIOLATIONS);
                if more > 0 {
                    message.push_str(&format!("\n- and {more} more"));
                }
                Err(message)
            }
        }
    }

    /// Run the body on validated arguments (the loop adds timeout, panic and cancellation handling around this).
    pub fn call(
        &self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        self.inner.tool.call(arguments, context)
    }
}

impl fmt::Debug for CompiledTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledTool")
            .field("name", &self.inner.spec.name)
            .field("requires_approval", &self.inner.requires_approval)
            .field("return_direct", &self.inner.return_direct)
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Weather {
        city: String,
        days: Option<u8>,
    }

    fn weather() -> CompiledTool {
        tool_fn("weather", "Forecast", |w: Weather, _| async move {
            Ok::<_, String>(format!("sunny in {}", w.city))
        })
        .compile()
        .unwrap()
    }

    #[test]
    fn derived_schema_is_bare_and_lists_required_fields() {
        let tool = weather();
        let schema = &tool.spec().parameters;
        assert!(schema.get("$schema").is_none(), "{schema}");
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["city"]));
    }

    #[test]
    fn validation_lists_every_violation_with_its_path() {
        let tool = weather();
        let err = tool
            .validate(&ToolArguments::Json(json!({"days": "three"})))
            .unwrap_err();
        assert!(
            err.contains("\n- at /: missing required property \"city\""),
            "{err}"
        );
        assert!(
            err.contains("\n- at /days: expected integer or null, found string \"three\""),
            "{err}"
        );
        let err = tool
            .validate(&ToolArguments::parse("{\"city\":".into()))
            .unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        assert_eq!(
            tool.validate(&ToolArguments::Json(json!({"city": "Oslo"})))
                .unwrap(),
            json!({"city": "Oslo"})
        );
    }

    #[test]
    fn bad_names_and_schemas_are_typed_errors() {
        let bad_name = tool_json(
            "has space",
            "",
            json!({"type": "object"}),
            |v, _| async move { Ok::<_, String>(v) },
        )
        .compile()
        .unwrap_err();
        assert_eq!(bad_name.kind(), &ErrorKind::InvalidRequest);
        let bad_schema = tool_json("t", "", json!({"type": 12}), |v, _| async move {
            Ok::<_, String>(v)
        })
        .compile()
        .unwrap_err();
        assert!(
            bad_schema.message().contains("not a valid JSON Schema"),
            "{bad_schema}"
        );
        assert_eq!(bad_schema.kind(), &ErrorKind::InvalidRequest);
        // The keyword and where it is, so the author can find it in a large schema.
        let nested = tool_json(
            "t",
            "",
            json!({"type": "object", "properties": {"when": {"pattern": "(?<=a)b"}}}),
            |v, _| async move { Ok::<_, String>(v) },
        )
        .compile()
        .unwrap_err();
        assert!(
            nested.message().starts_with(
                "the parameters of tool `t` are not a valid JSON Schema: `pattern` at #/properties/when: "
            ),
            "{nested}"
        );
        // The same as a typed error, for callers that report or match on it.
        let source = std::error::Error::source(&nested)
            .and_then(|e| e.downcast_ref::<crate::schema::SchemaError>())
            .expect("the schema error is the source");
        assert_eq!(
            (source.keyword(), source.pointer()),
            ("pattern", "#/properties/when")
        );
        let remote = tool_json(
            "t",
            "",
            json!({"$ref": "https://example.com/schema.json"}),
            |v, _| async move { Ok::<_, String>(v) },
        )
        .compile()
        .unwrap_err();
        assert!(
            remote.message().contains(
                "`$ref` at #: `https://example.com/schema.json` is not a local reference"
            ),
            "{remote}"
        );
        let not_object = tool_json(
            "t",
            "",
            json!(true),
            |v, _| async move { Ok::<_, String>(v) },
        )
        .compile()
        .unwrap_err();
        assert_eq!(not_object.kind(), &ErrorKind::InvalidRequest);
    }

    #[tokio::test]
    async fn typed_output_is_json_and_strings_stay_plain() {
        let ctx = ToolContext::new("c1", "weather", 0, Arc::default(), CancellationToken::new());
        let text = weather()
            .call(json!({"city": "Oslo"}), ctx.clone())
            .await
            .unwrap();
        assert_eq!(text, "sunny in Oslo");
        let tool = tool_fn("pair", "", |w: Weather, _| async move {
            Ok::<_, String>(json!({"city": w.city}))
        })
        .compile()
        .unwrap();
        assert_eq!(
            tool.call(json!({"city": "Oslo"}), ctx.clone())
                .await
                .unwrap(),
            r#"{"city":"Oslo"}"#
        );
        // A `ToolOutput` is sent as its parts, not serialized.
        let chart = tool_json("chart", "", json!({"type": "object"}), |_, _| async move {
            Ok::<_, String>(ToolOutput::from_parts(vec![
                tower_chat::Part::text("the chart"),
                tower_chat::Part::image(vec![0x89, b'P', b'N', b'G'], "image/png"),
            ]))
        })
        .compile()
        .unwrap();
        let output = chart.call(json!({}), ctx).await.unwrap();
        assert_eq!(output.parts().len(), 2);
        assert_eq!(output.media_bytes(), 4);
    }
}
