//! Record ids for the model rounds of one client request.
//!
//! The persistence layer sits inside the tool loop, so every model round trip is its own record. A Responses API
//! client is handed one id (`resp_…`) per request, and a later `previous_response_id` must find the conversation
//! as that request left it: its *last* round. The id the client holds names the request's first round; the
//! rounds after it are `{id}~1`, `{id}~2`, …, so the last one is found by walking the suffixes until one is
//! missing (one lookup per round, rounds are few and bounded by `--max-rounds`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tower_chat::ChatRequest;
use tower_chat_persistence::{CallId, CallRecord, RequestedCallId, Store, StoreError};

/// Separates a request's record id from its round number; never part of an id the gateway hands out.
const ROUND_SEPARATOR: char = '~';

/// In the extensions of a request whose records must be found by the id the client was given. The tool loop
/// hands every round a clone of its request, so the counter is shared by the request's rounds.
#[derive(Clone, Debug)]
pub(crate) struct RoundIds {
    base: Arc<str>,
    next: Arc<AtomicU32>,
}

impl RoundIds {
    pub(crate) fn new(base: impl Into<Arc<str>>) -> Self {
        RoundIds {
            base: base.into(),
            next: Arc::new(AtomicU32::new(0)),
        }
    }

    fn take_next(&self) -> CallId {
        round_id(&self.base, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

fn round_id(base: &str, round: u32) -> CallId {
    if round == 0 {
        CallId::new(base)
    } else {
        CallId::new(format!("{base}{ROUND_SEPARATOR}{round}"))
    }
}

/// Between the tool loop and the persistence layer: names this round's record after the request's id.
pub(crate) fn name_round(mut request: ChatRequest) -> ChatRequest {
    if let Some(ids) = request.extensions.get::<RoundIds>() {
        let id = ids.take_next();
        request.extensions.insert(RequestedCallId(id));
    }
    request
}

/// The record of the last round of the request the client's id names (`None`: no such id, or an id the gateway
/// never hands out).
pub(crate) async fn last_round(
    records: &dyn Store,
    id: &str,
) -> Result<Option<CallRecord>, StoreError> {
    if id.contains(ROUND_SEPARATOR) {
        return Ok(None);
    }
    let Some(mut last) = records.call(&round_id(id, 0)).await? else {
        return Ok(None);
    };
    for round in 1.. {
        match records.call(&round_id(id, round)).await? {
            Some(record) => last = record,
            None => break,
        }
    }
    Ok(Some(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_of_one_request_share_the_counter_and_follow_its_id() {
        let ids = RoundIds::new("resp_1");
        let mut request = ChatRequest::new(Vec::new());
        request.extensions.insert(ids);
        let named: Vec<CallId> = (0..3)
            .map(|_| {
                name_round(request.clone())
                    .extensions
                    .get::<RequestedCallId>()
                    .unwrap()
                    .0
                    .clone()
            })
            .collect();
        assert_eq!(
            named,
            [
                CallId::new("resp_1"),
                CallId::new("resp_1~1"),
                CallId::new("resp_1~2")
            ]
        );
        let plain = name_round(ChatRequest::new(Vec::new()));
        assert!(plain.extensions.get::<RequestedCallId>().is_none());
    }
}
