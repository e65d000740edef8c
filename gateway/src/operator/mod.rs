//! Operator decisions: people other than the client approve or deny a paused call.
//!
//! With `--operator-keys-file PATH` (same format as `--api-keys-file`, keys distinct from every client key):
//!
//! | route | key | what |
//! |---|---|---|
//! | `POST /v1/approvals/{id}/decision` | operator | `{"approved": true, "reason": "…"}`: decide a pending approval (once; 409 afterwards) |
//! | `GET /v1/approvals?limit=N&after=CURSOR` | operator | the unexpired pending approvals of every gateway process on the database (the approval layer's store), soonest to expire (with one `--approval-ttl`: oldest) first, a page of at most 200 at a time |
//! | `GET /v1/approvals/{id}?wait=SECS` | client (the paused turn's caller) | the decision so far: `pending`, `approved` or `denied`; waits up to `wait` seconds (at most 60) for one |
//!
//! A caller may have `--max-polls-per-key` (default 16) polls with a `wait` waiting at once (callers without a
//! gateway key count as one caller); one more is refused at once with `429 too_many_polls` and `Retry-After`,
//! rather than answered `pending` without waiting, which would invite a client to poll again at once. Polls
//! without `wait` answer at once and are not counted.
//!
//! The waiting client then resends its conversation as it has it (ending with the approval notice) **without**
//! `tower_chat.approvals`: the gateway finds the notice's approval ids, takes the operators' decisions and
//! resumes the turn with the operator as the approver (`ApproverIdentity("operator:NAME")`), so the approval
//! layer's audit log names the operator. A resend before every id is decided gets `409 approval_pending`.
//!
//! Failed operator-key checks share the console's failed-login limit (`login_limit.rs`), counted by the key
//! presented and the client address (behind a reverse proxy, the one `--trusted-proxy-header` reports): over
//! it, `429 too_many_failed_logins` with `Retry-After`, before the key is looked at. A request without a key,
//! or with a client key, is answered 401 without counting.
//!
//! While operator keys are configured, the approver rule lets only operators approve: a client's own
//! `"approved": true` is refused (`approver_rejected`); a client may still deny its own call.
//!
//! Decisions are kept with the pending approval in the approval layer's store
//! ([`ApprovalStore::decide_pending`](tower_chat_approval::ApprovalStore::decide_pending)), so every process on
//! the database sees them: an operator may decide in one replica, the client wait in a second and resend to a
//! third; a restart loses nothing. A gateway without a store (built around a stack of its own) keeps decisions
//! in its memory, for the turns paused in it.

pub(crate) mod console;
pub(crate) mod login_throttle;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use tower_chat::{CallerIdentity, ConversationId, Message, ToolArguments};
use tower_chat_approval::{DecideOutcome, PendingApproval, PendingCursor, PendingDecision};

use crate::error::{json_response, ApiError};
use crate::api::extract::{ApiJson, ApiQuery, Expected};
use tower_chat_wire::format::{ApprovalAnswer, ApprovalNotice};

/// The prefix of an operator's approver identity (`operator:NAME`). Client identities cannot carry it: key
/// names have no `:`.
pub const OPERATOR_PREFIX: &str = "operator:";

/// The longest a client's `GET /v1/approvals/{id}?wait=` may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// How often a waiting `GET /v1/approvals/{id}?wait=` looks at the store for a decision another process made.
const STORE_RECHECK: Duration = Duration::from_millis(500);

/// The approver rule the gateway's approval layer runs while operator keys are configured: only an operator may
/// approve; anyone the request binds to may deny.
pub(crate) fn only_operators_approve(
    input: &tower_chat_approval::ApproverInput<'_>,
) -> Result<(), String> {
    let by_operator = input
        .approver()
        .is_some_and(|a| a.starts_with(OPERATOR_PREFIX));
    if input.decision().approved && !by_operator {
        return Err(format!(
            "only an operator may approve this call (POST /v1/approvals/{}/decision with an operator key)",
            input.decision().approval_id
        ));
    }
    Ok(())
}

