//! What one request may hold, checked on the format-independent [`ChatRequest`] after the wire conversion, so
//! every inbound surface gets the same limits: messages, tool calls, client tools, the bytes of their schemas,
//! the shape of every schema a client sends (tool parameters and the answer schema, within [`SchemaLimits`]:
//! depth, values, `$ref`s followed and expanded size, measured in linear time before anything compiles or
//! inlines them), id lengths, approval decisions. The body limit bounds the bytes; these bound the *count*
//! of things a body of that size could otherwise carry (40,000 tools in 3 MB) and what each costs downstream
//! (audit rows and error text per approval decision, stored conversation ids).
//!
//! Each breach is a 400 `limit_exceeded` naming the limit and the setting that raises it: the field of
//! [`RequestLimits`] (`max_messages`, …), or the gateway's command-line flag (`--max-messages`, …) with
//! [`SettingNames::Flags`].
//!
//! ```
//! use tower_chat::{ChatRequest, Message};
//! use tower_chat_wire::limits::RequestLimits;
//!
//! let limits = RequestLimits { max_messages: 2, ..RequestLimits::default() };
//! let small = ChatRequest::new(vec![Message::user("hi")]);
//! assert!(limits.check(&small).is_ok());
//! let long = ChatRequest::new(vec![Message::user("a"), Message::user("b"), Message::user("c")]);
//! let error = limits.check(&long).unwrap_err();
//! assert_eq!((error.status.as_u16(), error.code), (400, "limit_exceeded"));
//! ```

use std::collections::HashSet;
use std::fmt;
use std::io;

use tower_chat::schema_limits::SchemaLimits;
use tower_chat::{CallerIdentity, ChatRequest, ConversationId, Message, ResponseFormat, ToolKind};

use crate::error::ApiError;

/// The per-request limits. [`Default`] gives the gateway's defaults, errors naming these fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Messages in one request, and tool calls across its assistant messages (default 1024; the gateway's
    /// `--max-messages`).
    pub max_messages: usize,
    /// Client tools in one request (default 128, OpenAI's own limit; `--max-tools`).
    pub max_tools: usize,
    /// The client tools' names, descriptions and parameter schemas together, as compact JSON (default 262144;
    /// `--max-schema-bytes`).
    pub max_schema_bytes: usize,
    /// Approval decisions in one request (default 64; `--max-approvals`).
    pub max_approvals: usize,
    /// The longest tool call id, tool name or approval id (default 256; `--max-id-bytes`).
    pub max_id_bytes: usize,
    /// The longest `x-conversation-id` (128 bytes of visible ASCII).
    pub max_conversation_id_bytes: usize,
    /// The decoded bytes of one image, audio clip or file (default 20 MiB, OpenAI's per-image limit;
    /// `--max-media-part-bytes`).
    pub max_media_part_bytes: usize,
    /// The decoded bytes of every media part of one request together (default 32 MiB, Anthropic's request
    /// limit; `--max-media-bytes`). Media does not count against the body limit, which caps the rest of the
    /// body.
    pub max_media_bytes: usize,
    /// The shape of each client schema (tool parameters, the answer schema): [`SchemaLimits::DEFAULT`]. An
    /// error names the field of [`SchemaLimits`] (`max_depth`, `max_expanded_nodes`, …).
    pub schema: SchemaLimits,
    /// How an error over a limit names the setting that raises it (default: the fields of this struct).
    pub setting_names: SettingNames,
}

/// How an error over a limit names the setting that raises it, so whoever reads the error knows what to change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SettingNames {
    /// The fields of [`RequestLimits`] (`max_messages`), and `body_limit` for the body limit: what an app
    /// embedding the routes sets.
    #[default]
    Fields,
    /// The gateway's command-line flags (`--max-messages`, `--body-limit`).
    Flags,
}

/// A setting's name as [`SettingNames`] spells it, written without allocating.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    field: &'static str,
    names: SettingNames,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.names {
            SettingNames::Fields => f.write_str(self.field),
            SettingNames::Flags => {
                f.write_str("--")?;
                for (i, word) in self.field.split('_').enumerate() {
                    if i > 0 {
                        f.write_str("-")?;
                    }
                    f.write_str(word)?;
                }
                Ok(())
            }
        }
    }
}

