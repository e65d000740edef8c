//! The turn layer: what the gateway adds to a client turn beyond one call through its stack, as the
//! outermost layer over the stack ([`TurnLayer`](layer::TurnLayer), service [`Turn`](service::Turn)). The wire crate's routes
//! (`tower_chat_wire::WireRouter`, told that the service [keeps turns](tower_chat_wire::WireRouter::keeps_turns))
//! read the request and hand what it says beyond its messages to this layer in the request's extensions
//! ([`TurnContext`](tower_chat_wire::extensions::TurnContext): approval decisions, `previous_response_id`, the
//! answer's record id, the headers). Before the stack is called ([`resume`]):
//!
//! - the request's media are admitted against `--max-media-in-flight`, and client tools may not take the names
//!   of the gateway's own tools or its MCP tools;
//! - the client's own calls that were handed back are spliced back into the turn the model really had;
//! - `previous_response_id` splices the stored conversation in;
//! - a resend of a paused turn without decisions takes the operators' decisions;
//! - an approval resume splices the paused turn's hidden messages back (this process's [`PendingStore`], or,
//!   after a restart or in another replica, the approval store and the call records) and passes the decisions
//!   on;
//! - the turn gets its conversation id (the header's, the stored or resumed one, or a new one), the record ids
//!   of its rounds, its request id and its `Cache-Control`.
//!
//! On the way back ([`stream`]), a turn that pauses for approval is kept in the [`PendingStore`] and its
//! approval requests go out under the ids the client answers with; a turn that hands client calls back keeps
//! its hidden rounds under those calls' ids; the answer's `x-cache` goes into the
//! [`ResponseHeaders`](tower_chat_wire::extensions::ResponseHeaders). The layer's own refusals are
//! [`ApiError`]s carried as the chat error's source, answered by the route as they are.
//!
//! [`Turns`] holds what the routes and this layer need, shared by every request.

mod future;
pub(crate) mod layer;
pub(crate) mod pending;
mod resume;
pub(crate) mod rounds;
mod service;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use tower_chat::ChatError;
use tower_chat_approval::ApprovalStore;
use tower_chat_persistence::Store;

use crate::api::request_size::RequestLimits;
use crate::error::ApiError;
use crate::operator::OperatorState;
use crate::stack::mcp::GatewayMcp;
use crate::stack::ChatStack;
use crate::telemetry::warning_throttle::WarnLimit;
use crate::turn::pending::PendingStore;
use tower_chat_wire::format::ParseContext;

/// What a turn needs, shared by every request.
#[derive(Clone)]
pub(crate) struct Turns {
    /// The chat stack every turn is sent through, under the turn layer ([`TurnLayer`](layer::TurnLayer)).
    pub(crate) stack: ChatStack,
    /// Paused turns this process holds, by approval id.
    pub(crate) pending: Arc<PendingStore>,
    /// Where an approval layer keeps pending approvals, and the call records: together they let a resume find
    /// its conversation after a restart, or in another replica.
    pub(crate) approval_store: Option<Arc<dyn ApprovalStore>>,
    pub(crate) records: Option<Arc<dyn Store>>,
    /// `--body-limit`.
    pub(crate) body_limit: usize,
    /// What the wire formats' parsers need to know about the gateway.
    pub(crate) parse: ParseContext,
    pub(crate) limits: Arc<RequestLimits>,
    /// `--max-media-in-flight`: the media of all turns in flight, capped.
    pub(crate) media: Arc<crate::edge::in_flight::MediaInFlight>,
    /// `--operator-keys-file`: operator decisions on pending approvals ([`crate::operator`]).
    pub(crate) operators: Option<OperatorState>,
    /// The single `--upstream` when it is Anthropic's API: `POST /v1/messages/count_tokens` asks it.
    pub(crate) anthropic_counter: Option<tower_chat::anthropic::AnthropicChat>,
    /// `[upstreams]`: a count for a model whose first target is Anthropic's API asks that target.
    pub(crate) router: Option<crate::stack::upstreams::ModelRouter>,
    /// The names of the server-side tools the gateway offers (none unless configured): client tools must not
    /// take them.
    pub(crate) server_tools: Vec<&'static str>,
    /// `[[mcp]]`: the MCP tools the loop offers, whose names client tools must not take.
    pub(crate) mcp: Option<GatewayMcp>,
    /// `[cache]` is on: requests carry their `Cache-Control` (and their route's time to live, `[cache.routes]`)
    /// and answers their `x-cache`.
    pub(crate) caching: Option<Arc<crate::stack::cache::RouteTtls>>,
    /// Cancelled when the drain time after a shutdown signal is over: requests still in flight end with a
    /// `shutting_down` error (a stream with its format's error event) before their connections close.
    pub(crate) drain_over: tower_chat::CancellationToken,
}

/// What a turn is resumed from and kept in.
pub(crate) struct Keeping {
    /// Paused turns and hand-backs this process holds.
    pub(crate) pending: Arc<PendingStore>,
    /// Where an approval layer keeps pending approvals, and the call records: together they let a resume find
    /// its conversation after a restart, or in another replica; the records also hold stored responses.
    pub(crate) approval_store: Option<Arc<dyn ApprovalStore>>,
    pub(crate) records: Option<Arc<dyn Store>>,
    /// `--max-media-in-flight`: the media of all turns in flight, capped.
    pub(crate) media: Arc<crate::edge::in_flight::MediaInFlight>,
    /// Operator decisions on pending approvals (`--operator-keys-file`).
    pub(crate) operators: Option<OperatorState>,
    /// The names of the server-side tools the gateway offers: client tools must not take them.
    pub(crate) server_tools: Vec<&'static str>,
    /// `[[mcp]]`: the MCP tools the loop offers, whose names client tools must not take.
    pub(crate) mcp: Option<GatewayMcp>,
    /// `[cache]` is on: requests carry their `Cache-Control` (and their route's time to live) and answers their
    /// `x-cache`.
    pub(crate) caching: Option<Arc<crate::stack::cache::RouteTtls>>,
}

/// A refusal of the layer's own, as the route answers it.
fn failed(error: ApiError) -> ChatError {
    warn_server_error(&error);
    error.into_chat()
}

/// A chat error before anything was answered: logged when it is the gateway's or the upstream's fault.
fn failed_chat(error: ChatError) -> ChatError {
    let error = worded(error);
    warn_server_error(&tower_chat_wire::ApiError::from_chat(&error));
    error
}

/// A chat error as the gateway answers it ([`crate::error::from_chat`]): carried as its source where the
/// gateway's wording differs from the wire crate's.
fn worded(error: ChatError) -> ChatError {
    let own = crate::error::from_chat(&error);
    if own == ApiError::from_chat(&error) {
        error
    } else {
        own.into_chat()
    }
}

fn warn_server_error(error: &ApiError) {
    if error.status.is_server_error() {
        static FAILED: WarnLimit = WarnLimit::new(Duration::from_secs(1), 10);
        if let Some(suppressed) = FAILED.admit(std::time::Instant::now()) {
            tracing::warn!(status = %error.status, message = %error.message, suppressed, "request failed");
        }
    }
}
