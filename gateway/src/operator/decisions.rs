//! The operators' decisions on paused calls: what the gateway needs to take them ([`OperatorState`]), the
//! operator's key check, the approver rule that lets only operators approve, and the decisions kept until the
//! client resumes its turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use tower_chat::{CallerIdentity, Message};
use tower_chat_approval::{PendingApproval, PendingDecision};

use crate::error::ApiError;
use tower_chat_wire::format::ApprovalAnswer;

/// The prefix of an operator's approver identity (`operator:NAME`). Client identities cannot carry it: key
/// names have no `:`.
pub const OPERATOR_PREFIX: &str = "operator:";

/// The longest a client's `GET /v1/approvals/{id}?wait=` may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// How often a waiting `GET /v1/approvals/{id}?wait=` looks at the store for a decision another process made.
pub(super) const STORE_RECHECK: Duration = Duration::from_millis(500);

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
pub(super) struct Decided {
    pub(super) caller: Option<CallerIdentity>,
    pub(super) approved: bool,
    pub(super) reason: Option<String>,
    pub(super) approver: String,
    pub(super) decided_at: SystemTime,
    pub(super) expires: Instant,
}

/// The operators' decisions, by approval id, and a signal for the clients long-polling them.
#[derive(Debug)]
pub(crate) struct Decisions {
    pub(super) ttl: Duration,
    decided: Mutex<HashMap<String, Decided>>,
    pub(super) changed: tokio::sync::watch::Sender<u64>,
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
    pub(super) fn decide(&self, id: &str, decided: Decided) -> bool {
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

    pub(super) fn get(&self, id: &str, caller: Option<&CallerIdentity>) -> Option<Decided> {
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
    pub(super) fn notify(&self) {
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
pub(crate) struct Operator(pub(super) String);

impl Operator {
    /// The operator whose key is named `name` in the operator keys file.
    pub(crate) fn named(name: &str) -> Self {
        Operator(format!("{OPERATOR_PREFIX}{name}"))
    }

    /// The name of the operator's key (what the audit log of managed keys records).
    pub(crate) fn name(&self) -> &str {
        self.0.strip_prefix(OPERATOR_PREFIX).unwrap_or(&self.0)
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
pub(super) async fn pending_caller(
    state: &OperatorState,
    id: &str,
) -> Option<Option<CallerIdentity>> {
    if state.approval_store.is_some() {
        return stored_pending(state, id).await.map(|p| p.caller);
    }
    state.pending.paused_caller(id)
}

/// The unexpired pending approval `id` of the approval layer's store (shared by every process on the database).
pub(super) async fn stored_pending(state: &OperatorState, id: &str) -> Option<PendingApproval> {
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
pub(super) async fn decision_of(
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

#[cfg(test)]
mod tests {
    use serde_json::json;

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
