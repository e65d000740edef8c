//! What an inbound wire format carries that no layer models: request fields, content parts and feature headers
//! kept as the client sent them, for an upstream that speaks the same format.
//!
//! A gateway parses a client's body into a [`ChatRequest`]; whatever its typed model has no place for is kept
//! here instead of refused, because real formats grow fields faster than any model of them. The leaf decides
//! at the last moment, when the upstream is known: a leaf of the same [`ApiFormat`] sends the carried fields
//! after its own (the client's order kept; a carried field replaces one of ours of the same name, an object
//! meets ours key by key) and the
//! [`ForwardedHeaders`]; a leaf of another format leaves them out, logs each at `debug` and names it in the
//! request's [`DroppedFields`], so a gateway can tell its client what did not travel.
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

use crate::content::{Content, Part, ProviderPart};
use crate::error::{ChatError, ErrorKind};
use crate::message::Message;
use crate::request::{ChatRequest, ToolChoice, ToolSpec};
use crate::tool_kind::{freeform_description, ToolKind, Unhosted};

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

/// `request` as a leaf speaking `format` sends it: parts `keeps` refuses are taken out (a user message left
/// with nothing is removed), and carried fields of another format too; each drop is logged and recorded.
/// Tools are made fit for the format ([`for_format`]). The request is cloned only when something changes.
pub(crate) fn for_upstream(
    mut request: ChatRequest,
    format: Option<ApiFormat>,
    keeps: impl Fn(&ProviderPart) -> bool,
) -> Result<ChatRequest, ChatError> {
    let dropped = request.extensions.get::<DroppedFields>().cloned();
    let note = |name: String| {
        tracing::debug!(dropped = %name, "left out of the upstream call: another wire format's");
        if let Some(dropped) = &dropped {
            dropped.record(name);
        }
    };
    for_format(&mut request, format, &note)?;
    if let Some(carried) = &request.options.carried {
        if Some(carried.format) != format {
            for name in carried.fields.keys() {
                note(name.clone());
            }
            request.options.carried = None;
        }
    }
    if let Some(forwarded) = request.extensions.get::<ForwardedHeaders>() {
        if Some(forwarded.format) != format {
            for (name, _) in &forwarded.headers {
                note(name.as_str().to_owned());
            }
            if let Some(query) = &forwarded.query {
                note(format!("?{query}"));
            }
        }
    }
    let foreign = |part: &Part| matches!(part, Part::Provider(raw) if !keeps(raw));
    let any_foreign = request.messages.iter().any(|message| match message {
        Message::User { content } | Message::System { content } => {
            content.parts().iter().any(foreign)
        }
        Message::Tool(tool) => tool.content.parts().iter().any(foreign),
        _ => false,
    });
    if any_foreign {
        let messages = std::mem::take(&mut *request.messages);
        let mut kept = Vec::with_capacity(messages.len());
        for mut message in messages {
            let user = matches!(message, Message::User { .. });
            let content = match &mut message {
                Message::User { content } | Message::System { content } => content,
                Message::Tool(tool) => &mut tool.content,
                _ => {
                    kept.push(message);
                    continue;
                }
            };
            if content.parts().iter().any(foreign) {
                for part in content.parts().iter().filter(|p| foreign(p)) {
                    if let Part::Provider(raw) = part {
                        let kind = raw.value.get("type").and_then(Value::as_str);
                        note(format!("content:{}", kind.unwrap_or("untyped")));
                    }
                }
                let parts: Vec<Part> = content
                    .parts()
                    .iter()
                    .filter(|part| !foreign(part))
                    .cloned()
                    .collect();
                if parts.is_empty() && user {
                    continue;
                }
                *content = Content::from_parts(parts);
            }
            kept.push(message);
        }
        *request.messages = kept;
    }
    Ok(request)
}

/// The request's tools as a leaf speaking `format` sends them: a hosted tool of another format is dropped or
/// refused by its rule ([`HostedTool::elsewhere`]); a freeform tool goes to a provider without freeform tools
/// as its one-string function, with its grammar in the description. Untouched (not copied) when no tool needs
/// either.
fn for_format(
    request: &mut ChatRequest,
    format: Option<ApiFormat>,
    note: &impl Fn(String),
) -> Result<(), ChatError> {
    let freeform = format == Some(ApiFormat::Responses);
    let foreign = |tool: &ToolSpec| match &tool.kind {
        ToolKind::Function => false,
        ToolKind::Custom { .. } => !freeform,
        ToolKind::Hosted(hosted) => Some(hosted.format) != format,
    };
    if !request.options.tools.iter().any(foreign) {
        return Ok(());
    }
    let mut kept = Vec::with_capacity(request.options.tools.len());
    let mut gone = Vec::new();
    for tool in request.options.tools.iter() {
        match &tool.kind {
            ToolKind::Hosted(hosted) if foreign(tool) => match hosted.elsewhere() {
                Unhosted::Dropped => {
                    note(format!("tool:{}", hosted.tool_type()));
                    gone.push(tool.name.clone());
                }
                Unhosted::Refused => {
                    return Err(ChatError::new(
                        ErrorKind::Unsupported,
                        format!(
                        "the hosted tool `{}` cannot be served by this upstream: only {} runs it",
                        hosted.tool_type(),
                        hosted.hosted_by()
                    ),
                    )
                    .refused_before_sending())
                }
            },
            ToolKind::Custom { format } if foreign(tool) => {
                let mut function = tool.clone();
                function.description = freeform_description(&tool.description, format.as_ref());
                kept.push(function);
            }
            _ => kept.push(tool.clone()),
        }
    }
    let options = &mut *request.options;
    *options.tools = kept;
    // A choice of a tool that is no longer offered would be refused by the provider: the model chooses.
    if matches!(&options.tool_choice, Some(ToolChoice::Tool(name)) if gone.contains(name)) {
        options.tool_choice = Some(ToolChoice::Auto);
    }
    Ok(())
}
