//! Calls for the usage page to show, written straight into the gateway's call records: a minute of eleven
//! `model-a` calls (alice's; 100–190 ms and one 60 s outlier; 10 input and 4 output tokens and 1,000 nano-$
//! each) and a minute of two `model-b` calls that failed (bob's; 400 and 500 ms; unpriced).

use std::time::{Duration, SystemTime};

use tower_chat::{CallerIdentity, Cost};
use tower_chat_persistence::{CallId, CallOutcome, RecordedError, Store};

use super::Harness;

/// Write the seeded calls beside one the gateway recorded (its copy gives the rest of a record's fields): the
/// gateway must have recorded at least one call. The two minutes are 10 and 3 minutes before now, whole
/// minutes, so each lands in one bucket of the last hour.
pub async fn seed(gw: &Harness) {
    let store = gw.records().await;
    let now = SystemTime::now();
    let recent = store
        .call_summaries(&tower_chat_persistence::CallQuery::between(
            now - Duration::from_secs(3600),
            now + Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let template = store
        .call(&recent.last().expect("a recorded call to copy").call_id)
        .await
        .unwrap()
        .unwrap();
    let minute = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
        * 60;
    let at = |minutes_ago: u64, seconds: u64| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(minute - minutes_ago * 60 + seconds)
    };
    let error = RecordedError {
        kind: "upstream".into(),
        message: "503 from the provider".into(),
    };
    let mut calls = Vec::new();
    for i in 0..11u64 {
        let latency = if i == 10 { 60_000 } else { 100 + 10 * i };
        calls.push((
            "alice",
            "model-a",
            at(10, i),
            latency,
            CallOutcome::Completed,
            Some(1_000),
        ));
    }
    for (i, latency) in [400, 500].into_iter().enumerate() {
        let failed = CallOutcome::Failed {
            error: error.clone(),
        };
        calls.push(("bob", "model-b", at(3, i as u64), latency, failed, None));
    }
    let records: Vec<_> = calls
        .into_iter()
        .map(|(caller, model, started, latency, outcome, cost)| {
            let mut record = template.clone();
            record.call_id = CallId::generate();
            record.caller = Some(CallerIdentity::new(caller));
            record.model = Some(model.into());
            record.started_at = started;
            record.first_token_at = Some(started + Duration::from_millis(latency / 2));
            record.ended_at = started + Duration::from_millis(latency);
            record.outcome = outcome;
            record.cost = cost.map(Cost::from_nanos);
            record.response.usage.input_tokens = 10;
            record.response.usage.output_tokens = 4;
            record.response.usage.from_response_cache = false;
            record
        })
        .collect();
    store.write_calls(&records).await.unwrap();
}
