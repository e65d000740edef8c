//! The call log: a page of recorded calls, newest first, filtered (caller, model, status, time range) and
//! searched (a call or conversation id, or words of the calls' messages through the store's full-text index),
//! paged by an opaque keyset cursor of (start time, call id) so that inserts never shift a page.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tower_chat::CallerIdentity;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::record::CallRecord;
use crate::record::{from_micros, to_micros, CallSummary};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use tower_chat::Message;

/// How many characters of a call's first message the log keeps.
pub const FIRST_MESSAGE_CHARS: usize = 200;

/// A recorded call's status, as the `status` column names it: the outcome without its error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Delivered its `Finish` event.
    Completed,
    /// Failed before any output.
    Failed,
    /// The caller dropped or cancelled it.
    Cancelled,
    /// The upstream stopped mid-stream.
    Interrupted,
    /// Started and not yet ended.
    InFlight,
    /// A content policy withheld the rest of the answer.
    Blocked,
}

impl CallStatus {
    /// Every status, in the order a filter lists them.
    pub const ALL: [CallStatus; 6] = [
        CallStatus::Completed,
        CallStatus::Failed,
        CallStatus::Blocked,
        CallStatus::Cancelled,
        CallStatus::Interrupted,
        CallStatus::InFlight,
    ];

    /// The stored name (`completed`, `failed`, `blocked`, `cancelled`, `interrupted`, `in_flight`).
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Cancelled => "cancelled",
            CallStatus::Interrupted => "interrupted",
            CallStatus::InFlight => "in_flight",
            CallStatus::Blocked => "blocked",
        }
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`CallStatus`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCallStatus(pub String);

impl fmt::Display for UnknownCallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown call status {:?} (expected one of completed, failed, blocked, cancelled, interrupted, in_flight)",
            self.0
        )
    }
}

impl std::error::Error for UnknownCallStatus {}

impl FromStr for CallStatus {
    type Err = UnknownCallStatus;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        CallStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
            .ok_or_else(|| UnknownCallStatus(name.to_owned()))
    }
}

/// A position in the log: the (start time, call id) of a call, the log's order. Opaque on the wire
/// ([`CallLogCursor::encode`]); exact to the microsecond, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallLogCursor {
    pub(crate) started_at: i64,
    pub(crate) call_id: String,
}

/// A cursor string that does not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidCursor;

impl fmt::Display for InvalidCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid call log cursor")
    }
}

impl std::error::Error for InvalidCursor {}

impl CallLogCursor {
    /// The position of a listed call.
    pub fn of(summary: &CallSummary) -> Self {
        CallLogCursor {
            started_at: to_micros(summary.started_at),
            call_id: summary.call_id.as_str().to_owned(),
        }
    }

    /// The start time of the call at this position.
    pub fn started_at(&self) -> SystemTime {
        from_micros(self.started_at)
    }

    /// URL-safe text: the start in microseconds and the id's bytes in hex.
    pub fn encode(&self) -> String {
        let mut text = format!("{}.", self.started_at);
        for byte in self.call_id.as_bytes() {
            text.push_str(&format!("{byte:02x}"));
        }
        text
    }

    /// Read back [`CallLogCursor::encode`]'s text.
    pub fn decode(text: &str) -> Result<Self, InvalidCursor> {
        let (at, id) = text.split_once('.').ok_or(InvalidCursor)?;
        let started_at = at.parse::<i64>().map_err(|_| InvalidCursor)?;
        if id.is_empty() || id.len() % 2 != 0 || !id.is_ascii() {
            return Err(InvalidCursor);
        }
        let bytes = (0..id.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&id[i..i + 2], 16).map_err(|_| InvalidCursor))
            .collect::<Result<Vec<u8>, _>>()?;
        let call_id = String::from_utf8(bytes).map_err(|_| InvalidCursor)?;
        Ok(CallLogCursor {
            started_at,
            call_id,
        })
    }
}

