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
    /// the response format, and provider-specific fields but those in [`EXTRA_FIELDS_NOT_IN_KEY`]. Not in it:
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
            extra,
        } = &**options;

        let mut h = KeyHasher(Sha256::new());
        h.bytes(LAYOUT);
        match scope {
            CacheScope::Caller => {
                h.tag(1);
                h.opt_str(extensions.get::<CallerIdentity>().map(CallerIdentity::as_str));
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
        // A `Map` iterates in key order unless serde_json's `preserve_order` is on; then the same fields in
        // another order give another key: a miss, never a wrong answer.
        for (name, value) in extra {
            if !EXTRA_FIELDS_NOT_IN_KEY.contains(&name.as_str()) {
                h.str(name);
                h.json(value);
            }
        }
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
            }) => {
                self.tag(b'a');
                self.str(content);
                self.json(reasoning);
                self.len(tool_calls.len());
                for call in tool_calls {
                    self.str(&call.id);
                    self.str(&call.name);
                    self.str(&call.arguments.to_wire_string());
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
                    self.bytes(audio.data.bytes());
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
                self.bytes(blob.bytes());
            }
            MediaSource::FileId { id } => {
                self.tag(b'f');
                self.str(id);
            }
        }
    }
}
