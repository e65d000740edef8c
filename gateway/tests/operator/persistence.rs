//! Every model call is recorded through the persistence layer (SQLite `--db`, PostgreSQL `--database-url`): one
//! record per round trip, tool rounds included.

use crate::common;

use common::{post, request, three_add_calls, tool_result, Harness};
use tower_chat::test_server::Reply;
use tower_chat::{ConversationId, Message};
use tower_chat_persistence::{CallOutcome, CallRecord, Store};
use tower_chat_testkit::until;

/// `test-model` at $1 / $2 per million input / output tokens.
fn priced(config: &mut tower_chat_gateway::Config) {
    config.file.limits.prices.insert(
        "test-model".into(),
        tower_chat_gateway::limits::PriceEntry {
            input: 1.0,
            output: 2.0,
            ..Default::default()
        },
    );
}

/// The records of one three-call turn (the calls of `turn`, in start order): one per model round trip, each
/// with its own round index, usage, cost, timestamps and outcome; the tool results the loop ran are in the next
/// round's request.
fn assert_one_record_per_model_call(calls: &[CallRecord], caller: Option<&str>) {
    assert_eq!(calls.len(), 3, "one record per model call: {calls:#?}");
    let usage: Vec<(u64, u64)> = calls
        .iter()
        .map(|c| (c.usage().input_tokens, c.usage().output_tokens))
        .collect();
    assert_eq!(usage, [(20, 9), (20, 9), (12, 5)], "each round's own usage");
    let costs: Vec<Option<u64>> = calls.iter().map(|c| c.cost.map(|c| c.as_nanos())).collect();
    assert_eq!(costs, [Some(38_000), Some(38_000), Some(22_000)]);
    let rounds: Vec<u32> = calls.iter().map(|c| c.round_index).collect();
    assert_eq!(rounds, [0, 1, 2]);
    for call in calls {
        assert_eq!(call.outcome, CallOutcome::Completed);
        assert_eq!(call.caller.as_ref().map(|c| c.as_str()), caller);
        assert_eq!(call.provider.as_deref(), Some("openai"));
        assert_eq!(call.model.as_deref(), Some("scripted-model"));
        let first_token = call.first_token_at.expect("every round streamed output");
        assert!(call.started_at <= first_token && first_token <= call.ended_at);
    }
    // Each round starts after the previous one ended (the loop ran the tool in between).
    for pair in calls.windows(2) {
        assert!(pair[0].ended_at <= pair[1].started_at, "{pair:#?}");
    }
    assert_eq!(
        calls[0].request.messages.as_slice(),
        [Message::user("2+3, +4?")]
    );
    assert_eq!(called(&calls[0]), "call_add");
    // Round 1 was sent round 0's call and the result the loop ran.
    let sent = calls[1].request.messages.as_slice();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(matches!(&sent[2], Message::Tool(t) if t.call_id == "call_add" && t.content == "5"));
    assert_eq!(called(&calls[1]), "call_add2");
    assert!(matches!(calls[2].request.messages.last(), Some(Message::Tool(t)) if t.content == "9"));
    assert_eq!(
        calls[2].response.messages,
        [Message::assistant("The sum is 9")]
    );
}

/// The id of the tool call a round answered with.
fn called(call: &CallRecord) -> &str {
    match call.response.messages.as_slice() {
        [Message::Assistant(a)] => &a.tool_calls[0].id,
        other => panic!("not one assistant message with a call: {other:?}"),
    }
}

