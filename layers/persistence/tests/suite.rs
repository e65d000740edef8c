//! The store suite: every test runs against SQLite and against PostgreSQL (`DATABASE_URL`; skipped with a
//! message when unset).

#[macro_use]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{answer, copy, scripted, TestDb};
use futures_util::StreamExt;
use serde_json::json;
use tower::{Layer, ServiceExt};
use tower_chat::{
    AssistantMessage, CallerIdentity, ChatError, ChatEvent, ChatRequest, ChatStreamExt,
    ConversationId, ErrorKind, FinishReason, Message, ToolCall, ToolMessage, ToolSpec,
};
use tower_chat_persistence::{
    CallId, CallOutcome, CallQuery, CallRecord, ConversationQuery, Persistence, Spend, SpendQuery,
    REDACTED,
};
use tower_chat_testkit::{database_url, hanging, scripted_stream, Delivery, Items, SHAPES};

both_stores!(
    a_completed_call_is_recorded_in_full,
    a_thousand_concurrent_calls_leave_a_thousand_complete_records,
    a_stream_dropped_mid_way_is_recorded_as_cancelled_with_its_partial_output,
    an_upstream_that_dies_is_recorded_as_interrupted_with_its_partial_output,
    failures_before_output_are_recorded_as_failed,
    a_store_refusing_writes_fails_the_call_with_a_store_error,
    a_store_refusing_writes_in_fail_open_mode_keeps_the_calls_going,
    conversations_are_listed_and_continued_from_the_store,
    migrations_of_other_crates_are_applied_once,
    in_flight_records_are_replaced_by_the_final_one,
    records_carry_their_cost_and_spend_sums_per_caller_and_conversation,
    refusals_before_sending_are_recorded_small_whatever_the_request_held,
    an_estimate_charged_inside_is_recorded_marked_estimated,
    call_summaries_say_which_calls_the_response_cache_answered,
    usage_sums_calls_errors_tokens_cost_and_latency_percentiles_per_bucket_model_and_caller,
    a_calls_request_id_is_recorded_with_it_in_flight_and_at_its_end,
);

