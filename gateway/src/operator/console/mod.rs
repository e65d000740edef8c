//! The operator console: a web UI at `/console` for the people who decide pending approvals and look at what
//! conversations did and cost.
//!
//! Served when operator keys are configured (`--operator-keys-file`; `--no-console` turns it off); without them
//! `/console` answers a 404 naming that flag. Pages:
//!
//! | path | what |
//! |---|---|
//! | `/console/login` | log in with an operator key (the only page served without a session, with the assets); failed logins are limited, `429` + `Retry-After` |
//! | `/console` | the approvals inbox ([`card`]): pending calls (the user's request and the model's text before the call, arguments as sized fields, for `write_file` a diff against the file, reason, caller, conversation, age, expiry), approve or deny with a reason; decided calls whose client has not resumed in their own section; a banner after a decision; `console.js` keeps it current from `/console/api/approvals` |
//! | `/console/approvals/{id}/decision` | a decision's URL opened as a page: the approval's card and form, or a 404 page once it is no longer listed |
//! | `/console/calls?q=&caller=&model=&status=&since=&until=&before=` | the call log ([`calls`]): every recorded call, newest first (time, caller, model, outcome, first message, tokens, cost, latency, time to first token), filtered (`status=awaiting_approval`: the calls whose approval waits), searched by call, request or conversation id (bare or qualified), caller, model or word prefixes (a malformed search is refused; a word search shows each call's matching snippet, linked to the message on the timeline), paged by cursor; `console.js` adds new calls from `/console/api/calls?after=…` |
//! | `/console/conversations` | conversations, most recent first: caller, last activity, calls, tokens, cost |
//! | `/console/conversation?id=…&q=&hit=` | one conversation's timeline: its turns as `<details>` with a one-line summary (repeated prompts marked; a long conversation opens its last turn and has a turn index), messages, every recorded call (model, latency, time to first token, usage, outcome, tool calls and results), approvals and their audit; `hit` (from a search) marks the found message's `q` words; an unknown id is a 404 page |
//! | `/console/media?call=…&message=…&part=…` | the bytes of one part of a recorded call's history: raster images inline (the timeline's thumbnails), anything else as an attachment ([`media`]) |
//! | `/console/usage?range=1h\|24h\|7d&by=model\|caller` | model calls, errors and their rate, tokens, cost and latency percentile bands over time, by model or caller (server-rendered SVG); breakdown tables per model and per caller; the response cache's hit rate and the spend it saved |
//! | `/console/spend?range=today\|7d\|this-week\|last-week\|this-month\|last-month` or `?from=&until=` | cost and tokens per caller × model for the period, from the store's spend rollup ([`spend`]); each caller's budget and its use (the limits layer's counters); `/console/spend.csv` the same table as a CSV attachment |
//! | `/console/keys` | the managed keys ([`keys`]): name, id, team, allowed models and routes, expiry, status (active, rotating, revoked, expired), spend today and this month against the key's budgets; a form that creates a key, whose answer shows the new secret once (`no-store`, never in a URL or the store) |
//! | `/console/keys/{id}` | one key ([`key_page`]): its facts, limits and counters; a form that changes its team, expiry, models, routes and limits ([`key_form`]); rotate (with a grace period) and revoke, each confirmed on a second page whose form posts `confirm=1`; a rotation shows the new secret once |
//! | `/console/teams`, `/console/teams/{id}` | the managed teams ([`teams`]): members, limits, spend against the budgets the members share; a form that creates a team, one that changes its limits, and its deletion, confirmed on a second page (refused while a member key is not revoked) |
//! | `/console/audit?target=&page=` | the audit log of managed keys and teams ([`key_audit`]): who changed what when, the fields before and after, newest first, paged |
//! | `/console/favicon.svg` | the console's icon, linked from every page (cached for a year) |
//!
//! Every page's navigation and tab title count the calls waiting for a decision, kept current by `console.js`
//! (from `/console/api/waiting`, or on the inbox from its own refresh).
//!
//! The key, team and audit pages are served when the gateway manages keys (a database and both keys files);
//! their changes run [`crate::keys::ops`], the admin API's own code, attributed in the audit log to the operator
//! logged in.
//!
//! Any other path under `/console` answers a `404` page inside the console; a refused decision (`409`: decided
//! already) and a bad query (`400`: an unknown `?range=`) are HTML pages too, never the API's JSON.
//!
//! Safe by construction: every page is a compile-time [`maud`] template, which escapes every value it splices; state changes are
//! POSTs that must come from the console's own origin and carry the session's CSRF token; the session cookie
//! is `HttpOnly`, `SameSite=Strict` and `Secure` off loopback ([`session`]); every response carries a strict
//! `Content-Security-Policy` (no inline script or style: the stylesheet and the one script are files embedded in
//! the binary with `include_str!`), `X-Frame-Options: DENY`, `nosniff`, `no-referrer` and `no-store`.
//!
//! It reads what the gateway already keeps: the pending approvals of every process on the database (the approval
//! layer's store), the call records ([`tower_chat_persistence::Store`]: SQLite or PostgreSQL) and the approval
//! audit log. Failed logins are limited per key and client address and in all ([`crate::operator::login_throttle`]; behind a
//! reverse proxy the client address is the one `--trusted-proxy-header` reports, [`crate::edge::client_addr`]).

