//! Judging a request before it leaves: every text it carries.
//!
//! - every message's content, whatever its role: each run of adjacent text parts as one text (consecutive
//!   system messages as one content), text documents, image and file URLs, provider parts' JSON (see
//!   [`crate::content`]);
//! - the assistant messages of the history: their text and reasoning (stage `request`) and their tool calls'
//!   arguments, every string and key (stage `tool_call`, as when the call streamed out);
//! - tool messages (stage `tool_result`);
//! - the tools offered (description, and every string and key of the parameter schema), the stop sequences,
//!   the response format's schema and the provider options (`user`, `metadata`, …), all stage `request`.
//!
//! Whole-text checks (moderation, your own) read only the turn's new text and documents — the messages after
//! the last assistant message — so a long conversation does not pay one external call per old message on every
//! turn; the pattern checks read everything, and share one work budget per stage ([`crate::scan::Budget`]).
//! Redacting an assistant message's reasoning drops its provider's signature, which no longer matches.

use serde_json::Value;
use tower_chat::{
    ChatError, ChatRequest, GuardrailAudit, GuardrailStage, GuardrailVerdict, Message, Part,
    ResponseFormat, ToolArguments,
};

use crate::content::judge_parts;
use crate::json::judge_json;
use crate::policy::{blocked, judge, record, Budgets, Policy};

/// A change to make to the request.
enum Edit {
    Part {
        message: usize,
        part: usize,
        new: Part,
    },
    AssistantText {
        message: usize,
        text: String,
    },
    Reasoning {
        message: usize,
        index: usize,
        text: String,
    },
    Arguments {
        message: usize,
        call: usize,
        arguments: ToolArguments,
    },
    ToolDescription {
        tool: usize,
        text: String,
    },
    ToolParameters {
        tool: usize,
        value: Value,
    },
    Stop {
        index: usize,
        text: String,
    },
    ResponseSchema(Value),
    Extra(serde_json::Map<String, Value>),
    EndUser(String),
    Carried(serde_json::Map<String, Value>),
}

/// The verdicts and edits gathered so far; a block ends the request.
struct Judging<'a> {
    policy: &'a Policy,
    audit: Option<GuardrailAudit>,
    budgets: Budgets,
    edits: Vec<Edit>,
}

