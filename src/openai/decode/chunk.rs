//! Streamed `chat.completion.chunk`s: the SSE decoder of the leaf ([`ChunkDecoder`]), and its tests.

use std::collections::VecDeque;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::extras::{self, Extra};
use super::fields::{finish_reason, stream_error, WireUsage};
use super::parts::{push_parts, Content, ContentPart};
use super::text::Text;
use crate::error::{ChatError, ErrorKind};
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::message::ToolCall;
use crate::sse::SseEvent;
use crate::transport::WireDecoder;

/// One `chat.completion.chunk`. Strings borrow from the event's JSON where they can ([`Text`]) and only the first
/// choice is kept ([`FirstChoice`]): a text chunk then costs one allocation, for the text the event hands out.
///
/// `M` is what `id` and `model` are read as: [`Text`] until the response's metadata has been reported, then
/// [`IgnoredAny`] — they repeat on every chunk, and skipping them keeps the struct small enough to move cheaply.
#[derive(Deserialize)]
#[serde(bound(deserialize = "M: Deserialize<'de>"))] // not the `M: Default` serde would infer from `default`
struct Chunk<'a, M = Text<'a>> {
    #[serde(default)]
    id: Option<M>,
    #[serde(default)]
    model: Option<M>,
    #[serde(default, borrow)]
    choices: FirstChoice<'a>,
    /// Boxed, like `error`: both come once per stream, if at all, and would otherwise widen every chunk.
    #[serde(default)]
    usage: Option<Box<WireUsage>>,
    #[serde(default)]
    error: Option<Box<Value>>,
}

/// How a chunk's `id` and `model` are kept: as text, or not at all.
trait Metadata {
    fn into_text(self) -> Option<String>;
}

impl Metadata for Text<'_> {
    fn into_text(self) -> Option<String> {
        Some(self.into_string())
    }
}

impl Metadata for IgnoredAny {
    fn into_text(self) -> Option<String> {
        None
    }
}

/// The choice with index 0 out of `choices` (tower-chat asks for one: `n` is not set); others are skipped.
#[derive(Default)]
struct FirstChoice<'a>(Option<ChunkChoice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Choices<'a>(std::marker::PhantomData<ChunkChoice<'a>>);

        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Choices<'a> {
            type Value = FirstChoice<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut first = None;
                while let Some(choice) = seq.next_element::<ChunkChoice<'a>>()? {
                    if choice.index == 0 && first.is_none() {
                        first = Some(choice);
                    }
                }
                Ok(FirstChoice(first))
            }
        }

        deserializer.deserialize_seq(Choices(std::marker::PhantomData))
    }
}

struct ChunkChoice<'a> {
    index: u32,
    delta: Option<Delta<'a>>,
    finish_reason: Option<Text<'a>>,
    /// The choice's other fields, kept for a Chat Completions client.
    extra: Extra,
}

impl<'de: 'a, 'a> Deserialize<'de> for ChunkChoice<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<ChunkChoice<'a>>);

        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = ChunkChoice<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a choice object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut choice = ChunkChoice {
                    index: 0,
                    delta: None,
                    finish_reason: None,
                    extra: None,
                };
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    match &*key.0 {
                        "index" => choice.index = map.next_value::<Option<u32>>()?.unwrap_or(0),
                        "delta" => choice.delta = map.next_value()?,
                        "finish_reason" => choice.finish_reason = map.next_value()?,
                        other => extras::keep(other, &mut map, &mut choice.extra)?,
                    }
                }
                Ok(choice)
            }
        }

        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A choice's `delta`. Kept small (the rare reasoning and refusal texts boxed) because every chunk moves it a few
/// times on its way out of serde, and a small value moves in registers where a large one costs a `memcpy` call.
#[derive(Default)]
pub(super) struct Delta<'a> {
    pub(super) content: Option<Text<'a>>,
    pub(super) tool_calls: Option<Vec<DeltaToolCall<'a>>>,
    pub(super) rare: Option<Box<RareDelta<'a>>>,
}

#[derive(Default)]
pub(super) struct RareDelta<'a> {
    /// DeepSeek, vLLM (older), llama.cpp.
    pub(super) reasoning_content: Option<Text<'a>>,
    /// vLLM, OpenRouter, Ollama.
    pub(super) reasoning: Option<Text<'a>>,
    pub(super) refusal: Option<Text<'a>>,
    /// `content` sent as a list of parts (Mistral's reasoning models).
    pub(super) content_parts: Option<Vec<ContentPart>>,
    /// Fields no layer models (`annotations`, a provider's extras), kept for a Chat Completions client.
    pub(super) extra: Extra,
}

