//! `GET /v1/usage`: what the caller has used of its limits and, with a database, what its recorded calls cost.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{json, Value};
use tower_chat::{CallerIdentity, Cost};
use tower_chat_limits::{CounterKind, LimitsLayer, ANONYMOUS};
use tower_chat_persistence::{SpendQuery, Store};

use crate::error::json_response;

/// `GET /v1/usage`: the caller's counters (used, limit, remaining, reset time; costs also in dollars) and, when
/// calls are recorded, their recorded spend.
pub(crate) async fn usage(
    limits: Option<LimitsLayer>,
    records: Option<Arc<dyn Store>>,
    caller: Option<CallerIdentity>,
) -> Response {
    let caller_id = caller.as_ref().map_or(ANONYMOUS, |c| c.as_str()).to_owned();
    let mut body =
        json!({"object": "usage", "caller": caller_id, "limits": null, "recorded": null});
    if let Some(limits) = limits {
        match limits.usage(&caller_id).await {
            Ok(report) => {
                let scopes: Vec<Value> = report
                    .scopes
                    .iter()
                    .map(|scope| {
                        let counters: Vec<Value> =
                            scope.counters.iter().map(counter_json).collect();
                        json!({"model": scope.model, "team": scope.team, "counters": counters})
                    })
                    .collect();
                body["limits"] = Value::Array(scopes);
            }
            Err(error) => return crate::error::from_chat(&error).into_response(),
        }
    }
    if let Some(records) = records {
        let query = SpendQuery {
            caller: caller.clone(),
            ..SpendQuery::default()
        };
        match records.spend(&query).await {
            Ok(spend) => {
                body["recorded"] = json!({
                    "calls": spend.calls,
                    "input_tokens": spend.input_tokens,
                    "output_tokens": spend.output_tokens,
                    "cost_usd": spend.cost.as_usd(),
                    "unpriced_calls": spend.unpriced_calls,
                    "estimated_calls": spend.estimated_calls,
                });
            }
            Err(error) => tracing::warn!(%error, "cannot sum the caller's recorded spend"),
        }
    }
    json_response(StatusCode::OK, &body)
}

fn counter_json(counter: &tower_chat_limits::CounterUsage) -> Value {
    let mut value = json!({
        "kind": counter.kind,
        "used": counter.used,
        "limit": counter.limit,
        "remaining": counter.remaining,
        "resets_at": counter.resets_at_ms.map(|ms| ms.div_ceil(1000)),
    });
    if matches!(
        counter.kind,
        CounterKind::CostPerDay | CounterKind::CostPerMonth
    ) {
        let usd = |nanos: u64| Cost::from_nanos(nanos).as_usd();
        value["unit"] = json!("nano_usd");
        value["used_usd"] = json!(usd(counter.used));
        value["limit_usd"] = json!(usd(counter.limit));
        value["remaining_usd"] = json!(usd(counter.remaining));
    }
    value
}
