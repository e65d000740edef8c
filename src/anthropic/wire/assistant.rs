//! An assistant turn as Messages API blocks: thinking, text and `tool_use` blocks, with the blocks the core does
//! not model (a server tool's `server_tool_use` and its result) back in the places they came in.

use std::iter::Peekable;
use std::vec::IntoIter;

use serde_json::{Map, Value};

use super::block::{Block, EMPTY_INPUT};
use crate::message::{AssistantMessage, PlacedPart, ToolArguments};
use crate::reasoning::Continuation;

/// Where a carried block goes in the order this encoder writes a turn (reasoning, then text, then calls): before
/// the reasoning part, at the text offset, or before the call its place names.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Reasoning(usize),
    Text(usize),
    Calls(usize),
}

fn slot(placed: &PlacedPart, message: &AssistantMessage) -> Slot {
    if placed.after_reasoning < message.reasoning.len() {
        Slot::Reasoning(placed.after_reasoning)
    } else if placed.after_calls == 0 {
        // An offset inside a character (a record edited by hand) moves to the next boundary.
        let text = &message.content;
        let mut at = placed.text_offset.min(text.len());
        while !text.is_char_boundary(at) {
            at += 1;
        }
        Slot::Text(at)
    } else {
        Slot::Calls(placed.after_calls)
    }
}

/// The carried blocks up to `limit`, as they come.
fn take_until<'a>(
    placed: &mut Peekable<IntoIter<(Slot, &'a Value)>>,
    limit: Slot,
    out: &mut Vec<Block<'a>>,
) {
    while let Some((_, value)) = placed.next_if(|(slot, _)| *slot <= limit) {
        out.push(Block::Raw(value));
    }
}

/// The blocks of `message`. Carried blocks of another provider's format were left out before encoding
/// (`leaf::foreign`); any that remain are skipped here too.
pub(super) fn blocks(message: &AssistantMessage) -> Vec<Block<'_>> {
    let mut placed: Vec<(Slot, &Value)> = message
        .provider_parts
        .iter()
        .filter(|placed| placed.part.provider == "anthropic")
        .map(|placed| (slot(placed, message), &placed.part.value))
        .collect();
    // Stable: blocks in one place keep the order they came in.
    placed.sort_by_key(|(slot, _)| *slot);
    let mut placed = placed.into_iter().peekable();
    let mut out = Vec::with_capacity(
        1 + message.reasoning.len() + message.tool_calls.len() + message.provider_parts.len(),
    );
    // Extended thinking continues only from its own blocks, unchanged and first in the turn.
    for (i, part) in message.reasoning.iter().enumerate() {
        take_until(&mut placed, Slot::Reasoning(i), &mut out);
        match &part.continuation {
            Some(Continuation::AnthropicThinking { signature }) => out.push(Block::Thinking {
                thinking: &part.text,
                signature,
            }),
            Some(Continuation::AnthropicRedacted { data }) => {
                out.push(Block::RedactedThinking { data })
            }
            Some(other) => tracing::debug!(
                from = other.provider(),
                "another provider's reasoning left out of a Messages request"
            ),
            None => {}
        }
    }
    // The text is split where carried blocks sat between its blocks, so each comes back between the same texts.
    let text = &message.content;
    let mut from = 0;
    while let Some(&(Slot::Text(at), _)) = placed.peek() {
        if at > from {
            out.push(Block::Text {
                text: &text[from..at],
                cache_control: None,
            });
            from = at;
        }
        take_until(&mut placed, Slot::Text(at), &mut out);
    }
    if from < text.len() {
        out.push(Block::Text {
            text: &text[from..],
            cache_control: None,
        });
    }
    for (j, call) in message.tool_calls.iter().enumerate() {
        take_until(&mut placed, Slot::Calls(j), &mut out);
        // The API takes an object; arguments that were not an object were answered with an error result
        // already, so an empty object keeps the history well-formed.
        let input = match &call.arguments {
            ToolArguments::Json(value @ Value::Object(_)) => value,
            _ => EMPTY_INPUT.get_or_init(|| Value::Object(Map::new())),
        };
        out.push(Block::ToolUse {
            id: &call.id,
            name: &call.name,
            input,
        });
    }
    take_until(&mut placed, Slot::Calls(usize::MAX), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::content::ProviderPart;
    use crate::message::ToolCall;
    use crate::reasoning::ReasoningPart;

    fn carried(message: &mut AssistantMessage, value: Value) {
        let part = ProviderPart {
            provider: "anthropic".into(),
            value,
        };
        message
            .provider_parts
            .push(PlacedPart::at_end_of(message, part));
    }

    #[test]
    fn carried_blocks_come_back_between_the_texts_and_calls_they_sat_between() {
        let mut message = AssistantMessage::default();
        message.reasoning.push(ReasoningPart {
            text: "think".into(),
            continuation: Some(Continuation::AnthropicThinking {
                signature: "sig".into(),
            }),
        });
        message.content.push_str("Let me search. ");
        carried(&mut message, json!({"type": "server_tool_use", "id": "s1"}));
        carried(
            &mut message,
            json!({"type": "web_search_tool_result", "id": "r1"}),
        );
        message.content.push_str("Found it.");
        message
            .tool_calls
            .push(ToolCall::new("c1", "read", json!({"path": "a"})));
        carried(
            &mut message,
            json!({"type": "container_upload", "file_id": "f"}),
        );
        // A block of another provider's format never reaches this encoder's output.
        message.provider_parts.push(PlacedPart {
            after_reasoning: 0,
            text_offset: 0,
            after_calls: 0,
            part: ProviderPart {
                provider: "openai".into(),
                value: json!({"type": "web_search_call"}),
            },
        });
        let blocks = serde_json::to_value(blocks(&message)).unwrap();
        let types: Vec<&str> = blocks
            .as_array()
            .unwrap()
            .iter()
            .map(|block| block["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "thinking",
                "text",
                "server_tool_use",
                "web_search_tool_result",
                "text",
                "tool_use",
                "container_upload"
            ]
        );
        assert_eq!(blocks[1]["text"], "Let me search. ");
        assert_eq!(blocks[4]["text"], "Found it.");
        assert_eq!(blocks[2], json!({"type": "server_tool_use", "id": "s1"}));
    }

    #[test]
    fn a_turn_without_carried_blocks_is_one_text_block() {
        let message = AssistantMessage {
            content: "hello".into(),
            ..AssistantMessage::default()
        };
        let blocks = serde_json::to_value(blocks(&message)).unwrap();
        assert_eq!(blocks, json!([{"type": "text", "text": "hello"}]));
    }
}
