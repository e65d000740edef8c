//! A managed key's team reaches its calls' records: the spend rollup sums a team member's calls under the team's
//! name, and a key without a team under none.

use serde_json::json;
use tower_chat_persistence::{ConversationQuery, SpendRollupQuery, Store, UtcDay};

use super::keys::{admin, call, created, gateway, unique};

#[tokio::test]
async fn a_team_members_calls_are_summed_under_the_team_in_the_spend_rollup() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let base = gw.url("");
    let team_name = unique("research");
    let team = admin(&base, "POST", "/admin/teams", json!({"name": team_name})).await;
    assert_eq!(team.status, 201, "{}", team.body);
    let team_id = team.json()["id"].as_str().unwrap().to_owned();
    let member = unique("member");
    let (_, member_secret) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": member, "team": team_id}),
        )
        .await,
    );
    let loner = unique("loner");
    let (_, loner_secret) =
        created(&admin(&base, "POST", "/admin/keys", json!({"name": loner})).await);
    for secret in [&member_secret, &member_secret, &loner_secret] {
        let answer = call(&base, secret).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }

    let store = gw.records().await;
    let today = UtcDay::of(std::time::SystemTime::now());
    // Around today: a call made just before midnight is summed on the day it started.
    let days = SpendRollupQuery::days(today.plus(-1), today.plus(1));
    let rows = store
        .spend_rollup(&days.clone().by_caller().by_team())
        .await
        .unwrap();
    let of = |caller: &str| {
        rows.iter()
            .find(|row| row.caller.as_ref().map(|c| c.as_str()) == Some(caller))
            .unwrap_or_else(|| panic!("no rollup row of {caller}: {rows:?}"))
    };
    assert_eq!(of(&member).team.as_deref(), Some(team_name.as_str()));
    assert_eq!(of(&member).calls, 2);
    assert_eq!(of(&loner).team, None);
    assert_eq!(of(&loner).calls, 1);
    // The team's own total: its member's calls only.
    let team_rows = store
        .spend_rollup(&days.team(team_name.as_str()).by_team())
        .await
        .unwrap();
    assert_eq!(team_rows.len(), 1, "{team_rows:?}");
    assert_eq!(team_rows[0].calls, 2);
    // The records carry it too.
    let conversations = store
        .list_conversations(&ConversationQuery::new().caller(member.as_str()))
        .await
        .unwrap();
    assert_eq!(conversations.len(), 2);
    for conversation in conversations {
        for record in store
            .conversation_calls(&conversation.conversation_id)
            .await
            .unwrap()
        {
            assert_eq!(
                record.team.as_ref().map(|t| t.as_str()),
                Some(team_name.as_str())
            );
        }
    }
}
