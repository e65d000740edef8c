//! A JSON answer asked for as a forced tool call, for providers (or models) with no response-schema parameter.
//!
//! Models follow a schema reliably when it is a tool's input and the call is forced: the request offers one
//! tool, [`FORCED_ANSWER_TOOL`], whose parameters are the answer's schema, and requires it. The answer then comes
//! back as that tool's arguments; [`ForcedAnswerEvents`] turns those back into text events, so callers see JSON
//! text as from any other provider and the tool call never reaches a tool loop. Provider-agnostic: a leaf applies
//! [`force_answer_tool`] when encoding and runs its decoded events through [`ForcedAnswerEvents`].
//!
//! ```
//! use serde_json::json;
//! use tower_chat::forced_answer::{force_answer_tool, ForcedAnswerEvents, FORCED_ANSWER_TOOL};
//! use tower_chat::{ChatEvent, ChatOptions, FinishReason, ToolCall};
//!
//! let mut options = ChatOptions::default();
//! force_answer_tool(&mut options, "city", &json!({"type": "object"})).unwrap();
//! assert_eq!(options.tools[0].name, FORCED_ANSWER_TOOL);
//!
//! let mut events = ForcedAnswerEvents::default();
//! let answer: Vec<ChatEvent> = [
//!     ChatEvent::ToolCallStart { index: 0, id: "t1".into(), name: FORCED_ANSWER_TOOL.into() },
//!     ChatEvent::ToolCallDelta { index: 0, arguments: "{\"name\":".into() },
//!     ChatEvent::ToolCallDelta { index: 0, arguments: "\"Oslo\"}".into() },
//!     ChatEvent::ToolCallEnd { index: 0, call: ToolCall::new("t1", FORCED_ANSWER_TOOL, json!({"name": "Oslo"})) },
//!     ChatEvent::finish(FinishReason::ToolCalls),
//! ]
//! .into_iter()
//! .filter_map(|event| events.map(event))
//! .collect();
//! assert_eq!(answer, [ChatEvent::text("{\"name\":"), ChatEvent::text("\"Oslo\"}"), ChatEvent::finish(FinishReason::Stop)]);
//! ```

use serde_json::Value;

use crate::error::{ChatError, ErrorKind};
use crate::event::{ChatEvent, FinishReason};
use crate::request::{ChatOptions, ToolChoice, ToolSpec};

/// The name of the tool whose input is the answer. Reserved: a request that offers its own tool of this name
/// together with a JSON answer is refused.
pub const FORCED_ANSWER_TOOL: &str = "structured_answer";

/// Offer [`FORCED_ANSWER_TOOL`] with `schema` as its parameters (`name` is the schema's name, for the tool's
/// description). Alone, it is required; beside the request's own tools, some tool call is required (the model
/// may call the others first, as a tool loop then runs them, and answers through this one). Refused when the
/// request forces one of its own tools (it could never answer) or already offers a tool of this name.
pub fn force_answer_tool(
    options: &mut ChatOptions,
    name: &str,
    schema: &Value,
) -> Result<(), ChatError> {
    if options
        .tools
        .iter()
        .any(|tool| tool.name == FORCED_ANSWER_TOOL)
    {
        return Err(ChatError::new(
            ErrorKind::InvalidRequest,
            format!("the tool name `{FORCED_ANSWER_TOOL}` is reserved for a JSON schema answer"),
        ));
    }
    let choice = match &options.tool_choice {
        Some(ToolChoice::Tool(forced)) => {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "a JSON schema answer is asked for as a tool call here, so the request cannot force its own \
                     tool `{forced}`"
                ),
            ))
        }
        // The request's tools may not be called: the answer is the only call left.
        Some(ToolChoice::None) => ToolChoice::Tool(FORCED_ANSWER_TOOL.to_owned()),
        _ if options.tools.is_empty() => ToolChoice::Tool(FORCED_ANSWER_TOOL.to_owned()),
        _ => ToolChoice::Required,
    };
    options.tools.push(ToolSpec::new(
        FORCED_ANSWER_TOOL,
        format!("Give the answer (`{name}`) as this tool's input."),
        schema.clone(),
    ));
    options.tool_choice = Some(choice);
    Ok(())
}

/// Turns the calls of [`FORCED_ANSWER_TOOL`] in a response back into text (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct ForcedAnswerEvents {
    /// The response positions of the answer's calls, and whether any of their argument text came as deltas.
    answers: Vec<(usize, bool)>,
    /// Whether a call of another tool went through unchanged (then the finish stays `ToolCalls`).
    other_calls: bool,
}

impl ForcedAnswerEvents {
    /// The event to pass on for `event`, if any.
    pub fn map(&mut self, event: ChatEvent) -> Option<ChatEvent> {
        match event {
            ChatEvent::ToolCallStart {
                index, ref name, ..
            } => {
                if name == FORCED_ANSWER_TOOL {
                    self.answers.push((index, false));
                    return None;
                }
                self.other_calls = true;
                Some(event)
            }
            ChatEvent::ToolCallDelta { index, arguments } if self.is_answer(index) => {
                self.answer(index).1 = true;
                Some(ChatEvent::TextDelta { text: arguments })
            }
            // A whole (non-streamed) response, or a provider that sent no deltas: the complete input is the text.
            ChatEvent::ToolCallEnd { index, call } if self.is_answer(index) => {
                let streamed = self.answer(index).1;
                (!streamed).then(|| ChatEvent::TextDelta {
                    text: call.arguments.to_wire_string(),
                })
            }
            ChatEvent::Finish {
                reason: FinishReason::ToolCalls,
            } if !self.answers.is_empty() && !self.other_calls => {
                Some(ChatEvent::finish(FinishReason::Stop))
            }
            other => Some(other),
        }
    }

    fn is_answer(&self, index: usize) -> bool {
        self.answers.iter().any(|(i, _)| *i == index)
    }

    fn answer(&mut self, index: usize) -> &mut (usize, bool) {
        self.answers
            .iter_mut()
            .find(|(i, _)| *i == index)
            .expect("checked by is_answer")
    }
}