/// The id of the HTTP request a call served, given as an extension, is on its in-flight record and its final
/// one, and read back as written; a call without one records none.
async fn a_calls_request_id_is_recorded_with_it_in_flight_and_at_its_end(db: &TestDb) {
    use tower_chat_persistence::RequestId;
    let layer = db.layer().record_in_flight(true);
    let chat = layer.layer(scripted(|_| {
        hanging(vec![Ok(ChatEvent::text("Hel")), Ok(ChatEvent::text("lo"))])
    }));
    let conv = conversation();
    let id = RequestId::new(format!("req-{}", common::uuid_simple()));
    let mut stream = chat
        .clone()
        .oneshot(request(&conv, "hi").with_extension(id.clone()))
        .await
        .unwrap();
    stream.next().await.unwrap().unwrap();
    layer.flush().await.unwrap();
    assert_eq!(only_call(db, &conv).await.request_id.as_ref(), Some(&id));
    drop(stream);
    layer.flush().await.unwrap();
    let last = only_call(db, &conv).await;
    assert_eq!(last.outcome, CallOutcome::Cancelled);
    assert_eq!(last.request_id, Some(id));

    let without = conversation();
    let plain = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("no id"))
    }));
    plain
        .oneshot(request(&without, "hi"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    layer.flush().await.unwrap();
    assert_eq!(only_call(db, &without).await.request_id, None);
}

/// Usage aggregates: per time bucket, model and caller, summed in the database, with nearest-rank latency
/// percentiles that one slow call moves only at p99; failed and interrupted calls count as errors, cancelled
/// ones do not, in-flight ones are left out.
async fn usage_sums_calls_errors_tokens_cost_and_latency_percentiles_per_bucket_model_and_caller(
    db: &TestDb,
) {
    use tower_chat::Cost;
    use tower_chat_persistence::{RecordedError, UsageQuery};
    let template = db.recorded_call("counted").await;
    // Callers of their own: PostgreSQL keeps the records of earlier runs.
    let run = common::uuid_simple();
    let (alice, bob) = (format!("alice-{run}"), format!("bob-{run}"));
    let since = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let minute = Duration::from_secs(60);
    let error = RecordedError {
        kind: "upstream".into(),
        message: "503".into(),
    };
    // (caller, model, seconds after `since`, latency ms, outcome, cost nano-$, cached)
    let mut rows = Vec::new();
    for i in 0..20u64 {
        // Bucket 0: twenty of alice's calls on model-a, 100..=290 ms, the last one a 30 s outlier.
        let latency = if i == 19 { 30_000 } else { 100 + 10 * i };
        rows.push((
            &alice,
            "model-a",
            i,
            latency,
            CallOutcome::Completed,
            Some(1_000),
            i < 2,
        ));
    }
    let failed = CallOutcome::Failed {
        error: error.clone(),
    };
    let interrupted = CallOutcome::Interrupted { error: None };
    rows.push((&bob, "model-b", 70, 400, failed, None, false));
    rows.push((&bob, "model-b", 80, 500, interrupted, None, false));
    rows.push((
        &bob,
        "model-b",
        90,
        600,
        CallOutcome::Cancelled,
        Some(5_000),
        false,
    ));
    rows.push((
        &bob,
        "model-a",
        100,
        700,
        CallOutcome::Completed,
        Some(2_000),
        false,
    ));
    rows.push((&bob, "model-a", 110, 1, CallOutcome::InFlight, None, false));
    // Outside the period: left out.
    rows.push((
        &bob,
        "model-a",
        3 * 60,
        100,
        CallOutcome::Completed,
        Some(9),
        false,
    ));
    let records: Vec<CallRecord> = rows
        .into_iter()
        .map(|(caller, model, at, latency, outcome, cost, cached)| {
            let mut record = template.clone();
            record.call_id = CallId::generate();
            record.caller = Some(CallerIdentity::new(caller.as_str()));
            record.model = Some(model.into());
            record.started_at = since + Duration::from_secs(at);
            record.first_token_at = Some(record.started_at + Duration::from_millis(latency / 2));
            record.ended_at = record.started_at + Duration::from_millis(latency);
            record.outcome = outcome;
            record.cost = cost.map(Cost::from_nanos);
            record.response.usage.input_tokens = 10;
            record.response.usage.output_tokens = 4;
            record.response.usage.from_response_cache = cached;
            record
        })
        .collect();
    db.store.write_calls(&records).await.unwrap();
    let period = |caller: &str| UsageQuery::between(since, since + 2 * minute).caller(caller);
    let ms = Duration::from_millis;

    let alice_total = db.store.usage(&period(&alice)).await.unwrap();
    assert_eq!(alice_total.len(), 1, "{alice_total:?}");
    let total = &alice_total[0];
    assert_eq!(
        (total.bucket, total.model.as_deref(), &total.caller),
        (None, None, &None)
    );
    assert_eq!(
        (
            total.calls,
            total.failed_calls,
            total.input_tokens,
            total.output_tokens
        ),
        (20, 0, 200, 80)
    );
    assert_eq!(
        (total.cost, total.unpriced_calls),
        (Cost::from_nanos(20_000), 0)
    );
    assert_eq!(
        (
            total.cached_calls,
            total.cached_input_tokens,
            total.cached_output_tokens
        ),
        (2, 20, 8)
    );
    // Nearest rank over 100, 110, …, 280 and 30,000: p50 is the 10th, p90 the 18th, p99 the outlier.
    assert_eq!(total.latency.p50, ms(190));
    assert_eq!(total.latency.p90, ms(270));
    assert_eq!(total.latency.p99, ms(30_000));
    assert_eq!(total.time_to_first_token_p50, Some(ms(95)));

    let bob_by_model = db
        .store
        .usage(&period(&bob).per_bucket(minute).by_model().by_caller())
        .await
        .unwrap();
    let keys: Vec<_> = bob_by_model
        .iter()
        .map(|a| {
            (
                a.bucket,
                a.model.as_deref(),
                a.caller.as_ref().map(|c| c.as_str()),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (Some(1), Some("model-a"), Some(bob.as_str())),
            (Some(1), Some("model-b"), Some(bob.as_str())),
        ],
        "the in-flight call and the one after the period are left out"
    );
    let b = &bob_by_model[1];
    assert_eq!((b.calls, b.failed_calls, b.cancelled_calls), (3, 2, 1));
    assert!((b.error_rate() - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!((b.cost, b.unpriced_calls), (Cost::from_nanos(5_000), 2));
    assert_eq!((b.latency.p50, b.latency.p99), (ms(500), ms(600)));
    assert_eq!(bob_by_model[0].latency.p50, ms(700));

    let bob_per_bucket = db
        .store
        .usage(&period(&bob).per_bucket(minute))
        .await
        .unwrap();
    assert_eq!(bob_per_bucket.len(), 1);
    assert_eq!(
        (
            bob_per_bucket[0].bucket,
            bob_per_bucket[0].calls,
            bob_per_bucket[0].failed_calls
        ),
        (Some(1), 4, 2)
    );
    assert_eq!(
        db.store
            .usage(&period(&alice).per_bucket(Duration::ZERO))
            .await
            .unwrap_err()
            .message(),
        "a usage bucket must be between 1 µs and 292271 years long, not 0ns"
    );
}

/// A replayed answer's record is marked in its usage; call summaries read that mark without decoding the
/// messages (what a usage page counts cache hits and their savings with).
async fn call_summaries_say_which_calls_the_response_cache_answered(db: &TestDb) {
    let layer = db.layer();
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::AllAtOnce, answer("cached or not"))
    }));
    let conv = conversation();
    chat.oneshot(request(&conv, "hi"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    layer.flush().await.unwrap();
    // A caller of its own: PostgreSQL keeps the records of earlier runs.
    let caller = CallerIdentity::new(format!("cache-{}", CallId::generate().as_str()));
    let mut fresh = only_call(db, &conv).await;
    fresh.caller = Some(caller.clone());
    let mut replayed = fresh.clone();
    replayed.call_id = CallId::generate();
    replayed.started_at += Duration::from_millis(1);
    replayed.response.usage.from_response_cache = true;
    fresh.call_id = CallId::generate();
    db.store.write_calls(&[fresh, replayed]).await.unwrap();
    let calls = db
        .store
        .call_summaries(&CallQuery {
            caller: Some(caller),
            ..CallQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        calls
            .iter()
            .map(|c| c.from_response_cache)
            .collect::<Vec<_>>(),
        [false, true]
    );
}

fn request(conversation: &ConversationId, text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::system("be brief"), Message::user(text)])
        .with_extension(conversation.clone())
}

fn conversation() -> ConversationId {
    ConversationId::new(format!("conv-{}", common::uuid_simple()))
}

async fn only_call(db: &TestDb, conversation: &ConversationId) -> CallRecord {
    let mut calls = db.store.conversation_calls(conversation).await.unwrap();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    calls.pop().unwrap()
}

async fn a_completed_call_is_recorded_in_full(db: &TestDb) {
    for shape in SHAPES {
        let layer = db.layer();
        let tool_call = ToolCall::new("c1", "weather", json!({"city": "Oslo"}));
        let mut items = vec![
            Ok(ChatEvent::ToolCallStart {
                index: 0,
                id: "c1".into(),
                name: "weather".into(),
            }),
            Ok(ChatEvent::ToolCallEnd {
                index: 0,
                call: tool_call.clone(),
            }),
            Ok(ChatEvent::ToolResult {
                result: ToolMessage::success("c1", "weather", "12C"),
            }),
        ];
        items.extend(answer("It is 12C in Oslo."));
        let items = std::sync::Arc::new(items);
        let chat = layer.layer(scripted(move |_| scripted_stream(shape, copy(&items))));

        let conv = conversation();
        let mut req = request(&conv, "Weather in Oslo?")
            .model("scripted-model")
            .tool(ToolSpec::new(
                "weather",
                "current weather",
                json!({"type": "object"}),
            ))
            .with_extension(CallerIdentity::new("alice"));
        req.options.extra = json!({"api_key": "sk-secret-123", "seed": 7})
            .as_object()
            .unwrap()
            .clone();
        let events: Vec<_> = chat.oneshot(req).await.unwrap().collect::<Vec<_>>().await;
        // Every event passes through unchanged, Finish last.
        assert_eq!(events.len(), 9, "{shape:?}: {events:?}");
        assert!(matches!(
            events.last(),
            Some(Ok(ChatEvent::Finish {
                reason: FinishReason::Stop
            }))
        ));

        // Fail-closed: the record is stored before Finish is delivered, so no flush is needed.
        let record = only_call(db, &conv).await;
        assert_eq!(record.outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(record.text(), "It is 12C in Oslo.");
        assert_eq!(record.caller, Some(CallerIdentity::new("alice")));
        assert_eq!(record.provider.as_deref(), Some("scripted"));
        assert_eq!(record.model.as_deref(), Some("scripted-model-2"));
        assert_eq!(record.round_index, 0);
        assert_eq!(record.usage().total_tokens(), 14);
        assert_eq!(record.finish_reason(), Some(&FinishReason::Stop));
        assert_eq!(
            record.response.messages,
            vec![
                Message::Assistant(AssistantMessage {
                    tool_calls: vec![tool_call.clone()],
                    ..AssistantMessage::default()
                }),
                Message::tool_result("c1", "weather", "12C"),
                Message::Assistant(AssistantMessage {
                    content: "It is 12C in Oslo.".into(),
                    reasoning: vec![tower_chat::ReasoningPart::text("thinking")],
                    tool_calls: vec![],
                    provider_parts: Vec::new(),
                }),
            ]
        );
        assert_eq!(record.request.messages.len(), 2);
        assert_eq!(record.request.options.tools.len(), 1);
        assert_eq!(record.request.options.extra["api_key"], json!(REDACTED));
        assert_eq!(record.request.options.extra["seed"], json!(7));
        let first = record.first_token_at.expect("first token time");
        assert!(record.started_at <= first && first <= record.ended_at);

        // The same record by id, and no secret anywhere in what was stored.
        let by_id = db.store.call(&record.call_id).await.unwrap().unwrap();
        assert_eq!(by_id, record);
        assert!(!serde_json::to_string(&by_id)
            .unwrap()
            .contains("sk-secret-123"));
        assert_eq!(layer.stats().recorded, 1);
        assert_eq!(layer.stats().failed + layer.stats().dropped, 0);
    }
}

async fn a_thousand_concurrent_calls_leave_a_thousand_complete_records(db: &TestDb) {
    let layer = db.layer().buffer(256);
    let chat = layer.layer(scripted(|req: &ChatRequest| {
        let question = match req.messages.last() {
            Some(Message::User { content }) => content.clone(),
            other => panic!("unexpected {other:?}"),
        };
        scripted_stream(Delivery::OneByOne, answer(&format!("answer to {question}")))
    }));
    let conv = conversation();
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let chat = chat.clone();
            let req = request(&conv, &format!("q{i}"));
            // Boxed outside the task: rustc's Send check of an async block holding the `Oneshot` trips over
            // the `Response = ChatStream` bound (rust-lang/rust#102211).
            let call: std::pin::Pin<
                Box<
                    dyn std::future::Future<Output = Result<tower_chat::ChatStream, ChatError>>
                        + Send,
                >,
            > = Box::pin(chat.oneshot(req));
            tokio::spawn(async move { call.await.unwrap().collect_response().await.unwrap() })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.unwrap().text(), format!("answer to q{i}"));
    }
    let calls = db.store.conversation_calls(&conv).await.unwrap();
    assert_eq!(calls.len(), 1000);
    let ids: HashSet<_> = calls.iter().map(|c| c.call_id.clone()).collect();
    assert_eq!(ids.len(), 1000, "call ids are unique");
    for call in &calls {
        assert_eq!(call.outcome, CallOutcome::Completed);
        let Some(Message::User { content }) = call.request.messages.last() else {
            panic!("{call:?}")
        };
        assert_eq!(call.text(), format!("answer to {content}"));
    }
    let stats = layer.stats();
    assert_eq!((stats.recorded, stats.failed, stats.dropped), (1000, 0, 0));
}

