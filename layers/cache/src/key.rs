//! [`CacheKey`]: the SHA-256 of everything that shapes a model's answer, within a scope.
//!
//! The request and its options are destructured without `..`, so a field added to [`ChatRequest`] or
//! [`ChatOptions`] does not compile here until it is either hashed or excluded with a reason.

use std::fmt;

use sha2::{Digest, Sha256};
use tower_chat::{
    AssistantMessage, CallerIdentity, ChatOptions, ChatRequest, Content, MediaSource, Message,
    Part, ToolMessage,
};

/// Fields of [`ChatOptions::extra`] that say who asked or how to keep the call, not what to answer: they are
/// left out of the key (OpenAI's `user`, `metadata` and `store`).
pub const EXTRA_FIELDS_NOT_IN_KEY: [&str; 3] = ["metadata", "store", "user"];

/// Changes whenever the hashed layout changes, so that entries written by another layout are never read.
const LAYOUT: &[u8] = b"tower-chat-cache/1";

/// Who may receive an answer stored for a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CacheScope {
    /// Only the caller who asked ([`CallerIdentity`]); requests without one share the anonymous scope. The
    /// default: one tenant never receives another's answer.
    #[default]
    Caller,
    /// Every caller: identical requests of different callers share one answer. Only for prompts that carry
    /// nothing private.
    Shared,
}

/// The key of one answer: a SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// The key of `request` within `scope`; `default_model` is the model a request that names none is sent to.
    ///
    /// In the key: the scope, the model, the messages (media by their bytes, URLs and file ids as written), the
    /// tools, the tool choice, parallel tool calls, the sampling options, the output limit, stop sequences,
    /// the response format, the reasoning settings, provider-specific fields but those in [`EXTRA_FIELDS_NOT_IN_KEY`], and the fields carried for the upstream ([`ChatOptions::carried`]). Not in it:
    /// the stream flag (a hit is replayed in the shape the request asks), the context in
    /// [`ChatRequest::extensions`] (ids, cancellation) but the caller, and prompt-cache hints (they change what
    /// the provider keeps, not what it answers).
    pub fn of(request: &ChatRequest, default_model: Option<&str>, scope: &CacheScope) -> CacheKey {
        let ChatRequest {
            messages,
            options,
            // Context: conversation and request ids, cancellation, approvals. Only the caller matters, below.
            extensions,
        } = request;
        let ChatOptions {
            model,
            tools,
            tool_choice,
            parallel_tool_calls,
            temperature,
            top_p,
            max_output_tokens,
            stop,
            response_format,
            // How the answer is delivered, not what it is: a hit is replayed either way.
            stream: _,
            reasoning,
            // Who asks, for the provider's abuse monitoring, not what is answered (as `user` in `extra`).
            end_user: _,
            extra,
            carried,
        } = &**options;

        let mut h = KeyHasher(Sha256::new());
        h.bytes(LAYOUT);
        match scope {
            CacheScope::Caller => {
                h.tag(1);
                h.opt_str(
                    extensions
                        .get::<CallerIdentity>()
                        .map(CallerIdentity::as_str),
                );
            }
            CacheScope::Shared => h.tag(2),
        }
        h.opt_str(model.as_deref().or(default_model));

        h.len(messages.len());
        for message in messages {
            h.message(message);
        }

        h.len(tools.len());
        for tool in tools {
            // `cache` is a prompt-cache breakpoint: left out.
            h.str(&tool.name);
            h.str(&tool.description);
            h.json(&tool.parameters);
            // A freeform tool's grammar and a hosted tool's definition change what the model may do (a function
            // tool adds nothing, so keys of requests without other kinds stay as they were).
            if !tool.kind.is_function() {
                h.tag(b'k');
                h.json(&tool.kind);
            }
        }
        h.opt_json(tool_choice.as_ref());
        h.opt(parallel_tool_calls.map(u8::from).map(u64::from));
        h.opt(temperature.map(|t| u64::from(t.to_bits())));
        h.opt(top_p.map(|t| u64::from(t.to_bits())));
        h.opt(max_output_tokens.map(u64::from));
        h.len(stop.len());
        for sequence in stop {
            h.str(sequence);
        }
        h.opt_json(response_format.as_ref());
        h.opt_json(reasoning.as_ref());
        // A `Map` iterates in key order unless serde_json's `preserve_order` is on; then the same fields in
        // another order give another key: a miss, never a wrong answer.
        for (name, value) in extra {
            if !EXTRA_FIELDS_NOT_IN_KEY.contains(&name.as_str()) {
                h.str(name);
                h.json(value);
            }
        }
        // Fields a client sent that no layer models still shape the answer: all of them are in the key.
        h.opt_json(carried.as_ref());
        CacheKey(h.0.finalize().into())
    }

    /// The digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest in lowercase hexadecimal.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({self})")
    }
}

