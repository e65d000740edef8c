//! A team budget across replicas: three `tower-chat-gateway` processes sharing Redis (the limits store) and
//! PostgreSQL (the call records), in front of one scripted upstream that reports usage; one key in a team with a
//! small cost budget; 200 concurrent calls spread over the three.
//!
//! The bound. Every admission runs one Redis script that checks, for the key's scopes and the team's together,
//! `counter + reservation ≤ budget`, where the counter holds the reported cost of every settled call and the
//! reservation of every call in flight (admitted, not yet settled); a call's reservation is its estimate (the
//! prompt, and `default_max_output_tokens` of output, priced). So the total cost the upstream reports for admitted
//! calls is at most the budget plus, for each call in flight when the last call was admitted, what its reported
//! cost exceeded its reservation by: at most one reservation estimate per concurrent call for a provider that
//! reports at most twice the estimate, and nothing for one that reports less. The upstream here reports 12 prompt
//! and 5 completion tokens ($0.000022) against a reservation of at least 100 output tokens ($0.0002), so the
//! reported total must stay within the budget itself.

use crate::common;
use crate::limits::{GatewayProcess, KEY};

use std::time::{SystemTime, UNIX_EPOCH};

use common::{send, Answer};
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat_testkit::{database_url, redis_url, until};

/// The team's budget: $0.002 a day, in nano-dollars.
const BUDGET_NANOS: u64 = 2_000_000;

/// What a reported usage costs at the configured prices ($1/M prompt, $2/M completion tokens), in nano-dollars.
fn reported_cost(answer: &Answer) -> u64 {
    let usage = &answer.json()["usage"];
    let tokens = |field: &str| {
        usage[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field}: {}", answer.body))
    };
    tokens("prompt_tokens") * 1_000 + tokens("completion_tokens") * 2_000
}

/// The team's `cost_per_day` counter as a replica's `GET /v1/usage` reports it for the key.
async fn team_spend(gateway: &GatewayProcess) -> u64 {
    let answer = send(
        "GET",
        &format!("http://{}/v1/usage", gateway.addr),
        &[("authorization", &format!("Bearer {KEY}"))],
        "",
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let report = answer.json();
    let scopes = report["limits"].as_array().unwrap();
    let team: &Value = scopes
        .iter()
        .find(|s| s["team"] == "research")
        .unwrap_or_else(|| panic!("no team scope: {report}"));
    let counter = &team["counters"][0];
    assert_eq!(counter["kind"], "cost_per_day", "{report}");
    assert_eq!(counter["limit"], BUDGET_NANOS, "{report}");
    counter["used"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_never_spend_a_team_budget_beyond_the_calls_in_flight() {
    let Some(redis) = redis_url() else { return };
    let Some(postgres) = database_url() else {
        return;
    };
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hi there")).await;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // The key's own budget is far above the team's: the team's is the one that refuses.
    let config = format!(
        "[limits]\nstore = \"redis\"\nredis_url = \"{redis}\"\n\
         redis_prefix = \"tower-chat-gateway-process-test:team:{}:{nanos}:\"\n\
         default_max_output_tokens = 100\n\
         [limits.keys.alice]\ncost_per_day_usd = 10.0\n\
         [limits.teams.research]\nmembers = [\"alice\"]\ncost_per_day_usd = 0.002\n\
         [limits.prices.\"test-model\"]\ninput = 1.0\noutput = 2.0\n",
        std::process::id()
    );
    // Started one after the other: the first creates the records' tables in PostgreSQL.
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways
            .push(GatewayProcess::start_with(&provider.base_url(), &config, Some(&postgres)).await);
    }
    let answers: Vec<Answer> = (0..200)
        .map(|i| gateways[i % 3].chat())
        .collect::<FuturesUnordered<_>>()
        .collect()
        .await;

    let admitted: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.status != 200).collect();
    // No call lost: each was admitted or refused, and only the admitted ones reached the upstream.
    assert_eq!(admitted.len() + refused.len(), 200);
    assert_eq!(provider.requests().len(), admitted.len());
    assert!(
        !admitted.is_empty() && !refused.is_empty(),
        "{} admitted",
        admitted.len()
    );
    for answer in &refused {
        assert_eq!(answer.status, 429, "{}", answer.body);
        let error = &answer.json()["error"];
        assert_eq!(error["code"], "rate_limit_exceeded", "{}", answer.body);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("team research is over its cost_per_day limit of $0.002 (")
                && message.contains(" used so far, this call needs $"),
            "{message}"
        );
    }
    // The bound (see the module's docs): every reported cost is below its reservation, so the total the
    // upstream reported for admitted calls stays within the budget.
    let spent: u64 = admitted.iter().map(|a| reported_cost(a)).sum();
    assert!(
        spent <= BUDGET_NANOS,
        "{} admitted calls reported {spent} nano-dollars against a budget of {BUDGET_NANOS}",
        admitted.len()
    );
    // Every call settled with its reported usage, on every replica: the team's counter is exactly the spend.
    until("the team's counter settles to the reported spend", || {
        let gateway = &gateways[2];
        async move { team_spend(gateway).await == spent }
    })
    .await;
    for gateway in &gateways {
        assert_eq!(team_spend(gateway).await, spent, "{}", gateway.log());
    }
}
