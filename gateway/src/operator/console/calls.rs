//! The call log (`/console/calls`): every recorded call, newest first, with its time, caller, model, outcome
//! (errors marked in words, not by colour alone), first message, tokens, cost, latency and time to first token;
//! filtered by caller, model, status and time range, searched the way incidents are reported (a call, request or
//! conversation id, a caller, a model, or the beginnings of words of the messages through the store's full-text
//! index: each found call shows a snippet of its matching message and links to it in the timeline, marked),
//! paged by an opaque cursor. `console.js` polls `/console/api/calls` for calls newer than the newest row
//! and puts them on top; without the script the page is complete and a reload shows them.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::json;
use tower_chat::CallerIdentity;
use tower_chat_persistence::{
    CallLogCursor, CallLogEntry, CallLogPage, CallLogPosition, CallLogQuery, CallStatus,
};

use super::calls_approvals::{awaiting_approval, paused_approvals};
use super::extract::PageQuery;
use super::format::{dollars, millis, url_encode, utc};
use super::highlight::Hit;
use super::layout::{error_page, html_response, layout, Nav};
use super::outcome::Approval;
use super::session::Session;
use super::state::ConsoleState;

/// Calls per page.
const PAGE_SIZE: u32 = 50;

/// The outcome filter's value for the calls whose turn waits for an operator's decision.
const AWAITING_APPROVAL: &str = "awaiting_approval";

/// The log's query string, as the filter form and the links send it. Every field is optional and an empty one
/// (an untouched form field) means no filter; a value that does not parse is refused, never ignored.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CallLogParams {
    /// A call, request or conversation id, a caller, a model, or the beginnings of words of the messages.
    #[serde(default)]
    q: String,
    #[serde(default)]
    caller: String,
    #[serde(default)]
    model: String,
    /// A stored status name (`completed`, `failed`, …).
    #[serde(default)]
    status: String,
    /// `YYYY-MM-DDTHH:MM[:SS]`, UTC (what a `datetime-local` field sends).
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    /// The page below this cursor.
    #[serde(default)]
    before: String,
    /// Only the calls newer than this cursor (the script's poll).
    #[serde(default)]
    after: String,
}

impl CallLogParams {
    /// The store query these parameters ask for, or what is wrong with them.
    fn query(&self) -> Result<CallLogQuery, String> {
        let text = |value: &str| Some(value.trim().to_owned()).filter(|v| !v.is_empty());
        if self.awaiting() {
            if text(&self.q).is_some() {
                return Err(
                    "the search and the awaiting-approval filter do not combine; \
                            give one of them."
                        .into(),
                );
            }
            return Ok(CallLogQuery {
                caller: text(&self.caller).map(CallerIdentity::new),
                model: text(&self.model),
                ..CallLogQuery::default()
            });
        }
        if let Some(search) = text(&self.q) {
            tower_chat_persistence::check_search(&search)
                .map_err(|e| format!("the search {search:?} cannot find anything: {e}."))?;
        }
        let status = text(&self.status)
            .map(|s| CallStatus::from_str(&s))
            .transpose()
            .map_err(|e| e.to_string())?;
        let since = text(&self.since)
            .map(|t| {
                parse_utc(&t).ok_or(format!(
                    "`since` is not a time: {t:?} (use YYYY-MM-DDTHH:MM, UTC)"
                ))
            })
            .transpose()?;
        let until = text(&self.until)
            .map(|t| {
                parse_utc(&t).ok_or(format!(
                    "`until` is not a time: {t:?} (use YYYY-MM-DDTHH:MM, UTC)"
                ))
            })
            .transpose()?;
        if let (Some(since), Some(until)) = (since, until) {
            if since >= until {
                return Err("`since` must be before `until`.".into());
            }
        }
        let cursor = |name: &str, value: &str| {
            text(value)
                .map(|c| CallLogCursor::decode(&c).map_err(|e| format!("`{name}`: {e}")))
                .transpose()
        };
        let position = match (
            cursor("before", &self.before)?,
            cursor("after", &self.after)?,
        ) {
            (Some(_), Some(_)) => return Err("Give `before` or `after`, not both.".into()),
            (Some(before), None) => CallLogPosition::Before(before),
            (None, Some(after)) => CallLogPosition::After(after),
            (None, None) => CallLogPosition::Latest,
        };
        Ok(CallLogQuery {
            caller: text(&self.caller).map(CallerIdentity::new),
            model: text(&self.model),
            status,
            since,
            until,
            search: text(&self.q),
            position,
            limit: Some(PAGE_SIZE),
        })
    }