async fn a_stream_dropped_mid_way_is_recorded_as_cancelled_with_its_partial_output(db: &TestDb) {
    let layer = db.layer();
    let chat = layer.layer(scripted(|_| {
        hanging(vec![Ok(ChatEvent::text("Hel")), Ok(ChatEvent::text("lo"))])
    }));
    let conv = conversation();
    let mut stream = chat.oneshot(request(&conv, "hi")).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatEvent::text("Hel")
    );
    assert_eq!(stream.next().await.unwrap().unwrap(), ChatEvent::text("lo"));
    // The upstream now hangs; the caller gives up.
    assert!(
        tokio::time::timeout(Duration::from_millis(20), stream.next())
            .await
            .is_err()
    );
    drop(stream);
    layer.flush().await.unwrap();
    let record = only_call(db, &conv).await;
    assert_eq!(record.outcome, CallOutcome::Cancelled);
    assert_eq!(record.text(), "Hello");
    assert!(record.first_token_at.is_some());
    assert_eq!(record.finish_reason(), None);

    // Both shapes: a caller that stops reading after the first text delta and drops the stream.
    for shape in SHAPES {
        let chat = layer.layer(scripted(move |_| {
            scripted_stream(shape, answer("Hello there"))
        }));
        let conv = conversation();
        let mut stream = chat.oneshot(request(&conv, "hi")).await.unwrap();
        for _ in 0..3 {
            stream.next().await.unwrap().unwrap();
        }
        drop(stream);
        layer.flush().await.unwrap();
        let record = only_call(db, &conv).await;
        assert_eq!(record.outcome, CallOutcome::Cancelled, "{shape:?}");
        assert_eq!(record.text(), "Hello");
        assert_eq!(record.response.messages.len(), 1);
        assert_eq!(record.usage().total_tokens(), 0, "usage had not arrived");
    }

    // Dropping the response future before the provider answered is recorded too.
    // (A bare `service_fn` reports no `ModelInfo`: wrapped directly, its records name no provider.)
    let pending = tower::service_fn(|_req: ChatRequest| async {
        futures_util::future::pending::<Result<tower_chat::ChatStream, ChatError>>().await
    });
    let chat = Persistence::new(pending, layer.clone());
    let conv = conversation();
    let call = chat.oneshot(request(&conv, "hi"));
    assert!(tokio::time::timeout(Duration::from_millis(10), call)
        .await
        .is_err());
    layer.flush().await.unwrap();
    let record = only_call(db, &conv).await;
    assert_eq!(record.outcome, CallOutcome::Cancelled);
    assert_eq!(record.first_token_at, None);
}

