//! What is recorded about one chat call, and how it is read back.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tower_chat::{
    CallerIdentity, ChatError, ChatOptions, ChatResponse, ConversationId, Cost, FinishReason,
    Message, Shared, Usage,
};

/// The id of one recorded chat call (a time-ordered UUID, version 7). The layer puts it into the request's extensions before
/// calling the inner service, so inner layers (telemetry, a gateway's logs) can refer to the record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(String);

impl CallId {
    /// A fresh id: a version 7 UUID (48 bits of milliseconds, then random bits), so ids generated one after
    /// another sort after each other and a store's index on them grows at its end instead of splitting pages
    /// at random places (cheaper to write, fewer pages written per transaction).
    pub fn generate() -> Self {
        CallId(uuid::Uuid::now_v7().to_string())
    }

    /// Wrap an existing id (to look a record up).
    pub fn new(value: impl Into<String>) -> Self {
        CallId(value.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A record id chosen by the caller: put one into a request's extensions and the layer stores the call under it
/// instead of a generated id (a front end that hands ids to its clients — the gateway's Responses API `resp_…`
/// ids — finds the record again with [`crate::Store::call`]). The outermost layer takes it out of the request,
/// so a nested layer recording the rounds of a tool loop keeps ids of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestedCallId(pub CallId);

/// The id of the HTTP request a call was made for (a gateway's `x-request-id`): put one into a request's
/// extensions and the layer records it with the call, so the record of a call can be found from an access-log
/// line or an error body that names the request. Every call of a tool loop's turn carries the turn's request id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(String);

impl RequestId {
    /// Wrap a request's id.
    pub fn new(value: impl Into<String>) -> Self {
        RequestId(value.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The team a call's caller belongs to (a gateway's managed key in a team): put one into a request's extensions
/// and the layer records it with the call, and the spend rollup sums the team's spend
/// ([`crate::SpendRollupQuery::by_team`]). Without one a call has no team.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallerTeam(String);

impl CallerTeam {
    /// Wrap a team's name.
    pub fn new(value: impl Into<String>) -> Self {
        CallerTeam(value.into())
    }

    /// The team's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An error as recorded: the stable name of its [`tower_chat::ErrorKind`] (`ErrorKind::as_str`) and its message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedError {
    /// `ErrorKind::as_str()` of the error, e.g. `"connection"`.
    pub kind: String,
    /// The error's message.
    pub message: String,
}

impl From<&ChatError> for RecordedError {
    fn from(error: &ChatError) -> Self {
        RecordedError {
            kind: error.kind().as_str().to_owned(),
            message: error.message().to_owned(),
        }
    }
}

/// How a call ended.
///
/// The rule is mechanical so that a record says what the layer saw, not what it guessed:
/// - a [`tower_chat::ChatEvent::Finish`] arrived → [`CallOutcome::Completed`];
/// - the caller dropped the stream before its end, or an error of kind `Cancelled` arrived →
///   [`CallOutcome::Cancelled`];
/// - the service call failed, or the stream's first item was an error → [`CallOutcome::Failed`];
/// - the stream broke after output began (an error item after at least one event, or an end without `Finish`)
///   → [`CallOutcome::Interrupted`], with the error when there was one.
///
/// Whatever the outcome, [`CallRecord::response`] holds everything received until then.
///
/// With [`crate::PersistenceLayer::record_in_flight`], a call is also recorded when it starts, as
/// [`CallOutcome::InFlight`]; its final record replaces that one. A record still in flight after the process is
/// gone marks a call the process was serving when it died.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The stream delivered its `Finish` event.
    Completed,
    /// The call failed before any output.
    Failed {
        /// Why.
        error: RecordedError,
    },
    /// The caller dropped the stream (or cancelled the call) before it ended.
    Cancelled,
    /// The upstream stopped mid-stream; the partial output is kept.
    Interrupted {
        /// The error that ended the stream; `None` when it ended silently without `Finish`.
        error: Option<RecordedError>,
    },
    /// The call had started and not yet ended when this record was written (only with
    /// [`crate::PersistenceLayer::record_in_flight`]); its response is empty and its `ended_at` equals
    /// its `started_at`.
    InFlight,
    /// A content policy outside the layer withheld the rest of the answer ([`tower_chat::GuardedCall`]): the
    /// response holds what the client was sent — the text before the match and the policy's notice, with a
    /// `content_filter` finish — and the record's verdicts name the check that blocked.
    Blocked,
}

impl CallOutcome {
    /// The stable name stored in the `status` column: `completed`, `failed`, `cancelled`, `interrupted`,
    /// `in_flight`, `blocked`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallOutcome::Completed => "completed",
            CallOutcome::Failed { .. } => "failed",
            CallOutcome::Cancelled => "cancelled",
            CallOutcome::Interrupted { .. } => "interrupted",
            CallOutcome::InFlight => "in_flight",
            CallOutcome::Blocked => "blocked",
        }
    }

    /// The recorded error, if the outcome has one.
    pub fn error(&self) -> Option<&RecordedError> {
        match self {
            CallOutcome::Failed { error } => Some(error),
            CallOutcome::Interrupted { error } => error.as_ref(),
            CallOutcome::Completed
            | CallOutcome::Cancelled
            | CallOutcome::InFlight
            | CallOutcome::Blocked => None,
        }
    }

    /// Rebuild an outcome from its stored columns.
    pub(crate) fn from_columns(
        status: &str,
        error_kind: Option<String>,
        error_message: Option<String>,
    ) -> Result<Self, String> {
        let error = error_kind.map(|kind| RecordedError {
            kind,
            message: error_message.unwrap_or_default(),
        });
        Ok(match status {
            "completed" => CallOutcome::Completed,
            "cancelled" => CallOutcome::Cancelled,
            "interrupted" => CallOutcome::Interrupted { error },
            "in_flight" => CallOutcome::InFlight,
            "blocked" => CallOutcome::Blocked,
            "failed" => CallOutcome::Failed {
                error: error.ok_or("a failed record has no error kind")?,
            },
            other => return Err(format!("unknown call status {other:?}")),
        })
    }
}

/// The request side of a record: what was sent to the model. Secrets are never part of it: credentials live in
/// the leaf service, which the layer never sees, request extensions are not stored (except the conversation id
/// and caller identity, recorded in their own fields), and provider-specific `extra` options and carried fields
/// whose names look like credentials are replaced by `"[redacted]"` (see [`redact_options`]).
///
/// A call refused before it was sent to any provider ([`ChatError::is_refused_before_sending`]: a rate limit, a
/// budget) is recorded without its request: no messages, options naming only the model, and the request's size
/// in [`RecordedRequest::omitted`]. A refusal costs the database a small row, whatever the request held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The messages sent, oldest first (shared with the request that carried them: recording a call does not
    /// copy its history). Empty when the request was omitted.
    pub messages: Shared<Vec<Message>>,
    /// Model, tools offered, sampling options (redacted; shared with the request when nothing needed
    /// redacting). Only the model when the request was omitted.
    pub options: Shared<ChatOptions>,
    /// Set when the request was not stored (the call was refused before it was sent): its size instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<RequestSize>,
}

/// The size of a request that was not stored ([`RecordedRequest::omitted`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSize {
    /// How many messages it held.
    pub messages: u64,
    /// The UTF-8 bytes of their contents: text, reasoning, tool calls' names and arguments, tool results.
    pub bytes: u64,
}

