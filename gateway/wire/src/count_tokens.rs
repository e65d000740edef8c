//! Counting a request's input tokens without running it: Anthropic's `POST /v1/messages/count_tokens` and
//! OpenAI's `POST /v1/responses/input_tokens`, which coding agents call before a turn to decide when to compact
//! their context.
//!
//! The body is the format's own request (Messages' without `max_tokens`, which counting does not need), read by
//! the same parser and checked against the same [`RequestLimits`](crate::RequestLimits) as a turn, so a body a
//! turn would refuse is refused here with the same error. The count itself is the server's to make: an
//! estimate from the request (the gateway's is the limits layer's, characters over a ratio plus each image's
//! documented size), or an upstream's own count. An answer says which it is (`"estimated": true` beside the
//! format's fields), since an estimate can be off by tens of percent.

use serde_json::{json, Value};
use tower_chat::ChatRequest;

use crate::anthropic_messages::AnthropicMessages;
use crate::error::ApiError;
use crate::format::{schema, ParseContext, WireFormat};
use crate::responses::Responses;

/// A request's input tokens, and whether they are an estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenCount {
    /// The tokens the request's input takes.
    pub input_tokens: u64,
    /// `true` when the count was estimated rather than made by the model's own tokenizer.
    pub estimated: bool,
}

/// A format whose clients can ask for a request's input tokens.
pub trait CountsTokens: WireFormat {
    /// The path of the counting route.
    const COUNT_ROUTE: &'static str;

    /// The format's answer to a count.
    fn count_answer(count: TokenCount) -> Value;

    /// The format's request body as a turn would send it: counting requests leave out what only a turn needs.
    fn as_turn(body: &mut serde_json::Map<String, Value>) {
        let _ = body;
    }
}

impl CountsTokens for AnthropicMessages {
    const COUNT_ROUTE: &'static str = "/v1/messages/count_tokens";

    fn count_answer(count: TokenCount) -> Value {
        json!({"input_tokens": count.input_tokens, "estimated": count.estimated})
    }

    /// `max_tokens` is required on a turn and absent from a count.
    fn as_turn(body: &mut serde_json::Map<String, Value>) {
        body.entry("max_tokens").or_insert(json!(1));
    }
}

impl CountsTokens for Responses {
    const COUNT_ROUTE: &'static str = "/v1/responses/input_tokens";

    fn count_answer(count: TokenCount) -> Value {
        json!({"object": "response.input_tokens", "input_tokens": count.input_tokens,
               "estimated": count.estimated})
    }
}

/// The request a counting body describes, parsed and checked as a turn's would be (no limit on `stream`,
/// which counting ignores).
pub fn counted_request<F: CountsTokens>(
    body: &[u8],
    context: &ParseContext,
) -> Result<ChatRequest, ApiError> {
    let mut value: serde_json::Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| schema(format!("the body is not a JSON object ({e})")))?;
    F::as_turn(&mut value);
    value.remove("stream");
    let body = serde_json::to_vec(&value).expect("a JSON object serialises");
    let (inbound, _) = F::parse(&body, context)?;
    context.limits.check(&inbound.request)?;
    Ok(inbound.request)
}
