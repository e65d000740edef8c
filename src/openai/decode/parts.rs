//! `content` sent as a list of parts rather than a string (Mistral's reasoning models): `text` parts are answer
//! text, `thinking` parts (each a list of `text` parts) are reasoning, in the order they come.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;

use super::text::Text;
use crate::event::ChatEvent;

/// A message's or a delta's `content`: the usual string, or a list of parts.
pub(super) enum Content<'a> {
    Text(Text<'a>),
    Parts(Vec<ContentPart>),
}

/// One part of a `content` list; parts of other types (references, images) carry nothing to map.
#[derive(Deserialize)]
pub(super) struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<Thinking>,
}

/// A `thinking` part's body: a list of `text` parts (a plain string read the same way).
#[derive(Deserialize)]
#[serde(untagged)]
enum Thinking {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either<'a>(std::marker::PhantomData<Content<'a>>);

        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Either<'a> {
            type Value = Content<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a list of content parts")
            }

            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Text(Cow::Borrowed(text))))
            }

            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Text(Cow::Owned(text.to_owned()))))
            }

            fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
                Ok(Content::Text(Text(Cow::Owned(text))))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::Parts(parts))
            }
        }

        deserializer.deserialize_any(Either(std::marker::PhantomData))
    }
}

/// The parts' events in their order: `text` as answer text, `thinking` as reasoning. Empty texts make none.
pub(super) fn push_parts(parts: Vec<ContentPart>, out: &mut VecDeque<ChatEvent>) {
    for part in parts {
        match (part.kind.as_str(), part.text, part.thinking) {
            ("text", Some(text), _) if !text.is_empty() => {
                out.push_back(ChatEvent::TextDelta { text })
            }
            ("thinking", _, Some(thinking)) => {
                let text = match thinking {
                    Thinking::Text(text) => text,
                    Thinking::Parts(parts) => parts
                        .into_iter()
                        .filter(|part| part.kind == "text")
                        .filter_map(|part| part.text)
                        .collect(),
                };
                if !text.is_empty() {
                    out.push_back(ChatEvent::ReasoningDelta { text });
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use serde_json::{json, Value};

    use super::super::{decode_completion, ChunkDecoder};
    use crate::event::{ChatEvent, FinishReason};
    use crate::transport::EventDecoder;

    fn decode_stream(chunks: &[Value]) -> Vec<Result<ChatEvent, String>> {
        let mut decoder = EventDecoder::new(ChunkDecoder::default());
        for chunk in chunks {
            decoder.feed(format!("data: {chunk}\n\n").as_bytes());
        }
        decoder.feed(b"data: [DONE]\n\n");
        decoder.end(None);
        std::iter::from_fn(|| decoder.next_item())
            .map(|item| item.map_err(|e| e.to_string()))
            .collect()
    }

    /// The text and reasoning events, in order, with the finish.
    fn readable(events: impl IntoIterator<Item = ChatEvent>) -> Vec<ChatEvent> {
        let mut out: VecDeque<ChatEvent> = VecDeque::new();
        for event in events {
            if matches!(
                event,
                ChatEvent::TextDelta { .. }
                    | ChatEvent::ReasoningDelta { .. }
                    | ChatEvent::Finish { .. }
            ) {
                out.push_back(event);
            }
        }
        out.into()
    }

    fn expected() -> Vec<ChatEvent> {
        vec![
            ChatEvent::ReasoningDelta {
                text: "Add 3 and 30.".into(),
            },
            ChatEvent::text("The sum is 33."),
            ChatEvent::finish(FinishReason::Stop),
        ]
    }

    #[test]
    fn content_parts_streamed_give_text_and_reasoning() {
        let events = decode_stream(&[
            json!({"id":"c","model":"magistral-medium-latest","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}),
            json!({"id":"c","model":"magistral-medium-latest","choices":[{"index":0,"delta":{"content":[
                {"type":"thinking","thinking":[{"type":"text","text":"Add 3 "}]}]}}]}),
            json!({"id":"c","model":"magistral-medium-latest","choices":[{"index":0,"delta":{"content":[
                {"type":"thinking","thinking":[{"type":"text","text":"and 30."}]}]}}]}),
            json!({"id":"c","model":"magistral-medium-latest","choices":[{"index":0,"delta":{"content":[
                {"type":"text","text":"The sum "}]}}]}),
            json!({"id":"c","model":"magistral-medium-latest","choices":[{"index":0,"delta":{"content":"is 33."},
                "finish_reason":"stop"}]}),
        ]);
        assert!(events.iter().all(Result::is_ok), "{events:?}");
        let mut readable = readable(events.into_iter().map(Result::unwrap));
        // Deltas of one kind in a row read as one text.
        readable.dedup_by(|next, prev| match (prev, next) {
            (ChatEvent::ReasoningDelta { text }, ChatEvent::ReasoningDelta { text: more })
            | (ChatEvent::TextDelta { text }, ChatEvent::TextDelta { text: more }) => {
                text.push_str(more);
                true
            }
            _ => false,
        });
        assert_eq!(readable, expected());
    }

    #[test]
    fn content_parts_whole_give_text_and_reasoning() {
        let body = json!({"id":"c","model":"magistral-medium-latest","choices":[{"index":0,"message":{
            "role":"assistant","content":[
                {"type":"thinking","thinking":[{"type":"text","text":"Add 3 and 30."}]},
                {"type":"text","text":"The sum is 33."}]},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":10,"completion_tokens":20}});
        let events = decode_completion(body.to_string().as_bytes()).unwrap();
        assert_eq!(readable(events), expected());
    }

    #[test]
    fn content_that_is_neither_text_nor_a_list_is_a_protocol_error() {
        let events = decode_stream(&[json!({"choices":[{"index":0,"delta":{"content":7}}]})]);
        assert!(
            matches!(events.first(), Some(Err(m)) if m.starts_with("protocol")),
            "{events:?}"
        );
    }
}
