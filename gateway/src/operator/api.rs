//! The operator API's handlers: `GET /v1/approvals` (a page of pending approvals), `POST
//! /v1/approvals/{id}/decision` (an operator decides), `GET /v1/approvals/{id}?wait=` (the client waits for a
//! decision).

use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use tower_chat::CallerIdentity;
use tower_chat_approval::{DecideOutcome, PendingCursor, PendingDecision};

use crate::api::extract::{ApiJson, ApiQuery, Expected};
use crate::error::{json_response, ApiError};

use super::decisions::*;
use super::listing::*;

/// The query string of a listing: `limit` (1 to [`MAX_LIST`]) and `after` (a cursor from an earlier page).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageParams {
    limit: Option<usize>,
    after: Option<String>,
}

impl PageParams {
    /// The cursor and the page size asked for.
    fn page(&self) -> Result<(Option<PendingCursor>, usize), ApiError> {
        let limit = match self.limit {
            None => MAX_LIST,
            Some(n) if (1..=MAX_LIST).contains(&n) => n,
            Some(_) => {
                return Err(ApiError::invalid_request(
                    "invalid_limit",
                    format!("`limit` must be a whole number from 1 to {MAX_LIST}"),
                ))
            }
        };
        let after = match &self.after {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| {
                ApiError::invalid_request(
                    "invalid_cursor",
                    "`after` must be the `next_after` of an earlier page",
                )
            })?),
        };
        Ok((after, limit))
    }
}

