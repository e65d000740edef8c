//! The key form, that creates a key (`/console/keys`) or changes one (`/console/keys/{id}`): its fields as
//! typed, what they ask of the admin API's operations, and the fields themselves, filled with the key's values
//! or, after a refusal, with what the operator typed. A key's secret is never a field.

use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Map;

use super::managed::{limits_fields, split_list, LimitsForm};
use super::spend_range::{date, parse_date};
use crate::error::ApiError;
use crate::keys::ops::{KeyUpdate, NewKey};
use crate::keys::record::{invalid, KeyDoc, Row, TeamDoc};
use tower_chat_persistence::UtcDay;

/// The fields of the key form: the CSRF token, the name (creation only), the owner team's id (empty: none),
/// the last valid day (UTC, empty: none), the allowed models and routes, and the limits.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct KeyForm {
    pub(super) csrf: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    team: String,
    #[serde(default)]
    expires: String,
    #[serde(default)]
    models: String,
    #[serde(default)]
    routes: String,
    #[serde(flatten)]
    limits: LimitsForm,
}

/// The last day a key is valid through (UTC), as the form shows it: the day before the midnight it is refused
/// from (an expiry set through the API at another hour shows the day it falls in).
fn expiry_text(expires_at: Option<i64>) -> String {
    expires_at.map_or_else(String::new, |at| {
        date(UtcDay::from_days_since_epoch(
            (at - 1).div_euclid(86_400).max(0),
        ))
    })
}

impl KeyForm {
    /// The form filled with key `doc`'s values, as its page shows it before a change.
    pub(super) fn of(doc: &KeyDoc) -> KeyForm {
        KeyForm {
            csrf: None,
            name: String::new(),
            team: doc.team.clone().unwrap_or_default(),
            expires: expiry_text(doc.expires_at),
            models: doc.models.join(", "),
            routes: doc.routes.join(", "),
            limits: LimitsForm::of(&doc.limits),
        }
    }

    fn expires_at(&self) -> Result<Option<i64>, ApiError> {
        let expires = self.expires.trim();
        if expires.is_empty() {
            return Ok(None);
        }
        // Valid through the whole day named: refused from the next day's midnight, UTC.
        let day = parse_date(expires).map_err(|m| invalid("invalid_expiry", m))?;
        Ok(Some(day.plus(1).days_since_epoch() * 86_400))
    }

    fn team(&self) -> Option<String> {
        let team = self.team.trim();
        (!team.is_empty()).then(|| team.to_owned())
    }

    /// The key the form asks for, as the admin API takes it.
    pub(super) fn new_key(&self) -> Result<NewKey, ApiError> {
        Ok(NewKey {
            name: self.name.trim().to_owned(),
            team: self.team(),
            expires_at: self.expires_at()?,
            models: split_list(&self.models),
            routes: split_list(&self.routes),
            limits: self.limits.limits()?,
            metadata: Map::new(),
        })
    }

    /// The change the form asks of the key it was filled from (`shown`, that key's values now). The expiry and
    /// the lists are changed only when the operator changed them: a field left as shown keeps what the API set,
    /// an expiry at another hour than midnight or a pattern with a space in it included. The team and the
    /// limits are set as the form says; the metadata, which the form does not show, is kept.
    pub(super) fn update(&self, shown: &KeyForm) -> Result<KeyUpdate, ApiError> {
        let changed = |now: &str, was: &str| split_list(now) != split_list(was);
        Ok(KeyUpdate {
            team: Some(self.team()),
            expires_at: if self.expires.trim() == shown.expires.trim() {
                None
            } else {
                Some(self.expires_at()?)
            },
            models: changed(&self.models, &shown.models).then(|| split_list(&self.models)),
            routes: changed(&self.routes, &shown.routes).then(|| split_list(&self.routes)),
            limits: Some(self.limits.limits()?),
            metadata: None,
        })
    }

    /// The fields (without the CSRF token and the button), their ids starting with `prefix`; the name only when
    /// `creating`.
    pub(super) fn fields(&self, prefix: &str, teams: &[(Row, TeamDoc)], creating: bool) -> Markup {
        let mut teams: Vec<&Row> = teams.iter().map(|(row, _)| row).collect();
        teams.sort_by(|a, b| a.name.cmp(&b.name));
        let id = |field: &str| format!("{prefix}-{field}");
        html! {
            @if creating {
                label for=(id("name")) { "Name (the caller it becomes)" }
                input type="text" id=(id("name")) name="name" required maxlength="64" pattern="[A-Za-z0-9._\\-]+" autocomplete="off" value=(self.name);
            }
            label for=(id("team")) { "Team" }
            select id=(id("team")) name="team" {
                option value="" selected[self.team.is_empty()] { "none" }
                @for team in teams {
                    option value=(team.id) selected[self.team == team.id] { (team.name) }
                }
            }
            label for=(id("expires")) { "Valid through (UTC day; empty: no expiry)" }
            input type="date" id=(id("expires")) name="expires" value=(self.expires);
            label for=(id("models")) { "Allowed models (names or patterns with *, separated by commas; empty: any)" }
            input type="text" id=(id("models")) name="models" autocomplete="off" value=(self.models);
            label for=(id("routes")) { "Allowed routes (paths or patterns with *, like /v1/chat/*, separated by commas; empty: any)" }
            input type="text" id=(id("routes")) name="routes" autocomplete="off" value=(self.routes);
            (limits_fields(prefix, &self.limits))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_changes_only_what_the_operator_changed() {
        let doc = KeyDoc {
            // 12:00 UTC on 2026-01-02: not a midnight the form could set.
            expires_at: Some(1_767_355_200),
            models: vec!["gpt 4o".into()],
            routes: vec!["/v1/chat/*".into()],
            ..KeyDoc::default()
        };
        let shown = KeyForm::of(&doc);
        assert_eq!(shown.expires, "2026-01-02");
        let untouched = shown.update(&shown).unwrap();
        assert_eq!(untouched.expires_at, None, "the API's expiry is kept");
        assert_eq!(untouched.models, None, "a pattern with a space is kept");
        assert_eq!(untouched.routes, None);
        assert_eq!(untouched.team, Some(None));
        let edited = KeyForm {
            expires: String::new(),
            routes: "/v1/*, /v1/embeddings".into(),
            team: "team_1".into(),
            ..shown.clone()
        };
        let update = edited.update(&shown).unwrap();
        assert_eq!(
            update.expires_at,
            Some(None),
            "a cleared field clears the expiry"
        );
        assert_eq!(
            update.routes,
            Some(vec!["/v1/*".to_owned(), "/v1/embeddings".to_owned()])
        );
        assert_eq!(update.team, Some(Some("team_1".to_owned())));
        let midnight = KeyForm {
            expires: "2026-01-02".into(),
            ..KeyForm::default()
        };
        assert_eq!(
            midnight.new_key().unwrap().expires_at,
            Some(1_767_398_400),
            "valid through the day named"
        );
        assert_eq!(expiry_text(Some(1_767_398_400)), "2026-01-02");
        let bad = KeyForm {
            expires: "02/01/2026".into(),
            ..shown.clone()
        };
        assert_eq!(bad.update(&shown).unwrap_err().code, "invalid_expiry");
    }
}