mod calls;
mod calls_approvals;
mod card;
mod chart;
mod chart_scale;
mod extract;
mod format;
mod highlight;
mod key_audit;
mod key_form;
mod key_page;
mod keys;
mod layout;
mod managed;
mod media;
mod outcome;
mod pages;
pub(crate) mod session;
mod session_store;
mod spend;
mod spend_csv;
mod spend_range;
mod state;
mod teams;
mod timeline;
mod turns;
mod usage;
mod usage_breakdown;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;
use tower_chat_persistence::Store;

use crate::edge::in_flight::PeerAddr;
use crate::operator::OperatorState;
use extract::PageForm;
use layout::{
    check_csrf, error_layout, error_page, html_response, layout, see_other, ErrorMessage, Nav,
};
use maud::html;
use session::Session;
pub(crate) use session_store::SessionStore;
pub(crate) use state::ConsoleState;

/// The policy every console response carries: scripts, styles, images and fetches from the console's own origin
/// only, no inline code, forms post only to it, no framing, no `<base>`.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
const FAVICON: &str = include_str!("assets/favicon.svg");

/// The `/console` routes.
pub(crate) fn router<S: Clone + Send + Sync + 'static>(
    operators: OperatorState,
    records: Option<Arc<dyn Store>>,
    limits: Option<tower_chat_limits::LimitsLayer>,
    managed: Option<crate::keys::ManagedKeys>,
) -> Router<S> {
    let state = ConsoleState {
        sessions: operators.sessions.clone(),
        operators,
        records,
        managed: managed.map(|keys| crate::keys::admin::AdminState {
            keys,
            limits: limits.clone(),
        }),
        limits,
        usage_cache: Arc::default(),
    };
    let pages = Router::new()
        .route("/console", get(pages::inbox))
        .route("/console/api/approvals", get(pages::approvals_json))
        .route("/console/api/waiting", get(waiting_json))
        .route(
            "/console/approvals/{id}/decision",
            post(pages::decide).get(pages::decision_page),
        )
        .route("/console/calls", get(calls::page))
        .route("/console/api/calls", get(calls::newer_json))
        .route("/console/conversations", get(pages::conversations))
        .route("/console/conversation", get(timeline::timeline))
        .route("/console/media", get(media::media))
        .route("/console/usage", get(usage::page))
        .route("/console/spend", get(spend::page))
        .route("/console/spend.csv", get(spend_csv::csv))
        .route("/console/keys", get(keys::page).post(keys::create))
        .route("/console/keys/{id}", get(key_page::page))
        .route("/console/keys/{id}/edit", post(key_page::edit))
        .route("/console/keys/{id}/rotate", post(key_page::rotate))
        .route("/console/keys/{id}/revoke", post(key_page::revoke))
        .route("/console/teams", get(teams::page).post(teams::create))
        .route("/console/teams/{id}", get(teams::team))
        .route("/console/teams/{id}/edit", post(teams::edit))
        .route("/console/teams/{id}/delete", post(teams::delete))
        .route("/console/audit", get(key_audit::page))
        .route("/console/logout", post(logout))
        .route("/console/{*rest}", axum::routing::any(not_found))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ));
    Router::new()
        .route("/console/login", get(login_page).post(login))
        .route("/console/assets/console.css", get(css))
        .route("/console/assets/console.js", get(js))
        .route("/console/favicon.svg", get(favicon))
        .route("/console/", get(|| async { see_other("/console") }))
        .merge(pages)
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

/// What `/console` answers while no operator keys are configured: `404` with a message naming the flag that
/// turns the console on, instead of the API's generic JSON `not_found` a browser user cannot act on.
pub(crate) fn not_configured_router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    async fn not_configured() -> Response {
        let mut response = (StatusCode::NOT_FOUND, NOT_CONFIGURED).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
    Router::new()
        .route("/console", axum::routing::any(not_configured))
        .route("/console/{*rest}", axum::routing::any(not_configured))
        .layer(middleware::from_fn(security_headers))
}

