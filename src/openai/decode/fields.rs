//! What the stream decoder and the whole-response decoder both read: usage, finish reasons, error objects.

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ChatError, ErrorKind};
use crate::event::{FinishReason, Usage};

#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        Usage {
            from_response_cache: false,
            input_tokens: wire.prompt_tokens,
            output_tokens: wire.completion_tokens,
            cached_input_tokens: wire.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: wire
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens),
            // OpenAI caches on its own and does not bill writes apart.
            cache_write_input_tokens: None,
        }
    }
}

pub(super) fn finish_reason(reason: &str, had_calls: bool) -> FinishReason {
    match reason {
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        // Some servers say "stop" after calling tools; the caller must still act on the calls.
        "stop" | "eos" | "end_turn" if had_calls => FinishReason::ToolCalls,
        "stop" | "eos" | "end_turn" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

pub(super) fn stream_error(error: &Value) -> ChatError {
    let message = error_message(error).unwrap_or_else(|| error.to_string());
    let kind = match error
        .get("code")
        .or_else(|| error.get("type"))
        .and_then(Value::as_str)
    {
        Some("rate_limit_exceeded") | Some("rate_limit_error") => {
            ErrorKind::RateLimited { retry_after: None }
        }
        _ => ErrorKind::Upstream,
    };
    ChatError::new(kind, message)
}

fn error_message(error: &Value) -> Option<String> {
    match error {
        Value::String(s) => Some(s.clone()),
        Value::Object(fields) => fields
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// The provider's message in an error body: `{"error":{"message":…}}` (OpenAI), `{"error":"…"}` (llama.cpp,
/// Ollama), `{"message":…}` or `{"detail":…}` (vLLM / FastAPI).
pub(crate) fn provider_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value
        .get("error")
        .and_then(error_message)
        .or_else(|| {
            value
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .or_else(|| {
            value.get("detail").map(|d| match d {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages_in_the_shapes_servers_send() {
        assert_eq!(
            provider_message(br#"{"error":{"message":"bad key"}}"#).as_deref(),
            Some("bad key")
        );
        assert_eq!(
            provider_message(br#"{"error":"model not found"}"#).as_deref(),
            Some("model not found")
        );
        assert_eq!(
            provider_message(br#"{"detail":"nope"}"#).as_deref(),
            Some("nope")
        );
        assert_eq!(provider_message(b"<html>"), None);
    }
}