/// SHA-256 over length-prefixed, tagged fields, so that no two different requests feed it the same bytes.
struct KeyHasher(Sha256);

impl KeyHasher {
    fn tag(&mut self, tag: u8) {
        self.0.update([tag]);
    }

    fn len(&mut self, len: usize) {
        self.0.update((len as u64).to_le_bytes());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.len(bytes.len());
        self.0.update(bytes);
    }

    fn str(&mut self, text: &str) {
        self.bytes(text.as_bytes());
    }

    /// A blob's bytes, as [`bytes`](Self::bytes) feeds them, a piece at a time: a blob that holds only its
    /// base64 is not decoded for its key.
    fn blob(&mut self, blob: &tower_chat::Blob) {
        self.len(blob.len());
        blob.for_each_chunk(|piece| self.0.update(piece));
    }

    fn opt_str(&mut self, text: Option<&str>) {
        match text {
            Some(text) => {
                self.tag(1);
                self.str(text);
            }
            None => self.tag(0),
        }
    }

    fn opt(&mut self, value: Option<u64>) {
        match value {
            Some(value) => {
                self.tag(1);
                self.0.update(value.to_le_bytes());
            }
            None => self.tag(0),
        }
    }

    fn json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        // Serialising into a `Vec` cannot fail for these types (string keys only).
        let text = serde_json::to_vec(value).unwrap_or_default();
        self.bytes(&text);
    }

    fn opt_json<T: serde::Serialize>(&mut self, value: Option<&T>) {
        match value {
            Some(value) => {
                self.tag(1);
                self.json(value);
            }
            None => self.tag(0),
        }
    }

    fn message(&mut self, message: &Message) {
        match message {
            Message::System { content } => {
                self.tag(b's');
                self.content(content);
            }
            Message::User { content } => {
                self.tag(b'u');
                self.content(content);
            }
            Message::Assistant(AssistantMessage {
                content,
                reasoning,
                tool_calls,
                provider_parts,
            }) => {
                self.tag(b'a');
                self.str(content);
                self.json(reasoning);
                self.len(tool_calls.len());
                for call in tool_calls {
                    self.str(&call.id);
                    self.str(&call.name);
                    self.str(&call.arguments.to_wire_string());
                    if call.kind == tower_chat::CallKind::Custom {
                        self.tag(b'c');
                    }
                }
                // Carried blocks reach an upstream that speaks their format: two histories that differ only in
                // one are two answers. None (the common case) adds nothing, so keys written before stay valid.
                if !provider_parts.is_empty() {
                    self.tag(b'p');
                    self.json(provider_parts);
                }
            }
            Message::Tool(ToolMessage {
                call_id,
                name,
                content,
                is_error,
            }) => {
                self.tag(b't');
                self.str(call_id);
                self.str(name);
                self.tag(u8::from(*is_error));
                self.content(content);
            }
        }
    }

    fn content(&mut self, content: &Content) {
        let parts = content.parts();
        self.len(parts.len());
        for part in parts {
            // Prompt-cache hints (`cache`) are left out of every part.
            match part {
                Part::Text(text) => {
                    self.tag(b'T');
                    self.str(&text.text);
                }
                Part::Image(image) => {
                    self.tag(b'I');
                    self.source(&image.source);
                    self.opt_str(image.detail.map(|d| d.as_str()));
                }
                Part::Audio(audio) => {
                    self.tag(b'A');
                    self.str(audio.data.media_type());
                    self.blob(&audio.data);
                }
                Part::File(file) => {
                    self.tag(b'F');
                    self.source(&file.source);
                    self.opt_str(file.media_type.as_deref());
                    self.opt_str(file.name.as_deref());
                }
                Part::Provider(part) => {
                    self.tag(b'P');
                    self.str(&part.provider);
                    self.json(&part.value);
                }
                // A part kind added later: its whole JSON form, so it is never left out.
                other => {
                    self.tag(b'?');
                    self.json(other);
                }
            }
        }
    }

    /// Media by their bytes (not their base64 text, which is never built for the key), URLs and file ids as
    /// written.
    fn source(&mut self, source: &MediaSource) {
        match source {
            MediaSource::Url { url } => {
                self.tag(b'u');
                self.str(url);
            }
            MediaSource::Data(blob) => {
                self.tag(b'd');
                self.str(blob.media_type());
                self.blob(blob);
            }
            MediaSource::FileId { id } => {
                self.tag(b'f');
                self.str(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tower_chat::{
        CacheHint, ConversationId, ImageDetail, ImagePart, ResponseFormat, ToolCall, ToolChoice,
        ToolSpec,
    };

    /// A request with every field set, so that each change below is a change of a set value.
    fn full() -> ChatRequest {
        let image = Part::from(ImagePart {
            source: MediaSource::Data(tower_chat::Blob::new(vec![1u8, 2, 3], "image/png")),
            detail: Some(ImageDetail::Low),
            cache: None,
        });
        let mut request = ChatRequest::new(vec![
            Message::system("Be brief."),
            Message::user(Content::from_parts(vec![
                Part::text("What is this?"),
                image,
            ])),
            Message::Assistant(AssistantMessage {
                content: "Let me look.".into(),
                reasoning: vec![],
                tool_calls: vec![ToolCall::new("c1", "look", json!({"at": "it"}))],
                provider_parts: Vec::new(),
            }),
            Message::tool_result("c1", "look", "a square"),
        ])
        .model("gpt-4o-mini")
        .tool(ToolSpec::new("look", "Looks", json!({"type": "object"})))
        .with_extension(CallerIdentity::new("alice"));
        let options = &mut *request.options;
        options.tool_choice = Some(ToolChoice::Auto);
        options.parallel_tool_calls = Some(true);
        options.temperature = Some(0.5);
        options.top_p = Some(0.9);
        options.max_output_tokens = Some(100);
        options.stop = vec!["END".into()];
        options.response_format = Some(ResponseFormat::JsonObject);
        options.extra = json!({"seed": 7, "user": "u-1", "metadata": {"a": 1}, "store": true})
            .as_object()
            .unwrap()
            .clone();
        request
    }

    fn key(request: &ChatRequest) -> CacheKey {
        CacheKey::of(request, Some("default-model"), &CacheScope::Caller)
    }

    #[test]
    fn every_field_is_in_the_key_or_left_out_on_purpose() {
        type Change = fn(&mut ChatRequest);
        let shaping: Vec<(&str, Change)> = vec![
            ("model", |r| r.options.model = Some("gpt-4o".into())),
            ("model unset: the default one", |r| r.options.model = None),
            ("a message's text", |r| {
                r.messages[0] = Message::system("Be long.")
            }),
            ("a message's role", |r| {
                r.messages[0] = Message::user("Be brief.")
            }),
            ("one message fewer", |r| {
                r.messages.pop();
            }),
            ("an image's bytes", |r| {
                r.messages[1] = Message::user(Content::from_parts(vec![
                    Part::text("What is this?"),
                    Part::image(vec![1u8, 2, 4], "image/png"),
                ]))
            }),
            ("an image's detail", |r| {
                r.messages[1] = Message::user(Content::from_parts(vec![
                    Part::text("What is this?"),
                    Part::image(vec![1u8, 2, 3], "image/png"),
                ]))
            }),
            ("a tool call's arguments", |r| {
                r.messages[2] = Message::Assistant(AssistantMessage {
                    content: "Let me look.".into(),
                    reasoning: vec![],
                    tool_calls: vec![ToolCall::new("c1", "look", json!({"at": "that"}))],
                    provider_parts: Vec::new(),
                })
            }),
            ("a carried block in the assistant turn", |r| {
                if let Message::Assistant(assistant) = &mut r.messages[2] {
                    assistant.provider_parts.push(tower_chat::PlacedPart {
                        after_reasoning: 0,
                        text_offset: 0,
                        after_calls: 0,
                        part: tower_chat::ProviderPart {
                            provider: "anthropic".into(),
                            value: json!({"type": "server_tool_use", "id": "s1"}),
                        },
                    });
                }
            }),
            ("a tool result's error flag", |r| {
                r.messages[3] = Message::Tool(ToolMessage::error("c1", "look", "a square"))
            }),
            ("tools", |r| r.options.tools.clear()),
            ("a tool's schema", |r| {
                r.options.tools[0].parameters = json!({"type": "object", "required": ["at"]})
            }),
            ("tool choice", |r| {
                r.options.tool_choice = Some(ToolChoice::Required)
            }),
            ("parallel tool calls", |r| {
                r.options.parallel_tool_calls = Some(false)
            }),
            ("temperature", |r| r.options.temperature = Some(0.7)),
            ("top_p", |r| r.options.top_p = None),
            ("max output tokens", |r| {
                r.options.max_output_tokens = Some(101)
            }),
            ("stop sequences", |r| r.options.stop.push("STOP".into())),
            ("response format", |r| {
                r.options.response_format = Some(ResponseFormat::Text)
            }),
            ("a provider field", |r| {
                r.options.extra.insert("seed".into(), json!(8));
            }),
            ("the caller", |r| {
                r.extensions.insert(CallerIdentity::new("bob"));
            }),
        ];
        let not_shaping: Vec<(&str, Change)> = vec![
            ("the stream flag", |r| r.options.stream = !r.options.stream),
            ("a conversation id", |r| {
                r.extensions.insert(ConversationId::new("conv-9"));
            }),
            ("a cancellation token", |r| {
                r.extensions.insert(tower_chat::CancellationToken::new());
            }),
            ("the caller's metadata fields", |r| {
                for name in EXTRA_FIELDS_NOT_IN_KEY {
                    r.options.extra.insert(name.into(), json!("other"));
                }
            }),
            ("a prompt-cache hint on a tool", |r| {
                r.options.tools[0].cache = Some(CacheHint::default())
            }),
            ("a prompt-cache hint on a part", |r| {
                if let Message::System { content } = &mut r.messages[0] {
                    *content.parts_mut()[0].cache_slot().unwrap() = Some(CacheHint::default());
                }
            }),
        ];
        let base = key(&full());
        assert_eq!(base, key(&full()), "the key is stable");
        for (what, change) in shaping {
            let mut request = full();
            change(&mut request);
            assert_ne!(key(&request), base, "{what} must be in the key");
        }
        for (what, change) in not_shaping {
            let mut request = full();
            change(&mut request);
            assert_eq!(key(&request), base, "{what} must not be in the key");
        }
    }

    #[test]
    fn a_shared_scope_ignores_the_caller_and_the_caller_scope_does_not() {
        let mut bob = full();
        bob.extensions.insert(CallerIdentity::new("bob"));
        let shared = |r: &ChatRequest| CacheKey::of(r, None, &CacheScope::Shared);
        assert_eq!(shared(&full()), shared(&bob));
        assert_ne!(shared(&full()), key(&full()));
        let anonymous = ChatRequest::new(vec![Message::user("Hi")]);
        assert_ne!(
            key(&anonymous),
            key(&anonymous.clone().with_extension(CallerIdentity::new(""))),
            "no caller is not the caller named \"\""
        );
    }

    #[test]
    fn media_key_by_their_bytes_without_decoding_a_base64_blob() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let request = |blob: tower_chat::Blob| {
            ChatRequest::new(vec![Message::user(Content::from_parts(vec![
                Part::text("What is this?"),
                Part::from(ImagePart {
                    source: MediaSource::Data(blob.clone()),
                    detail: None,
                    cache: None,
                }),
                Part::from(tower_chat::AudioPart { data: blob }),
            ]))])
        };
        let from_bytes = tower_chat::Blob::new(bytes.clone(), "image/png");
        let text = format!("data:image/png;base64,{}", from_bytes.base64());
        let from_base64 = tower_chat::Blob::from_data_url_string(text).unwrap();
        assert_eq!(
            key(&request(from_base64.clone())),
            key(&request(from_bytes))
        );
        assert!(!from_base64.is_decoded());
        let mut other = bytes;
        other[9_999] ^= 1;
        assert_ne!(
            key(&request(tower_chat::Blob::new(other, "image/png"))),
            key(&request(from_base64))
        );
    }

    #[test]
    fn the_key_prints_as_64_hex_digits() {
        let hex = key(&full()).to_hex();
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