#[tokio::test]
async fn every_model_call_of_a_turn_is_its_own_record_with_its_usage_and_timestamps() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "recorder:sk-recorded\n").unwrap();
    let keys_path = keys.path().to_owned();
    let mut gw = Harness::start(three_add_calls, move |c| {
        c.api_keys_file = Some(keys_path);
        priced(c);
    })
    .await;
    let url = gw.url("/v1/chat/completions");
    for stream in [false, true] {
        let answer = post(
            &url,
            request(stream, "2+3, +4?").to_string(),
            &[
                ("authorization", "Bearer sk-recorded"),
                ("x-conversation-id", &format!("conv-gateway-{stream}")),
            ],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // Shutdown flushes the writer.
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = gw.records().await;
    for stream in [false, true] {
        // With gateway keys a conversation id is scoped to its caller.
        let conversation = ConversationId::new(format!("recorder/conv-gateway-{stream}"));
        let calls = store.conversation_calls(&conversation).await.unwrap();
        assert_one_record_per_model_call(&calls, Some("recorder"));
        // The conversation to continue from is the last round's: every message of the turn.
        let history = store.load_conversation(&conversation).await.unwrap();
        assert_eq!(history.len(), 6, "{history:?}");
        assert_eq!(history[0], Message::user("2+3, +4?"));
        assert!(matches!(&history[2], Message::Tool(t) if t.content == "5"));
        assert!(matches!(&history[4], Message::Tool(t) if t.content == "9"));
        assert_eq!(history[5], Message::assistant("The sum is 9"));
        // The conversation listing and the spend sum the rounds.
        let spend = store
            .spend(&tower_chat_persistence::SpendQuery::conversation(
                conversation.clone(),
            ))
            .await
            .unwrap();
        assert_eq!(
            (spend.calls, spend.input_tokens, spend.output_tokens),
            (3, 52, 23)
        );
        assert_eq!(spend.cost.as_nanos(), 98_000);
    }
}

#[tokio::test]
async fn a_client_hanging_up_mid_stream_is_recorded_as_cancelled_with_the_partial_output() {
    use tower_chat::test_server::Part;

    let mut gw = Harness::start(
        |_, _| {
            Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n",
            ])
            .then(Part::Hang)
        },
        |_| {},
    )
    .await;
    stream_then_hang_up(&gw, "conv-hangup", "hi", "partial").await;
    // The gateway noticed the hang-up when it dropped the upstream stream: the persistence layer handed the
    // record to its writer before that (in the recording stream's drop), and shutdown flushes the writer.
    gw.provider.hangups(1).await;
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = gw.records().await;
    let calls = store
        .conversation_calls(&ConversationId::new("conv-hangup"))
        .await
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].outcome,
        CallOutcome::Cancelled,
        "{:?}",
        calls[0].outcome
    );
    assert_eq!(calls[0].response.text(), "partial");
}

/// What the hang-up tests' upstream streams before it stops answering: reasoning, the start of a tool call
/// with half its arguments, then text in two chunks (the text last, so that a client that has seen it knows
/// every earlier event went through the gateway).
fn reasoning_half_a_tool_call_then_text() -> Reply {
    use tower_chat::test_server::Part;

    Reply::sse_chunks([
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"weighing it\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_half\",\
         \"type\":\"function\",\"function\":{\"name\":\"lookup\",\"arguments\":\"{\\\"city\\\": \\\"Par\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial \"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"answer\"}}]}\n\n",
    ])
    .then(Part::Hang)
}

/// A client streams an answer in `conversation`, hangs up after its text, and the gateway shuts down (flushing
/// its record writer).
async fn hang_up_after_the_text(gw: &mut Harness, conversation: &str) {
    stream_then_hang_up(gw, conversation, "hi", "answer").await;
    gw.provider.hangups(1).await;
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
}

/// The record [`reasoning_half_a_tool_call_then_text`] leaves when the client hangs up after the text: cancelled,
/// with the text, the reasoning and the tool call's name and argument text so far.
fn assert_cancelled_with_everything_streamed(calls: &[CallRecord]) {
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let record = &calls[0];
    assert_eq!(record.outcome, CallOutcome::Cancelled, "{record:#?}");
    let answer = record
        .response
        .last_assistant()
        .unwrap_or_else(|| panic!("no partial output in {record:#?}"));
    assert_eq!(answer.content, "partial answer");
    assert_eq!(answer.reasoning.len(), 1, "{answer:#?}");
    assert_eq!(answer.reasoning[0].text, "weighing it");
    assert_eq!(answer.tool_calls.len(), 1, "{answer:#?}");
    let call = &answer.tool_calls[0];
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        ("call_half", "lookup")
    );
    assert_eq!(
        call.arguments,
        tower_chat::ToolArguments::parse("{\"city\": \"Par".to_owned())
    );
}

#[tokio::test]
async fn a_hang_up_keeps_the_reasoning_text_and_tool_call_fragments_streamed_so_far() {
    let mut gw = Harness::start(|_, _| reasoning_half_a_tool_call_then_text(), |_| {}).await;
    hang_up_after_the_text(&mut gw, "conv-fragments").await;

    let store = gw.records().await;
    let calls = store
        .conversation_calls(&ConversationId::new("conv-fragments"))
        .await
        .unwrap();
    assert_cancelled_with_everything_streamed(&calls);
}