async fn an_upstream_that_dies_is_recorded_as_interrupted_with_its_partial_output(db: &TestDb) {
    for shape in SHAPES {
        let layer = db.layer();
        // An error item after output began.
        let died: Items = vec![
            Ok(ChatEvent::text("The answer is ")),
            Err(ChatError::new(ErrorKind::Connection, "connection reset")),
        ];
        let died = std::sync::Arc::new(died);
        let chat = layer.layer(scripted(move |_| scripted_stream(shape, copy(&died))));
        let conv = conversation();
        let result = chat
            .oneshot(request(&conv, "q"))
            .await
            .unwrap()
            .collect_response()
            .await;
        assert_eq!(result.unwrap_err().kind(), &ErrorKind::Connection);
        layer.flush().await.unwrap();
        let record = only_call(db, &conv).await;
        match &record.outcome {
            CallOutcome::Interrupted { error: Some(error) } => {
                assert_eq!(error.kind, "connection");
                assert_eq!(error.message, "connection reset");
            }
            other => panic!("{shape:?}: {other:?}"),
        }
        assert_eq!(record.text(), "The answer is ");

        // A stream that just stops, without Finish or error.
        let silent: Items = vec![Ok(ChatEvent::text("partial"))];
        let silent = std::sync::Arc::new(silent);
        let chat = layer.layer(scripted(move |_| scripted_stream(shape, copy(&silent))));
        let conv = conversation();
        let response = chat
            .oneshot(request(&conv, "q"))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.finish_reason, None);
        let record = only_call(db, &conv).await;
        assert_eq!(record.outcome, CallOutcome::Interrupted { error: None });
        assert_eq!(record.text(), "partial");
    }
}

async fn failures_before_output_are_recorded_as_failed(db: &TestDb) {
    let layer = db.layer();
    // The service call itself fails (HTTP 429).
    let refusing = tower::service_fn(|_req: ChatRequest| async {
        Err::<tower_chat::ChatStream, _>(ChatError::new(
            ErrorKind::RateLimited { retry_after: None },
            "slow down",
        ))
    });
    let chat = Persistence::new(refusing, layer.clone());
    let conv = conversation();
    let error = chat.oneshot(request(&conv, "q")).await.err().unwrap();
    assert_eq!(error.message(), "slow down");
    layer.flush().await.unwrap();
    let record = only_call(db, &conv).await;
    match &record.outcome {
        CallOutcome::Failed { error } => assert_eq!(error.kind, "rate_limited"),
        other => panic!("{other:?}"),
    }

    // The stream's first item is an error.
    let chat = layer.layer(scripted(|_| {
        scripted_stream(
            Delivery::AllAtOnce,
            vec![Err(ChatError::new(ErrorKind::Upstream, "overloaded"))],
        )
    }));
    let conv = conversation();
    let result = chat
        .oneshot(request(&conv, "q"))
        .await
        .unwrap()
        .collect_response()
        .await;
    assert_eq!(result.unwrap_err().kind(), &ErrorKind::Upstream);
    layer.flush().await.unwrap();
    assert!(matches!(
        only_call(db, &conv).await.outcome,
        CallOutcome::Failed { .. }
    ));

    // A cancellation error item is a cancellation.
    let chat = layer.layer(scripted(|_| {
        scripted_stream(
            Delivery::OneByOne,
            vec![Ok(ChatEvent::text("a")), Err(ChatError::cancelled())],
        )
    }));
    let conv = conversation();
    let _ = chat
        .oneshot(request(&conv, "q"))
        .await
        .unwrap()
        .collect_response()
        .await;
    layer.flush().await.unwrap();
    let record = only_call(db, &conv).await;
    assert_eq!(record.outcome, CallOutcome::Cancelled);
    assert_eq!(record.text(), "a");
}

/// A record is acknowledged once committed, so a call that ends while the database refuses writes fails with a
/// typed store error in place of its `Finish`: no call finishes with a record that is not stored.
async fn a_store_refusing_writes_fails_the_call_with_a_store_error(db: &TestDb) {
    for shape in SHAPES {
        let layer = db.layer();
        let chat = layer.layer(scripted(move |_| scripted_stream(shape, answer("fine"))));
        db.refuse_writes().await;
        let events: Vec<_> = chat
            .clone()
            .oneshot(request(&conversation(), "q"))
            .await
            .unwrap()
            .collect()
            .await;
        // The output arrived, but the call does not finish: a typed store error takes Finish's place.
        let (last, before) = events.split_last().unwrap();
        let error = last.as_ref().unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Store, "{shape:?}: {error}");
        assert!(error.message().contains("refuses writes") || error.message().contains("refuse"));
        assert!(before
            .iter()
            .all(|e| !matches!(e, Ok(ChatEvent::Finish { .. }))));
        assert!(before
            .iter()
            .any(|e| matches!(e, Ok(ChatEvent::TextDelta { text }) if text == "fi")));
        assert_eq!(layer.stats().failed, 1);

        // Once the database accepts writes again, calls complete and are recorded.
        db.accept_writes().await;
        let conv = conversation();
        let response = chat
            .oneshot(request(&conv, "q"))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "fine");
        assert_eq!(only_call(db, &conv).await.outcome, CallOutcome::Completed);
    }
}

