//! Entry points for the cargo-fuzz targets in `fuzz/`: the request parsers of every route (the wire formats'
//! own, in `tower-chat-wire`) with the gateway's limits, in a build with `--cfg fuzzing` (which cargo-fuzz
//! sets).

use tower_chat::ChatRequest;

use crate::api::request_size::RequestLimits;
use crate::error::ApiError;
use crate::ApprovalAnswer;
use tower_chat_wire::anthropic_messages::AnthropicMessages;
use tower_chat_wire::chat_completions::ChatCompletions;
use tower_chat_wire::format::{ParseContext, TowerChatRequest, UpstreamFormat, WireFormat};
use tower_chat_wire::responses::Responses;

/// The wire formats, in the order [`parse_request`] picks them by `format % 3`.
pub const FORMATS: [&str; 3] = ["chat_completions", "anthropic_messages", "responses"];

/// What a route's parser makes of a body: the stack's request and the approval decisions it carries.
pub fn parse_request(
    format: u8,
    body: &[u8],
) -> Result<(ChatRequest, Vec<ApprovalAnswer>), ApiError> {
    let context = ParseContext {
        upstream: if format & 0x80 == 0 {
            UpstreamFormat::OpenAi
        } else {
            UpstreamFormat::Anthropic
        },
        limits: RequestLimits::DEFAULT,
        stores_responses: true,
    };
    let inbound = match format % 3 {
        0 => ChatCompletions::parse(body, &context).map(|(inbound, _)| inbound),
        1 => AnthropicMessages::parse(body, &context).map(|(inbound, _)| inbound),
        _ => Responses::parse(body, &context).map(|(inbound, _)| inbound),
    }?;
    Ok((inbound.request, inbound.approvals))
}

/// The `tower_chat` object of a request (`{"approvals": [...]}`), as every format reads it.
pub fn approvals(body: &[u8]) -> Result<Vec<ApprovalAnswer>, serde_json::Error> {
    serde_json::from_slice::<TowerChatRequest>(body).map(|payload| payload.approvals)
}
