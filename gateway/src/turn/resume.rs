//! The conversation a turn continues, rebuilt before the stack sees the request: the client's own calls handed
//! back, a stored response (`previous_response_id`), a paused turn's hidden messages on an approval resume
//! (from this process's [`PendingStore`](crate::turn::pending::PendingStore) or, after a restart or in another
//! replica, from the approval store and the call records), the operators' decisions on a resend, and the
//! conversation id of the turn.

use http::{HeaderMap, StatusCode};
use tower_chat::{CallerIdentity, ChatError, ChatRequest, ConversationId, Message};
use tower_chat_wire::extensions::{ResponseHeaders, TurnContext};
use tower_chat_wire::format::{self, ApprovalAnswer, InboundRoute};

use crate::error::ApiError;
use crate::turn::pending::Resumption;
use crate::turn::stream::Kept;
use crate::turn::Keeping;

/// `request` with its conversation rebuilt and its turn's extensions settled, and what the turn keeps when it
/// ends. Nothing is looked up or consumed (an approval is single-use) before the media are admitted: a refusal
/// there changes nothing.
pub(super) async fn prepare(
    keeping: &Keeping,
    mut request: ChatRequest,
) -> Result<(ChatRequest, Kept), ApiError> {
    let media = keeping
        .media
        .admit(request.messages.iter().map(Message::media_bytes).sum())?;
    // Taken out: the layers below clone their request per round, and need none of it.
    let context = request
        .extensions
        .remove::<TurnContext>()
        .unwrap_or_default();
    let caller = request.extensions.get::<CallerIdentity>().cloned();
    // The client's `x-conversation-id`, which the route read: it wins over a stored or resumed one.
    let header_conversation = request.extensions.get::<ConversationId>().cloned();
    // A tool namespace's tools are called by their joined names: the client's too.
    let client_tools: Vec<String> = request
        .options
        .tools
        .iter()
        .map(|t| t.name.clone())
        .chain(
            tower_chat::namespaced_tools(&request.options.tools)
                .into_iter()
                .map(|(joined, ..)| joined),
        )
        .collect();
    if let Some(clash) = client_tools
        .iter()
        .find(|name| keeping.server_tools.contains(&name.as_str()))
    {
        return Err(ApiError::invalid_request(
            "tool_name_reserved",
            format!("the tool name `{clash}` is reserved for the gateway's own tool"),
        ));
    }
    if let Some(mcp) = &keeping.mcp {
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
    keeping
        .pending
        .splice_handoffs(caller.as_ref(), &mut request.messages);
    let mut hidden = Vec::new();
    let mut conversation = None;
    let mut whole_history_given = false;
    if let Some(id) = &context.previous_response_id {
        let (history, stored) = previous_response(keeping, caller.as_ref(), id).await?;
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
    let mut approvals = context.approvals;
    let mut approver = None;
    if let (true, Some(operators)) = (approvals.is_empty(), &keeping.operators) {
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
        let resumption = match keeping.pending.resume(caller.as_ref(), &approvals) {
            Ok(resumption) => resumption,
            Err(error) => recorded_resumption(keeping, caller.as_ref(), &approvals)
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
    // One id per turn even without the header, so a paused turn resumes in the conversation it paused in
    // (records and approvals are bound to it).
    let conversation = match header_conversation {
        Some(header) => header,
        None => {
            let conversation = conversation.unwrap_or_else(|| {
                ConversationId::new(format!("conv_{}", uuid::Uuid::now_v7().simple()))
            });
            request.extensions.insert(conversation.clone());
            conversation
        }
    };
    if let Some(id) = recorded_request_id(&context.headers) {
        request.extensions.insert(id);
    }
    if let Some(id) = &context.record_id {
        // The request's rounds are stored under the id the client was given (the first round) and ids derived
        // from it, so a later `previous_response_id` finds the last one.
        request
            .extensions
            .insert(crate::turn::rounds::RoundIds::new(id.as_str()));
    }
    let cache = match (&keeping.caching, request.extensions.get::<InboundRoute>()) {
        (Some(routes), Some(&route)) => {
            let outcome =
                crate::stack::cache::control(&context.headers, route, routes, &mut request);
            let headers = request
                .extensions
                .get::<ResponseHeaders>()
                .cloned()
                .unwrap_or_default();
            Some((outcome, headers))
        }
        _ => None,
    };
    let kept = Kept {
        // Kept by reference: the user's text is read out only if the turn pauses for an operator.
        sent: request.messages.clone(),
        caller,
        conversation,
        hidden,
        pending: keeping.pending.clone(),
        client_tools,
        cache,
        _media: media,
    };
    Ok((request, kept))
}

/// A paused turn this process does not hold (it paused before a restart, or in another replica): the approval
/// layer's pending record names the conversation, and the call records hold the paused turn's whole history.
/// The approval layer then verifies the decisions as always (caller, conversation, single use, arguments).
///
/// `Ok(None)` when nothing is pending for `caller` under the first id (the caller gets the same error as for an
/// unknown id, so ids cannot be probed); `approval_turn_unavailable` when the approval is pending for this caller
/// but the paused turn cannot be rebuilt here (no call records of it): the approval stays pending, undecided.
async fn recorded_resumption(
    keeping: &Keeping,
    caller: Option<&CallerIdentity>,
    answers: &[ApprovalAnswer],
) -> Result<Option<Resumption>, ApiError> {
    let (Some(approvals), Some(first)) = (keeping.approval_store.as_ref(), answers.first()) else {
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
    let Some(records) = keeping.records.as_ref() else {
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
    keeping: &Keeping,
    caller: Option<&CallerIdentity>,
    id: &str,
) -> Result<(Vec<Message>, ConversationId), ApiError> {
    let not_found = || {
        ApiError::not_found_error(
            "previous_response_not_found",
            format!("previous response `{id}` not found"),
        )
    };
    let Some(records) = keeping.records.as_ref() else {
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

/// The request's `x-request-id` (the client's, or the one the edge generated), for the records of the turn's
/// calls, so an access-log line or an error body leads to them; `None` past
/// [`MAX_REQUEST_ID`](crate::error::MAX_REQUEST_ID) bytes (the edge replaces a longer one; a gateway served
/// without the edge may still pass one).
fn recorded_request_id(headers: &HeaderMap) -> Option<tower_chat_persistence::RequestId> {
    let id = headers.get(&crate::error::X_REQUEST_ID)?.to_str().ok()?;
    (id.len() <= crate::error::MAX_REQUEST_ID).then(|| tower_chat_persistence::RequestId::new(id))
}