async fn a_store_refusing_writes_in_fail_open_mode_keeps_the_calls_going(db: &TestDb) {
    let layer = db.layer().fail_open();
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::OneByOne, answer("fine"))
    }));
    db.refuse_writes().await;
    let conv = conversation();
    for _ in 0..3 {
        let response = chat
            .clone()
            .oneshot(request(&conv, "q"))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "fine");
    }
    layer.flush().await.unwrap();
    let stats = layer.stats();
    assert_eq!((stats.recorded, stats.failed), (0, 3), "{stats:?}");
    assert!(db.store.conversation_calls(&conv).await.unwrap().is_empty());
    db.accept_writes().await;
}

async fn conversations_are_listed_and_continued_from_the_store(db: &TestDb) {
    let layer = db.layer();
    // A tool loop's two rounds under the layer: round 0 calls a tool, round 1 answers.
    let chat = layer.layer(scripted(|req: &ChatRequest| {
        let items = if matches!(req.messages.last(), Some(Message::Tool(_))) {
            answer("It is 12C.")
        } else if matches!(req.messages.last(), Some(Message::User { content }) if content == "fail") {
            vec![Err(ChatError::new(ErrorKind::Upstream, "down"))]
        } else {
            vec![
                Ok(ChatEvent::ToolCallEnd {
                    index: 0,
                    call: ToolCall::new("c1", "weather", json!({})),
                }),
                Ok(ChatEvent::finish(FinishReason::ToolCalls)),
            ]
        };
        scripted_stream(Delivery::OneByOne, items)
    }));
    let alice = ConversationId::new(format!("alice-{}", common::uuid_simple()));
    let mut history = vec![Message::user("Weather?")];
    let round0 = chat
        .clone()
        .oneshot(
            ChatRequest::new(history.clone())
                .with_extension(alice.clone())
                .with_extension(CallerIdentity::new("alice")),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    history.extend(round0.messages);
    history.push(Message::tool_result("c1", "weather", "12C"));
    let round1 = chat
        .clone()
        .oneshot(
            ChatRequest::new(history.clone())
                .with_extension(alice.clone())
                .with_extension(CallerIdentity::new("alice")),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    history.extend(round1.messages);

    // A later failed call is kept, but is not part of the history to continue from.
    let mut failing = history.clone();
    failing.push(Message::user("fail"));
    let _ = chat
        .clone()
        .oneshot(ChatRequest::new(failing).with_extension(alice.clone()))
        .await
        .unwrap()
        .collect_response()
        .await;
    layer.flush().await.unwrap();

    let loaded = db.store.load_conversation(&alice).await.unwrap();
    assert_eq!(loaded, history);
    assert_eq!(loaded.len(), 4);
    let calls = db.store.conversation_calls(&alice).await.unwrap();
    assert_eq!(
        calls.iter().map(|c| c.round_index).collect::<Vec<_>>(),
        vec![0, 1, 0]
    );
    assert_eq!(calls[2].outcome.as_str(), "failed");

    // Another caller's conversation, without a conversation id: one is generated. It starts after the calls
    // above were flushed and read back, so it is the most recently active at the stored microsecond precision.
    let generated = chat
        .clone()
        .oneshot(
            ChatRequest::new(vec![Message::user("Hi")])
                .with_extension(CallerIdentity::new(format!("bob-{}", alice))),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(generated.finish_reason, Some(FinishReason::ToolCalls));
    let bobs = db
        .store
        .list_conversations(&ConversationQuery::new().caller(format!("bob-{}", alice)))
        .await
        .unwrap();
    assert_eq!(bobs.len(), 1);
    assert_ne!(bobs[0].conversation_id, alice);
    assert_eq!(bobs[0].calls, 1);

    let alices = db
        .store
        .list_conversations(&ConversationQuery::new().caller("alice"))
        .await
        .unwrap();
    assert_eq!(alices.len(), 1);
    assert_eq!(alices[0].conversation_id, alice);
    assert_eq!(alices[0].calls, 3, "counts every call of the conversation");
    assert!(alices[0].first_started_at <= alices[0].last_started_at);

    // Most recently active first, with paging.
    let all = db
        .store
        .list_conversations(&ConversationQuery::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].conversation_id, bobs[0].conversation_id);
    let second = db
        .store
        .list_conversations(&ConversationQuery::new().limit(1).offset(1))
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].conversation_id, alice);

    // Unknown things are empty, not errors.
    assert!(db
        .store
        .load_conversation(&ConversationId::new("nope"))
        .await
        .unwrap()
        .is_empty());
    assert!(db.store.call(&CallId::new("nope")).await.unwrap().is_none());
}

async fn migrations_of_other_crates_are_applied_once(db: &TestDb) {
    use tower_chat_persistence::Migration;
    match &db.backend {
        common::Backend::Sqlite(store) => {
            let path = store.path().to_owned();
            let migration = Migration::new(
                "test-crate/0001_notes",
                "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
            );
            for round in 0..2 {
                // Reopening applies nothing twice (a second CREATE TABLE would fail).
                let reopened = tower_chat_persistence::SqliteStore::builder(&path)
                    .migration(migration.clone())
                    .open()
                    .await
                    .unwrap();
                let count = reopened
                    .run("notes", move |conn| {
                        conn.execute(
                            "INSERT INTO notes (body) VALUES (?1)",
                            [format!("n{round}")],
                        )?;
                        conn.query_row("SELECT COUNT(*) FROM notes", [], |r| r.get::<_, i64>(0))
                    })
                    .await
                    .unwrap();
                assert_eq!(count, round + 1);
                // A panicking closure fails its own operation only.
                assert!(reopened
                    .with_connection(|_| -> () { panic!("boom") })
                    .await
                    .is_err());
                assert_eq!(
                    reopened
                        .run("count", |conn| {
                            conn.query_row("SELECT COUNT(*) FROM notes", [], |r| r.get::<_, i64>(0))
                        })
                        .await
                        .unwrap(),
                    round + 1
                );
            }
        }
        common::Backend::Postgres(store) => {
            let url = database_url().unwrap();
            let migration = Migration::new(
                "test-crate/0001_notes",
                "CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);",
            );
            for round in 0..2 {
                let reopened = tower_chat_persistence::PostgresStore::builder(url.clone())
                    .schema(store.schema().unwrap())
                    .migration(migration.clone())
                    .connect()
                    .await
                    .unwrap();
                let client = reopened.client().await.unwrap();
                client
                    .execute(
                        "INSERT INTO notes (body) VALUES ($1)",
                        &[&format!("n{round}")],
                    )
                    .await
                    .unwrap();
                let count: i64 = client
                    .query_one("SELECT COUNT(*) FROM notes", &[])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(count, round + 1);
            }
        }
    }
    // A migration that fails is reported as a store error naming it.
    let broken = Migration::new("test-crate/0002_broken", "CREATE TABLE (;");
    let error = match &db.backend {
        common::Backend::Sqlite(store) => {
            tower_chat_persistence::SqliteStore::builder(store.path())
                .migration(broken)
                .open()
                .await
                .unwrap_err()
        }
        common::Backend::Postgres(store) => {
            tower_chat_persistence::PostgresStore::builder(database_url().unwrap())
                .schema(store.schema().unwrap())
                .migration(broken)
                .connect()
                .await
                .unwrap_err()
        }
    };
    assert!(
        error.to_string().contains("test-crate/0002_broken"),
        "{error}"
    );
}