impl<'a> Delta<'a> {
    fn rare(&mut self) -> &mut RareDelta<'a> {
        self.rare.get_or_insert_with(Box::default)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Delta<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<Delta<'a>>);

        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = Delta<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a delta object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut delta = Delta::default();
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    match &*key.0 {
                        "content" => match map.next_value()? {
                            Some(Content::Text(text)) => delta.content = Some(text),
                            Some(Content::Parts(parts)) => delta.rare().content_parts = Some(parts),
                            None => {}
                        },
                        "tool_calls" => delta.tool_calls = map.next_value()?,
                        "reasoning_content" => delta.rare().reasoning_content = map.next_value()?,
                        "reasoning" => delta.rare().reasoning = map.next_value()?,
                        "refusal" => delta.rare().refusal = map.next_value()?,
                        "role" => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        other => extras::keep(other, &mut map, &mut delta.rare().extra)?,
                    }
                }
                Ok(delta)
            }
        }

        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
pub(super) struct DeltaToolCall<'a> {
    #[serde(default)]
    pub(super) index: Option<u32>,
    #[serde(default, borrow)]
    pub(super) id: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) function: Option<DeltaFunction<'a>>,
}

#[derive(Deserialize)]
pub(super) struct DeltaFunction<'a> {
    #[serde(default, borrow)]
    pub(super) name: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) arguments: Option<Text<'a>>,
}

/// A call being assembled from fragments.
pub(super) struct PartialCall {
    wire_index: u32,
    id: String,
    name: String,
    arguments: String,
    ended: bool,
}

/// Maps a Chat Completions SSE stream to chat events.
#[derive(Default)]
pub struct ChunkDecoder {
    pub(super) metadata_sent: bool,
    pub(super) calls: Vec<PartialCall>,
    pub(super) finish: Option<FinishReason>,
    pub(super) usage: Option<Usage>,
    pub(super) done: bool,
    /// The model sent a `refusal` text: the response ends as a refusal (`content_filter`, as Anthropic's
    /// `refusal` stop does), not as an answer, whatever its `finish_reason` says.
    pub(super) refused: bool,
}

