//! Judging a request before it leaves: system and user text, and the tool results it carries.
//!
//! Pattern checks read every message's text parts (the history goes to the provider too). Whole-text checks
//! (moderation, your own) read only the turn's new messages — those after the last assistant message — so a
//! long conversation does not pay one external call per old message on every turn. Assistant messages are the
//! model's own output, judged when they streamed out.

use tower_chat::{ChatError, ChatRequest, GuardrailAudit, GuardrailStage, Message, Part};

use crate::policy::{blocked, judge, record, Policy};

/// Judge `request`'s messages: an error if a check blocks, else the request with every redaction made (and the
/// sent messages left in the audit for the recorders outside).
pub(crate) async fn check_request(
    policy: &Policy,
    mut request: ChatRequest,
) -> Result<ChatRequest, ChatError> {
    if policy.request.is_empty() && policy.tool_result.is_empty() {
        return Ok(request);
    }
    let audit = request.extensions.get::<GuardrailAudit>().cloned();
    let new_from = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
        .map_or(0, |at| at + 1);
    let mut changes: Vec<(usize, usize, String)> = Vec::new();
    for (index, message) in request.messages.iter().enumerate() {
        let (stage, content, location) = match message {
            Message::System { content } | Message::User { content } => (
                GuardrailStage::Request,
                content,
                format!("messages[{index}]"),
            ),
            Message::Tool(tool) => (
                GuardrailStage::ToolResult,
                &tool.content,
                format!("tool_result:{}", tool.call_id),
            ),
            Message::Assistant(_) => continue,
        };
        let stage_policy = policy.stage(stage);
        if stage_policy.is_empty() {
            continue;
        }
        for (part_index, part) in content.parts().iter().enumerate() {
            let Part::Text(text) = part else { continue };
            let judged = judge(
                stage_policy,
                stage,
                &location,
                &text.text,
                index >= new_from,
            )
            .await?;
            record(audit.as_ref(), &judged.verdicts);
            if let Some(block) = &judged.block {
                return Err(blocked(block));
            }
            if let Some(redacted) = judged.redacted {
                changes.push((index, part_index, redacted));
            }
        }
    }
    if changes.is_empty() {
        return Ok(request);
    }
    let messages = &mut *request.messages;
    for (index, part_index, redacted) in changes {
        let content = match &mut messages[index] {
            Message::System { content } | Message::User { content } => content,
            Message::Tool(tool) => &mut tool.content,
            Message::Assistant(_) => continue,
        };
        if let Some(Part::Text(text)) = content.parts_mut().get_mut(part_index) {
            text.text = redacted;
        }
    }
    if let Some(audit) = &audit {
        audit.set_sent_messages(request.messages.clone());
    }
    Ok(request)
}