async fn in_flight_records_are_replaced_by_the_final_one(db: &TestDb) {
    let layer = db.layer().record_in_flight(true);
    let chat = layer.layer(scripted(|_| {
        hanging(vec![Ok(ChatEvent::text("Hel")), Ok(ChatEvent::text("lo"))])
    }));
    let conv = conversation();
    let mut stream = chat
        .clone()
        .oneshot(request(&conv, "hi").model("m-1"))
        .await
        .unwrap();
    stream.next().await.unwrap().unwrap();
    layer.flush().await.unwrap();
    // While the call runs, its start is on record.
    let in_flight = only_call(db, &conv).await;
    assert_eq!(in_flight.outcome, CallOutcome::InFlight);
    assert_eq!(in_flight.request.messages.len(), 2);
    assert_eq!(in_flight.model.as_deref(), Some("m-1"));
    assert_eq!(in_flight.ended_at, in_flight.started_at);
    assert!(in_flight.response.messages.is_empty());
    assert!(db.store.load_conversation(&conv).await.unwrap().is_empty());

    drop(stream);
    layer.flush().await.unwrap();
    let last = only_call(db, &conv).await;
    assert_eq!(last.call_id, in_flight.call_id);
    assert_eq!(last.outcome, CallOutcome::Cancelled);
    assert_eq!(last.text(), "Hel", "only what the caller had read");

    // An in-flight record arriving late never overwrites a final one.
    db.store
        .write_calls(std::slice::from_ref(&in_flight))
        .await
        .unwrap();
    assert_eq!(only_call(db, &conv).await, last);

    // A call whose process "dies" (its stream is leaked: no final record ever comes) stays in flight until the
    // next start closes it.
    let conv_dead = conversation();
    let stream = chat
        .clone()
        .oneshot(request(&conv_dead, "hi"))
        .await
        .unwrap();
    std::mem::forget(stream);
    layer.flush().await.unwrap();
    assert_eq!(
        only_call(db, &conv_dead).await.outcome,
        CallOutcome::InFlight
    );
    let before_start = std::time::SystemTime::now() + Duration::from_millis(1);
    let closed = match &db.backend {
        common::Backend::Sqlite(store) => store.abandon_in_flight(before_start).await.unwrap(),
        common::Backend::Postgres(store) => store.abandon_in_flight(before_start).await.unwrap(),
    };
    assert_eq!(closed, 1, "only the dead call was still in flight");
    let abandoned = only_call(db, &conv_dead).await;
    assert_eq!(abandoned.outcome, CallOutcome::Interrupted { error: None });
    assert_eq!(abandoned.ended_at, abandoned.started_at);
    assert_eq!(
        only_call(db, &conv).await,
        last,
        "final records are untouched"
    );

    // A completed call under the same layer leaves one completed record.
    let chat = layer.layer(scripted(|_| {
        scripted_stream(Delivery::OneByOne, answer("done"))
    }));
    let conv = conversation();
    let response = chat
        .oneshot(request(&conv, "q"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "done");
    assert_eq!(only_call(db, &conv).await.outcome, CallOutcome::Completed);
}

async fn records_carry_their_cost_and_spend_sums_per_caller_and_conversation(db: &TestDb) {
    use tower_chat::{Cost, ModelPrice, PriceTable, Usage};
    // $1 per million input tokens, $2 per million output tokens: `answer` uses 10 + 4 tokens = 18,000 nano-$.
    let prices = PriceTable::new().with("scripted-model", ModelPrice::per_million_usd(1.0, 2.0));
    let per_call = Cost::from_nanos(18_000);
    let started = std::time::SystemTime::now();
    for shape in SHAPES {
        let layer = db.layer().prices(prices.clone());
        let chat = layer.layer(scripted(move |req: &ChatRequest| {
            if req.options.model.as_deref() == Some("unpriced") {
                // No response metadata either: nothing to price it by.
                let usage = Usage {
                    input_tokens: 7,
                    output_tokens: 1,
                    ..Usage::default()
                };
                scripted_stream(
                    shape,
                    vec![
                        Ok(ChatEvent::text("ok")),
                        Ok(ChatEvent::Usage { usage }),
                        Ok(ChatEvent::finish(FinishReason::Stop)),
                    ],
                )
            } else {
                scripted_stream(shape, answer("Hi."))
            }
        }));
        let alice_conv = conversation();
        let bob_conv = conversation();
        let call = |conv: &ConversationId, caller: &str, model: &str| {
            request(conv, "Hello")
                .model(model)
                .with_extension(CallerIdentity::new(caller))
        };
        let alice = format!("alice-{}", common::uuid_simple());
        let bob = format!("bob-{}", common::uuid_simple());
        for req in [
            call(&alice_conv, &alice, "scripted-model"),
            call(&alice_conv, &alice, "scripted-model"),
            call(&alice_conv, &alice, "unpriced"),
            call(&bob_conv, &bob, "scripted-model"),
        ] {
            chat.clone()
                .oneshot(req)
                .await
                .unwrap()
                .collect_response()
                .await
                .unwrap();
        }
        let records = db.store.conversation_calls(&alice_conv).await.unwrap();
        let costs: Vec<_> = records.iter().map(|r| r.cost).collect();
        assert_eq!(
            costs,
            vec![Some(per_call), Some(per_call), None],
            "{shape:?}"
        );

        let spend = db
            .store
            .spend(&SpendQuery::caller(alice.as_str()))
            .await
            .unwrap();
        assert_eq!(
            spend,
            Spend {
                calls: 3,
                input_tokens: 27,
                output_tokens: 9,
                cost: Cost::from_nanos(36_000),
                unpriced_calls: 1,
                estimated_calls: 0,
            },
            "{shape:?}"
        );
        let spend = db
            .store
            .spend(&SpendQuery::conversation(bob_conv.clone()))
            .await
            .unwrap();
        assert_eq!((spend.calls, spend.cost), (1, per_call));
        // A period filter: nothing of bob's started before this test.
        let before =
            SpendQuery::caller(bob.as_str()).between(started - Duration::from_secs(3600), started);
        assert_eq!(db.store.spend(&before).await.unwrap(), Spend::default());

        // The listing carries the caller, tokens and cost of each conversation.
        let listed = db
            .store
            .list_conversations(&ConversationQuery::new().caller(alice.as_str()))
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "{shape:?}");
        let summary = &listed[0];
        assert_eq!(
            summary.caller.as_ref().map(|c| c.as_str()),
            Some(alice.as_str())
        );
        assert_eq!(
            (summary.calls, summary.input_tokens, summary.output_tokens),
            (3, 27, 9)
        );
        assert_eq!(
            (summary.cost, summary.unpriced_calls),
            (Cost::from_nanos(36_000), 1)
        );

        // Call summaries: scalar columns, oldest first, filtered by caller and period, the latest `limit`.
        let calls = db
            .store
            .call_summaries(&CallQuery {
                caller: Some(CallerIdentity::new(alice.as_str())),
                ..CallQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(calls.len(), 3, "{shape:?}");
        assert!(calls.windows(2).all(|w| w[0].started_at <= w[1].started_at));
        assert_eq!(
            calls.iter().map(|c| c.cost).collect::<Vec<_>>(),
            vec![Some(per_call), Some(per_call), None]
        );
        assert_eq!(calls[2].model.as_deref(), Some("unpriced"));
        assert_eq!((calls[2].input_tokens, calls[2].output_tokens), (7, 1));
        assert!(calls.iter().all(|c| c.outcome == CallOutcome::Completed
            && c.conversation_id == alice_conv
            && c.latency() >= c.time_to_first_token().unwrap_or_default()));
        let latest = db
            .store
            .call_summaries(&CallQuery {
                caller: Some(CallerIdentity::new(alice.as_str())),
                ..CallQuery::default().limit(2)
            })
            .await
            .unwrap();
        assert_eq!(
            latest.iter().map(|c| &c.call_id).collect::<Vec<_>>(),
            calls[1..].iter().map(|c| &c.call_id).collect::<Vec<_>>(),
            "the latest two, oldest first"
        );
        let window = CallQuery {
            caller: Some(CallerIdentity::new(bob.as_str())),
            ..CallQuery::between(started - Duration::from_secs(3600), started)
        };
        assert!(db.store.call_summaries(&window).await.unwrap().is_empty());
    }
}

/// The bytes the database takes with SQLite's write-ahead log copied into the file and emptied first: how many
/// pages of log the commits left depends on when SQLite last checkpointed, not on what they stored.
async fn checkpointed_size(db: &TestDb) -> u64 {
    if let common::Backend::Sqlite(store) = &db.backend {
        store
            .run("checkpoint", |conn| {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            })
            .await
            .unwrap();
    }
    db.size_bytes().await
}

/// A call an inner layer refused before sending it (a rate limit) is recorded as a small row: caller, model,
/// outcome and the request's size, not its messages. Twenty refusals of a megabyte each grow the database by far
/// less than their bodies; the same refusal without the marker (the provider's own 429) keeps its request.
async fn refusals_before_sending_are_recorded_small_whatever_the_request_held(db: &TestDb) {
    const REFUSALS: usize = 20;
    const BODY: usize = 1024 * 1024;
    let layer = db.layer();
    let refusing = tower::service_fn(|_req: ChatRequest| async {
        Err::<tower_chat::ChatStream, _>(
            ChatError::new(
                ErrorKind::RateLimited {
                    retry_after: Some(Duration::from_secs(30)),
                },
                "caller alice is over the requests limit",
            )
            .refused_before_sending(),
        )
    });
    let chat = Persistence::new(refusing, layer.clone());
    // Text no compression shrinks (PostgreSQL compresses large values): letters from a generator seeded by `i`.
    let large = |i: usize| {
        let mut state = i as u64 + 1;
        let text: String = (0..BODY)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                char::from(b'a' + (state >> 59) as u8 % 26)
            })
            .collect();
        ChatRequest::new(vec![Message::system("be brief"), Message::user(text)])
            .model("m")
            .tool(ToolSpec::new("big", "d".repeat(64 * 1024), json!({})))
            .with_extension(CallerIdentity::new("alice"))
            .with_extension(conversation())
    };
    // One record first, so the tables exist with their first pages.
    let _ = chat.clone().oneshot(large(0)).await;
    layer.flush().await.unwrap();
    let before = checkpointed_size(db).await;
    let mut conversations = Vec::new();
    for i in 1..=REFUSALS {
        let request = large(i);
        conversations.push(request.conversation_id().unwrap().clone());
        let error = chat.clone().oneshot(request).await.err().unwrap();
        assert!(error.is_refused_before_sending());
    }
    layer.flush().await.unwrap();
    let growth = checkpointed_size(db).await.saturating_sub(before);
    eprintln!(
        "{REFUSALS} refusals of {BODY} bytes each grew the database by {growth} bytes ({} per refusal)",
        growth / REFUSALS as u64
    );
    assert!(
        growth < (REFUSALS * 8192) as u64,
        "{REFUSALS} refusals grew the database by {growth} bytes"
    );
    let record = only_call(db, &conversations[0]).await;
    assert_eq!(record.caller, Some(CallerIdentity::new("alice")));
    assert_eq!(record.model.as_deref(), Some("m"));
    assert!(record.request.messages.is_empty());
    assert_eq!(record.request.options.model.as_deref(), Some("m"));
    assert!(record.request.options.tools.is_empty());
    assert_eq!(
        record.request.omitted,
        Some(tower_chat_persistence::RequestSize {
            messages: 2,
            bytes: ("be brief".len() + BODY) as u64,
        })
    );
    match &record.outcome {
        CallOutcome::Failed { error } => {
            assert_eq!(error.kind, "rate_limited");
            assert_eq!(error.message, "caller alice is over the requests limit");
        }
        other => panic!("{other:?}"),
    }

    // A refusal that may have left (no marker: the provider's own 429) keeps what was sent.
    let provider_refusing = tower::service_fn(|_req: ChatRequest| async {
        Err::<tower_chat::ChatStream, _>(ChatError::new(
            ErrorKind::RateLimited { retry_after: None },
            "slow down",
        ))
    });
    let conv = conversation();
    let _ = Persistence::new(provider_refusing, layer.clone())
        .oneshot(request(&conv, "kept"))
        .await;
    layer.flush().await.unwrap();
    let record = only_call(db, &conv).await;
    assert_eq!(record.request.omitted, None);
    assert_eq!(
        record.request.messages.as_slice(),
        [Message::system("be brief"), Message::user("kept")]
    );
}