impl RequestSize {
    /// The size of `messages`.
    pub fn of(messages: &[Message]) -> Self {
        let bytes = messages
            .iter()
            .map(|message| match message {
                Message::System { content } | Message::User { content } => content.size(),
                Message::Assistant(a) => {
                    a.content.len()
                        + a.reasoning.iter().map(|r| r.text.len()).sum::<usize>()
                        + a.tool_calls
                            .iter()
                            .map(|c| c.name.len() + c.arguments.to_wire_string().len())
                            .sum::<usize>()
                }
                Message::Tool(t) => t.content.size() + t.name.len(),
            } as u64)
            .sum();
        RequestSize {
            messages: messages.len() as u64,
            bytes,
        }
    }
}

/// Everything recorded about one chat call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// This call's id.
    pub call_id: CallId,
    /// The conversation it belongs to (from the request context; generated when absent).
    pub conversation_id: ConversationId,
    /// Who called, from the request context.
    pub caller: Option<CallerIdentity>,
    /// The id of the HTTP request the call was made for, from the request's extensions ([`RequestId`]).
    /// Stored in the `response` column's JSON (key `request_id`), so no column was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestId>,
    /// The caller's team, from the request's extensions ([`CallerTeam`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<CallerTeam>,
    /// The model round within the current turn: how many assistant messages follow the last user message of the
    /// request (0 for the first model call of a turn; a tool loop's later rounds count up).
    pub round_index: u32,
    /// When the layer was called.
    pub started_at: SystemTime,
    /// When the first content event (text, reasoning or a tool call) arrived.
    pub first_token_at: Option<SystemTime>,
    /// When the call ended (finish, error, end of stream or drop).
    pub ended_at: SystemTime,
    /// The provider, as the inner service reports it ([`tower_chat::ModelInfo`]); `None` for a service wrapped
    /// with [`crate::Persistence::new`].
    pub provider: Option<String>,
    /// The model: the one that answered when the provider said so, else the one requested.
    pub model: Option<String>,
    /// What was sent.
    pub request: RecordedRequest,
    /// What came back: assistant text, reasoning and tool calls, tool results a tool loop ran, usage, finish
    /// reason. Partial when the call did not complete.
    pub response: ChatResponse,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// What the call cost, priced with the layer's [`tower_chat::PriceTable`]
    /// ([`crate::PersistenceLayer::prices`]); `None` when the layer has no price for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// The response's usage (and so the cost) is an estimate, not the provider's report: the report never came
    /// (the caller dropped the stream, the provider sends none) and a layer inside this one charged the call
    /// an estimate ([`tower_chat::EstimatedUsage`]: the limits layer's estimated prompt and the output seen),
    /// which the record carries so that recorded spend and the limits' counters agree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_estimated: bool,
    /// What a content policy inside the layer decided about the call ([`tower_chat::GuardrailAudit`]): each
    /// check's verdict with the byte offsets of its span, never the matched text. When a check redacted the
    /// request, [`CallRecord::request`] holds the messages as they were sent, not as the caller gave them.
    /// Stored in the `response` column's JSON (key `guardrail`), so no column was added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrail: Vec<tower_chat::GuardrailVerdict>,
}