    /// Whether only the calls whose turn waits for an approval are asked for (`status=awaiting_approval`): no
    /// stored status, but what the approval store says of each paused turn ([`awaiting_approval`]).
    fn awaiting(&self) -> bool {
        self.status.trim() == AWAITING_APPROVAL
    }

    /// The filters as a query string (no cursor), for the pager's and the poll's links.
    fn filters(&self) -> String {
        [
            ("q", &self.q),
            ("caller", &self.caller),
            ("model", &self.model),
            ("status", &self.status),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .iter()
        .filter(|(_, value)| !value.trim().is_empty())
        .map(|(name, value)| format!("{name}={}", url_encode(value.trim())))
        .collect::<Vec<_>>()
        .join("&")
    }
}

/// `YYYY-MM-DDTHH:MM` or `YYYY-MM-DDTHH:MM:SS` (a space instead of the `T` too), read as UTC.
fn parse_utc(text: &str) -> Option<SystemTime> {
    let (date, time) = text.split_once(['T', ' '])?;
    let mut date = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let mut time = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hour, minute) = (time.next()??, time.next()??);
    let second = time.next().unwrap_or(Some(0))?;
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second)
        && (1970..=9999).contains(&year);
    if !valid {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's days_from_civil, the inverse of [`utc`]'s).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Where each found call of a word search matched, by call id ([`super::highlight::hit`]): the calls are read
/// back, as the index keeps no text to cut a snippet from.
async fn search_hits(
    state: &ConsoleState,
    params: &CallLogParams,
    entries: &[CallLogEntry],
) -> HashMap<String, (Hit, Vec<String>)> {
    let mut hits = HashMap::new();
    let prefixes = super::highlight::prefixes(&params.q);
    let Some(records) = state.records.as_ref().filter(|_| !prefixes.is_empty()) else {
        return hits;
    };
    for entry in entries {
        let Ok(Some(record)) = records.call(&entry.summary.call_id).await else {
            continue;
        };
        if let Some(hit) = super::highlight::hit(&record, &prefixes) {
            hits.insert(
                entry.summary.call_id.as_str().to_owned(),
                (hit, prefixes.clone()),
            );
        }
    }
    hits
}

/// One call as the page and the poll show it: the cells' text, computed once here so that the rows the script
/// adds read exactly like the server's.
struct Row {
    call_id: String,
    timeline: String,
    time: String,
    caller: String,
    model: String,
    status: &'static str,
    /// The outcome in words: the status, and for an error its kind and message.
    outcome: String,
    is_error: bool,
    first_message: String,
    tokens: String,
    cost: String,
    latency: String,
    ttft: String,
    /// For a word search: the matching message, marked.
    snippet: Option<Markup>,
}

impl Row {
    fn of(
        entry: &CallLogEntry,
        approvals: &HashMap<String, Approval>,
        hits: &HashMap<String, (Hit, Vec<String>)>,
    ) -> Row {
        let call = &entry.summary;
        let hit = hits.get(call.call_id.as_str());
        let timeline = match hit {
            // The matching message, marked, scrolled to.
            Some((hit, prefixes)) => {
                let anchor = url_encode(&format!("m-{}-{}", call.call_id.as_str(), hit.index));
                format!(
                    "/console/conversation?id={}&q={}&hit={anchor}#{anchor}",
                    url_encode(call.conversation_id.as_str()),
                    url_encode(&prefixes.join(" ")),
                )
            }
            None => format!(
                "/console/conversation?id={}#call-{}",
                url_encode(call.conversation_id.as_str()),
                url_encode(call.call_id.as_str())
            ),
        };
        let shown = match approvals.get(call.call_id.as_str()) {
            Some(approval) => super::outcome::paused(approval),
            None => super::outcome::shown(&call.outcome, call.refused_before_sending),
        };
        let in_flight = shown.status == CallStatus::InFlight.as_str();
        Row {
            call_id: call.call_id.as_str().to_owned(),
            timeline,
            time: utc(call.started_at),
            caller: call
                .caller
                .as_ref()
                .map_or("(no key)", |c| c.as_str())
                .to_owned(),
            model: call.model.clone().unwrap_or_else(|| "—".into()),
            status: shown.status,
            outcome: shown.text,
            is_error: shown.is_error,
            first_message: if entry.first_message.is_empty() {
                "—".into()
            } else {
                entry.first_message.clone()
            },
            tokens: format!("{} in / {} out", call.input_tokens, call.output_tokens),
            cost: if call.from_response_cache {
                "$0 (cached)".into()
            } else {
                call.cost.map_or_else(|| "—".into(), dollars)
            },
            latency: if in_flight {
                "—".into()
            } else {
                millis(call.latency())
            },
            ttft: call
                .time_to_first_token()
                .map_or_else(|| "—".into(), millis),
            snippet: hit.map(|(hit, _)| hit.snippet.clone()),
        }
    }