/// The body of [`not_configured_router`]'s answer.
pub(crate) const NOT_CONFIGURED: &str = "The operator console is off: this gateway was started without \
     --operator-keys-file.\nStart it with --operator-keys-file PATH (one operator key per line, `name:key` or a \
     bare key) to serve the console here; operators log in at /console/login with a key from that file.\n";

/// The headers of every console response.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    // A handler's own policy stays: the media route's is stricter than the pages'.
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Every page but the login page needs a session; reads must not come from another site's script, and state
/// changes must come from the console's own origin.
async fn require_session(
    State(state): State<ConsoleState>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let writes = request.method() != http::Method::GET && request.method() != http::Method::HEAD;
    if writes && !session::same_origin(headers) {
        return error_page(
            StatusCode::FORBIDDEN,
            "Refused: this request did not come from the console's own pages.",
        );
    }
    if !writes && !session::readable(headers) {
        return error_page(StatusCode::FORBIDDEN, "Refused: cross-site read.");
    }
    let found = match state.session(headers).await {
        Ok(found) => found,
        Err(e) => return session_store_failed(&e),
    };
    let Some(mut session) = found else {
        if request.uri().path().starts_with("/console/api/") {
            return crate::error::json_response(
                StatusCode::UNAUTHORIZED,
                &serde_json::json!({"error": "log in at /console/login"}),
            );
        }
        if writes {
            return error_page(StatusCode::FORBIDDEN, "Refused: you are not logged in.");
        }
        return see_other("/console/login");
    };
    let path = request.uri().path();
    if !writes && !path.starts_with("/console/api/") && path != "/console/media" {
        session.waiting = waiting(&state.operators).await;
    }
    session.manages_keys = state.managed.is_some();
    request.extensions_mut().insert(session.clone());
    let mut response = next.run(request).await;
    if let Some(ErrorMessage(message)) = response.extensions_mut().remove::<ErrorMessage>() {
        let framed = error_layout(response.status(), &message, Some(&session)).into_string();
        response.headers_mut().remove(header::CONTENT_LENGTH);
        *response.body_mut() = Body::from(framed);
    }
    response
}

/// The calls waiting for a decision, as the navigation counts them (`None` when the store cannot be read: the
/// page still renders, without a count).
async fn waiting(operators: &OperatorState) -> Option<session::Waiting> {
    let page = crate::operator::pending_page(operators, None, crate::operator::MAX_LIST)
        .await
        .ok()?;
    Some(session::Waiting {
        count: page.listed.iter().filter(|l| l.status == "pending").count(),
        more: page.next.is_some(),
    })
}

/// `GET /console/api/waiting`: how many calls wait for a decision (`count`, and `more` when more wait behind
/// the listed page), what every page's navigation and tab title show; `console.js` polls it on every page but
/// the inbox, which refreshes its whole list.
async fn waiting_json(State(state): State<ConsoleState>) -> Response {
    match waiting(&state.operators).await {
        Some(w) => crate::error::json_response(
            StatusCode::OK,
            &serde_json::json!({"count": w.count, "more": w.more}),
        ),
        None => crate::error::json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({"error": "the pending approvals cannot be read"}),
        ),
    }
}

/// A form with nothing but its CSRF token (logging out).
#[derive(Debug, Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

/// The login form.
#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    key: String,
}

async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8", "private, max-age=300")
}

async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8", "private, max-age=300")
}

/// The icon never changes within a release, and browsers ask for it on every page: cached for a year.
async fn favicon() -> Response {
    asset(
        FAVICON,
        "image/svg+xml",
        "public, max-age=31536000, immutable",
    )
}

fn asset(body: &'static str, content_type: &'static str, cache: &'static str) -> Response {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

/// Any other path under `/console`: a 404 page inside the console (the inspection API's paths answer JSON).
async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    if path.starts_with("/console/api/") {
        return crate::error::json_response(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": format!("no console API at {path}")}),
        );
    }
    error_page(
        StatusCode::NOT_FOUND,
        &format!("There is no console page at {path}."),
    )
}

/// The database holding sessions failed: nobody is let in or out on a guess.
fn session_store_failed(error: &tower_chat_persistence::StoreError) -> Response {
    tracing::error!(error = %error, "console: the session store failed");
    error_page(
        StatusCode::SERVICE_UNAVAILABLE,
        "The console's session store is unavailable; try again shortly.",
    )
}

async fn login_page(State(state): State<ConsoleState>, headers: HeaderMap) -> Response {
    match state.session(&headers).await {
        Ok(Some(_)) => return see_other("/console"),
        Ok(None) => {}
        Err(e) => return session_store_failed(&e),
    }
    login_form(StatusCode::OK, None)
}