impl CallRecord {
    /// The finish reason, when the stream delivered one.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.response.finish_reason.as_ref()
    }

    /// The tokens used.
    pub fn usage(&self) -> Usage {
        self.response.usage
    }

    /// Whether a response cache answered the call: every usage report was a replay
    /// ([`Usage::from_response_cache`]), so no provider was called, the latency is the replay's, and the cost is
    /// zero (the tokens are those the original call spent, which the replay saved).
    pub fn from_response_cache(&self) -> bool {
        self.response.usage.from_response_cache
    }

    /// The assistant text of the response (possibly partial).
    pub fn text(&self) -> &str {
        self.response.text()
    }

    /// The conversation as this call left it: the request's messages followed by the response's.
    pub fn history(&self) -> Vec<Message> {
        let mut messages =
            Vec::with_capacity(self.request.messages.len() + self.response.messages.len());
        messages.extend(self.request.messages.iter().cloned());
        messages.extend(self.response.messages.iter().cloned());
        messages
    }
}

/// One conversation in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationSummary {
    /// The conversation.
    pub conversation_id: ConversationId,
    /// How many calls it has recorded.
    pub calls: u64,
    /// When its first call started.
    pub first_started_at: SystemTime,
    /// When its latest call started.
    pub last_started_at: SystemTime,
    /// Who called (conversations are bound to their caller; if calls of several callers share one id, the
    /// greatest name).
    #[serde(default)]
    pub caller: Option<CallerIdentity>,
    /// Input tokens of its calls.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens of its calls.
    #[serde(default)]
    pub output_tokens: u64,
    /// What its priced calls cost.
    #[serde(default)]
    pub cost: Cost,
    /// Its calls recorded without a cost (no price for their model): `cost` leaves them out.
    #[serde(default)]
    pub unpriced_calls: u64,
}