impl RequestLimits {
    /// The gateway's defaults, as a constant.
    pub const DEFAULT: RequestLimits = RequestLimits {
        max_messages: 1024,
        max_tools: 128,
        max_schema_bytes: 256 * 1024,
        max_approvals: 64,
        max_id_bytes: 256,
        max_conversation_id_bytes: 128,
        max_media_part_bytes: 20 * 1024 * 1024,
        max_media_bytes: 32 * 1024 * 1024,
        schema: SchemaLimits::DEFAULT,
        setting_names: SettingNames::Fields,
    };

    /// The setting `field` (a field of this struct, or `body_limit`) as these limits name it in errors.
    pub fn setting(&self, field: &'static str) -> Setting {
        Setting {
            field,
            names: self.setting_names,
        }
    }
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits::DEFAULT
    }
}

fn exceeded(message: String) -> ApiError {
    ApiError::invalid_request("limit_exceeded", message)
}

fn too_much_media(message: String) -> ApiError {
    ApiError {
        message,
        ..ApiError::too_large(0)
    }
}

impl RequestLimits {
    /// Check the counts a wire format's parser reads off the raw body before it converts a single item:
    /// `messages` and `calls` are at most what the conversion would produce, so a body refused here would have
    /// been refused after it, only later and after work proportional to its size.
    pub fn check_counts(&self, messages: usize, calls: usize) -> Result<(), ApiError> {
        if messages > self.max_messages {
            return Err(exceeded(format!(
                "the request has {messages} messages; the limit is {} ({})",
                self.max_messages,
                self.setting("max_messages")
            )));
        }
        if calls > self.max_messages {
            return Err(exceeded(format!(
                "the request has {calls} tool calls; the limit is {} ({})",
                self.max_messages,
                self.setting("max_messages")
            )));
        }
        Ok(())
    }

    /// The most bytes a body may have: the text cap plus the media cap in base64 (4 characters per 3 bytes) with
    /// room for the parts' framing.
    pub fn body_allowance(&self, body_limit: usize) -> usize {
        body_limit
            .saturating_add(self.max_media_bytes.div_ceil(3).saturating_mul(4))
            .saturating_add(64 * 1024)
    }

    /// Check media parts: each within `max_media_part_bytes`, all within `max_media_bytes`.
    fn check_media(&self, request: &ChatRequest) -> Result<(), ApiError> {
        let mut total = 0usize;
        for (i, message) in request.messages.iter().enumerate() {
            let content = match message {
                Message::System { content } | Message::User { content } => content,
                Message::Tool(tool) => &tool.content,
                Message::Assistant(_) => continue,
            };
            if content.as_text().is_some() {
                continue;
            }
            for (j, part) in content.parts().iter().enumerate() {
                let bytes = part.media_bytes();
                if bytes > self.max_media_part_bytes {
                    return Err(too_much_media(format!(
                        "messages[{i}] part {j} ({}, {bytes} bytes) exceeds {} bytes ({})",
                        part.media_type().unwrap_or(part.kind()),
                        self.max_media_part_bytes,
                        self.setting("max_media_part_bytes")
                    )));
                }
                total = total.saturating_add(bytes);
            }
        }
        if total > self.max_media_bytes {
            return Err(too_much_media(format!(
                "the request's media parts hold {total} bytes; the limit is {} ({})",
                self.max_media_bytes,
                self.setting("max_media_bytes")
            )));
        }
        Ok(())
    }

