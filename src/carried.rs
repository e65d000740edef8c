//! What an inbound wire format carries that no layer models: request fields, content parts and feature headers
//! kept as the client sent them, for an upstream that speaks the same format.
//!
//! A gateway parses a client's body into a [`ChatRequest`](crate::ChatRequest); whatever its typed model has no
//! place for is kept here instead of refused, because real formats grow fields faster than any model of them.
//! The leaf decides at the last moment, when the upstream is known: a leaf of the same [`ApiFormat`] sends the
//! carried fields after its own (the client's order kept; a carried field replaces one of ours of the same name,
//! an object meets ours key by key) and the [`ForwardedHeaders`]; a leaf of another format leaves them out, logs
//! each at `debug` and names it in the request's [`DroppedFields`], so a gateway can tell its client what did not
//! travel.
//!
//! ```
//! use serde_json::json;
//! use tower_chat::{ApiFormat, Carried, ChatRequest, Message};
//!
//! let mut request = ChatRequest::new(vec![Message::user("hi")]);
//! let mut carried = Carried::new(ApiFormat::Messages);
//! carried.fields.insert("context_management".into(), json!({"edits": []}));
//! request.options.carried = Some(carried);
//! // An Anthropic leaf sends `context_management` as it is; an OpenAI leaf drops it and says so.
//! ```

use std::sync::{Arc, Mutex};

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A request wire format, as spoken by a client and by an upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiFormat {
    /// OpenAI Chat Completions (and every server that speaks it, Azure included).
    ChatCompletions,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Messages,
}

impl ApiFormat {
    /// The format's name (`chat_completions`, `responses`, `messages`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApiFormat::ChatCompletions => "chat_completions",
            ApiFormat::Responses => "responses",
            ApiFormat::Messages => "messages",
        }
    }
}

/// Top-level request fields a client sent that the inbound format does not model, in the client's order.
///
/// In [`ChatOptions::carried`](crate::ChatOptions::carried): stored with a call's record and part of a cache
/// key, like every option, so a replay sends them again and two requests that differ only in them never share
/// an answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// The format the fields are written in: only a leaf speaking it sends them.
    pub format: ApiFormat,
    /// The fields, as sent.
    pub fields: Map<String, Value>,
}

impl Carried {
    /// No fields yet, in `format`.
    pub fn new(format: ApiFormat) -> Self {
        Carried {
            format,
            fields: Map::new(),
        }
    }
}

/// Request headers that select provider features (`anthropic-beta`, `OpenAI-Beta`) and a query (`beta=true`),
/// in a request's extensions: a leaf of the same format sends them with the call, others drop them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedHeaders {
    format: ApiFormat,
    headers: Vec<(HeaderName, HeaderValue)>,
    query: Option<String>,
}

impl ForwardedHeaders {
    /// Nothing to forward yet, for upstreams speaking `format`.
    pub fn new(format: ApiFormat) -> Self {
        ForwardedHeaders {
            format,
            headers: Vec::new(),
            query: None,
        }
    }

    /// Forward a header (repeated names are all sent).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// Forward a query (`beta=true`), appended to the call's URL.
    pub fn query(mut self, query: impl Into<String>) -> Self {
        self.query = Some(query.into());
        self
    }

    /// Whether there is nothing to forward.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.query.is_none()
    }

    /// The format whose upstreams receive these.
    pub fn format(&self) -> ApiFormat {
        self.format
    }

    /// The headers.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The query, if any.
    pub fn query_string(&self) -> Option<&str> {
        self.query.as_deref()
    }
}

/// Where a leaf names what it left out of a call (a carried field, a part in another provider's format, a
/// forwarded header), in a request's extensions. Clones share the list, so the caller that inserted it reads
/// what the leaf below every layer recorded.
#[derive(Clone, Debug, Default)]
pub struct DroppedFields(Arc<Mutex<Vec<String>>>);

impl DroppedFields {
    /// An empty list.
    pub fn new() -> Self {
        DroppedFields::default()
    }

    /// Name something left out (once: a tool loop's later rounds drop the same fields again).
    pub fn record(&self, name: impl Into<String>) {
        let name = name.into();
        let mut names = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !names.contains(&name) {
            names.push(name);
        }
    }

    /// What was left out, in the order first recorded.
    pub fn names(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}