impl Judging<'_> {
    /// Record `verdicts`; the request's error when `block` is set.
    fn take(
        &mut self,
        verdicts: &[GuardrailVerdict],
        block: Option<GuardrailVerdict>,
    ) -> Result<(), ChatError> {
        record(self.audit.as_ref(), verdicts);
        match block {
            Some(block) => Err(blocked(&block, self.policy.max_candidates)),
            None => Ok(()),
        }
    }

    /// Judge one text; its redaction, when it has one.
    async fn text(
        &mut self,
        stage: GuardrailStage,
        location: &str,
        text: &str,
    ) -> Result<Option<String>, ChatError> {
        let policy = self.policy.stage(stage);
        if policy.scan.is_empty() || text.is_empty() {
            return Ok(None);
        }
        let judged = judge(
            policy,
            stage,
            location,
            text,
            false,
            self.budgets.stage(stage),
        )
        .await?;
        self.take(&judged.verdicts, judged.block)?;
        Ok(judged.redacted)
    }

    /// Judge a JSON value's strings and keys; the redacted value, when one was.
    async fn json(
        &mut self,
        stage: GuardrailStage,
        location: &str,
        value: &Value,
    ) -> Result<Option<Value>, ChatError> {
        let policy = self.policy.stage(stage);
        if policy.scan.is_empty() {
            return Ok(None);
        }
        let judged = judge_json(
            policy,
            stage,
            location,
            value,
            false,
            self.budgets.stage(stage),
        )
        .await?;
        self.take(&judged.verdicts, judged.block)?;
        Ok(judged.redacted)
    }

    async fn message(
        &mut self,
        index: usize,
        message: &Message,
        new: bool,
    ) -> Result<(), ChatError> {
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
            Message::Assistant(assistant) => {
                let location = format!("messages[{index}]");
                if let Some(text) = self
                    .text(GuardrailStage::Request, &location, &assistant.content)
                    .await?
                {
                    self.edits.push(Edit::AssistantText {
                        message: index,
                        text,
                    });
                }
                for (j, part) in assistant.reasoning.iter().enumerate() {
                    let at = format!("{location}.reasoning[{j}]");
                    if let Some(text) = self.text(GuardrailStage::Request, &at, &part.text).await? {
                        self.edits.push(Edit::Reasoning {
                            message: index,
                            index: j,
                            text,
                        });
                    }
                }
                for (k, call) in assistant.tool_calls.iter().enumerate() {
                    let at = format!("tool_call:{}", call.id);
                    let arguments = match &call.arguments {
                        ToolArguments::Json(value) => self
                            .json(GuardrailStage::ToolCall, &at, value)
                            .await?
                            .map(ToolArguments::Json),
                        ToolArguments::Invalid { raw, error } => self
                            .text(GuardrailStage::ToolCall, &at, raw)
                            .await?
                            .map(|raw| ToolArguments::Invalid {
                                raw,
                                error: error.clone(),
                            }),
                    };
                    if let Some(arguments) = arguments {
                        self.edits.push(Edit::Arguments {
                            message: index,
                            call: k,
                            arguments,
                        });
                    }
                }
                return Ok(());
            }
        };
        let policy = self.policy.stage(stage);
        let judged = judge_parts(
            policy,
            stage,
            &location,
            content.parts(),
            new,
            self.budgets.stage(stage),
        )
        .await?;
        self.take(&judged.verdicts, judged.block)?;
        self.edits
            .extend(judged.changed.into_iter().map(|(part, new)| Edit::Part {
                message: index,
                part,
                new,
            }));
        Ok(())
    }

    /// Consecutive system messages (one per Anthropic `system` block) read as one content, so a match split
    /// between two blocks is found.
    async fn systems(
        &mut self,
        run: std::ops::Range<usize>,
        messages: &[Message],
        new: bool,
    ) -> Result<(), ChatError> {
        let mut parts = Vec::new();
        let mut places = Vec::new();
        for index in run.clone() {
            if let Message::System { content } = &messages[index] {
                for (part, value) in content.parts().iter().enumerate() {
                    parts.push(value.clone());
                    places.push((index, part));
                }
            }
        }
        let stage = GuardrailStage::Request;
        let location = format!("messages[{}]", run.start);
        let budget = self.budgets.stage(stage);
        let judged = judge_parts(
            self.policy.stage(stage),
            stage,
            &location,
            &parts,
            new,
            budget,
        )
        .await?;
        self.take(&judged.verdicts, judged.block)?;
        for (at, new) in judged.changed {
            let (message, part) = places[at];
            self.edits.push(Edit::Part { message, part, new });
        }
        Ok(())
    }

    /// The tools offered, the stop sequences, the response format and the provider options.
    async fn options(&mut self, request: &ChatRequest) -> Result<(), ChatError> {
        let stage = GuardrailStage::Request;
        let options = &request.options;
        for (tool, spec) in options.tools.iter().enumerate() {
            let at = format!("tools[{tool}]");
            if let Some(text) = self
                .text(stage, &format!("{at}.description"), &spec.description)
                .await?
            {
                self.edits.push(Edit::ToolDescription { tool, text });
            }
            if let Some(value) = self
                .json(stage, &format!("{at}.parameters"), &spec.parameters)
                .await?
            {
                self.edits.push(Edit::ToolParameters { tool, value });
            }
        }
        for (index, stop) in options.stop.iter().enumerate() {
            if let Some(text) = self.text(stage, &format!("stop[{index}]"), stop).await? {
                self.edits.push(Edit::Stop { index, text });
            }
        }
        if let Some(ResponseFormat::JsonSchema { schema, .. }) = &options.response_format {
            if let Some(value) = self.json(stage, "response_format", schema).await? {
                self.edits.push(Edit::ResponseSchema(value));
            }
        }
        if !options.extra.is_empty() {
            let extra = Value::Object(options.extra.clone());
            if let Some(Value::Object(map)) = self.json(stage, "options", &extra).await? {
                self.edits.push(Edit::Extra(map));
            }
        }
        if let Some(user) = &options.end_user {
            if let Some(text) = self.text(stage, "end_user", user).await? {
                self.edits.push(Edit::EndUser(text));
            }
        }
        // Fields the wire formats do not model travel to a same-format upstream as the client sent them.
        if let Some(carried) = options.carried.as_ref().filter(|c| !c.fields.is_empty()) {
            let fields = Value::Object(carried.fields.clone());
            if let Some(Value::Object(map)) = self.json(stage, "carried", &fields).await? {
                self.edits.push(Edit::Carried(map));
            }
        }
        Ok(())
    }
}