#[tokio::test]
async fn with_database_url_a_hang_up_keeps_the_fragments_streamed_so_far() {
    use tower_chat_persistence::PostgresStore;

    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let database_url = url.clone();
    let mut gw = Harness::start(
        |_, _| reasoning_half_a_tool_call_then_text(),
        move |c| c.database_url = Some(database_url),
    )
    .await;
    // Unique per run: the database outlives the test.
    let conversation = format!("conv-pg-hangup-{}", uuid::Uuid::new_v4().simple());
    hang_up_after_the_text(&mut gw, &conversation).await;

    let store = PostgresStore::connect(url).await.unwrap();
    let calls = store
        .conversation_calls(&ConversationId::new(conversation))
        .await
        .unwrap();
    assert_cancelled_with_everything_streamed(&calls);
}

#[tokio::test]
async fn with_database_url_calls_and_approvals_go_to_postgresql() {
    use tower_chat_persistence::PostgresStore;

    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let database_url = url.clone();
    let mut gw = Harness::start(
        |req, _| {
            let messages = req.body["messages"].as_array().unwrap();
            match tool_result(messages, "call_write") {
                None => Reply::openai_tool_calls(&[(
                    "call_write",
                    "write_file",
                    r#"{"path": "pg.txt", "content": "pg"}"#,
                )]),
                Some(result) => Reply::openai_text(&format!("done: {result}")),
            }
        },
        move |c| c.database_url = Some(database_url),
    )
    .await;
    // Unique per run: the database outlives the test.
    let conversation = format!("conv-pg-{}", uuid::Uuid::new_v4().simple());
    let url_chat = gw.url("/v1/chat/completions");
    let headers = [("x-conversation-id", conversation.as_str())];
    let first = post(&url_chat, request(false, "write pg").to_string(), &headers)
        .await
        .json();
    let message = &first["choices"][0]["message"];
    let id = message["tower_chat_approvals"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let store = PostgresStore::connect(url).await.unwrap();
    let approvals = tower_chat_approval::PostgresApprovalStore::new(store.clone())
        .await
        .unwrap();
    let pending = tower_chat_approval::ApprovalStore::get_pending(&approvals, &id)
        .await
        .unwrap()
        .expect("the approval is pending in PostgreSQL");
    assert_eq!(pending.conversation_id.as_str(), conversation);

    let mut resume = request(false, "write pg");
    resume["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"role": "assistant", "content": message["content"]}));
    resume["tower_chat"] = serde_json::json!({"approvals": [{"id": id, "approved": true}]});
    let second = post(&url_chat, resume.to_string(), &headers).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        std::fs::read_to_string(gw.root().join("pg.txt")).unwrap(),
        "pg"
    );
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let conversation = ConversationId::new(conversation);
    assert_eq!(
        store.conversation_calls(&conversation).await.unwrap().len(),
        2
    );
    let history = store.load_conversation(&conversation).await.unwrap();
    assert_eq!(
        history.last(),
        Some(&Message::assistant("done: wrote 2 bytes to pg.txt"))
    );
}

#[tokio::test]
async fn with_database_url_every_model_call_is_its_own_record_too() {
    use tower_chat_persistence::PostgresStore;

    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let database_url = url.clone();
    let mut gw = Harness::start(three_add_calls, move |c| {
        c.database_url = Some(database_url);
        priced(c);
    })
    .await;
    // Unique per run: the database outlives the test.
    let conversation = format!("conv-pg-rounds-{}", uuid::Uuid::new_v4().simple());
    let answer = post(
        &gw.url("/v1/chat/completions"),
        request(true, "2+3, +4?").to_string(),
        &[("x-conversation-id", conversation.as_str())],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = PostgresStore::connect(url).await.unwrap();
    let conversation = ConversationId::new(conversation);
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_one_record_per_model_call(&calls, None);
    let listed = store
        .list_conversations(&tower_chat_persistence::ConversationQuery::new().limit(1000))
        .await
        .unwrap();
    let summary = listed
        .iter()
        .find(|c| c.conversation_id == conversation)
        .expect("listed");
    assert_eq!(
        (summary.calls, summary.input_tokens, summary.output_tokens),
        (3, 52, 23)
    );
    assert_eq!(summary.cost.as_nanos(), 98_000);
}

/// Ask for a streamed answer in conversation `conversation` on a raw connection, read until `seen` has
/// arrived, then drop the connection: the test controls exactly when the client goes away.
async fn stream_then_hang_up(gw: &Harness, conversation: &str, user: &str, seen: &str) {
    let mut socket = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let body = request(true, user).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         x-conversation-id: {conversation}\r\ncontent-length: {}\r\n\r\n{body}",
        gw.addr,
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, head.as_bytes())
        .await
        .unwrap();
    let mut received = Vec::new();
    while !String::from_utf8_lossy(&received).contains(seen) {
        let mut buf = [0u8; 4096];
        let n = tokio::io::AsyncReadExt::read(&mut socket, &mut buf)
            .await
            .unwrap();
        assert!(n > 0, "connection closed early");
        received.extend_from_slice(&buf[..n]);
    }
}

/// The bytes of the gateway's SQLite database once its write-ahead log is checkpointed into the file (the log's
/// size depends on when SQLite last checkpointed): the file and whatever is left beside it.
async fn database_bytes(gw: &Harness) -> u64 {
    let store = gw.records().await;
    // The call log's search index is a database of its own beside it (`gateway.db-search`), written by a thread
    // of its own: its write-ahead log is folded in too, or its size would depend on whether that thread had
    // closed its file yet.
    let search = gw.files.path().join("gateway.db-search");
    store
        .run("checkpoint", move |conn| {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            if search.exists() {
                conn.execute("ATTACH DATABASE ?1 AS search", [search.to_string_lossy()])?;
                conn.query_row("PRAGMA search.wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
                conn.execute_batch("DETACH DATABASE search")?;
            }
            Ok(())
        })
        .await
        .unwrap();
    drop(store);
    // A file may go between the listing and its size (the gateway's store empties and removes its own files
    // while it runs): it then holds nothing.
    std::fs::read_dir(gw.files.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("gateway.db")
        })
        .map(|entry| entry.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// `size` bytes of letters no compression shrinks, different for each `seed`.
fn incompressible(size: usize, seed: u64) -> String {
    let mut state = seed + 1;
    (0..size)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            char::from(b'a' + (state >> 59) as u8 % 26)
        })
        .collect()
}

/// A gateway with one call a day for every key, `alice`'s key, and prices for `test-model`.
async fn one_call_a_day(keys: &std::path::Path) -> Harness {
    std::fs::write(keys, "alice:sk-alice\n").unwrap();
    let keys = keys.to_owned();
    Harness::start(
        |_, _| Reply::openai_text("ok"),
        move |c| {
            c.api_keys_file = Some(keys);
            c.file.limits.default.requests_per_day = Some(1);
            priced(c);
        },
    )
    .await
}

/// Requests the limits refuse (429) are recorded as small rows — caller, model, reason and the request's size —
/// whatever their bodies held: ten refused 3 MB requests grow the database by a few KB, not 30 MB. Requests
/// refused before the stack (400 unparsable, 413 over the body limit, 401 without a valid key) leave no record.
#[tokio::test]
async fn refused_requests_are_recorded_small_and_those_refused_before_the_stack_not_at_all() {
    const REFUSALS: u64 = 10;
    const MESSAGE: usize = 3 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let url_of = |gw: &Harness| gw.url("/v1/chat/completions");
    let alice = [("authorization", "Bearer sk-alice")];

    // The baseline: the day's one call, and nothing else.
    let mut baseline = one_call_a_day(&dir.path().join("keys-baseline")).await;
    let answer = post(&url_of(&baseline), request(false, "hi").to_string(), &alice).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    baseline.shutdown();
    baseline.server.take().unwrap().await.unwrap().unwrap();
    let baseline_bytes = database_bytes(&baseline).await;

    let mut gw = one_call_a_day(&dir.path().join("keys")).await;
    let url = url_of(&gw);
    let answer = post(&url, request(false, "hi").to_string(), &alice).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    for i in 0..REFUSALS {
        let body = request(false, &incompressible(MESSAGE, i)).to_string();
        let answer = post(&url, body, &alice).await;
        assert_eq!(answer.status, 429, "{}", answer.body);
    }
    // Refused before the stack: unparsable, over the body limit, a wrong key.
    let unparsable = format!("{{\"messages\": [{}", incompressible(MESSAGE, 99));
    assert_eq!(post(&url, unparsable, &alice).await.status, 400);
    let too_large = request(false, &incompressible(5 * 1024 * 1024, 98)).to_string();
    assert_eq!(post(&url, too_large, &alice).await.status, 413);
    let body = request(false, &incompressible(MESSAGE, 97)).to_string();
    let wrong_key = [("authorization", "Bearer sk-mallory")];
    assert_eq!(post(&url, body, &wrong_key).await.status, 401);
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let growth = database_bytes(&gw).await.saturating_sub(baseline_bytes);
    eprintln!(
        "{REFUSALS} refused {MESSAGE}-byte requests grew the database by {growth} bytes ({} per refusal)",
        growth / REFUSALS
    );
    assert!(
        growth < REFUSALS * 8192,
        "{REFUSALS} refusals grew the database by {growth} bytes"
    );
    let store = gw.records().await;
    let calls = store
        .call_summaries(&tower_chat_persistence::CallQuery::default())
        .await
        .unwrap();
    // The day's call and the refusals; nothing of the 400, 413 and 401.
    assert_eq!(calls.len() as u64, 1 + REFUSALS, "{calls:#?}");
    let refused: Vec<_> = calls
        .iter()
        .filter(
            |c| matches!(&c.outcome, CallOutcome::Failed { error } if error.kind == "rate_limited"),
        )
        .collect();
    assert_eq!(refused.len() as u64, REFUSALS);
    let record = store.call(&refused[0].call_id).await.unwrap().unwrap();
    assert_eq!(record.caller.as_ref().map(|c| c.as_str()), Some("alice"));
    assert_eq!(record.model.as_deref(), Some("test-model"));
    assert!(record.request.messages.is_empty());
    let omitted = record.request.omitted.expect("the request's size");
    assert_eq!(omitted.messages, 1);
    assert_eq!(omitted.bytes, MESSAGE as u64);
}

/// A streamed call the client hangs up on midway, with `[limits]` on: the limits charge an estimate (no usage
/// report came), and the call's record carries the same tokens and cost, marked estimated; `/v1/usage`'s
/// recorded spend agrees with the limits' counters.
#[tokio::test]
async fn a_cancelled_stream_is_recorded_with_the_estimate_the_limits_charged() {
    use tower_chat::test_server::Part;

    let minute = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60
    };
    let started_in = minute();
    let mut gw = Harness::start(
        |_, _| {
            Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial answer\"}}]}\n\n",
            ])
            .then(Part::Hang)
        },
        |c| {
            let default = &mut c.file.limits.default;
            default.input_tokens_per_minute = Some(1_000_000);
            default.output_tokens_per_minute = Some(1_000_000);
            default.cost_per_day_usd = Some(100.0);
            priced(c);
        },
    )
    .await;
    stream_then_hang_up(
        &gw,
        "conv-estimated",
        "Tell me a long story",
        "partial answer",
    )
    .await;
    gw.provider.hangups(1).await;

    // The record is handed to the writer only as the gateway drops the stream the client left, after the
    // response: `/v1/usage` (which reads the store) shows it a little later.
    let read_usage = || async { common::get(&gw.url("/v1/usage")).await.json() };
    until("the hung-up call's record", || async {
        read_usage().await["recorded"]["calls"] == 1
    })
    .await;
    let usage = read_usage().await;
    let recorded = &usage["recorded"];
    assert_eq!(recorded["calls"], 1, "{usage}");
    assert_eq!(recorded["estimated_calls"], 1, "{usage}");
    let counter = |kind: &str| {
        usage["limits"][0]["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} counter in {usage}"))
            .clone()
    };
    let charged_cost = counter("cost_per_day")["used"].as_u64().unwrap();
    assert!(charged_cost > 0, "{usage}");
    assert_eq!(
        recorded["cost_usd"].as_f64().unwrap(),
        counter("cost_per_day")["used_usd"].as_f64().unwrap(),
        "{usage}"
    );
    // Token windows are a minute long: compared when the call and the read fell in the same one.
    if minute() == started_in {
        assert_eq!(
            recorded["input_tokens"],
            counter("input_tokens")["used"],
            "{usage}"
        );
        assert_eq!(
            recorded["output_tokens"],
            counter("output_tokens")["used"],
            "{usage}"
        );
    }
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = gw.records().await;
    let calls = store
        .conversation_calls(&ConversationId::new("conv-estimated"))
        .await
        .unwrap();
    assert_eq!(calls.len(), 1);
    let record = &calls[0];
    assert_eq!(record.outcome, CallOutcome::Cancelled);
    assert!(record.usage_estimated);
    assert_eq!(record.cost.map(|c| c.as_nanos()), Some(charged_cost));
    assert_eq!(
        serde_json::json!(record.usage().input_tokens),
        recorded["input_tokens"]
    );
    // "partial answer": 14 characters at 4 a token.
    assert_eq!(record.usage().output_tokens, 4);
    assert!(record.usage().input_tokens > 0);
}