/// A stream or future that leaves an estimate in the request's slot when it is dropped or ends without usage,
/// as the limits layer settles such a call.
struct Estimating {
    inner: tower_chat::ChatStream,
    slot: Option<tower_chat::EstimatedUsage>,
    usage: tower_chat::Usage,
}

impl futures_util::Stream for Estimating {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.inner.as_mut().poll_next(cx));
        if item.is_none() {
            // Ended without a usage report: charged (and left) before the end reaches the caller.
            if let Some(slot) = self.slot.take() {
                slot.set(self.usage);
            }
        }
        std::task::Poll::Ready(item)
    }
}

impl Drop for Estimating {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.set(self.usage);
        }
    }
}

/// An inner layer that charged an estimate (no usage report came) leaves it in the request's
/// `EstimatedUsage`: the record carries it, marked estimated and priced, whether the caller dropped the stream,
/// dropped the call before it answered, or the stream ended without usage; `spend` counts those calls.
async fn an_estimate_charged_inside_is_recorded_marked_estimated(db: &TestDb) {
    use tower_chat::{Cost, EstimatedUsage, ModelPrice, PriceTable, Usage};
    let estimate = Usage {
        input_tokens: 1_000,
        output_tokens: 3,
        ..Usage::default()
    };
    // $1 / $2 per million: 1,000 × 1,000 + 3 × 2,000 nano-$.
    let cost = Cost::from_nanos(1_006_000);
    let prices = PriceTable::new().with("m", ModelPrice::per_million_usd(1.0, 2.0));
    let layer = db.layer().prices(prices);
    let slot = |req: &ChatRequest| req.extensions.get::<EstimatedUsage>().cloned();
    let call = |conv: &ConversationId| request(conv, "q").model("m");

    // The caller drops the stream mid-way.
    let chat = layer.layer(scripted(move |req: &ChatRequest| {
        Box::pin(Estimating {
            inner: hanging(vec![Ok(ChatEvent::text("part"))]),
            slot: slot(req),
            usage: estimate,
        })
    }));
    let dropped = conversation();
    let mut stream = chat.clone().oneshot(call(&dropped)).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    drop(stream);

    // The stream ends without a usage report.
    let chat = layer.layer(scripted(move |req: &ChatRequest| {
        Box::pin(Estimating {
            inner: scripted_stream(
                Delivery::OneByOne,
                vec![
                    Ok(ChatEvent::text("done")),
                    Ok(ChatEvent::finish(FinishReason::Stop)),
                ],
            ),
            slot: slot(req),
            usage: estimate,
        })
    }));
    let unreported = conversation();
    chat.oneshot(call(&unreported))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();

    // The caller drops the call before the inner service answered.
    let waiting = tower::service_fn(move |req: ChatRequest| {
        let guard = Estimating {
            inner: Box::pin(futures_util::stream::empty()),
            slot: slot(&req),
            usage: estimate,
        };
        async move {
            let _guard = guard;
            std::future::pending::<Result<tower_chat::ChatStream, ChatError>>().await
        }
    });
    let unanswered = conversation();
    let mut chat = Persistence::new(waiting, layer.clone());
    let future = tower::Service::call(
        tower::ServiceExt::ready(&mut chat).await.unwrap(),
        call(&unanswered),
    );
    drop(future);

    layer.flush().await.unwrap();
    for conv in [&dropped, &unreported, &unanswered] {
        let record = only_call(db, conv).await;
        assert!(record.usage_estimated, "{conv}: {record:?}");
        assert_eq!(record.usage(), estimate, "{conv}");
        assert_eq!(record.cost, Some(cost), "{conv}");
    }
    assert_eq!(
        only_call(db, &dropped).await.outcome,
        CallOutcome::Cancelled
    );
    assert_eq!(
        only_call(db, &unanswered).await.outcome,
        CallOutcome::Cancelled
    );
    assert_eq!(
        only_call(db, &unreported).await.outcome,
        CallOutcome::Completed
    );

    // Reported usage is the provider's, never marked.
    let chat = layer.layer(scripted(|_: &ChatRequest| {
        scripted_stream(Delivery::OneByOne, answer("Hi."))
    }));
    let reported = conversation();
    chat.oneshot(call(&reported))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    layer.flush().await.unwrap();
    let record = only_call(db, &reported).await;
    assert!(!record.usage_estimated);
    assert_eq!(record.usage().input_tokens, 10);

    let spend = db
        .store
        .spend(&SpendQuery::conversation(dropped.clone()))
        .await
        .unwrap();
    assert_eq!(
        (spend.calls, spend.input_tokens, spend.estimated_calls),
        (1, 1_000, 1)
    );
}