/// Which conversations to list ([`crate::Store::list_conversations`]); most recently active first.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ConversationQuery {
    /// Only conversations with a call by this caller.
    pub caller: Option<CallerIdentity>,
    /// At most this many (default 100).
    pub limit: Option<u32>,
    /// Skip this many (for paging).
    pub offset: u32,
}

impl ConversationQuery {
    pub(crate) const DEFAULT_LIMIT: u32 = 100;

    /// All conversations, most recent first, at most 100.
    pub fn new() -> Self {
        ConversationQuery::default()
    }

    /// Only this caller's conversations.
    pub fn caller(mut self, caller: impl Into<CallerIdentity>) -> Self {
        self.caller = Some(caller.into());
        self
    }

    /// At most `limit` conversations.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Skip the first `offset` conversations.
    pub fn offset(mut self, offset: u32) -> Self {
        self.offset = offset;
        self
    }

    pub(crate) fn effective_limit(&self) -> u32 {
        self.limit.unwrap_or(Self::DEFAULT_LIMIT)
    }
}

/// Option names that look like credentials (compared case-insensitively, `-` read as `_`).
const SECRET_MARKERS: &[&str] = &[
    "api_key",
    "apikey",
    "secret",
    "password",
    "passwd",
    "authorization",
    "auth_token",
    "access_token",
    "refresh_token",
    "bearer",
    "credential",
    "private_key",
    "session_token",
    "cookie",
];

/// What a redacted value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// Whether an option name looks like it carries a credential.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase().replace('-', "_");
    name == "key" || name == "token" || SECRET_MARKERS.iter().any(|m| name.contains(m))
}

/// A copy of `options` fit for storage: provider-specific `extra` fields whose name looks like a credential
/// (at any depth) are replaced by [`REDACTED`]. `max_tokens` and the like are kept: only names that match a
/// credential marker (`api_key`, `secret`, `password`, `authorization`, `access_token`, …) are redacted.
pub fn redact_options(options: &ChatOptions) -> ChatOptions {
    let mut options = options.clone();
    redact_map(&mut options.extra);
    // Fields carried for the upstream as the client sent them are the client's to name: checked the same way.
    if let Some(carried) = &mut options.carried {
        redact_map(&mut carried.fields);
    }
    options
}

/// The options to store for a request: its own (shared, not copied) when no `extra` field looks like a
/// credential, else a redacted copy.
pub(crate) fn stored_options(options: &Shared<ChatOptions>) -> Shared<ChatOptions> {
    if map_has_secret(&options.extra)
        || options
            .carried
            .as_ref()
            .is_some_and(|carried| map_has_secret(&carried.fields))
    {
        Shared::new(redact_options(options))
    } else {
        options.clone()
    }
}

fn map_has_secret(map: &Map<String, Value>) -> bool {
    map.iter()
        .any(|(name, value)| is_secret_name(name) || value_has_secret(value))
}

fn value_has_secret(value: &Value) -> bool {
    match value {
        Value::Object(map) => map_has_secret(map),
        Value::Array(items) => items.iter().any(value_has_secret),
        _ => false,
    }
}

fn redact_map(map: &mut Map<String, Value>) {
    for (name, value) in map.iter_mut() {
        if is_secret_name(name) {
            *value = Value::String(REDACTED.to_owned());
        } else {
            redact_value(value);
        }
    }
}

fn redact_value(value: &mut Value) {
    match value {
        Value::Object(map) => redact_map(map),
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        _ => {}
    }
}