    fn markup(&self) -> Markup {
        html! {
            tr data-call-id=(self.call_id) data-status=(self.status) class=[self.is_error.then_some("failed")] {
                td class="time" data-label="Time" { a href=(self.timeline) { (self.time) } }
                td class="caller" data-label="Caller" { (self.caller) }
                td class="model" data-label="Model" { (self.model) }
                td class="outcome" data-label="Outcome" {
                    @if self.is_error { strong class="outcome-error" { (self.outcome) } } @else { (self.outcome) }
                }
                td class="first-message" data-label="First message" {
                    (self.first_message)
                    @if let Some(snippet) = &self.snippet {
                        p class="snippet" { a href=(self.timeline) { (snippet) } }
                    }
                }
                td class="number" data-label="Tokens" { (self.tokens) }
                td class="number" data-label="Cost" { (self.cost) }
                td class="number" data-label="Latency" { (self.latency) }
                td class="number" data-label="Time to first token" { (self.ttft) }
            }
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "call_id": self.call_id,
            "timeline": self.timeline,
            "time": self.time,
            "caller": self.caller,
            "model": self.model,
            "status": self.status,
            "outcome": self.outcome,
            "is_error": self.is_error,
            "first_message": self.first_message,
            "tokens": self.tokens,
            "cost": self.cost,
            "latency": self.latency,
            "ttft": self.ttft,
        })
    }
}

/// The filter form: GET, so a filtered log is a link; empty fields filter nothing.
fn filter_form(params: &CallLogParams) -> Markup {
    let status = params.status.trim();
    html! {
        form method="get" action="/console/calls" class="filters" id="call-filters" role="search" {
            label { span { "Search" } input type="search" name="q" value=(params.q) placeholder="id, request id, caller, model or words"; }
            label { span { "Caller" } input type="text" name="caller" value=(params.caller); }
            label { span { "Model" } input type="text" name="model" value=(params.model); }
            label {
                span { "Outcome" }
                select name="status" {
                    option value="" selected[status.is_empty()] { "any" }
                    @for s in CallStatus::ALL {
                        option value=(s.as_str()) selected[status == s.as_str()] { (s.as_str().replace('_', " ")) }
                    }
                    option value=(AWAITING_APPROVAL) selected[status == AWAITING_APPROVAL] { "awaiting approval" }
                }
            }
            label { span { "From (UTC)" } input type="datetime-local" name="since" value=(params.since) step="1"; }
            label { span { "Until (UTC)" } input type="datetime-local" name="until" value=(params.until) step="1"; }
            div class="filter-actions" {
                button type="submit" { "Apply" }
                a href="/console/calls" class="button" { "Clear" }
            }
        }
    }
}

/// `GET /console/calls?q=&caller=&model=&status=&since=&until=&before=`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(params): PageQuery<CallLogParams>,
) -> Response {
    let Some(records) = &state.records else {
        return error_page(StatusCode::NOT_FOUND, "This gateway keeps no call records.");
    };
    if !params.after.trim().is_empty() {
        return error_page(
            StatusCode::BAD_REQUEST,
            "`after` is for /console/api/calls; the page pages down with `before`.",
        );
    }
    let query = match params.query() {
        Ok(query) => query,
        Err(problem) => {
            return error_page(
                StatusCode::BAD_REQUEST,
                &format!("The call log cannot show this: {problem}"),
            )
        }
    };
    let awaiting = params.awaiting();
    let page = if awaiting {
        // What waits is a handful of turns: shown whole, without pages.
        match awaiting_approval(&state, records.as_ref(), &query, PAGE_SIZE).await {
            Ok(entries) => CallLogPage {
                entries,
                older: None,
            },
            Err(problem) => return error_page(StatusCode::INTERNAL_SERVER_ERROR, &problem),
        }
    } else {
        match records.call_log(&query).await {
            Ok(page) => page,
            Err(e) => {
                return error_page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("Reading the call log failed: {e}"),
                )
            }
        }
    };
    let filters = params.filters();
    let latest = matches!(query.position, CallLogPosition::Latest);
    let with = |extra: String| {
        let joined = [filters.as_str(), extra.as_str()]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("&");
        if joined.is_empty() {
            "/console/calls".to_owned()
        } else {
            format!("/console/calls?{joined}")
        }
    };
    // Only the newest page is kept current: new calls belong on top of it, not of an older page. A call that
    // starts waiting is not a newer call: the awaiting-approval list is current when loaded.
    let poll = (latest && !awaiting).then(|| {
        if filters.is_empty() {
            "/console/api/calls".to_owned()
        } else {
            format!("/console/api/calls?{filters}")
        }
    });
    let newest = page
        .entries
        .first()
        .map(|e| CallLogCursor::of(&e.summary).encode());
    let filtered = !filters.is_empty();
    let approvals = paused_approvals(&state, &page.entries).await;
    let hits = search_hits(&state, &params, &page.entries).await;
    let main = html! {
        (filter_form(&params))
        p id="no-calls" class=(if page.entries.is_empty() { "empty" } else { "empty hidden" }) {
            @if filtered { "No recorded call matches these filters." } @else { "No call recorded yet." }
        }
        table id="calls" class=(if page.entries.is_empty() { "calls hidden" } else { "calls" })
            data-poll=[poll] data-newest=[newest] {
            thead {
                tr {
                    th { "Time (UTC)" } th { "Caller" } th { "Model" } th { "Outcome" } th { "First message" }
                    th { "Tokens" } th { "Cost" } th { "Latency" } th { "Time to first token" }
                }
            }
            tbody {
                @for entry in &page.entries { (Row::of(entry, &approvals, &hits).markup()) }
            }
        }
        p class="pager" {
            @if !latest {
                a href=(with(String::new())) id="newest-calls" { "← newest" }
            }
            @if let Some(older) = &page.older {
                a href=(with(format!("before={}", older.encode()))) id="older-calls" rel="next" { "older →" }
            }
        }
    };
    html_response(
        StatusCode::OK,
        layout("Calls", Nav::Calls, Some(&session), main),
    )
}

