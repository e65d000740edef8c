//! Azure's Chat Completions stream: OpenAI's chunks read by OpenAI's own decoder, plus what Azure adds — a
//! first chunk with only `prompt_filter_results` (and an empty `id` and `model`, which must not stand for the
//! response's), `content_filter_results` on every choice, and a `content_filter` finish that becomes a typed
//! error carrying the categories that cut the completion.

use std::collections::VecDeque;

use serde_json::Value;

use super::content_filter::{ContentFiltered, FilterStage};
use crate::error::ChatError;
use crate::event::{ChatEvent, FinishReason};
use crate::leaf::ProviderWire;
use crate::openai::OpenAi;
use crate::sse::SseEvent;
use crate::transport::WireDecoder;

type OpenAiDecoder = <OpenAi as ProviderWire>::Decoder;

/// Maps an Azure OpenAI SSE stream to chat events.
#[derive(Default)]
pub struct AzureDecoder {
    openai: OpenAiDecoder,
    /// The categories of the last choice whose filter result filtered something.
    filtered: Option<ContentFiltered>,
}

impl std::fmt::Debug for AzureDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureDecoder").finish_non_exhaustive()
    }
}

/// Whether `data` may carry a filter verdict (a substring test: most chunks say `"filtered":false` throughout).
fn mentions_filtering(data: &str) -> bool {
    memchr::memmem::find(data.as_bytes(), br#""filtered":true"#).is_some()
}

/// The first choice's `content_filter_results` that filtered something, from a chunk or a whole completion.
pub(super) fn completion_filter(chunk: &Value) -> Option<ContentFiltered> {
    let results = chunk
        .get("choices")?
        .as_array()?
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)?
        .get("content_filter_results")?;
    let filtered = ContentFiltered::from_results(FilterStage::Completion, results);
    let any = filtered.filtered().next().is_some();
    any.then_some(filtered)
}

/// A chunk that only reports the prompt's filter results (no choices).
fn is_prompt_annotation(data: &str) -> bool {
    memchr::memmem::find(data.as_bytes(), br#""prompt_filter_results""#).is_some()
        && serde_json::from_str::<Value>(data).is_ok_and(|v| {
            v.get("choices")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        })
}

impl AzureDecoder {
    /// A `content_filter` finish just decoded becomes the filter's typed error (the events before it stay).
    fn check_finish(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        if let Some(ChatEvent::Finish {
            reason: FinishReason::ContentFilter,
        }) = out.back()
        {
            out.pop_back();
            let filtered = self.filtered.take().unwrap_or(ContentFiltered {
                stage: FilterStage::Completion,
                categories: Vec::new(),
            });
            return Err(filtered.into_error());
        }
        Ok(())
    }
}

impl WireDecoder for AzureDecoder {
    type Framing = crate::sse::SseDecoder;

    fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), ChatError> {
        if is_prompt_annotation(&event.data) {
            // The prompt passed (a refused prompt is a 400); nothing in it is part of the answer.
            return Ok(());
        }
        if mentions_filtering(&event.data) {
            if let Some(filtered) = serde_json::from_str::<Value>(&event.data)
                .ok()
                .as_ref()
                .and_then(completion_filter)
            {
                self.filtered = Some(filtered);
            }
        }
        self.openai.on_event(event, out)?;
        self.check_finish(out)
    }

    fn on_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError> {
        self.openai.on_end(out)?;
        self.check_finish(out)
    }

    fn is_done(&self) -> bool {
        self.openai.is_done()
    }
}

/// A whole completion: OpenAI's decoding, and a `content_filter` finish as the filter's typed error.
pub(super) fn decode_whole(body: &[u8]) -> Result<Vec<ChatEvent>, ChatError> {
    let events = OpenAi::decode_whole(body)?;
    if let Some(ChatEvent::Finish {
        reason: FinishReason::ContentFilter,
    }) = events.last()
    {
        let filtered = serde_json::from_slice::<Value>(body)
            .ok()
            .as_ref()
            .and_then(completion_filter)
            .unwrap_or(ContentFiltered {
                stage: FilterStage::Completion,
                categories: Vec::new(),
            });
        return Err(filtered.into_error());
    }
    Ok(events)
}