/// Microseconds since the Unix epoch, the stored form of every timestamp (the same in SQLite and PostgreSQL).
pub(crate) fn to_micros(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn from_micros(micros: i64) -> SystemTime {
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros as u64)
    } else {
        UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs())
    }
}

/// The round index of a request: assistant messages after the last user message.
pub(crate) fn round_index(messages: &[Message]) -> u32 {
    let after_user = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .map_or(messages, |i| &messages[i + 1..]);
    let rounds = after_user
        .iter()
        .filter(|m| matches!(m, Message::Assistant(_)))
        .count();
    u32::try_from(rounds).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tower_chat::AssistantMessage;

    #[test]
    fn credentials_in_extra_options_are_redacted_at_any_depth() {
        let options = ChatOptions {
            extra: json!({
                "api_key": "sk-live",
                "max_tokens": 5,
                "headers": {"Authorization": "Bearer x", "X-Trace": "t"},
                "list": [{"client-secret": "s"}],
                "seed": 1
            })
            .as_object()
            .unwrap()
            .clone(),
            ..ChatOptions::default()
        };
        let redacted = redact_options(&options);
        let text = serde_json::to_string(&redacted).unwrap();
        for secret in ["sk-live", "Bearer x", "\"s\""] {
            assert!(!text.contains(secret), "{secret} leaked in {text}");
        }
        assert_eq!(redacted.extra["max_tokens"], json!(5));
        assert_eq!(redacted.extra["headers"]["X-Trace"], json!("t"));
        assert_eq!(redacted.extra["headers"]["Authorization"], json!(REDACTED));
        let shared = Shared::new(options);
        assert_eq!(*stored_options(&shared), redacted);
        // Nothing to redact: the request's own options, not a copy.
        let clean = Shared::new(ChatOptions::default());
        assert!(Shared::ptr_eq(&stored_options(&clean), &clean));
    }

    #[test]
    fn round_index_counts_assistant_messages_of_the_current_turn() {
        let assistant = Message::Assistant(AssistantMessage::default());
        assert_eq!(round_index(&[Message::user("a")]), 0);
        assert_eq!(
            round_index(&[
                Message::user("a"),
                assistant.clone(),
                Message::tool_result("c", "t", "r"),
                assistant.clone(),
                Message::tool_result("c2", "t", "r"),
            ]),
            2
        );
        assert_eq!(
            round_index(&[Message::user("a"), assistant, Message::user("b")]),
            0
        );
    }

    #[test]
    fn timestamps_round_trip_through_micros() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(from_micros(to_micros(t)), t);
        let before = UNIX_EPOCH - Duration::from_micros(5);
        assert_eq!(from_micros(to_micros(before)), before);
    }

    #[test]
    fn outcomes_rebuild_from_their_columns() {
        let err = RecordedError {
            kind: "connection".into(),
            message: "reset".into(),
        };
        for outcome in [
            CallOutcome::Completed,
            CallOutcome::Cancelled,
            CallOutcome::Failed { error: err.clone() },
            CallOutcome::InFlight,
            CallOutcome::Interrupted { error: None },
            CallOutcome::Interrupted {
                error: Some(err.clone()),
            },
        ] {
            let e = outcome.error().cloned();
            let back = CallOutcome::from_columns(
                outcome.as_str(),
                e.as_ref().map(|e| e.kind.clone()),
                e.map(|e| e.message),
            )
            .unwrap();
            assert_eq!(back, outcome);
        }
        assert!(CallOutcome::from_columns("failed", None, None).is_err());
        assert!(CallOutcome::from_columns("exploded", None, None).is_err());
    }
}

/// Which calls [`crate::Store::spend`] sums: every filter set must match (none set: every call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpendQuery {
    /// Only this caller's calls.
    pub caller: Option<CallerIdentity>,
    /// Only this conversation's calls.
    pub conversation_id: Option<ConversationId>,
    /// Only calls started at or after this instant.
    pub since: Option<SystemTime>,
    /// Only calls started before this instant.
    pub until: Option<SystemTime>,
}

