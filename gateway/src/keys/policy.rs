//! The limits of the configuration's `[limits]` and of the managed keys and teams as one [`LimitPolicy`]: what the
//! limits layer takes, live, each time the table of managed keys changes.
//!
//! A managed key's own limits apply to its caller (a key without limits of its own takes `[limits.default]`); a
//! key with a team is a member of it, so its calls also count against the team's limits, which every member
//! shares. A managed team is named by its name, like a `[limits.teams]` entry: one of each with the same name is
//! one team, and the managed limits are the ones that apply.

use tower_chat_limits::LimitPolicy;

use super::table::Table;
use crate::config::limits::{LimitsEntry, LimitsSection};
use crate::startup_error::GatewayError;

/// The policy of `section` with the managed keys and teams of `table` added.
///
/// # Errors
/// What [`LimitsSection::policy`] refuses (a key in two `[limits.teams]`).
pub(crate) fn limit_policy(
    section: &LimitsSection,
    table: &Table,
) -> Result<LimitPolicy, GatewayError> {
    let mut policy = section.policy()?;
    for (row, doc) in &table.teams {
        if doc.limits != LimitsEntry::default() {
            policy = policy.team(row.name.clone(), doc.limits.limits());
        }
    }
    for key in &table.keys {
        if key.doc.limits != LimitsEntry::default() {
            policy = policy.caller(key.row.name.clone(), key.doc.limits.limits());
        }
        let team = key
            .doc
            .team
            .as_deref()
            .and_then(|id| table.teams.iter().find(|(row, _)| row.id == id));
        if let Some((row, _)) = team {
            policy = policy.member(key.row.name.clone(), row.name.clone());
        }
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::record::{KeyDoc, Row, TeamDoc};
    use crate::keys::store::Snapshot;
    use tower_chat_limits::WindowLimit;

    fn row(id: &str, doc: String) -> Row {
        Row {
            id: id.into(),
            name: id.into(),
            digest: "0".repeat(64),
            previous_digest: None,
            doc,
        }
    }

    #[test]
    fn keys_take_their_own_limits_and_count_against_their_teams() {
        let per_minute = |n| LimitsEntry {
            requests_per_minute: Some(n),
            ..LimitsEntry::default()
        };
        let key = |team: Option<&str>, limits: LimitsEntry| {
            serde_json::to_string(&KeyDoc {
                team: team.map(str::to_owned),
                limits,
                ..KeyDoc::default()
            })
            .unwrap()
        };
        let snapshot = Snapshot {
            version: 1,
            keys: vec![
                row("own", key(Some("t"), per_minute(1))),
                row("member", key(Some("t"), LimitsEntry::default())),
                row("alone", key(None, LimitsEntry::default())),
            ],
            teams: vec![row(
                "t",
                serde_json::to_string(&TeamDoc {
                    limits: per_minute(7),
                    ..TeamDoc::default()
                })
                .unwrap(),
            )],
        };
        let table = crate::keys::table::Table::build(snapshot);
        let section = LimitsSection {
            default: per_minute(100),
            ..LimitsSection::default()
        };
        let policy = limit_policy(&section, &table).unwrap();
        let requests = |caller: &str| policy.scopes(caller, None)[0].limits.requests;
        assert_eq!(requests("own"), Some(WindowLimit::per_minute(1)));
        assert_eq!(requests("member"), Some(WindowLimit::per_minute(100)));
        assert_eq!(requests("alone"), Some(WindowLimit::per_minute(100)));
        // Both members count against the team's limits; a key without a team against none.
        assert_eq!(policy.team_of("own"), Some("t"));
        assert_eq!(policy.team_of("member"), Some("t"));
        assert_eq!(policy.team_of("alone"), None);
        let team = policy.team_scope("t").unwrap();
        assert_eq!(team.limits.requests, Some(WindowLimit::per_minute(7)));
    }
}