fn login_form(status: StatusCode, problem: Option<&str>) -> Response {
    let main = html! {
        @if let Some(problem) = problem {
            p class="error" id="login-error" { (problem) }
        }
        form method="post" action="/console/login" class="login" {
            label for="key" { "Operator key" }
            input type="password" name="key" id="key" autocomplete="current-password" required;
            button type="submit" id="login" { "Log in" }
        }
        p class="hint" { "A key of the gateway's --operator-keys-file. Client keys do not open the console." }
    };
    html_response(status, layout("Log in", Nav::None, None, main))
}

/// `POST /console/login`: an operator key opens a session. Failed logins are limited by key, client address and
/// in all ([`crate::operator::login_throttle`], shared with the operator API); a login over the limit is refused before its
/// key is looked at. An empty key or a client key is refused without counting: it guesses nothing.
async fn login(
    State(state): State<ConsoleState>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    PageForm(form): PageForm<LoginForm>,
) -> Response {
    if !session::same_origin(&headers) {
        return error_page(
            StatusCode::FORBIDDEN,
            "Refused: the login form must be posted from the console's own page.",
        );
    }
    let key = form.key.trim();
    if key.is_empty() {
        return login_form(StatusCode::UNAUTHORIZED, Some("Enter an operator key."));
    }
    if state.operators.is_client_key(key) {
        tracing::warn!("console: login refused (a client key)");
        return login_form(
            StatusCode::UNAUTHORIZED,
            Some("That is a client key, not an operator key: the console takes operator keys."),
        );
    }
    let limit = &state.operators.login_limit;
    let source = state
        .operators
        .source(peer.as_ref().map(|Extension(p)| p), &headers);
    let fingerprint = limit.fingerprint(key);
    if let Err(refused) = limit.admit(source, fingerprint, Instant::now()) {
        tracing::warn!(limit = ?refused.limit, "console: login refused (too many failed logins)");
        let seconds = refused.retry_after_secs();
        let mut response = login_form(
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!(
                "Too many failed logins: {}. Try again in {seconds} s.",
                refused.reason()
            )),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return response;
    }
    let Some((operator, key_fingerprint)) = state.operators.keys.identify_key(key) else {
        limit.failed(source, fingerprint, Instant::now());
        tracing::warn!("console: login refused (not an operator key)");
        return login_form(
            StatusCode::UNAUTHORIZED,
            Some("That is not an operator key."),
        );
    };
    limit.succeeded(source, Instant::now());
    let id = match state
        .sessions
        .create(operator.as_str(), &key_fingerprint)
        .await
    {
        Ok(id) => id,
        Err(e) => return session_store_failed(&e),
    };
    tracing::info!(operator = operator.as_str(), "console: operator logged in");
    let mut response = see_other("/console");
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(&headers, Some(&id)));
    response
}

/// `POST /console/logout`.
async fn logout(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    PageForm(form): PageForm<CsrfForm>,
) -> Response {
    if let Err(refused) = check_csrf(&session, form.csrf.as_deref()) {
        return *refused;
    }
    if let Err(e) = state.sessions.remove(&headers).await {
        return session_store_failed(&e);
    }
    let mut response = see_other("/console/login");
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(&headers, None));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings an attacker controls (tool arguments, messages, conversation ids, an operator's name) come out
    /// inert wherever a template splices them: no tag, no attribute break-out, no entity trickery survives.
    #[test]
    fn hostile_strings_are_inert_in_text_and_attributes() {
        let hostile = [
            "<script>alert(1)</script>",
            "\"><img src=x onerror=alert(1)>",
            "'><svg onload=alert(1)>",
            "&lt;script&gt; already escaped",
            "</textarea><script>x</script>",
            "a\u{0}b\u{202e}c <!-- --> ]]>",
        ];
        for text in hostile {
            let session = Session::for_test(text);
            let page = layout(
                text,
                Nav::Inbox,
                Some(&session),
                html! { div title=(text) data-x=(text) { (text) } },
            )
            .into_string();
            assert!(!page.contains(text), "{page}");
            let div = &page[page.find("<div ").unwrap()..];
            let head = &div[..div.find('>').unwrap()];
            let inner = &div[head.len() + 1..div.find("</div>").unwrap()];
            assert!(!inner.contains(['<', '>', '"']), "{div}");
            // The only quotes are the ones delimiting the two attribute values; one tag opens.
            assert_eq!(head.matches('"').count(), 4, "{head}");
            assert_eq!(head.matches('<').count(), 1, "{head}");
            assert_eq!(unescape(inner), text, "escaping loses nothing");
            assert_eq!(
                page.matches("<script").count(),
                1,
                "the one script file only"
            );
        }
    }

    fn unescape(text: &str) -> String {
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }
}