impl SpendQuery {
    /// Every call of `caller`.
    pub fn caller(caller: impl Into<CallerIdentity>) -> Self {
        SpendQuery {
            caller: Some(caller.into()),
            ..SpendQuery::default()
        }
    }

    /// Every call of a conversation.
    pub fn conversation(conversation_id: impl Into<ConversationId>) -> Self {
        SpendQuery {
            conversation_id: Some(conversation_id.into()),
            ..SpendQuery::default()
        }
    }

    /// Only calls started in `[since, until)`.
    pub fn between(mut self, since: SystemTime, until: SystemTime) -> Self {
        self.since = Some(since);
        self.until = Some(until);
        self
    }
}

/// What a set of calls used and cost (calls still in flight are not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spend {
    /// Calls summed.
    pub calls: u64,
    /// Their input tokens.
    pub input_tokens: u64,
    /// Their output tokens.
    pub output_tokens: u64,
    /// Their cost (of the priced ones).
    pub cost: Cost,
    /// Calls recorded without a cost (no price for their model): `cost` leaves them out.
    pub unpriced_calls: u64,
    /// Calls whose usage is an estimate ([`CallRecord::usage_estimated`]): they are in the sums.
    #[serde(default)]
    pub estimated_calls: u64,
}

/// Which calls [`crate::Store::call_summaries`] returns: every filter set must match; the latest `limit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallQuery {
    /// Only this caller's calls.
    pub caller: Option<CallerIdentity>,
    /// Only calls started at or after this instant.
    pub since: Option<SystemTime>,
    /// Only calls started before this instant.
    pub until: Option<SystemTime>,
    /// At most this many, the latest (default 10,000).
    pub limit: Option<u32>,
}

impl CallQuery {
    pub(crate) const DEFAULT_LIMIT: u32 = 10_000;

    /// Calls started in `[since, until)`.
    pub fn between(since: SystemTime, until: SystemTime) -> Self {
        CallQuery {
            since: Some(since),
            until: Some(until),
            ..CallQuery::default()
        }
    }

    /// At most `limit` calls (the latest).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    pub(crate) fn effective_limit(&self) -> u32 {
        self.limit.unwrap_or(Self::DEFAULT_LIMIT)
    }
}

/// One call without its messages: what usage statistics and dashboards need (timings, model, caller, tokens,
/// cost, outcome), read from the record's scalar columns only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSummary {
    /// The call's id.
    pub call_id: CallId,
    /// Its conversation.
    pub conversation_id: ConversationId,
    /// Who called.
    pub caller: Option<CallerIdentity>,
    /// When it started.
    pub started_at: SystemTime,
    /// When its first content event arrived.
    pub first_token_at: Option<SystemTime>,
    /// When it ended.
    pub ended_at: SystemTime,
    /// The model.
    pub model: Option<String>,
    /// How it ended.
    pub outcome: CallOutcome,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Its cost, when priced.
    pub cost: Option<Cost>,
    /// Whether a response cache answered it ([`CallRecord::from_response_cache`]): its tokens are those the
    /// replay saved, its cost zero.
    pub from_response_cache: bool,
    /// Whether a layer refused the call before it reached any provider (a limit, a content policy): recorded
    /// failed, without its request ([`RecordedRequest::omitted`]).
    pub refused_before_sending: bool,
    /// Whether it ended asking for tool calls ([`FinishReason::ToolCalls`]): a tool loop runs them, or an
    /// approval layer outside holds the turn there until they are decided.
    pub asked_for_tools: bool,
}

impl CallSummary {
    /// From its start to its end.
    pub fn latency(&self) -> Duration {
        self.ended_at
            .duration_since(self.started_at)
            .unwrap_or_default()
    }

    /// From its start to its first content event.
    pub fn time_to_first_token(&self) -> Option<Duration> {
        self.first_token_at
            .map(|t| t.duration_since(self.started_at).unwrap_or_default())
    }
}