    /// The body without its media, against the body limit: `body_len` less the base64 text of the media parts.
    pub fn check_text_bytes(
        &self,
        request: &ChatRequest,
        body_len: usize,
        body_limit: usize,
    ) -> Result<(), ApiError> {
        if body_len <= body_limit {
            return Ok(());
        }
        let media: usize = request
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::System { content } | Message::User { content } => Some(content),
                Message::Tool(tool) => Some(&tool.content),
                Message::Assistant(_) => None,
            })
            .flat_map(|content| content.parts())
            .map(|part| part.media_bytes().div_ceil(3) * 4)
            .sum();
        let text = body_len.saturating_sub(media);
        if text > body_limit {
            return Err(ApiError {
                message: format!(
                    "the request body holds {text} bytes besides its media; the limit is {body_limit} ({})",
                    self.setting("body_limit")
                ),
                ..ApiError::too_large(body_limit)
            });
        }
        Ok(())
    }

    /// Check a converted request: counts first (cheap), then lengths, then schema bytes.
    pub fn check(&self, request: &ChatRequest) -> Result<(), ApiError> {
        let calls = request
            .messages
            .iter()
            .map(|message| match message {
                Message::Assistant(assistant) => assistant.tool_calls.len(),
                _ => 0,
            })
            .sum();
        self.check_counts(request.messages.len(), calls)?;
        let tools = &request.options.tools;
        if tools.len() > self.max_tools {
            return Err(exceeded(format!(
                "the request has {} tools; the limit is {} ({})",
                tools.len(),
                self.max_tools,
                self.setting("max_tools")
            )));
        }
        self.check_media(request)?;
        for (i, message) in request.messages.iter().enumerate() {
            match message {
                Message::Assistant(assistant) => {
                    for call in &assistant.tool_calls {
                        self.id(|| format!("messages[{i}] tool call id"), &call.id)?;
                        self.id(|| format!("messages[{i}] tool call name"), &call.name)?;
                    }
                }
                Message::Tool(tool) => {
                    self.id(|| format!("messages[{i}] tool_call_id"), &tool.call_id)?
                }
                _ => {}
            }
        }
        let mut bytes = 0usize;
        for (i, tool) in tools.iter().enumerate() {
            self.id(|| format!("tools[{i}] name"), &tool.name)?;
            bytes = bytes
                .saturating_add(tool.name.len())
                .saturating_add(tool.description.len())
                .saturating_add(json_len(&tool.parameters))
                .saturating_add(match &tool.kind {
                    ToolKind::Function => 0,
                    ToolKind::Custom { format } => format.as_ref().map_or(0, json_len),
                    ToolKind::Hosted(hosted) => json_len(&hosted.definition),
                });
            if bytes > self.max_schema_bytes {
                return Err(exceeded(format!(
                    "the tools' names, descriptions and schemas exceed {} bytes ({})",
                    self.max_schema_bytes,
                    self.setting("max_schema_bytes")
                )));
            }
        }
        self.check_schemas(request)
    }

    /// Every schema the client sent within [`RequestLimits::schema`]; each is walked once, without recursion.
    pub fn check_schemas(&self, request: &ChatRequest) -> Result<(), ApiError> {
        for (i, tool) in request.options.tools.iter().enumerate() {
            self.schema.check(&tool.parameters).map_err(|error| {
                exceeded(format!(
                    "the parameters of tools[{i}] (`{}`) are refused: {error}",
                    tool.name
                ))
            })?;
        }
        if let Some(ResponseFormat::JsonSchema { schema, .. }) = &request.options.response_format {
            self.schema
                .check(schema)
                .map_err(|error| exceeded(format!("the answer schema is refused: {error}")))?;
        }
        Ok(())
    }

    /// Check the approval decisions of a request before any is looked up: at most `max_approvals`, each id at
    /// most `max_id_bytes`, no id twice. One error for the whole request, naming at most one id.
    pub fn check_approvals<'a>(
        &self,
        ids: impl ExactSizeIterator<Item = &'a str>,
    ) -> Result<(), ApiError> {
        if ids.len() > self.max_approvals {
            return Err(exceeded(format!(
                "the request carries {} approval decisions; the limit is {} ({})",
                ids.len(),
                self.max_approvals,
                self.setting("max_approvals")
            )));
        }
        let mut seen = HashSet::with_capacity(ids.len());
        for id in ids {
            self.id(|| "an approval id".to_owned(), id)?;
            if !seen.insert(id) {
                return Err(ApiError::invalid_request(
                    "invalid_approval",
                    format!("the approval id `{id}` is decided twice; send one decision per id"),
                ));
            }
        }
        Ok(())
    }

    /// The conversation a request belongs to: the client's `x-conversation-id` (1 to 128 bytes of visible
    /// ASCII; an empty header counts as none), scoped to the caller. With gateway keys the stored id is `<caller>/<id>` (caller ids contain no
    /// `/`), so another caller sending the same header lands in a conversation of its own: it can neither
    /// read, extend nor disturb the first caller's.
    pub fn conversation(
        &self,
        caller: Option<&CallerIdentity>,
        header: Option<&[u8]>,
    ) -> Result<Option<ConversationId>, ApiError> {
        let Some(raw) = header.filter(|raw| !raw.is_empty()) else {
            return Ok(None);
        };
        if raw.len() > self.max_conversation_id_bytes || !raw.iter().all(|b| b.is_ascii_graphic()) {
            return Err(exceeded(format!(
                "`x-conversation-id` must be 1 to {} bytes of visible ASCII",
                self.max_conversation_id_bytes
            )));
        }
        let id = String::from_utf8_lossy(raw);
        Ok(Some(ConversationId::new(match caller {
            Some(caller) => format!("{}/{id}", caller.as_str()),
            None => id.into_owned(),
        })))
    }

    /// `what` names the id only when it is refused: checking a thousand ids allocates nothing.
    fn id(&self, what: impl FnOnce() -> String, id: &str) -> Result<(), ApiError> {
        if id.len() > self.max_id_bytes {
            return Err(exceeded(format!(
                "{} is {} bytes long; the limit is {} ({})",
                what(),
                id.len(),
                self.max_id_bytes,
                self.setting("max_id_bytes")
            )));
        }
        Ok(())
    }
}

