//! Reasoning as Responses clients carry it: `reasoning` items in and out, and the `encrypted_content` that
//! lets a client hand back reasoning from any upstream.
//!
//! A Responses client can only return reasoning as a `reasoning` item, whose continuation is its opaque
//! `encrypted_content`. Reasoning from an OpenAI upstream keeps OpenAI's own item id and `encrypted_content`,
//! passed through unchanged both ways. Reasoning from another upstream (Anthropic's `thinking` with its
//! signature, `redacted_thinking`, Bedrock's and Gemini's signatures) has no such form, so it goes out
//! [sealed](crate::sealed_reasoning) in `encrypted_content`, and the gateway restores the part when the item
//! comes back, so a tool round over an Anthropic upstream with extended thinking sends the thinking block back
//! byte for byte, even to another replica.

use serde::Deserialize;
use serde_json::{json, Value};
use tower_chat::{Continuation, ReasoningPart};

use crate::error::ApiError;
use crate::format::schema;
use crate::sealed_reasoning::{seal, unseal};

/// A `reasoning` input item (`id`, `summary`, `content`, `encrypted_content`) as a reasoning part: the part the
/// gateway sealed into it, else OpenAI's item with its id, summaries and `encrypted_content` unchanged.
pub(crate) fn input_reasoning(item: Value, at: &str) -> Result<ReasoningPart, ApiError> {
    #[derive(Deserialize)]
    struct Item {
        id: String,
        #[serde(default)]
        summary: Vec<Text>,
        #[serde(default)]
        content: Option<Vec<Text>>,
        #[serde(default)]
        encrypted_content: Option<String>,
    }
    #[derive(Deserialize)]
    struct Text {
        text: String,
    }
    let item: Item = serde_json::from_value(item).map_err(|e| schema(format!("{at}: {e}")))?;
    if let Some(part) = item
        .encrypted_content
        .as_deref()
        .map(|sealed| unseal(sealed, at, "encrypted_content"))
        .transpose()?
        .flatten()
    {
        return Ok(part);
    }
    let summary: Vec<String> = item.summary.into_iter().map(|s| s.text).collect();
    let text = if summary.is_empty() {
        joined(item.content.unwrap_or_default().into_iter().map(|c| c.text))
    } else {
        joined(summary.iter().cloned())
    };
    Ok(ReasoningPart {
        text,
        continuation: Some(Continuation::OpenAiReasoning {
            id: item.id,
            encrypted_content: item.encrypted_content,
            summary,
        }),
    })
}

fn joined(texts: impl Iterator<Item = String>) -> String {
    texts.collect::<Vec<_>>().join("\n\n")
}

/// The id and `encrypted_content` a reasoning part is shown with. `streamed_id` is the id the item was opened
/// under when it streamed before its continuation was known. An OpenAI item keeps its own id and
/// `encrypted_content`; when it streamed under another id, or came from another upstream, its continuation is
/// sealed. `encrypted_content` is only shown when the request asked for it (`include`).
pub(crate) fn shown(
    part: &ReasoningPart,
    streamed_id: Option<&str>,
    include_encrypted: bool,
) -> (String, Option<String>) {
    let own_id = || {
        streamed_id.map_or_else(
            || format!("rs_{}", uuid::Uuid::new_v4().simple()),
            str::to_owned,
        )
    };
    match &part.continuation {
        Some(Continuation::OpenAiReasoning {
            id,
            encrypted_content,
            ..
        }) if streamed_id.is_none_or(|streamed| streamed == id) => (
            id.clone(),
            encrypted_content.clone().filter(|_| include_encrypted),
        ),
        Some(_) => (own_id(), include_encrypted.then(|| seal(part))),
        None => (own_id(), None),
    }
}