/// `GET /console/api/calls?…filters…&after=CURSOR`: the calls newer than the cursor (all filters applied),
/// newest first, as the page's rows; without `after`, the newest page. `newest` is the cursor to poll from next.
pub(crate) async fn newer_json(
    State(state): State<ConsoleState>,
    params: Result<Query<CallLogParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let bad = |message: String| {
        crate::error::json_response(StatusCode::BAD_REQUEST, &json!({"error": message}))
    };
    let Some(records) = &state.records else {
        return crate::error::json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": "this gateway keeps no call records"}),
        );
    };
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => return bad(rejection.body_text()),
    };
    if !params.before.trim().is_empty() {
        return bad("the poll reads newer calls (`after`), not older ones".into());
    }
    if params.awaiting() {
        return bad(
            "the poll reads newer calls; the calls awaiting approval are listed by the page".into(),
        );
    }
    let query = match params.query() {
        Ok(query) => query,
        Err(problem) => return bad(problem),
    };
    match records.call_log(&query).await {
        Ok(page) => {
            let newest = page
                .entries
                .first()
                .map(|e| CallLogCursor::of(&e.summary).encode())
                .or_else(|| Some(params.after.trim().to_owned()).filter(|a| !a.is_empty()));
            let approvals = paused_approvals(&state, &page.entries).await;
            let data: Vec<serde_json::Value> = page
                .entries
                .iter()
                .map(|e| Row::of(e, &approvals, &HashMap::new()).json())
                .collect();
            crate::error::json_response(StatusCode::OK, &json!({"data": data, "newest": newest}))
        }
        Err(e) => crate::error::json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": format!("reading the call log failed: {e}")}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_and_bad_ones_are_refused() {
        let at = parse_utc("2024-02-29T13:05").unwrap();
        assert_eq!(utc(at), "2024-02-29 13:05:00");
        assert_eq!(
            utc(parse_utc("1970-01-01 00:00:59").unwrap()),
            "1970-01-01 00:00:59"
        );
        for bad in [
            "2023-02-29T10:00",
            "2024-13-01T00:00",
            "2024-01-01",
            "yesterday",
            "2024-01-01T24:00",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn bad_filters_are_refused_not_ignored() {
        let params = |status: &str, since: &str, until: &str, before: &str| CallLogParams {
            status: status.into(),
            since: since.into(),
            until: until.into(),
            before: before.into(),
            ..CallLogParams::default()
        };
        assert!(params("error", "", "", "")
            .query()
            .unwrap_err()
            .contains("unknown call status"));
        assert!(params("", "soon", "", "")
            .query()
            .unwrap_err()
            .contains("since"));
        assert!(params("", "2024-01-02T00:00", "2024-01-01T00:00", "")
            .query()
            .unwrap_err()
            .contains("before `until`"));
        assert!(params("", "", "", "nonsense")
            .query()
            .unwrap_err()
            .contains("cursor"));
        let fine = params("failed", "2024-01-01T00:00", "", "")
            .query()
            .unwrap();
        assert_eq!(fine.status, Some(CallStatus::Failed));
    }
}