/// Which part of the filtered log a query reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CallLogPosition {
    /// The newest calls.
    #[default]
    Latest,
    /// The calls older than the cursor (the next page down).
    Before(CallLogCursor),
    /// The calls newer than the cursor (what arrived since a page was shown), up to the limit, the oldest of
    /// them first taken so that none is skipped.
    After(CallLogCursor),
}

/// Which calls [`crate::Store::call_log`] lists: every filter set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallLogQuery {
    /// Only this caller's calls.
    pub caller: Option<CallerIdentity>,
    /// Only calls to this model.
    pub model: Option<String>,
    /// Only calls with this status.
    pub status: Option<CallStatus>,
    /// Only calls started at or after this instant.
    pub since: Option<SystemTime>,
    /// Only calls started before this instant.
    pub until: Option<SystemTime>,
    /// Only calls found by this text, the way incidents are reported: the call's id, the id of the HTTP request
    /// it was made for (the `x-request-id` its client received), its conversation's id (as stored, or bare: the
    /// id a client sent, without the `<caller>/` the gateway qualifies it with), its caller or its model, all
    /// exactly; or messages holding a word that begins with each word of it (full-text, case-insensitive:
    /// `zanzib` finds "Zanzibar"). [`check_search`] says whether a text can find anything at all.
    pub search: Option<String>,
    /// Which page.
    pub position: CallLogPosition,
    /// At most this many (default 50, at most [`CallLogQuery::MAX_LIMIT`]).
    pub limit: Option<u32>,
}

impl CallLogQuery {
    /// The page size when none is given.
    pub const DEFAULT_LIMIT: u32 = 50;
    /// The largest page.
    pub const MAX_LIMIT: u32 = 500;

    pub(crate) fn effective_limit(&self) -> u32 {
        self.limit
            .unwrap_or(Self::DEFAULT_LIMIT)
            .clamp(1, Self::MAX_LIMIT)
    }

    /// The search's words as a query for SQLite FTS5: each word quoted (so no word is read as an operator) and
    /// a prefix (`"zanzib"*`), all required; `None` when the search has no word.
    #[cfg(feature = "sqlite")]
    pub(crate) fn fts5_words(&self) -> Option<String> {
        let words: Vec<String> = search_words(self.search.as_deref()?)
            .map(|word| format!("\"{}\"*", word.replace('"', "\"\"")))
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    }

    /// The search's words for PostgreSQL's `to_tsquery`, each a prefix (`zanzib:*`), all required (`&`);
    /// `None` without a word. The words are letters and digits only, so none reads as an operator.
    #[cfg(feature = "postgres")]
    pub(crate) fn tsquery_words(&self) -> Option<String> {
        let words: Vec<String> = search_words(self.search.as_deref()?)
            .map(|word| format!("{word}:*"))
            .collect();
        (!words.is_empty()).then(|| words.join(" & "))
    }
}

/// The longest search text: an id or a handful of words, not a document.
pub const MAX_SEARCH_CHARS: usize = 256;

/// The most words a search may hold; each is one more prefix lookup in the index.
pub const MAX_SEARCH_WORDS: usize = 16;

/// Why a search text cannot find anything, so that it is refused instead of answering "no match".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MalformedSearch {
    /// Only punctuation or spaces: no word to look for, and no id holds none.
    NoWord,
    /// Longer than [`MAX_SEARCH_CHARS`].
    TooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// More than [`MAX_SEARCH_WORDS`] words.
    TooManyWords {
        /// How many it holds.
        words: usize,
    },
}

impl fmt::Display for MalformedSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MalformedSearch::NoWord => f.write_str(
                "the search holds no word or id to look for (only punctuation or spaces)",
            ),
            MalformedSearch::TooLong { chars } => write!(
                f,
                "the search is {chars} characters long; at most {MAX_SEARCH_CHARS} are read"
            ),
            MalformedSearch::TooManyWords { words } => write!(
                f,
                "the search has {words} words; at most {MAX_SEARCH_WORDS} are looked for together"
            ),
        }
    }
}