/// `GET /v1/approvals?limit=N&after=CURSOR`: what waits for a decision, oldest first, a page at a time.
pub(crate) async fn list(
    State(state): State<OperatorState>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Response {
    let page = match params.page() {
        Ok((after, limit)) => pending_page(&state, after.as_ref(), limit).await,
        Err(error) => Err(error),
    };
    match page {
        Ok(page) => {
            let data: Vec<serde_json::Value> = page.listed.iter().map(listed_json).collect();
            json_response(
                StatusCode::OK,
                &json!({
                    "object": "list",
                    "data": data,
                    "has_more": page.next.is_some(),
                    "next_after": page.next.map(|c| c.to_string()),
                }),
            )
        }
        Err(error) => error.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    approved: bool,
    #[serde(default)]
    reason: Option<String>,
}

impl Expected for DecisionBody {
    const EXPECTED: &'static str = r#"{"approved": true|false, "reason": "…"}"#;
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found_error(
        "approval_not_found",
        format!("no pending approval `{id}` (unknown, expired or already used)"),
    )
}

/// The longest reason kept (it is shown to the model on a denial, and stored in the audit log).
const MAX_REASON: usize = 4096;

/// `POST /v1/approvals/{id}/decision`.
pub(crate) async fn decide(
    State(state): State<OperatorState>,
    Extension(operator): Extension<Operator>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> Response {
    match record_decision(&state, &operator, &id, body.approved, body.reason).await {
        Ok(()) => json_response(
            StatusCode::OK,
            &json!({
                "id": id,
                "status": if body.approved { "approved" } else { "denied" },
                "approver": operator.0,
            }),
        ),
        Err(error) => error.into_response(),
    }
}

/// Record `operator`'s decision on pending approval `id` (the JSON route's and the console's one path): 404
/// when nothing is pending under `id`, 409 when it was already decided, 400 for an overlong reason.
pub(crate) async fn record_decision(
    state: &OperatorState,
    operator: &Operator,
    id: &str,
    approved: bool,
    reason: Option<String>,
) -> Result<(), ApiError> {
    if reason.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
        return Err(ApiError::invalid_request(
            "reason_too_long",
            format!("the reason is longer than {MAX_REASON} bytes"),
        ));
    }
    let already = || ApiError {
        status: StatusCode::CONFLICT,
        ..ApiError::invalid_request(
            "approval_already_decided",
            format!("approval `{id}` was already decided"),
        )
    };
    match &state.approval_store {
        // Kept with the pending approval, so the client's resume finds it in whichever process it reaches.
        Some(store) => {
            let decision = PendingDecision {
                approved,
                reason,
                approver: operator.0.clone(),
                decided_at: SystemTime::now(),
            };
            match store
                .decide_pending(id, &decision)
                .await
                .map_err(|e| crate::error::from_chat(&e))?
            {
                DecideOutcome::Recorded => state.decisions.notify(),
                DecideOutcome::AlreadyDecided => return Err(already()),
                DecideOutcome::NotPending => return Err(not_found(id)),
            }
        }
        // A gateway around a stack of its own, without an approval store: the turns paused here.
        None => {
            let Some(caller) = state.pending.paused_caller(id) else {
                return Err(not_found(id));
            };
            let decided = Decided {
                caller,
                approved,
                reason,
                approver: operator.0.clone(),
                decided_at: SystemTime::now(),
                expires: Instant::now() + state.decisions.ttl,
            };
            if !state.decisions.decide(id, decided) {
                return Err(already());
            }
        }
    }
    tracing::info!(approval_id = %id, approver = %operator.0, approved, "operator decision");
    Ok(())
}

/// The query string of a poll: `wait=SECS`, how long to wait for a decision (other parameters are ignored).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WaitParams {
    wait: Option<f64>,
}

/// `GET /v1/approvals/{id}?wait=SECS`, for the paused turn's caller.
pub(crate) async fn poll(
    State(state): State<OperatorState>,
    caller: Option<Extension<CallerIdentity>>,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<WaitParams>,
) -> Response {
    let caller = caller.map(|Extension(c)| c);
    let wait = params
        .wait
        .filter(|w| w.is_finite() && *w > 0.0)
        .map_or(Duration::ZERO, |w| Duration::from_secs_f64(w).min(MAX_WAIT));
    // Held until the answer: a waiting poll is a task, a timer and a store look every STORE_RECHECK.
    let _polling = if wait.is_zero() {
        None
    } else {
        match state.polls.admit(&caller) {
            Some(permit) => Some(permit),
            None => return crate::error::too_many_polls(state.polls.limit()).into_response(),
        }
    };
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribed before the first look, so a decision made in between is not missed.
    let mut changed = state.decisions.changed.subscribe();
    loop {
        if let Some(decided) = decision_of(&state, &id, caller.as_ref()).await {
            return json_response(
                StatusCode::OK,
                &json!({
                    "id": id,
                    "status": if decided.approved { "approved" } else { "denied" },
                    "approver": decided.approver,
                    "reason": decided.reason,
                    "decided_at": unix(decided.decided_at),
                }),
            );
        }
        match pending_caller(&state, &id).await {
            Some(owner) if owner == caller => {}
            _ => return not_found(&id).into_response(),
        }
        if tokio::time::Instant::now() >= deadline {
            return json_response(StatusCode::OK, &json!({"id": id, "status": "pending"}));
        }
        // A decision made here wakes the wait at once; one made in another process sharing the store is seen at
        // the next look, at most STORE_RECHECK later.
        let wake = match &state.approval_store {
            Some(_) => deadline.min(tokio::time::Instant::now() + STORE_RECHECK),
            None => deadline,
        };
        if let Ok(Err(_)) = tokio::time::timeout_at(wake, changed.changed()).await {
            // The gateway is going away: still pending.
            return json_response(StatusCode::OK, &json!({"id": id, "status": "pending"}));
        }
    }
}

/// The 409 for a resend that names approvals no operator decided yet.
pub(crate) fn still_pending(ids: &[String]) -> ApiError {
    ApiError {
        status: StatusCode::CONFLICT,
        ..ApiError::invalid_request(
            "approval_pending",
            format!(
                "approval {} awaits an operator's decision; wait with GET /v1/approvals/{}?wait=30, then \
                 resend",
                ids.join(", "),
                ids[0]
            ),
        )
    }
}

/// Whether any of `ids` is still pending for `caller` (decided or not).
pub(crate) async fn any_pending(
    state: &OperatorState,
    caller: Option<&CallerIdentity>,
    ids: &[String],
) -> bool {
    for id in ids {
        if pending_caller(state, id).await.as_ref().map(Option::as_ref) == Some(caller) {
            return true;
        }
    }
    false
}
