//! The console's page frame: the whole-page layout with its navigation, HTML and redirect responses, the error
//! page, and the CSRF check every posted form passes.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use maud::{html, Markup, DOCTYPE};

use super::session::{self, Session};

/// `303 See Other` to `location` (a path of the console).
pub(crate) fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// A whole HTML response.
pub(crate) fn html_response(status: StatusCode, page: Markup) -> Response {
    let mut response = (status, page.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// Which navigation entry is current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nav {
    Inbox,
    Calls,
    Conversations,
    Usage,
    Spend,
    Keys,
    Teams,
    Audit,
    None,
}

/// A whole page: head, navigation (when logged in: `session` is `None` on the login and error pages), the
/// title as the heading, then `main`.
pub(crate) fn layout(title: &str, nav: Nav, session: Option<&Session>, main: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // Every page's tab says how many calls wait, like a mail client's.
                title {
                    @if let Some(waiting) = session.and_then(|s| s.waiting) {
                        "(" (waiting) ") "
                    }
                    (title) " · tower-chat console"
                }
                @if let Some(session) = session {
                    meta name="csrf-token" content=(session.csrf);
                }
                link rel="icon" type="image/svg+xml" href="/console/favicon.svg";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    span class="brand" { "tower-chat console" }
                    @if let Some(session) = session {
                        nav {
                            @for (entry, href, label) in [
                                (Nav::Inbox, "/console", "Approvals"),
                                (Nav::Calls, "/console/calls", "Calls"),
                                (Nav::Conversations, "/console/conversations", "Conversations"),
                                (Nav::Usage, "/console/usage", "Usage"),
                                (Nav::Spend, "/console/spend", "Spend"),
                                (Nav::Keys, "/console/keys", "Keys"),
                                (Nav::Teams, "/console/teams", "Teams"),
                                (Nav::Audit, "/console/audit", "Audit"),
                            ].into_iter().filter(|(entry, _, _)| session.manages_keys || !matches!(entry, Nav::Keys | Nav::Teams | Nav::Audit)) {
                                a href=(href) class=[(entry == nav).then_some("current")] {
                                    (label)
                                    @if let (Nav::Inbox, Some(waiting)) = (entry, session.waiting) {
                                        " " span class="count" id="nav-pending-count" { "(" (waiting) ")" }
                                    }
                                }
                            }
                        }
                        form method="post" action="/console/logout" class="logout" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            span class="operator" { (session.operator) }
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (main)
                }
            }
        }
    }
}

/// What went wrong, kept on an error page's response so that [`require_session`] can frame it with the
/// operator's navigation.
#[derive(Clone, Debug)]
pub(crate) struct ErrorMessage(pub(crate) String);

pub(crate) fn error_layout(status: StatusCode, message: &str, session: Option<&Session>) -> Markup {
    let title = status.canonical_reason().unwrap_or("Error");
    let main = html! {
        p class="error" id="error" data-status=(status.as_u16()) { (message) }
        a href="/console" { "Back to the console" }
    };
    layout(title, Nav::None, session, main)
}

/// A page saying what went wrong (escaped like everything else). Behind a session it is shown inside the
/// console's frame, navigation included.
pub(crate) fn error_page(status: StatusCode, message: &str) -> Response {
    let mut response = html_response(status, error_layout(status, message, None));
    response
        .extensions_mut()
        .insert(ErrorMessage(message.to_owned()));
    response
}

/// A form posted with a session carries the session's CSRF token (`csrf`); the refusal when it does not.
pub(crate) fn check_csrf(session: &Session, submitted: Option<&str>) -> Result<(), Box<Response>> {
    if !session::csrf_matches(session, submitted) {
        return Err(Box::new(error_page(
            StatusCode::FORBIDDEN,
            "Refused: the form's CSRF token is missing or wrong. Reload the page and try again.",
        )));
    }
    Ok(())
}