/// A `reasoning` output item: its text as one `summary_text` part (none when empty).
pub(crate) fn output_item(id: &str, text: &str, encrypted_content: Option<String>) -> Value {
    let summary = if text.is_empty() {
        json!([])
    } else {
        json!([{"type": "summary_text", "text": text}])
    };
    let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
    if let Some(encrypted_content) = encrypted_content {
        item["encrypted_content"] = encrypted_content.into();
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Encoder, Ending, Folded, Visible};
    use crate::responses::ResponseEncoder;

    fn thinking(text: &str, signature: &str) -> ReasoningPart {
        ReasoningPart {
            text: text.into(),
            continuation: Some(Continuation::AnthropicThinking {
                signature: signature.into(),
            }),
        }
    }

    #[test]
    fn anthropic_thinking_is_sealed_and_comes_back_byte_for_byte() {
        let part = thinking("Let me check.\n\"quoted\" é", "EqQBCkYIARgCKkB+/=sig");
        let (id, sealed) = shown(&part, None, true);
        assert!(id.starts_with("rs_"), "{id}");
        let sealed = sealed.expect("asked for");
        assert!(sealed.starts_with("tower-chat.reasoning.v1:"), "{sealed}");
        let item = output_item(&id, &part.text, Some(sealed));
        assert_eq!(item["summary"][0]["text"], part.text);
        // The item as a client sends it back, its summary edited: the sealed part wins.
        let mut back = item.clone();
        back["summary"] = json!([{"type": "summary_text", "text": "edited"}]);
        assert_eq!(input_reasoning(back, "input[1]").unwrap(), part);
        let redacted = ReasoningPart {
            text: String::new(),
            continuation: Some(Continuation::AnthropicRedacted {
                data: "opaque==".into(),
            }),
        };
        let (_, sealed) = shown(&redacted, Some("rs_streamed"), true);
        assert_eq!(
            unseal(&sealed.unwrap(), "x", "encrypted_content").unwrap(),
            Some(redacted)
        );
    }

    #[test]
    fn encrypted_content_is_shown_only_when_asked_for() {
        let part = thinking("hmm", "sig");
        assert_eq!(shown(&part, Some("rs_1"), false), ("rs_1".to_owned(), None));
        assert_eq!(
            shown(&ReasoningPart::text("plain"), Some("rs_1"), true).1,
            None
        );
    }

    #[test]
    fn an_openai_item_passes_through_unchanged_both_ways() {
        let item = json!({"type": "reasoning", "id": "rs_abc", "status": "completed",
            "summary": [{"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Then."}],
            "encrypted_content": "gAAAAABo-opaque=="});
        let part = input_reasoning(item, "input[0]").unwrap();
        assert_eq!(part.text, "First.\n\nThen.");
        assert_eq!(
            part.continuation,
            Some(Continuation::OpenAiReasoning {
                id: "rs_abc".into(),
                encrypted_content: Some("gAAAAABo-opaque==".into()),
                summary: vec!["First.".into(), "Then.".into()],
            })
        );
        // Out again: OpenAI's id and encrypted_content, not a sealed copy.
        assert_eq!(
            shown(&part, None, true),
            ("rs_abc".to_owned(), Some("gAAAAABo-opaque==".to_owned()))
        );
        // Streamed under the gateway's id before the continuation came: sealed, so the id survives the trip.
        let (id, sealed) = shown(&part, Some("rs_gateway"), true);
        assert_eq!(id, "rs_gateway");
        assert_eq!(
            unseal(&sealed.unwrap(), "x", "encrypted_content").unwrap(),
            Some(part)
        );
    }

    #[test]
    fn a_damaged_sealed_part_is_refused_with_its_place() {
        for damaged in [
            "tower-chat.reasoning.v9:e30=",
            "tower-chat.reasoning.v1:@@@",
            "tower-chat.reasoning.v1:bm90IGpzb24=",
        ] {
            let item = json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": damaged});
            let error = input_reasoning(item, "input[3]").unwrap_err();
            assert!(
                error.message.contains("input[3]") && error.message.contains("encrypted_content"),
                "{damaged}: {}",
                error.message
            );
        }
    }

    /// The encoder's SSE output as (event name, payload) pairs.
    fn events(bytes: &[u8]) -> Vec<(String, Value)> {
        std::str::from_utf8(bytes)
            .unwrap()
            .split("\n\n")
            .filter(|event| !event.is_empty())
            .map(|event| {
                let (name, data) = event
                    .strip_prefix("event: ")
                    .and_then(|event| event.split_once("\ndata: "))
                    .unwrap();
                (name.to_owned(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    fn encoder(include_encrypted: bool) -> ResponseEncoder {
        ResponseEncoder::new(
            "resp_1".into(),
            json!({}),
            include_encrypted,
            Vec::new(),
            Vec::new(),
        )
    }

    fn ending() -> Ending {
        Ending {
            reason: tower_chat::FinishReason::Stop,
            notices: Vec::new(),
            operators_decide: false,
        }
    }

    #[test]
    fn a_whole_answer_leads_with_its_reasoning_items() {
        let part = thinking("Let me see.", "sig/+=");
        let folded = || Folded {
            content: "Hi".into(),
            reasoning: "Let me see.and more".into(),
            reasoning_parts: vec![part.clone()],
            reasoning_covered: "Let me see.".len(),
            ..Folded::default()
        };
        let output = encoder(true).whole_value(folded(), &ending())["output"].clone();
        let types: Vec<&str> = output
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["reasoning", "reasoning", "message"]);
        assert_eq!(output[0]["summary"][0]["text"], "Let me see.");
        let sealed = output[0]["encrypted_content"].as_str().unwrap();
        assert_eq!(
            unseal(sealed, "x", "encrypted_content").unwrap().as_ref(),
            Some(&part)
        );
        // Text after the last signed block: shown, with nothing to continue from.
        assert_eq!(output[1]["summary"][0]["text"], "and more");
        assert!(output[1].get("encrypted_content").is_none());
        let output = encoder(false).whole_value(folded(), &ending())["output"].clone();
        assert!(output[0].get("encrypted_content").is_none(), "{output}");
    }

    #[test]
    fn streamed_reasoning_is_a_summary_under_one_item_id() {
        let mut encoder = encoder(true);
        let folded = Folded::default();
        let mut out = Vec::new();
        for event in [
            Visible::Reasoning("Let ".into()),
            Visible::Reasoning("me see.".into()),
            Visible::ReasoningEnd(Continuation::AnthropicThinking {
                signature: "sig".into(),
            }),
            Visible::ReasoningEnd(Continuation::AnthropicRedacted {
                data: "opaque".into(),
            }),
            Visible::Text("Hi".into()),
        ] {
            encoder.visible(&folded, event, &mut out);
        }
        encoder.close(&folded, &ending(), &mut out);
        let events = events(&out);
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names[..10],
            [
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
                // The redacted block: an item without a summary.
                "response.output_item.added",
                "response.output_item.done",
                "response.output_item.added",
            ]
        );
        let (added, done) = (&events[0].1, &events[6].1);
        assert_eq!(added["item"]["id"], done["item"]["id"]);
        assert_eq!(events[4].1["text"], "Let me see.");
        let sealed = done["item"]["encrypted_content"].as_str().unwrap();
        assert_eq!(
            unseal(sealed, "x", "encrypted_content").unwrap(),
            Some(thinking("Let me see.", "sig"))
        );
        assert_eq!(
            (
                events[7].1["output_index"].as_u64(),
                events[9].1["output_index"].as_u64()
            ),
            (Some(1), Some(2))
        );
        let completed = &events.last().unwrap().1["response"]["output"];
        let types: Vec<&str> = completed
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["reasoning", "reasoning", "message"]);
    }

    #[test]
    fn an_openai_item_that_arrives_whole_streams_under_its_own_id() {
        let mut encoder = encoder(true);
        let mut out = Vec::new();
        let continuation = Continuation::OpenAiReasoning {
            id: "rs_openai".into(),
            encrypted_content: Some("gAAAAB-opaque".into()),
            summary: Vec::new(),
        };
        encoder.visible(
            &Folded::default(),
            Visible::ReasoningEnd(continuation),
            &mut out,
        );
        let events = events(&out);
        assert_eq!(events[0].1["item"]["id"], "rs_openai");
        assert_eq!(events[1].1["item"]["id"], "rs_openai");
        assert_eq!(events[1].1["item"]["encrypted_content"], "gAAAAB-opaque");
    }
}
