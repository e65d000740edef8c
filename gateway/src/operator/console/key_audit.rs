//! The audit log of managed keys and teams (`/console/audit?target=&page=`): who changed what when, and the
//! fields the change set, before and after, newest first, [`PAGE`] entries a page. It shows what the store's
//! audit entries hold, which is what [`Row::public`](crate::keys::record::Row::public) shows: never a secret
//! nor its digest.

use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use serde_json::Value;

use super::extract::PageQuery;
use super::format::url_encode;
use super::layout::{html_response, layout, Nav};
use super::managed::{self, refused};
use super::pages::pretty;
use super::session::Session;
use super::state::ConsoleState;
use crate::keys::ops;

/// Entries a page.
pub(crate) const PAGE: i64 = 50;

/// The audit page's query: one key's or team's entries (`target`), the page (from 0).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AuditQuery {
    target: Option<String>,
    page: Option<u32>,
}

/// The fields an entry changed, before and after (a creation: every field after; nothing before).
fn changed(before: Option<&Value>, after: Option<&Value>) -> (Value, Value) {
    let empty = serde_json::Map::new();
    let before_map = before.and_then(Value::as_object).unwrap_or(&empty);
    let after_map = after.and_then(Value::as_object).unwrap_or(&empty);
    let mut was = serde_json::Map::new();
    let mut now = serde_json::Map::new();
    for key in before_map.keys().chain(after_map.keys()) {
        if ["updated_at", "object"].contains(&key.as_str()) {
            continue;
        }
        let (b, a) = (before_map.get(key), after_map.get(key));
        if b != a {
            if let Some(b) = b {
                was.insert(key.clone(), b.clone());
            }
            if let Some(a) = a {
                now.insert(key.clone(), a.clone());
            }
        }
    }
    (Value::Object(was), Value::Object(now))
}

/// `GET /console/audit`.
pub(crate) async fn page(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session>,
    PageQuery(query): PageQuery<AuditQuery>,
) -> Response {
    let keys = match managed::keys(&state) {
        Ok(keys) => keys,
        Err(refusal) => return *refusal,
    };
    let page = query.page.unwrap_or(0);
    let target = query.target.clone().unwrap_or_default();
    // One more than a page: whether an older page exists.
    let entries = match ops::audit(keys, target.clone(), PAGE + 1, i64::from(page) * PAGE).await {
        Ok(entries) => entries,
        Err(error) => return refused(&error),
    };
    let older = entries.len() > usize::try_from(PAGE).unwrap_or(usize::MAX);
    let link = |page: u32| {
        let mut href = format!("/console/audit?page={page}");
        if !target.is_empty() {
            href.push_str(&format!("&target={}", url_encode(&target)));
        }
        href
    };
    let main = html! {
        p class="hint" {
            "Every change to a managed key or team, made here or through the admin API, newest first. "
            @if !target.is_empty() {
                "Only those of " code { (target) } ". " a href="/console/audit" { "All changes" }
            }
        }
        @if entries.is_empty() {
            p class="empty" id="audit-empty" { "No changes." }
        } @else {
            table id="key-audit" class="audit" {
                thead {
                    tr {
                        @for heading in ["when", "who", "what", "target", "before", "after"] {
                            th scope="col" { (heading) }
                        }
                    }
                }
                tbody {
                    @for entry in entries.iter().take(usize::try_from(PAGE).unwrap_or(usize::MAX)) {
                        @let (was, now) = changed(entry.before.as_ref(), entry.after.as_ref());
                        @let name = entry.after.as_ref().or(entry.before.as_ref()).and_then(|v| v["name"].as_str()).unwrap_or("");
                        tr data-action=(entry.action) data-target=(entry.target) {
                            td data-label="when" { (managed::at(entry.at_ms / 1000)) }
                            td data-label="who" { (entry.actor) }
                            td data-label="what" { (entry.action) " " (entry.kind) }
                            td class="id" data-label="target" {
                                @let href = if entry.kind == "team" { format!("/console/teams/{}", entry.target) } else { format!("/console/keys/{}", entry.target) };
                                a href=(href) { (name) } " " code { (entry.target) }
                            }
                            td data-label="before" { @if was.as_object().is_some_and(|m| !m.is_empty()) { pre { (pretty(&was)) } } @else { "—" } }
                            td data-label="after" { @if now.as_object().is_some_and(|m| !m.is_empty()) { pre { (pretty(&now)) } } @else { "—" } }
                        }
                    }
                }
            }
        }
        p class="pages" {
            @if page > 0 { a href=(link(page - 1)) id="newer" { "Newer" } " " }
            @if older { a href=(link(page + 1)) id="older" { "Older" } }
        }
    };
    html_response(
        StatusCode::OK,
        layout("Audit log", Nav::Audit, Some(&session), main),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_entry_shows_only_the_fields_it_changed() {
        let before = json!({"object": "key", "name": "a", "status": "active", "updated_at": 1});
        let after = json!({"object": "key", "name": "a", "status": "revoked", "updated_at": 2, "revoked_at": 2});
        let (was, now) = changed(Some(&before), Some(&after));
        assert_eq!(was, json!({"status": "active"}));
        assert_eq!(now, json!({"status": "revoked", "revoked_at": 2}));
        let (was, now) = changed(None, Some(&before));
        assert_eq!(was, json!({}));
        assert_eq!(now, json!({"name": "a", "status": "active"}));
    }
}
