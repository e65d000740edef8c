//! Turn handling: what happens between a parsed request and the stack's call. An approval resume (the paused
//! turn's hidden messages spliced back, from this process's [`PendingStore`] or, after a restart or in another
//! replica, from the approval store and the call records), `previous_response_id` (the stored conversation
//! spliced in), the operators' decisions on a resend, the conversation id of the turn, the cache's
//! `Cache-Control`, and the answer's encoding. [`Turns`] holds what a turn needs; the router owns one.

pub(crate) mod pending;
pub(crate) mod rounds;

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use tower::ServiceExt;
use tower_chat::{
    ApprovalRequest, CallerIdentity, ChatError, ConversationId, FinishReason, Message, Shared,
    ToolCall,
};
use tower_chat_approval::ApprovalStore;
use tower_chat_persistence::Store;

use crate::api::request_size::RequestLimits;
use crate::error::ApiError;
use crate::operator::OperatorState;
use crate::stack::mcp::GatewayMcp;
use crate::stack::ChatStack;
use crate::turn::pending::{PendingStore, Resumption};
use tower_chat_wire::format::{self, ApprovalNotice, ParseContext, WireFormat};
use tower_chat_wire::respond::{Turn, TurnKeeper};
use tower_chat_wire::router::{answer, check_inbound, client_tools, read_body};

