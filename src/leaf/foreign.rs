//! What a leaf leaves out of an upstream call because it belongs to another wire format: carried fields,
//! forwarded headers and provider parts of a format the upstream does not speak, each named in the request's
//! [`DroppedFields`].

use serde_json::Value;

use crate::carried::{ApiFormat, DroppedFields, ForwardedHeaders};
use crate::content::{Content, Part, ProviderPart};
use crate::error::{ChatError, ErrorKind};
use crate::message::Message;
use crate::request::{ChatRequest, ToolChoice, ToolSpec};
use crate::tool_kind::{freeform_description, ToolKind, Unhosted};
use crate::tool_namespace::flatten;

/// `request` as a leaf speaking `format` sends it: parts `keeps` refuses are taken out, of user, system and
/// tool messages and of assistant turns (a user message or assistant turn left with nothing is removed), and carried fields of another format too; each drop is logged and recorded.
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
        if Some(forwarded.format()) != format {
            for (name, _) in forwarded.headers() {
                note(name.as_str().to_owned());
            }
            if let Some(query) = forwarded.query_string() {
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
        Message::Assistant(assistant) => assistant
            .provider_parts
            .iter()
            .any(|placed| !keeps(&placed.part)),
    });
    if any_foreign {
        let messages = std::mem::take(&mut *request.messages);
        let mut kept = Vec::with_capacity(messages.len());
        for mut message in messages {
            let user = matches!(message, Message::User { .. });
            let content = match &mut message {
                Message::User { content } | Message::System { content } => content,
                Message::Tool(tool) => &mut tool.content,
                Message::Assistant(assistant) => {
                    assistant.provider_parts.retain(|placed| {
                        let keep = keeps(&placed.part);
                        if !keep {
                            let kind = placed.part.value.get("type").and_then(Value::as_str);
                            note(format!("content:{}", kind.unwrap_or("untyped")));
                        }
                        keep
                    });
                    // A turn that held only such blocks says nothing the upstream can read.
                    if !assistant.is_empty() {
                        kept.push(message);
                    }
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

/// The request's tools as a leaf speaking `format` sends them: a Responses tool namespace becomes its tools,
/// each named by [`namespaced_tool_name`](crate::namespaced_tool_name), and each of them then goes by the rules
/// for a tool of its kind; a hosted tool of another format is dropped or refused by its rule
/// ([`HostedTool::elsewhere`](crate::HostedTool::elsewhere)); a freeform tool goes to a provider without
/// freeform tools as its one-string function, with its grammar in the description. Untouched (not copied)
/// when no tool needs any of it.
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
    let mut fit = |tool: &ToolSpec| -> Result<(), ChatError> {
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
        Ok(())
    };
    for tool in request.options.tools.iter() {
        match &tool.kind {
            // A group's tools go by the rules of their kinds; a group inside it is a hosted tool there.
            ToolKind::Hosted(hosted) if foreign(tool) => match flatten(hosted) {
                Some(members) => members.iter().try_for_each(&mut fit)?,
                None => fit(tool)?,
            },
            _ => fit(tool)?,
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
