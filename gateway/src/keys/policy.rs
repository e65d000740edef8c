//! The limits of the keys file's `[limits]` and of the managed keys as one [`LimitPolicy`]: what the limits
//! layer enforces once it takes a new policy while running.
//!
//! A managed key's own limits apply to its caller; a key without limits of its own takes its team's (the
//! nearest owner that set some), else `[limits.default]`. `[limits.keys.<name>]` entries keep theirs.

use tower_chat_limits::LimitPolicy;

use super::table::Table;
use crate::config::limits::{LimitsEntry, LimitsSection};

/// The policy of `section` with the managed keys of `table` added.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the limits layer takes its policy when it is built; this is the one to hand it"
    )
)]
pub(crate) fn limit_policy(section: &LimitsSection, table: &Table) -> LimitPolicy {
    let mut policy = LimitPolicy::new(section.default.limits());
    for (key, entry) in &section.keys {
        policy = policy.caller(key.clone(), entry.limits());
    }
    for (model, entry) in &section.models {
        policy = policy.model(model.clone(), entry.limits());
    }
    for key in &table.keys {
        let own = &key.doc.limits;
        let team = key.doc.team.as_deref().and_then(|id| {
            table
                .teams
                .iter()
                .find(|(row, _)| row.id == id)
                .map(|(_, doc)| &doc.limits)
        });
        let entry = if *own != LimitsEntry::default() {
            own
        } else if let Some(team) = team.filter(|t| **t != LimitsEntry::default()) {
            team
        } else {
            continue;
        };
        policy = policy.caller(key.row.name.clone(), entry.limits());
    }
    policy
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
    fn keys_take_their_own_limits_then_their_teams() {
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
        let policy = limit_policy(&section, &table);
        let requests = |caller: &str| policy.scopes(caller, None)[0].limits.requests;
        assert_eq!(requests("own"), Some(WindowLimit::per_minute(1)));
        assert_eq!(requests("member"), Some(WindowLimit::per_minute(7)));
        assert_eq!(requests("alone"), Some(WindowLimit::per_minute(100)));
    }
}