/// What a turn needs, shared by every request.
#[derive(Clone)]
pub(crate) struct Turns {
    /// The chat stack every turn is sent through.
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

/// A paused turn this process does not hold (it paused before a restart, or in another replica): the approval
/// layer's pending record names the conversation, and the call records hold the paused turn's whole history.
/// The approval layer then verifies the decisions as always (caller, conversation, single use, arguments).
///
/// `Ok(None)` when nothing is pending for `caller` under the first id (the caller gets the same error as for an
/// unknown id, so ids cannot be probed); `approval_turn_unavailable` when the approval is pending for this caller
/// but the paused turn cannot be rebuilt here (no call records of it): the approval stays pending, undecided.
async fn recorded_resumption(
    state: &Turns,
    caller: Option<&CallerIdentity>,
    answers: &[format::ApprovalAnswer],
) -> Result<Option<Resumption>, ApiError> {
    let (Some(approvals), Some(first)) = (state.approval_store.as_ref(), answers.first()) else {
        return Ok(None);
    };
    let pending = match approvals.get_pending(&first.id).await {
        Ok(Some(pending)) if pending.caller.as_ref() == caller => pending,
        _ => return Ok(None),
    };
    let unavailable = |why: &str| {
        ApiError {
            status: StatusCode::CONFLICT,
            ..ApiError::invalid_request(
                "approval_turn_unavailable",
                format!(
                    "approval `{}` is pending, but its paused turn was held by another gateway process and {why}; \
                     the approval stays pending: resend to the process that paused it, or deny it",
                    first.id
                ),
            )
        }
    };
    let Some(records) = state.records.as_ref() else {
        return Err(unavailable("this gateway keeps no call records"));
    };
    let history = match records.load_conversation(&pending.conversation_id).await {
        Ok(history) if !history.is_empty() => history,
        Ok(_) => {
            return Err(unavailable(
                "the call records hold none of its conversation",
            ))
        }
        Err(_) => return Err(unavailable("reading the call records failed")),
    };
    let decisions = answers
        .iter()
        .map(|a| tower_chat::ApprovalDecision {
            approval_id: a.id.clone(),
            approved: a.approved,
            reason: a.reason.clone(),
        })
        .collect();
    Ok(Some(Resumption {
        hidden: history,
        whole_history: true,
        conversation: pending.conversation_id,
        decisions: tower_chat::ApprovalDecisions(decisions),
    }))
}

/// The stored conversation a `previous_response_id` names, without its system messages (a request's own
/// instructions replace them), and the conversation it belongs to. Unknown ids, another caller's, responses
/// stored with `store: false` and failed turns are one error, so ids cannot be probed.
async fn previous_response(
    state: &Turns,
    caller: Option<&CallerIdentity>,
    id: &str,
) -> Result<(Vec<Message>, ConversationId), ApiError> {
    let not_found = || {
        ApiError::not_found_error(
            "previous_response_not_found",
            format!("previous response `{id}` not found"),
        )
    };
    let Some(records) = state.records.as_ref() else {
        return Err(ApiError::invalid_request(
            "previous_response_unavailable",
            "`previous_response_id` needs the gateway's persistence store",
        ));
    };
    // The request's last model round: the conversation as that response left it.
    let record = crate::turn::rounds::last_round(records.as_ref(), id)
        .await
        .map_err(|e| {
            crate::error::from_chat(&ChatError::new(
                tower_chat::ErrorKind::Store,
                format!("reading the previous response failed: {e}"),
            ))
        })?
        .ok_or_else(not_found)?;
    if record.caller.as_ref() != caller
        || record.outcome != tower_chat_persistence::CallOutcome::Completed
    {
        return Err(not_found());
    }
    let history = record
        .history()
        .into_iter()
        .filter(|m| !matches!(m, Message::System { .. }))
        .collect();
    Ok((history, record.conversation_id))
}

/// One client turn in format `F`: the body checked against the request limits, the conversation rebuilt
/// (`previous_response_id`, a paused turn's hidden messages on an approval resume, the operators' decisions),
/// the conversation id settled (header, stored, resumed or a new one), the stack called, and the answer encoded,
/// streaming or not.
pub(crate) async fn handle<F: WireFormat>(
    state: &Turns,
    caller: Option<CallerIdentity>,
    headers: HeaderMap,
    query: Option<&str>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = read_body(body, state.body_limit, &state.limits)?;
    let (parsed, encoder) = F::parse(&body, &state.parse)?;
    // Before anything is looked up, spliced or stored: the request's size in things, not bytes.
    check_inbound(&parsed, body.len(), state.body_limit, &state.limits)?;
    // The request is parsed (its media checked, their base64 moved out of the parsed JSON, not copied): the
    // body's bytes are not needed any more, and a stream may hold its request for minutes.
    drop(body);
    // Before anything is looked up or consumed (an approval is single-use): a refusal here changes nothing.
    let media = state.media.admit(
        parsed
            .request
            .messages
            .iter()
            .map(Message::media_bytes)
            .sum(),
    )?;
    let header_conversation = state.limits.conversation(
        caller.as_ref(),
        headers.get("x-conversation-id").map(|v| v.as_bytes()),
    )?;
    let mut request = parsed.request;
    let client_tools: HashSet<String> = client_tools(&request);
    if let Some(clash) = client_tools
        .iter()
        .find(|name| state.server_tools.contains(&name.as_str()))
    {
        return Err(ApiError::invalid_request(
            "tool_name_reserved",
            format!("the tool name `{clash}` is reserved for the gateway's own tool"),
        ));
    }
    if let Some(mcp) = &state.mcp {
        // The loop would run the MCP tool and the client would be handed the same call.
        if let Some((clash, server)) = client_tools
            .iter()
            .find_map(|name| Some((name, mcp.offered(caller.as_ref(), name)?)))
        {
            return Err(ApiError::invalid_request(
                "tool_name_reserved",
                format!(
                    "the tool name `{clash}` is taken by the gateway's MCP tool of server `{server}`; \
                     give the client tool another name"
                ),
            ));
        }
    }
    state
        .pending
        .splice_handoffs(caller.as_ref(), &mut request.messages);
    let mut hidden = Vec::new();
    let mut conversation = None;
    let mut whole_history_given = false;
    if let Some(id) = &parsed.previous_response_id {
        let (history, stored) = previous_response(state, caller.as_ref(), id).await?;
        // The request's own instructions first, then the stored conversation, then the new input.
        let instructions = request
            .messages
            .iter()
            .take_while(|m| matches!(m, Message::System { .. }))
            .count();
        request.messages.splice(instructions..instructions, history);
        format::name_tool_results(&mut request.messages);
        conversation = Some(stored);
        whole_history_given = true;
    }
    let mut approvals = parsed.approvals;
    let mut approver = None;
    if let (true, Some(operators)) = (approvals.is_empty(), &state.operators) {
        // A resend of a paused turn without decisions: the operators' decisions, when all are made.
        let ids = crate::operator::notice_ids(&request.messages);
        if !ids.is_empty() {
            match crate::operator::pick_decisions(operators, caller.as_ref(), &ids).await {
                Some(picked) => {
                    approvals = picked.answers;
                    approver = Some(picked.approver);
                }
                None if crate::operator::any_pending(operators, caller.as_ref(), &ids).await => {
                    return Err(crate::operator::still_pending(&ids));
                }
                None => {}
            }
        }
    }
    if !approvals.is_empty() {
        let resumption = match state.pending.resume(caller.as_ref(), &approvals) {
            Ok(resumption) => resumption,
            Err(error) => recorded_resumption(state, caller.as_ref(), &approvals)
                .await?
                .ok_or(error)?,
        };
        // The client's copy of the paused answer (the approval notice) is replaced by what the loop really had.
        if matches!(request.messages.last(), Some(Message::Assistant(a)) if a.tool_calls.is_empty())
        {
            request.messages.pop();
        }
        if whole_history_given {
            // A stored response's history already holds the paused turn, hidden messages included.
        } else if resumption.whole_history {
            hidden = match resumption.hidden.strip_prefix(request.messages.as_slice()) {
                Some(rest) => rest.to_vec(),
                None => Vec::new(),
            };
            request.messages = resumption.hidden.into();
        } else {
            request.messages.extend(resumption.hidden.iter().cloned());
            hidden = resumption.hidden;
        }
        conversation = Some(resumption.conversation);
        request.extensions.insert(resumption.decisions);
        if let Some(approver) = approver {
            // The approval layer checks its approver rule against, and audits, the operator.
            request
                .extensions
                .insert(tower_chat_approval::ApproverIdentity::new(approver));
        }
    }
    if let Some(caller) = &caller {
        request.extensions.insert(caller.clone());
    }
    request.extensions.insert(F::ROUTE);
    let dropped =
        tower_chat_wire::carry::forward(F::ROUTE, &headers, query, &parsed.dropped, &mut request);
    // One id per turn even without the header, so a paused turn resumes in the conversation it paused in
    // (records and approvals are bound to it).
    let conversation = header_conversation
        .or(conversation)
        .unwrap_or_else(|| ConversationId::new(format!("conv_{}", uuid::Uuid::now_v7().simple())));
    request.extensions.insert(conversation.clone());
    if let Some(id) = recorded_request_id(&headers) {
        request.extensions.insert(id);
    }
    if let Some(id) = &parsed.record_id {
        // The request's rounds are stored under the id the client was given (the first round) and ids derived
        // from it, so a later `previous_response_id` finds the last one.
        request
            .extensions
            .insert(crate::turn::rounds::RoundIds::new(id.as_str()));
    }
    let cache_outcome = state
        .caching
        .as_ref()
        .map(|routes| crate::stack::cache::control(&headers, F::ROUTE, routes, &mut request));
    // Kept by reference: the user's text is read out only if the turn pauses for an operator.
    let sent = request.messages.clone();
    let turn = Turn {
        model: parsed.model,
        client_tools,
        keeper: Kept {
            sent,
            caller,
            conversation,
            hidden,
            pending: state.pending.clone(),
            operators_decide: state.operators.is_some(),
        },
    };
    let stream = state
        .stack
        .clone()
        .oneshot(request)
        .await
        .map_err(|e| crate::error::from_chat(&e))?;
    let mut response = answer(
        stream,
        parsed.stream,
        turn,
        encoder,
        state.drain_over.clone(),
    )
    .await?;
    if let Some(outcome) = &cache_outcome {
        crate::stack::cache::outcome_header(outcome, response.headers_mut());
    }
    tower_chat_wire::carry::name_dropped(&dropped, &mut response);
    // Held until the answer's last byte: a stream keeps its request's media alive (the call record, a tool
    // loop's later rounds) as long as it runs.
    Ok(response
        .map(|body| axum::body::Body::new(crate::edge::in_flight::GuardedBody::new(body, media))))
}

/// The request's `x-request-id` (the client's, or the one the edge generated), for the records of the turn's
/// calls, so an access-log line or an error body leads to them; `None` past
/// [`MAX_REQUEST_ID`](crate::error::MAX_REQUEST_ID) bytes (the edge replaces a longer one; a gateway served
/// without the edge may still pass one).
fn recorded_request_id(headers: &HeaderMap) -> Option<tower_chat_persistence::RequestId> {
    let id = headers.get(&crate::error::X_REQUEST_ID)?.to_str().ok()?;
    (id.len() <= crate::error::MAX_REQUEST_ID).then(|| tower_chat_persistence::RequestId::new(id))
}

/// The text of the last user message of `messages` that has any, as an approval's context keeps it.
fn last_user_text(messages: &[Message]) -> Option<String> {
    messages.iter().rev().find_map(|message| match message {
        Message::User { content } => {
            tower_chat_approval::ApprovalContext::kept(&content.joined_text())
        }
        _ => None,
    })
}

/// What the gateway keeps of a turn when it ends: a turn paused for approval (its hidden messages, under the
/// approval ids its notices name) and a hand-back of the client's own calls, both in the [`PendingStore`].
struct Kept {
    caller: Option<CallerIdentity>,
    conversation: ConversationId,
    /// Hidden messages this turn continues from (a resumed pause).
    hidden: Vec<Message>,
    /// The request's messages: its last user message is what an operator reads beside a paused call.
    sent: Shared<Vec<Message>>,
    pending: Arc<PendingStore>,
    /// Operators decide pending approvals (`--operator-keys-file`): the notice tells the client to wait.
    operators_decide: bool,
}

impl TurnKeeper for Kept {
    fn end(
        &mut self,
        reason: &FinishReason,
        messages: Vec<Message>,
        approvals: &[ApprovalRequest],
        client_calls: &[ToolCall],
    ) -> Vec<ApprovalNotice> {
        let mut hidden = std::mem::take(&mut self.hidden);
        hidden.extend(messages);
        if *reason == FinishReason::AwaitingApproval && !approvals.is_empty() {
            return self.pending.pause(
                self.caller.clone(),
                self.conversation.clone(),
                hidden,
                approvals,
                last_user_text(&self.sent).as_deref(),
            );
        }
        if *reason == FinishReason::ToolCalls && !client_calls.is_empty() {
            let ids: Vec<String> = client_calls.iter().map(|c| c.id.clone()).collect();
            self.pending.hand_back(self.caller.clone(), &ids, hidden);
        }
        Vec::new()
    }

    fn operators_decide(&self) -> bool {
        self.operators_decide
    }

    fn error(&self, error: &ChatError) -> ApiError {
        crate::error::from_chat(error)
    }
}