impl std::error::Error for MalformedSearch {}

/// Whether `search` ([`CallLogQuery::search`]) can find anything: refused when it holds no word (ids hold
/// words too), is longer than [`MAX_SEARCH_CHARS`] or has more than [`MAX_SEARCH_WORDS`] words.
pub fn check_search(search: &str) -> Result<(), MalformedSearch> {
    let search = search.trim();
    let chars = search.chars().count();
    if chars > MAX_SEARCH_CHARS {
        return Err(MalformedSearch::TooLong { chars });
    }
    match search_words(search).count() {
        0 => Err(MalformedSearch::NoWord),
        words if words > MAX_SEARCH_WORDS => Err(MalformedSearch::TooManyWords { words }),
        _ => Ok(()),
    }
}

/// The words of a search: runs of letters and digits, as both full-text indexes split text. Each finds the
/// words of the messages that begin with it.
pub fn search_words(search: &str) -> impl Iterator<Item = &str> {
    search
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
}

/// One call of the log: its summary and the start of its conversation's first user message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallLogEntry {
    /// The call.
    pub summary: CallSummary,
    /// The first user message of the call's history, at most [`FIRST_MESSAGE_CHARS`] characters, whitespace
    /// collapsed; empty when it has none (or its text was not stored).
    pub first_message: String,
}

/// A page of the call log, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallLogPage {
    /// The calls.
    pub entries: Vec<CallLogEntry>,
    /// Where the next older page starts, when there are older calls ([`CallLogPosition::Before`]); `None` for an
    /// [`CallLogPosition::After`] query.
    pub older: Option<CallLogCursor>,
}

/// A record's first user message, as the log shows it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn first_message(record: &CallRecord) -> String {
    let text = record
        .request
        .messages
        .iter()
        .find_map(|message| match message {
            Message::User { content } => Some(content.joined_text()),
            _ => None,
        })
        .unwrap_or_default();
    let mut preview = String::new();
    for word in text.split_whitespace() {
        if !preview.is_empty() {
            preview.push(' ');
        }
        preview.push_str(word);
        if preview.chars().count() >= FIRST_MESSAGE_CHARS {
            break;
        }
    }
    preview.chars().take(FIRST_MESSAGE_CHARS).collect()
}

/// The most text one call adds to the full-text index: a long answer is searchable by its first 32 KiB, and the
/// index stays a fraction of the stored messages.
pub const MAX_INDEXED_BYTES: usize = 32 * 1024;

/// Longer runs without whitespace (base64, hashes, minified code) are left out of the index: nobody searches for
/// them by word, and each would cost the index its whole length (PostgreSQL drops words past 2 KiB anyway).
pub const MAX_INDEXED_WORD_CHARS: usize = 64;