/// One operator decision, until the client's resend uses it.
#[derive(Clone, Debug)]
struct Decided {
    caller: Option<CallerIdentity>,
    approved: bool,
    reason: Option<String>,
    approver: String,
    decided_at: SystemTime,
    expires: Instant,
}

/// The operators' decisions, by approval id, and a signal for the clients long-polling them.
#[derive(Debug)]
pub(crate) struct Decisions {
    ttl: Duration,
    decided: Mutex<HashMap<String, Decided>>,
    changed: tokio::sync::watch::Sender<u64>,
}

/// The decisions a resend picks up: the answers to pass on, and the operator who gave them.
#[derive(Debug)]
pub(crate) struct Picked {
    pub(crate) answers: Vec<ApprovalAnswer>,
    pub(crate) approver: String,
}

impl Decisions {
    pub(crate) fn new(ttl: Duration) -> Self {
        Decisions {
            ttl,
            decided: Mutex::new(HashMap::new()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Decided>> {
        // Every critical section leaves the map consistent.
        self.decided.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a decision; `false` when the id already has one.
    fn decide(&self, id: &str, decided: Decided) -> bool {
        let mut map = self.lock();
        let now = Instant::now();
        map.retain(|_, d| d.expires > now);
        if map.contains_key(id) {
            return false;
        }
        map.insert(id.to_owned(), decided);
        drop(map);
        self.notify();
        true
    }

    fn get(&self, id: &str, caller: Option<&CallerIdentity>) -> Option<Decided> {
        self.lock()
            .get(id)
            .filter(|d| d.expires > Instant::now() && d.caller.as_ref() == caller)
            .cloned()
    }

    /// Take the decisions of `ids` made for `caller`, when every id has one and one operator made them all;
    /// `None` otherwise (nothing is taken).
    pub(crate) fn take(&self, caller: Option<&CallerIdentity>, ids: &[String]) -> Option<Picked> {
        let mut map = self.lock();
        let now = Instant::now();
        let decided: Vec<&Decided> = ids
            .iter()
            .map(|id| {
                map.get(id)
                    .filter(|d| d.expires > now && d.caller.as_ref() == caller)
            })
            .collect::<Option<_>>()?;
        let approver = decided.first()?.approver.clone();
        if decided.iter().any(|d| d.approver != approver) {
            return None;
        }
        let answers = ids
            .iter()
            .zip(&decided)
            .map(|(id, d)| ApprovalAnswer {
                id: id.clone(),
                approved: d.approved,
                reason: d.reason.clone(),
            })
            .collect();
        for id in ids {
            map.remove(id);
        }
        Some(Picked { answers, approver })
    }

    /// Wake the clients long-polling here.
    fn notify(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The approval ids of the gateway's approval notice, when `messages` end with one (the assistant message a
/// paused turn showed the client, resent as the client has it).
pub(crate) fn notice_ids(messages: &[Message]) -> Vec<String> {
    let Some(Message::Assistant(last)) = messages.last() else {
        return Vec::new();
    };
    if !last.tool_calls.is_empty() {
        return Vec::new();
    }
    // A set beside the list, so a message with a hundred thousand notices is not a quadratic scan.
    let mut seen = std::collections::HashSet::new();
    let mut ids = Vec::new();
    for (at, _) in last.content.match_indices("Approval id: apr_") {
        let id = &last.content[at + "Approval id: ".len()..];
        let end = id
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(id.len());
        let id = &id[..end];
        if id.len() > "apr_".len() && seen.insert(id) {
            ids.push(id.to_owned());
        }
    }
    ids
}

/// What the operator routes need from the gateway.
#[derive(Clone)]
pub(crate) struct OperatorState {
    pub(crate) keys: Arc<crate::edge::auth::ApiKeys>,
    pub(crate) decisions: Arc<Decisions>,
    pub(crate) pending: Arc<crate::turn::pending::PendingStore>,
    pub(crate) approval_store: Option<Arc<dyn tower_chat_approval::ApprovalStore>>,
    /// Failed operator-key checks (API and console login), by key and client address and in all.
    pub(crate) login_limit: Arc<crate::operator::login_throttle::LoginLimiter>,
    /// The client keys (`--api-keys-file`): one presented on an operator route is refused without counting as a
    /// failed operator login (it guesses nothing).
    pub(crate) clients: Option<Arc<crate::edge::auth::ApiKeys>>,
    /// `--trusted-proxy-header` / `--trusted-proxies`: the client address behind a reverse proxy.
    pub(crate) proxies: Option<Arc<crate::edge::client_addr::TrustedProxies>>,
    /// Long-polls waiting, per caller (`--max-polls-per-key`).
    pub(crate) polls: Arc<crate::edge::in_flight::PerKey<Option<CallerIdentity>>>,
    /// Logged-in console sessions (in the gateway's database when it has one).
    pub(crate) sessions: crate::operator::console::SessionStore,
    /// `[limits.prices]`: what the console's usage page prices the response cache's savings at.
    pub(crate) prices: Arc<tower_chat::PriceTable>,
    /// The sandbox `write_file` writes through (`--files`): the console reads what a pending write would
    /// replace through it.
    pub(crate) files: Option<Arc<crate::stack::tools::Sandbox>>,
}

impl OperatorState {
    /// Where a request comes from, as the failed-login limit counts it: its TCP peer, or the client address
    /// a trusted proxy reports.
    pub(crate) fn source(
        &self,
        peer: Option<&crate::edge::in_flight::PeerAddr>,
        headers: &http::HeaderMap,
    ) -> crate::operator::login_throttle::Source {
        crate::operator::login_throttle::Source::of(crate::edge::client_addr::client_ip(
            self.proxies.as_deref(),
            peer.map(|p| p.0.ip()),
            headers,
        ))
    }

    /// Whether `key` is a client key.
    pub(crate) fn is_client_key(&self, key: &str) -> bool {
        self.clients
            .as_ref()
            .is_some_and(|clients| clients.identify(key).is_some())
    }
}

/// The operator's identity as the approver (`operator:NAME`).
#[derive(Clone, Debug)]
pub(crate) struct Operator(String);

impl Operator {
    /// The operator whose key is named `name` in the operator keys file.
    pub(crate) fn named(name: &str) -> Self {
        Operator(format!("{OPERATOR_PREFIX}{name}"))
    }
}

/// Operator routes accept operator keys only. Failed checks count against the same limit as console logins, by
/// key and client address ([`crate::operator::login_throttle`]); over it the request gets `429` with `Retry-After` before its
/// key is looked at. A request without a key, or with a client key, is refused (401) without counting: it
/// guesses nothing.
pub(crate) async fn authenticate_operator(
    State(state): State<OperatorState>,
    mut request: Request,
    next: Next,
) -> Response {
    let key = match crate::edge::auth::presented_key(request.headers()) {
        Ok(key) => key,
        Err(error) => return error.into_response(),
    };
    if state.is_client_key(key) {
        return ApiError::unauthorized(
            "this is a client key: the operator routes take an operator key (--operator-keys-file)",
        )
        .into_response();
    }
    let source = state.source(request.extensions().get(), request.headers());
    let fingerprint = state.login_limit.fingerprint(key);
    if let Err(refused) = state.login_limit.admit(source, fingerprint, Instant::now()) {
        let error = ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            retry_after: Some(Duration::from_secs(refused.retry_after_secs())),
            ..ApiError::invalid_request(
                "too_many_failed_logins",
                format!(
                    "too many failed operator key checks: {}; retry in {} s",
                    refused.reason(),
                    refused.retry_after_secs()
                ),
            )
        };
        return error.into_response();
    }
    match state.keys.identify(key) {
        Some(name) => {
            state.login_limit.succeeded(source, Instant::now());
            crate::edge::middleware::record_caller(&format!("operator:{}", name.as_str()));
            request
                .extensions_mut()
                .insert(Operator::named(name.as_str()));
            next.run(request).await
        }
        None => {
            state
                .login_limit
                .failed(source, fingerprint, Instant::now());
            ApiError::unauthorized("invalid API key").into_response()
        }
    }
}

/// Who a pending approval belongs to, when it is pending: the approval layer's store (every process on the
/// database, turns paused before a restart), or, in a gateway without one, a turn paused in this process.
///
/// With a store, the store alone says: a turn this process paused may have been resumed through another
/// process since, which took the approval from the store but could not clear this process's memory.
async fn pending_caller(state: &OperatorState, id: &str) -> Option<Option<CallerIdentity>> {
    if state.approval_store.is_some() {
        return stored_pending(state, id).await.map(|p| p.caller);
    }
    state.pending.paused_caller(id)
}

/// The unexpired pending approval `id` of the approval layer's store (shared by every process on the database).
async fn stored_pending(state: &OperatorState, id: &str) -> Option<PendingApproval> {
    let pending = state
        .approval_store
        .as_ref()?
        .get_pending(id)
        .await
        .ok()??;
    (!pending.is_expired(SystemTime::now())).then_some(pending)
}

/// The decision an operator made on `id` for `caller`'s paused turn, wherever it is kept: this process's
/// decisions (a gateway without a database), or the pending approval in the store (a decision made in any
/// replica, or before a restart).
async fn decision_of(
    state: &OperatorState,
    id: &str,
    caller: Option<&CallerIdentity>,
) -> Option<PendingDecision> {
    if let Some(decided) = state.decisions.get(id, caller) {
        return Some(PendingDecision {
            approved: decided.approved,
            reason: decided.reason,
            approver: decided.approver,
            decided_at: decided.decided_at,
        });
    }
    stored_pending(state, id)
        .await
        .filter(|p| p.caller.as_ref() == caller)?
        .decision
}

/// The operators' decisions on `ids` for a resend by `caller`, when every id has one and one operator made them
/// all; `None` otherwise (nothing is taken). This process's decisions are taken; decisions kept in the store
/// stay with their pending approval, which the approval layer takes (once) when the resumed request carries
/// them.
pub(crate) async fn pick_decisions(
    state: &OperatorState,
    caller: Option<&CallerIdentity>,
    ids: &[String],
) -> Option<Picked> {
    if let Some(picked) = state.decisions.take(caller, ids) {
        return Some(picked);
    }
    let mut decided = Vec::with_capacity(ids.len());
    for id in ids {
        let pending = stored_pending(state, id)
            .await
            .filter(|p| p.caller.as_ref() == caller)?;
        decided.push(pending.decision?);
    }
    let approver = decided.first()?.approver.clone();
    if decided.iter().any(|d| d.approver != approver) {
        return None;
    }
    let answers = ids
        .iter()
        .zip(decided)
        .map(|(id, d)| ApprovalAnswer {
            id: id.clone(),
            approved: d.approved,
            reason: d.reason,
        })
        .collect();
    Some(Picked { answers, approver })
}

/// Seconds since the Unix epoch.
pub(crate) fn unix(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One pending approval as operators see it: the paused call, and whether an operator already decided it (the
/// client has not resumed yet).
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub(crate) paused: crate::turn::pending::PausedApproval,
    /// `pending`, `approved` or `denied`.
    pub(crate) status: &'static str,
}

/// The most pending approvals one `GET /v1/approvals` (or console inbox) answer lists.
pub(crate) const MAX_LIST: usize = 200;

/// One page of pending approvals, oldest first.
#[derive(Debug)]
pub(crate) struct ListedPage {
    pub(crate) listed: Vec<Listed>,
    /// Where the next page starts, when there is one.
    pub(crate) next: Option<PendingCursor>,
}

fn status(approved: bool) -> &'static str {
    if approved {
        "approved"
    } else {
        "denied"
    }
}

/// What waits for a decision (unexpired), oldest first, at most `limit` (≤ [`MAX_LIST`]) after `after`: from the
/// approval layer's store when the gateway has one — every process on the database, and turns paused before a
/// restart — else the turns paused in this process.
pub(crate) async fn pending_page(
    state: &OperatorState,
    after: Option<&PendingCursor>,
    limit: usize,
) -> Result<ListedPage, ApiError> {
    let limit = limit.clamp(1, MAX_LIST);
    let now = SystemTime::now();
    let Some(store) = &state.approval_store else {
        // One time to live for every turn paused here: expiry order is pause order.
        let ttl = state.decisions.ttl;
        let mut listed: Vec<Listed> = pending_list(state)
            .into_iter()
            .filter(|l| {
                after.is_none_or(|c| {
                    (l.paused.paused_at + ttl, l.paused.notice.id.as_str())
                        > (c.expires_at, c.approval_id.as_str())
                })
            })
            .take(limit + 1)
            .collect();
        let next = (listed.len() > limit).then(|| {
            listed.truncate(limit);
            let last = &listed[limit - 1].paused;
            PendingCursor {
                expires_at: last.paused_at + ttl,
                approval_id: last.notice.id.clone(),
            }
        });
        return Ok(ListedPage { listed, next });
    };
    // One more than asked for tells whether another page follows.
    let mut page = store
        .list_pending(now, after, limit + 1)
        .await
        .map_err(|e| crate::error::from_chat(&e))?;
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        PendingCursor::after(&page[limit - 1])
    });
    let listed = page
        .into_iter()
        .map(|p| stored_listed(state, p, now))
        .collect();
    Ok(ListedPage { listed, next })
}

/// A pending approval of the store as operators see it at `now`: decided in the store, or by this process.
fn stored_listed(state: &OperatorState, p: PendingApproval, now: SystemTime) -> Listed {
    let status = match &p.decision {
        Some(d) => status(d.approved),
        None => state
            .decisions
            .get(&p.approval_id, p.caller.as_ref())
            .map_or("pending", |d| status(d.approved)),
    };
    Listed {
        status,
        paused: crate::turn::pending::PausedApproval {
            notice: ApprovalNotice {
                tool: p.call.name.clone(),
                arguments: match &p.call.arguments {
                    ToolArguments::Json(value) => value.clone(),
                    ToolArguments::Invalid { raw, .. } => raw.clone().into(),
                },
                reason: p.reason,
                id: p.approval_id,
            },
            caller: p.caller,
            conversation: p.conversation_id,
            paused_at: p.created_at,
            expires_in: p.expires_at.duration_since(now).unwrap_or_default(),
            context: p.context,
        },
    }
}

/// The pages read at most for one conversation's pending approvals ([`pending_in_conversation`]): 10 × 200 waiting
/// approvals across every conversation before the oldest are not shown on a timeline.
const MAX_CONVERSATION_PAGES: usize = 10;

/// What waits for a decision in `conversation`, oldest first: from the approval store when the gateway has one
/// (every process on the database), else this process's paused turns. Reads the store's pages in order, at most
/// [`MAX_CONVERSATION_PAGES`] of them.
pub(crate) async fn pending_in_conversation(
    state: &OperatorState,
    conversation: &ConversationId,
) -> Result<Vec<Listed>, ApiError> {
    let mut found = Vec::new();
    let mut after = None;
    for _ in 0..MAX_CONVERSATION_PAGES {
        let page = pending_page(state, after.as_ref(), MAX_LIST).await?;
        found.extend(
            page.listed
                .into_iter()
                .filter(|l| &l.paused.conversation == conversation),
        );
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(found)
}

/// The approval `id` as listed, when it is pending (decided or not) and unexpired: from the approval store when
/// the gateway has one, else this process's paused turns.
pub(crate) async fn find_listed(state: &OperatorState, id: &str) -> Option<Listed> {
    if state.approval_store.is_some() {
        let p = stored_pending(state, id).await?;
        return Some(stored_listed(state, p, SystemTime::now()));
    }
    pending_list(state)
        .into_iter()
        .find(|l| l.paused.notice.id == id)
}

/// The turns paused in this process (unexpired), oldest first, with this process's decisions.
pub(crate) fn pending_list(state: &OperatorState) -> Vec<Listed> {
    state
        .pending
        .list()
        .into_iter()
        .map(|paused| {
            let status = state
                .decisions
                .get(&paused.notice.id, paused.caller.as_ref())
                .map_or("pending", |d| status(d.approved));
            Listed { paused, status }
        })
        .collect()
}

/// One listed approval as JSON (`GET /v1/approvals` and the console's inbox poll).
pub(crate) fn listed_json(listed: &Listed) -> serde_json::Value {
    let p = &listed.paused;
    json!({
        "id": p.notice.id,
        "tool": p.notice.tool,
        "arguments": p.notice.arguments,
        "reason": p.notice.reason,
        "caller": p.caller.as_ref().map(|c| c.as_str()),
        "conversation": p.conversation.as_str(),
        "paused_at": unix(p.paused_at),
        "expires_in": p.expires_in.as_secs(),
        "status": listed.status,
        "context": {
            "user_message": p.context.user_message,
            "model_text": p.context.model_text,
        },
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(caller: &str, approver: &str, approved: bool) -> Decided {
        Decided {
            caller: Some(CallerIdentity::new(caller)),
            approved,
            reason: None,
            approver: approver.into(),
            decided_at: SystemTime::now(),
            expires: Instant::now() + Duration::from_secs(60),
        }
    }

    #[test]
    fn notice_ids_are_read_from_a_trailing_notice_only() {
        let notice = tower_chat_wire::format::approval_text(&[
            tower_chat_wire::format::ApprovalNotice {
                id: "apr_0123abcd".into(),
                tool: "write_file".into(),
                arguments: json!({"path": "a"}),
                reason: None,
            },
            tower_chat_wire::format::ApprovalNotice {
                id: "apr_4567ef".into(),
                tool: "write_file".into(),
                arguments: json!({"path": "b"}),
                reason: None,
            },
        ]);
        let mut messages = vec![Message::user("hi"), Message::assistant(notice)];
        assert_eq!(notice_ids(&messages), ["apr_0123abcd", "apr_4567ef"]);
        let operators = tower_chat_wire::format::operator_approval_text(&[
            tower_chat_wire::format::ApprovalNotice {
                id: "apr_89".into(),
                tool: "write_file".into(),
                arguments: json!({}),
                reason: None,
            },
        ]);
        assert!(operators.contains("An operator decides"), "{operators}");
        assert_eq!(notice_ids(&[Message::assistant(operators)]), ["apr_89"]);
        messages.push(Message::user("never mind"));
        assert!(notice_ids(&messages).is_empty(), "the notice is not last");
        assert!(notice_ids(&[Message::assistant("Approval id: apr_")]).is_empty());
    }

    #[test]
    fn decisions_are_taken_once_all_at_once_and_only_by_their_caller() {
        let decisions = Decisions::new(Duration::from_secs(60));
        let alice = CallerIdentity::new("alice");
        let ids = ["apr_1".to_owned(), "apr_2".to_owned()];
        assert!(decisions.decide("apr_1", decided("alice", "operator:carol", true)));
        assert!(!decisions.decide("apr_1", decided("alice", "operator:dan", false)));
        assert!(
            decisions.take(Some(&alice), &ids).is_none(),
            "apr_2 undecided"
        );
        assert!(decisions.decide("apr_2", decided("alice", "operator:carol", false)));
        assert!(decisions
            .take(Some(&CallerIdentity::new("bob")), &ids)
            .is_none());
        let picked = decisions.take(Some(&alice), &ids).unwrap();
        assert_eq!(picked.approver, "operator:carol");
        assert_eq!(
            picked
                .answers
                .iter()
                .map(|a| (a.id.as_str(), a.approved))
                .collect::<Vec<_>>(),
            [("apr_1", true), ("apr_2", false)]
        );
        assert!(decisions.take(Some(&alice), &ids).is_none(), "single use");
    }

    #[test]
    fn decisions_of_two_operators_are_not_mixed_in_one_resume() {
        let decisions = Decisions::new(Duration::from_secs(60));
        decisions.decide("apr_1", decided("alice", "operator:carol", true));
        decisions.decide("apr_2", decided("alice", "operator:dan", true));
        let ids = ["apr_1".to_owned(), "apr_2".to_owned()];
        assert!(decisions
            .take(Some(&CallerIdentity::new("alice")), &ids)
            .is_none());
    }
}
