//! [`Draft`]: what is known of a call before its response, finished into its record when the call ends.

use std::sync::Arc;
use std::time::SystemTime;

use tower_chat::{
    ChatError, ChatOptions, ConversationId, ErrorKind, EstimatedUsage, GuardedCall, GuardrailAudit,
    GuardrailVerdict, PriceTable, ResponseBuilder, Shared, Usage,
};

use crate::record::{
    CallId, CallOutcome, CallRecord, CallerTeam, RecordedError, RecordedRequest, RequestId,
    RequestSize,
};

/// What is known of a call before its response: everything but the outcome.
#[derive(Debug)]
pub(crate) struct Draft {
    pub(crate) call_id: CallId,
    pub(crate) conversation_id: ConversationId,
    pub(crate) caller: Option<tower_chat::CallerIdentity>,
    pub(crate) request_id: Option<RequestId>,
    pub(crate) team: Option<CallerTeam>,
    pub(crate) round_index: u32,
    pub(crate) started_at: SystemTime,
    pub(crate) provider: Option<Arc<str>>,
    pub(crate) prices: Option<Arc<PriceTable>>,
    pub(crate) request: RecordedRequest,
    /// Set by an inner layer that charged the call an estimate (read when the record is built).
    pub(crate) estimate: EstimatedUsage,
    /// Filled by a guardrail layer inside (read when the record is built).
    pub(crate) audit: GuardrailAudit,
    /// Left by a guardrail layer outside: the request's verdicts, and the screens the answer is kept through.
    pub(crate) guarded: Option<GuardedCall>,
    /// The verdicts the screens of a guardrail outside gave the answer.
    pub(crate) screened: Vec<GuardrailVerdict>,
}

impl Draft {
    /// The record of the call as it starts.
    pub(crate) fn in_flight(&self) -> CallRecord {
        CallRecord {
            call_id: self.call_id.clone(),
            conversation_id: self.conversation_id.clone(),
            caller: self.caller.clone(),
            request_id: self.request_id.clone(),
            team: self.team.clone(),
            round_index: self.round_index,
            started_at: self.started_at,
            first_token_at: None,
            ended_at: self.started_at,
            provider: self.provider.as_deref().map(str::to_owned),
            model: self.request.options.model.clone(),
            request: self.request.clone(),
            response: tower_chat::ChatResponse::default(),
            outcome: CallOutcome::InFlight,
            cost: None,
            usage_estimated: false,
            guardrail: Vec::new(),
        }
    }

    /// The request as recorded for a call refused before it was sent: its size and model, not its messages
    /// (nor the tools and options, which a request can make as large as its messages).
    pub(crate) fn omit_request(&mut self) {
        let messages = std::mem::take(&mut self.request.messages);
        self.request = RecordedRequest {
            omitted: Some(RequestSize::of(&messages)),
            messages: Shared::new(Vec::new()),
            options: Shared::new(ChatOptions {
                model: self.request.options.model.clone(),
                ..ChatOptions::default()
            }),
        };
    }

    pub(crate) fn finish(
        mut self,
        builder: ResponseBuilder,
        first_token_at: Option<SystemTime>,
        outcome: CallOutcome,
    ) -> CallRecord {
        // A stream cut midway keeps the tool calls it was still streaming, with their argument text so far.
        let mut response = builder.finish_with_open_calls();
        // A policy inside redacted the request: what was sent is what is kept.
        if self.request.omitted.is_none() {
            if let Some(sent) = self.audit.sent_messages() {
                self.request.messages = sent;
            }
        }
        // No usage reported, and an inner layer charged an estimate: the record carries what was charged.
        let estimated = match self.estimate.get() {
            Some(estimate) if response.usage == Usage::default() => {
                response.usage = estimate;
                true
            }
            _ => false,
        };
        let cost = self.prices.as_deref().and_then(|prices| {
            [
                self.request.options.model.as_deref(),
                response.model.as_deref(),
            ]
            .into_iter()
            .flatten()
            .find_map(|model| prices.cost(model, &response.usage))
        });
        let guardrail = self.verdicts();
        CallRecord {
            cost,
            model: response
                .model
                .clone()
                .or_else(|| self.request.options.model.clone()),
            call_id: self.call_id,
            conversation_id: self.conversation_id,
            caller: self.caller,
            request_id: self.request_id,
            team: self.team,
            round_index: self.round_index,
            started_at: self.started_at,
            first_token_at,
            ended_at: SystemTime::now(),
            provider: self.provider.as_deref().map(str::to_owned),
            request: self.request,
            response,
            outcome,
            usage_estimated: estimated,
            guardrail,
        }
    }
}

impl Draft {
    /// The call's verdicts: those of a policy inside (as it made them), then those of a policy outside (the
    /// request's, then the answer's as screened here).
    fn verdicts(&mut self) -> Vec<GuardrailVerdict> {
        let mut verdicts = self.audit.verdicts();
        if let Some(guarded) = &self.guarded {
            verdicts.extend(guarded.take_request_verdicts());
        }
        verdicts.append(&mut self.screened);
        verdicts
    }
}

/// The outcome of an error that ended a call; `output_began` says whether any event arrived before it.
pub(crate) fn outcome_of_error(error: &ChatError, output_began: bool) -> CallOutcome {
    if *error.kind() == ErrorKind::Cancelled {
        CallOutcome::Cancelled
    } else if output_began {
        CallOutcome::Interrupted {
            error: Some(RecordedError::from(error)),
        }
    } else {
        CallOutcome::Failed {
            error: RecordedError::from(error),
        }
    }
}