impl ChunkDecoder {
    fn on_chunk<M: Metadata>(
        &mut self,
        chunk: Chunk<'_, M>,
        event: &SseEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        if let Some(error) = chunk.error {
            return Err(stream_error(&error));
        }
        if event.event.as_deref() == Some("error") {
            return Err(ChatError::new(ErrorKind::Upstream, event.data.clone()));
        }
        let id = chunk.id.and_then(M::into_text);
        let model = chunk.model.and_then(M::into_text);
        if id.is_some() || model.is_some() {
            self.metadata_sent = true;
            out.push_back(ChatEvent::ResponseMetadata { id, model });
        }
        if let Some(choice) = chunk.choices.0 {
            if let Some(delta) = choice.delta {
                self.on_delta(delta, choice.extra, out);
            } else {
                extras::push(None, choice.extra, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.end_calls(out);
                self.finish = Some(finish_reason(&reason.0, !self.calls.is_empty()));
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some((*usage).into());
        }
        Ok(())
    }

    /// A choice's `delta` (and the choice's own extra fields).
    pub(super) fn on_delta(
        &mut self,
        delta: Delta<'_>,
        choice_extra: Extra,
        out: &mut VecDeque<ChatEvent>,
    ) {
        // Plain `if let`s, not iterators over the optional parts: every chunk has a delta, and dropping a
        // `Flatten` over options costs more than the checks themselves.
        let mut refusal = None;
        let mut parts = None;
        let mut extra = None;
        if let Some(rare) = delta.rare {
            let RareDelta {
                reasoning_content,
                reasoning,
                refusal: rare_refusal,
                content_parts,
                extra: rare_extra,
            } = *rare;
            parts = content_parts;
            extra = rare_extra;
            if let Some(text) = reasoning_content {
                push_text(text, out, |text| ChatEvent::ReasoningDelta { text });
            }
            if let Some(text) = reasoning {
                push_text(text, out, |text| ChatEvent::ReasoningDelta { text });
            }
            refusal = rare_refusal;
        }
        if let Some(text) = delta.content {
            push_text(text, out, |text| ChatEvent::TextDelta { text });
        }
        if let Some(parts) = parts {
            push_parts(parts, out);
        }
        if let Some(text) = refusal {
            self.refused |= !text.0.is_empty();
            push_text(text, out, |text| ChatEvent::TextDelta { text });
        }
        if let Some(fragments) = delta.tool_calls {
            for fragment in fragments {
                self.on_tool_fragment(fragment, out);
            }
        }
        extras::push(extra, choice_extra, out);
    }

    pub(super) fn on_tool_fragment(
        &mut self,
        fragment: DeltaToolCall<'_>,
        out: &mut VecDeque<ChatEvent>,
    ) {
        let wire_index = fragment.index.unwrap_or(0);
        let (name, arguments) = match fragment.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let open = self
            .calls
            .iter()
            .rposition(|c| c.wire_index == wire_index && !c.ended);
        let position = match (open, fragment.id) {
            // Same index, different id: a server that reuses index 0 for every call (Ollama).
            (Some(i), Some(id)) if !id.0.is_empty() && self.calls[i].id != id.0 => {
                self.end_call(i, out);
                self.start_call(wire_index, id.into_string(), name, out)
            }
            (Some(i), _) => {
                if let Some(name) = name.filter(|n| !n.0.is_empty()) {
                    if self.calls[i].name.is_empty() {
                        self.calls[i].name = name.into_string();
                    }
                }
                i
            }
            (None, id) => {
                let id = id
                    .filter(|id| !id.0.is_empty())
                    .map_or_else(|| format!("call_{}", self.calls.len()), Text::into_string);
                self.start_call(wire_index, id, name, out)
            }
        };
        if let Some(arguments) = arguments.filter(|a| !a.0.is_empty()) {
            self.calls[position].arguments.push_str(&arguments.0);
            out.push_back(ChatEvent::ToolCallDelta {
                index: position,
                arguments: arguments.into_string(),
            });
        }
    }

    fn start_call(
        &mut self,
        wire_index: u32,
        id: String,
        name: Option<Text<'_>>,
        out: &mut VecDeque<ChatEvent>,
    ) -> usize {
        let name = name.map(Text::into_string).unwrap_or_default();
        out.push_back(ChatEvent::ToolCallStart {
            index: self.calls.len(),
            id: id.clone(),
            name: name.clone(),
        });
        self.calls.push(PartialCall {
            wire_index,
            id,
            name,
            arguments: String::new(),
            ended: false,
        });
        self.calls.len() - 1
    }

    fn end_call(&mut self, index: usize, out: &mut VecDeque<ChatEvent>) {
        let call = &mut self.calls[index];
        if call.ended {
            return;
        }
        call.ended = true;
        out.push_back(ChatEvent::ToolCallEnd {
            index,
            call: ToolCall::from_raw_arguments(
                std::mem::take(&mut call.id),
                std::mem::take(&mut call.name),
                std::mem::take(&mut call.arguments),
            ),
        });
    }

    fn end_calls(&mut self, out: &mut VecDeque<ChatEvent>) {
        for index in 0..self.calls.len() {
            self.end_call(index, out);
        }
    }

    pub(super) fn finish(&mut self, out: &mut VecDeque<ChatEvent>) {
        self.end_calls(out);
        if let Some(usage) = self.usage.take() {
            out.push_back(ChatEvent::Usage { usage });
        }
        let had_calls = !self.calls.is_empty();
        let reason = self
            .finish
            .take()
            .unwrap_or_else(|| finish_reason("stop", had_calls));
        let reason = match reason {
            FinishReason::Stop if self.refused => FinishReason::ContentFilter,
            other => other,
        };
        out.push_back(ChatEvent::Finish { reason });
        self.done = true;
    }
}

impl std::fmt::Debug for ChunkDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkDecoder").finish_non_exhaustive()
    }
}

impl WireDecoder for ChunkDecoder {
    type Framing = crate::sse::SseDecoder;

    fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        let data = event.data.as_str();
        // serde_json skips whitespace around the chunk itself; only the sentinel needs trimming.
        if data.len() < 16 && data.trim() == "[DONE]" {
            self.finish(out);
            return Ok(());
        }
        let malformed = |e: serde_json::Error| {
            ChatError::protocol(format_args!("malformed chunk ({e})"), data.as_bytes())
        };
        if self.metadata_sent {
            let chunk: Chunk<'_, IgnoredAny> = serde_json::from_str(data).map_err(malformed)?;
            self.on_chunk(chunk, &event, out)
        } else {
            let chunk: Chunk<'_> = serde_json::from_str(data).map_err(malformed)?;
            self.on_chunk(chunk, &event, out)
        }
    }

    fn on_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        // Some servers close after the finish_reason (and usage) chunk without `[DONE]`: that is a complete
        // response. Without a finish_reason the provider stopped mid-answer.
        if self.finish.is_some() {
            self.finish(out);
            return Ok(());
        }
        Err(ChatError::ended_before("finishing the response"))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// Empty texts (the first chunk's `"content": ""`, for one) make no event.
fn push_text(text: Text<'_>, out: &mut VecDeque<ChatEvent>, event: fn(String) -> ChatEvent) {
    if !text.0.is_empty() {
        out.push_back(event(text.into_string()));
    }
}

#[cfg(test)]
mod tests;