/// The length of `value` as compact JSON, counted without building the string.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tower_chat::{AssistantMessage, ToolCall, ToolMessage, ToolSpec};

    fn limits() -> RequestLimits {
        RequestLimits {
            max_messages: 3,
            max_tools: 2,
            max_schema_bytes: 100,
            max_approvals: 2,
            max_id_bytes: 8,
            max_conversation_id_bytes: 10,
            setting_names: SettingNames::Flags,
            ..RequestLimits::DEFAULT
        }
    }

    #[test]
    fn a_limit_error_names_the_field_by_default_and_the_flag_when_asked() {
        let two = |setting_names| RequestLimits {
            max_messages: 2,
            max_media_part_bytes: 1,
            setting_names,
            ..RequestLimits::DEFAULT
        };
        let long = ChatRequest::new(vec![Message::user("a"); 3]);
        let error = two(SettingNames::Fields).check(&long).unwrap_err();
        assert!(
            error.message.ends_with("the limit is 2 (max_messages)"),
            "{}",
            error.message
        );
        let error = two(SettingNames::Flags).check(&long).unwrap_err();
        assert!(
            error.message.ends_with("the limit is 2 (--max-messages)"),
            "{}",
            error.message
        );
        assert_eq!(
            two(SettingNames::Flags)
                .setting("max_media_part_bytes")
                .to_string(),
            "--max-media-part-bytes"
        );
    }

    fn assert_limit(result: Result<(), ApiError>, needle: &str) {
        let error = result.unwrap_err();
        assert_eq!(error.status.as_u16(), 400);
        assert_eq!(error.code, "limit_exceeded", "{}", error.message);
        assert!(error.message.contains(needle), "{}", error.message);
    }

    fn with_tools(n: usize, schema: serde_json::Value) -> ChatRequest {
        let mut request = ChatRequest::new(vec![Message::user("hi")]);
        for i in 0..n {
            request
                .options
                .tools
                .push(ToolSpec::new(format!("t{i}"), "", schema.clone()));
        }
        request
    }

    /// Each limit passes at its value and fails one above it.
    #[test]
    fn every_limit_is_exact() {
        let l = limits();
        assert!(l
            .check(&ChatRequest::new(vec![Message::user("a"); 3]))
            .is_ok());
        assert_limit(
            l.check(&ChatRequest::new(vec![Message::user("a"); 4])),
            "--max-messages",
        );
        assert!(l.check(&with_tools(2, json!({}))).is_ok());
        assert_limit(l.check(&with_tools(3, json!({}))), "--max-tools");
        // Two tools of `t0`/`t1` (2 bytes) + schema: 2 + 48 = 50 bytes each.
        let schema = |n: usize| json!({"d": "x".repeat(n)});
        assert_eq!(json_len(&schema(40)), 48);
        assert!(l.check(&with_tools(2, schema(40))).is_ok());
        assert_limit(l.check(&with_tools(2, schema(41))), "--max-schema-bytes");

        let call = |id: &str| {
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall::new(id, "f", json!({}))],
                ..AssistantMessage::default()
            })
        };
        assert!(l.check(&ChatRequest::new(vec![call("12345678")])).is_ok());
        assert_limit(
            l.check(&ChatRequest::new(vec![call("123456789")])),
            "--max-id-bytes",
        );
        let answer = Message::Tool(ToolMessage::success("123456789", "f", "x"));
        assert_limit(l.check(&ChatRequest::new(vec![answer])), "tool_call_id");
        assert_limit(
            l.check(&with_tools(0, json!({})).tap_tool("123456789")),
            "tools[0] name",
        );
        let many_calls = Message::Assistant(AssistantMessage {
            tool_calls: (0..4)
                .map(|i| ToolCall::new(format!("c{i}"), "f", json!({})))
                .collect(),
            ..AssistantMessage::default()
        });
        assert_limit(l.check(&ChatRequest::new(vec![many_calls])), "tool calls");
        // Exactly the limit of tool calls (3) passes.
        let most_calls = Message::Assistant(AssistantMessage {
            tool_calls: (0..3)
                .map(|i| ToolCall::new(format!("c{i}"), "f", json!({})))
                .collect(),
            ..AssistantMessage::default()
        });
        assert!(l.check(&ChatRequest::new(vec![most_calls])).is_ok());
    }

    #[test]
    fn a_schema_over_the_schema_limits_is_refused_naming_the_limit() {
        use tower_chat::schema_limits::SchemaLimits;
        let l = RequestLimits {
            schema: SchemaLimits {
                max_depth: 3,
                ..SchemaLimits::DEFAULT
            },
            ..limits()
        };
        let chain = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"}, "c": {}},
            "$ref": "#/$defs/a"});
        assert_limit(l.check(&with_tools(1, chain.clone())), "tools[0] (`t0`)");
        assert_limit(l.check(&with_tools(1, chain.clone())), "(max_depth)");
        let mut answer = ChatRequest::new(vec![Message::user("hi")]);
        answer.options.response_format = Some(ResponseFormat::JsonSchema {
            name: "a".into(),
            schema: chain,
            strict: None,
        });
        assert_limit(l.check(&answer), "the answer schema is refused");
        assert!(l
            .check(&with_tools(
                1,
                json!({"$ref": "#/$defs/c", "$defs": {"c": {}}})
            ))
            .is_ok());
    }

    trait TapTool {
        fn tap_tool(self, name: &str) -> Self;
    }
    impl TapTool for ChatRequest {
        fn tap_tool(mut self, name: &str) -> Self {
            self.options.tools.push(ToolSpec::new(name, "", json!({})));
            self
        }
    }

    #[test]
    fn approvals_are_capped_deduplicated_and_short() {
        let l = limits();
        assert!(l.check_approvals(["a", "b"].into_iter()).is_ok());
        assert_limit(
            l.check_approvals(["a", "b", "c"].into_iter()),
            "--max-approvals",
        );
        assert_limit(
            l.check_approvals(["123456789"].into_iter()),
            "--max-id-bytes",
        );
        assert!(l.check_approvals(["12345678"].into_iter()).is_ok());
        let twice = l.check_approvals(["a", "a"].into_iter()).unwrap_err();
        assert_eq!(twice.code, "invalid_approval");
        assert!(twice.message.contains("twice"), "{}", twice.message);
        // 50,000 copies of one id: one short error.
        let many = RequestLimits::default();
        let ids = vec!["apr_x"; 50_000];
        let error = many.check_approvals(ids.iter().copied()).unwrap_err();
        assert!(error.message.len() < 200, "{}", error.message);
    }

    #[test]
    fn conversation_ids_are_checked_and_scoped_to_the_caller() {
        let l = limits();
        let alice = CallerIdentity::new("alice");
        let bob = CallerIdentity::new("bob");
        assert_eq!(l.conversation(Some(&alice), None).unwrap(), None);
        let a = l
            .conversation(Some(&alice), Some(b"conv-1"))
            .unwrap()
            .unwrap();
        let b = l
            .conversation(Some(&bob), Some(b"conv-1"))
            .unwrap()
            .unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str(), "alice/conv-1");
        assert_eq!(
            l.conversation(None, Some(b"conv-1"))
                .unwrap()
                .unwrap()
                .as_str(),
            "conv-1"
        );
        assert!(l.conversation(None, Some(b"0123456789")).is_ok());
        assert_eq!(l.conversation(Some(&alice), Some(b"")).unwrap(), None);
        for bad in [&b"01234567890"[..], b"a b", b"a\x01", "é".as_bytes()] {
            assert!(l.conversation(Some(&alice), Some(bad)).is_err(), "{bad:?}");
        }
    }
}
