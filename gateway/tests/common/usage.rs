//! Calls for the usage page to show, written straight into the gateway's call records: a minute of eleven
//! `model-a` calls (alice's; 100–190 ms and one 60 s outlier; 10 input and 4 output tokens and 1,000 nano-$
//! each) and a minute of two `model-b` calls that failed (bob's; 400 and 500 ms; unpriced); or, for a given set
//! of latencies, one completed `model-a` call of alice's per latency.

use std::time::{Duration, SystemTime};

use tower_chat::{CallerIdentity, Cost};
use tower_chat_persistence::{CallId, CallOutcome, RecordedError, Store};

use super::Harness;

/// Write the seeded calls beside one the gateway recorded (its copy gives the rest of a record's fields): the
/// gateway must have recorded at least one call. The two minutes are 10 and 3 minutes before now, whole
/// minutes, so each lands in one bucket of the last hour.
pub async fn seed(gw: &Harness) {
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
            (10, i),
            latency,
            CallOutcome::Completed,
            Some(1_000),
        ));
    }
    for (i, latency) in [400, 500].into_iter().enumerate() {
        let failed = CallOutcome::Failed {
            error: error.clone(),
        };
        calls.push(("bob", "model-b", (3, i as u64), latency, failed, None));
    }
    write(gw, calls).await;
}

/// Write one completed call of alice's per latency (in milliseconds), a second apart from 10 minutes before now;
/// the gateway must have recorded a call to copy, as for [`seed`].
pub async fn seed_latencies(gw: &Harness, latencies: &[u64]) {
    let calls = latencies
        .iter()
        .enumerate()
        .map(|(i, latency)| {
            let at = (10 - i as u64 / 60, i as u64 % 60);
            (
                "alice",
                "model-a",
                at,
                *latency,
                CallOutcome::Completed,
                Some(1_000),
            )
        })
        .collect();
    write(gw, calls).await;
}

/// A seeded call: caller, model, (minutes before now's minute, second within it), latency in ms, outcome, cost
/// in nano-dollars.
type Seeded = (
    &'static str,
    &'static str,
    (u64, u64),
    u64,
    CallOutcome,
    Option<u64>,
);

/// Write `calls` as copies of the gateway's last recorded call.
async fn write(gw: &Harness, calls: Vec<Seeded>) {
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
    let records: Vec<_> = calls
        .into_iter()
        .map(|(caller, model, started, latency, outcome, cost)| {
            let mut record = template.clone();
            record.call_id = CallId::generate();
            record.caller = Some(CallerIdentity::new(caller));
            record.model = Some(model.into());
            let started = at(started.0, started.1);
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