/// The text a record adds to the full-text index: the messages the call sent after the history's last answer
/// (the new turn: system and user messages, tool results) and the messages it produced, whitespace-separated
/// words of at most [`MAX_INDEXED_WORD_CHARS`] characters, up to [`MAX_INDEXED_BYTES`]. Earlier messages are
/// indexed with the call that added them, so each text is indexed once per conversation, not once per round.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn searchable_text(record: &CallRecord) -> String {
    let request = &record.request.messages;
    let new_input = request
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
        .map_or(0, |last_answer| last_answer + 1);
    let mut text = String::new();
    for message in request[new_input..].iter().chain(&record.response.messages) {
        let part = match message {
            Message::System { content } | Message::User { content } => content.joined_text(),
            Message::Tool(tool) => tool.content.joined_text(),
            Message::Assistant(answer) => std::borrow::Cow::Borrowed(answer.content.as_str()),
        };
        for word in part.split_whitespace() {
            if word.chars().count() > MAX_INDEXED_WORD_CHARS {
                continue;
            }
            if text.len() + 1 + word.len() > MAX_INDEXED_BYTES {
                return text;
            }
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(word);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_encoded_and_refuses_other_text() {
        let cursor = CallLogCursor {
            started_at: 1_700_000_000_123_456,
            call_id: "call-ä/1".into(),
        };
        assert_eq!(CallLogCursor::decode(&cursor.encode()), Ok(cursor));
        for bad in ["", "12", "x.6162", "12.6", "12.zz", "12.", "12.ff"] {
            assert_eq!(CallLogCursor::decode(bad), Err(InvalidCursor), "{bad:?}");
        }
    }

    #[test]
    #[cfg(all(feature = "sqlite", feature = "postgres"))]
    fn search_words_are_quoted_for_fts5_so_operators_stay_words() {
        let query = CallLogQuery {
            search: Some("NEAR(\"oslo\" OR -weather) ".into()),
            ..CallLogQuery::default()
        };
        assert_eq!(
            query.fts5_words().as_deref(),
            Some("\"NEAR\"* \"oslo\"* \"OR\"* \"weather\"*")
        );
        assert_eq!(
            query.tsquery_words().as_deref(),
            Some("NEAR:* & oslo:* & OR:* & weather:*")
        );
        let punctuation = CallLogQuery {
            search: Some(" -- ".into()),
            ..CallLogQuery::default()
        };
        assert_eq!(punctuation.fts5_words(), None);
    }

    #[test]
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn the_indexed_text_leaves_out_overlong_words_and_stops_at_its_budget() {
        let mut record: CallRecord = serde_json::from_value(serde_json::json!({
            "call_id": "c", "conversation_id": "v", "round_index": 0,
            "started_at": {"secs_since_epoch": 0, "nanos_since_epoch": 0},
            "ended_at": {"secs_since_epoch": 0, "nanos_since_epoch": 0},
            "request": {"messages": [], "options": {}},
            "response": {"messages": [], "usage": {"input_tokens": 0, "output_tokens": 0}},
            "outcome": {"status": "completed"}
        }))
        .unwrap();
        let blob = "A".repeat(MAX_INDEXED_WORD_CHARS + 1);
        record.request.messages =
            tower_chat::Shared::new(vec![Message::user(format!("find   the {blob} fjord"))]);
        assert_eq!(searchable_text(&record), "find the fjord");
        record.response.messages = vec![Message::assistant("word ".repeat(MAX_INDEXED_BYTES))];
        let long = searchable_text(&record);
        assert!(
            long.len() <= MAX_INDEXED_BYTES && long.len() > MAX_INDEXED_BYTES - 8,
            "{}",
            long.len()
        );
        assert!(long.starts_with("find the fjord word word"));
    }

    #[test]
    fn a_search_without_a_word_or_past_its_limits_is_malformed() {
        assert_eq!(check_search(" -- "), Err(MalformedSearch::NoWord));
        assert_eq!(check_search("*:&"), Err(MalformedSearch::NoWord));
        assert_eq!(
            check_search(&"a".repeat(MAX_SEARCH_CHARS + 1)),
            Err(MalformedSearch::TooLong {
                chars: MAX_SEARCH_CHARS + 1
            })
        );
        assert_eq!(
            check_search(&"w ".repeat(MAX_SEARCH_WORDS + 1)),
            Err(MalformedSearch::TooManyWords {
                words: MAX_SEARCH_WORDS + 1
            })
        );
        assert_eq!(check_search("zanzib"), Ok(()));
        assert_eq!(check_search("alice/conv-1"), Ok(()));
    }

    #[test]
    fn statuses_parse_from_their_stored_names_only() {
        for status in CallStatus::ALL {
            assert_eq!(status.as_str().parse(), Ok(status));
        }
        assert!("error".parse::<CallStatus>().is_err());
    }
}