/// Judge `request`'s texts: an error if a check blocks, else the request with every redaction made (and the
/// sent messages left in the audit for the recorders outside).
pub(crate) async fn check_request(
    policy: &Policy,
    mut request: ChatRequest,
) -> Result<ChatRequest, ChatError> {
    if policy.request.is_empty() && policy.tool_result.is_empty() && policy.tool_call.is_empty() {
        return Ok(request);
    }
    let new_from = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
        .map_or(0, |at| at + 1);
    let mut judging = Judging {
        policy,
        audit: request.extensions.get::<GuardrailAudit>().cloned(),
        budgets: Budgets::new(policy),
        edits: Vec::new(),
    };
    let messages = &request.messages;
    let mut index = 0;
    while index < messages.len() {
        let systems = messages[index..]
            .iter()
            .take_while(|m| matches!(m, Message::System { .. }))
            .count();
        if systems > 1 {
            let run = index..index + systems;
            judging.systems(run, messages, index >= new_from).await?;
            index += systems;
            continue;
        }
        judging
            .message(index, &messages[index], index >= new_from)
            .await?;
        index += 1;
    }
    judging.options(&request).await?;
    if judging.edits.is_empty() {
        return Ok(request);
    }
    let messages_changed = judging.edits.iter().any(|edit| {
        matches!(
            edit,
            Edit::Part { .. }
                | Edit::AssistantText { .. }
                | Edit::Reasoning { .. }
                | Edit::Arguments { .. }
        )
    });
    for edit in judging.edits {
        apply(&mut request, edit);
    }
    if let (Some(audit), true) = (&judging.audit, messages_changed) {
        audit.set_sent_messages(request.messages.clone());
    }
    Ok(request)
}

fn apply(request: &mut ChatRequest, edit: Edit) {
    match edit {
        Edit::Part { message, part, new } => {
            let content = match &mut request.messages[message] {
                Message::System { content } | Message::User { content } => content,
                Message::Tool(tool) => &mut tool.content,
                Message::Assistant(_) => return,
            };
            if let Some(slot) = content.parts_mut().get_mut(part) {
                *slot = new;
            }
        }
        Edit::AssistantText { message, text } => {
            if let Message::Assistant(assistant) = &mut request.messages[message] {
                assistant.content = text;
            }
        }
        Edit::Reasoning {
            message,
            index,
            text,
        } => {
            if let Message::Assistant(assistant) = &mut request.messages[message] {
                if let Some(part) = assistant.reasoning.get_mut(index) {
                    part.text = text;
                    // The provider signed the text as it was.
                    part.continuation = None;
                }
            }
        }
        Edit::Arguments {
            message,
            call,
            arguments,
        } => {
            if let Message::Assistant(assistant) = &mut request.messages[message] {
                if let Some(call) = assistant.tool_calls.get_mut(call) {
                    call.arguments = arguments;
                }
            }
        }
        Edit::ToolDescription { tool, text } => {
            if let Some(spec) = request.options.tools.get_mut(tool) {
                spec.description = text;
            }
        }
        Edit::ToolParameters { tool, value } => {
            if let Some(spec) = request.options.tools.get_mut(tool) {
                spec.parameters = value;
            }
        }
        Edit::Stop { index, text } => {
            if let Some(stop) = request.options.stop.get_mut(index) {
                *stop = text;
            }
        }
        Edit::ResponseSchema(value) => {
            if let Some(ResponseFormat::JsonSchema { schema, .. }) =
                &mut request.options.response_format
            {
                *schema = value;
            }
        }
        Edit::Extra(map) => request.options.extra = map,
        Edit::EndUser(text) => request.options.end_user = Some(text),
        Edit::Carried(map) => {
            if let Some(carried) = &mut request.options.carried {
                carried.fields = map;
            }
        }
    }
}
