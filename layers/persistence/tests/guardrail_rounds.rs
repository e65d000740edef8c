//! A content policy outside a tool loop outside the persistence layer (the gateway's order: one record per model
//! round), in both stores: tool calls' arguments and tool results the policy redacted are stored redacted, in
//! the round that made the call and in the next round's request; a call the policy blocked is stored withheld
//! (whether a pattern or a check judging it whole, such as moderation, found it);
//! and a key split between two rounds, which the policy catches for the client, is withheld in the record of
//! the round that completed it; a round's text that a check judging whole texts (moderation) blocked is stored
//! withheld in that round's record. What is stored is what the client read, and the withheld text is found by
//! no search and is nowhere in the database.

#[macro_use]
mod common;

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{copy, found, moderation, scripted, verdicts, TestDb};
use serde_json::json;
use tower::{Layer, ServiceExt};
use tower_chat::{
    ChatEvent, ChatRequest, ChatResponse, ChatStreamExt, ConversationId, FinishReason,
    GuardrailAction, GuardrailStage, Message, ToolArguments, ToolCall, Usage,
};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};
use tower_chat_guardrail::{Check, GuardrailLayer};
use tower_chat_persistence::{CallOutcome, CallRecord};
use tower_chat_testkit::{scripted_stream, Delivery, Items, SHAPES};

both_stores!(
    tool_calls_and_results_redacted_outside_are_stored_redacted,
    a_tool_call_blocked_outside_is_stored_withheld,
    a_key_split_between_rounds_is_withheld_in_the_round_that_completes_it,
    a_round_a_whole_text_check_blocked_is_stored_withheld,
    a_tool_call_a_whole_text_check_blocked_is_stored_withheld,
    a_tool_result_a_whole_text_check_redacted_is_stored_redacted,
    a_text_a_whole_text_check_redacted_is_stored_redacted_in_the_next_request_too,
);

const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
/// What the moderation double flags.
const MARKER: &str = "quokka-launch-code";

fn policy() -> GuardrailLayer {
    GuardrailLayer::new()
        .check(Check::secrets())
        .check(Check::personal_data())
}

/// One model round: `text` (when any), then a call of `lookup` with `arguments` (when any), then the finish.
fn round(text: &str, arguments: Option<serde_json::Value>) -> Items {
    let mut items = Vec::new();
    if !text.is_empty() {
        items.push(Ok(ChatEvent::text(text)));
    }
    let reason = match arguments {
        Some(arguments) => {
            let call = ToolCall::new("call-1", "lookup", arguments);
            items.push(Ok(ChatEvent::ToolCallStart {
                index: 0,
                id: call.id.clone(),
                name: call.name.clone(),
            }));
            items.push(Ok(ChatEvent::ToolCallDelta {
                index: 0,
                arguments: call.arguments.to_wire_string(),
            }));
            items.push(Ok(ChatEvent::ToolCallEnd { index: 0, call }));
            FinishReason::ToolCalls
        }
        None => FinishReason::Stop,
    };
    items.push(Ok(ChatEvent::Usage {
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
    }));
    items.push(Ok(ChatEvent::finish(reason)));
    items
}

/// The policy around a tool loop (whose `lookup` tool answers `result`) around the recording layer around a
/// model that answers `first`, and `second` once it has the tool's result; what the client read and the
/// records of the rounds, in order.
async fn through_loop(
    db: &TestDb,
    shape: Delivery,
    first: Items,
    second: Items,
    result: &'static str,
) -> (ChatResponse, Vec<CallRecord>) {
    through_loop_under(db, policy(), shape, first, second, result).await
}

/// [`through_loop`] under `policy`.
async fn through_loop_under(
    db: &TestDb,
    policy: GuardrailLayer,
    shape: Delivery,
    first: Items,
    second: Items,
    result: &'static str,
) -> (ChatResponse, Vec<CallRecord>) {
    let layer = db.layer();
    let (first, second) = (Arc::new(first), Arc::new(second));
    let model = scripted(move |request| {
        let answered = matches!(request.messages.last(), Some(Message::Tool(_)));
        scripted_stream(shape, copy(if answered { &second } else { &first }))
    });
    let lookup = tool_json(
        "lookup",
        "Looks a thing up",
        json!({"type": "object"}),
        move |_arguments, _context| async move { Ok::<_, String>(result) },
    );
    let chat = policy.layer(
        FunctionInvocationLayer::new()
            .tool(lookup)
            .unwrap()
            .layer(layer.clone().layer(model)),
    );
    let conversation = ConversationId::new(format!("conv-{}", common::uuid_simple()));
    let request = ChatRequest::new(vec![Message::user("Look it up, please")])
        .with_extension(conversation.clone());
    let seen = chat
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    // A blocked answer's record is handed over when the policy drops the stream, without waiting for it.
    layer.flush().await.unwrap();
    let mut records = db.store.conversation_calls(&conversation).await.unwrap();
    records.sort_by_key(|record| record.round_index);
    (seen, records)
}

fn calls(messages: &[Message]) -> Vec<&ToolCall> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a.tool_calls.iter()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Every assistant text of `messages`, in order.
fn said(messages: &[Message]) -> String {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a.content.as_str()),
            _ => None,
        })
        .collect()
}

fn results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.content.as_text().unwrap_or_default().to_owned()),
            _ => None,
        })
        .collect()
}

async fn tool_calls_and_results_redacted_outside_are_stored_redacted(db: &TestDb) {
    for shape in SHAPES {
        let (seen, records) = through_loop(
            db,
            shape,
            round("", Some(json!({"to": "ops@zanzibar.example"}))),
            round("Sent.", None),
            "delivered to ann@zanzibar.example",
        )
        .await;
        assert_eq!(records.len(), 2, "{shape:?}");
        // What the client was sent: the call's arguments and the tool's result redacted.
        let sent = calls(&seen.messages);
        assert_eq!(
            sent[0].arguments,
            ToolArguments::Json(json!({"to": "[REDACTED:email]"})),
            "{shape:?}"
        );
        assert_eq!(
            results(&seen.messages),
            ["delivered to [REDACTED:email]"],
            "{shape:?}"
        );
        assert_eq!(seen.text(), "Sent.");

        // The round that made the call keeps it as sent, with the verdict.
        assert_eq!(calls(&records[0].response.messages), sent, "{shape:?}");
        assert_eq!(records[0].outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(
            verdicts(&records[0]),
            vec![(
                GuardrailStage::ToolCall,
                GuardrailAction::Redact,
                Some("email")
            )],
            "{shape:?}"
        );
        // The next round's request carries the call and the result as the client saw them; the result's
        // verdict is kept with it.
        assert_eq!(calls(&records[1].request.messages), sent, "{shape:?}");
        assert_eq!(
            results(&records[1].request.messages),
            results(&seen.messages),
            "{shape:?}"
        );
        assert_eq!(records[1].text(), "Sent.");
        assert_eq!(
            verdicts(&records[1]),
            vec![(
                GuardrailStage::ToolResult,
                GuardrailAction::Redact,
                Some("email")
            )],
            "{shape:?}"
        );
    }
    assert_eq!(found(db, "zanzibar").await, 0);
    assert_eq!(found(db, "Sent").await, SHAPES.len());
    assert!(!db.stored_anywhere("zanzibar").await);
}

async fn a_tool_call_blocked_outside_is_stored_withheld(db: &TestDb) {
    for shape in SHAPES {
        let (seen, records) = through_loop(
            db,
            shape,
            round("Checking.", Some(json!({"key": KEY}))),
            round("never asked", None),
            "never run",
        )
        .await;
        assert_eq!(seen.finish_reason, Some(FinishReason::ContentFilter));
        assert!(calls(&seen.messages).is_empty(), "{shape:?}");
        assert_eq!(
            seen.text(),
            "Checking.[The rest of this answer was withheld by the content policy (check `secrets`).]"
        );
        assert_eq!(records.len(), 1, "{shape:?}");
        let record = &records[0];
        assert_eq!(record.text(), seen.text(), "{shape:?}");
        assert!(calls(&record.response.messages).is_empty(), "{shape:?}");
        assert_eq!(record.outcome, CallOutcome::Blocked, "{shape:?}");
        assert_eq!(
            record.finish_reason(),
            Some(&FinishReason::ContentFilter),
            "{shape:?}"
        );
        assert_eq!(
            verdicts(record),
            vec![(
                GuardrailStage::ToolCall,
                GuardrailAction::Block,
                Some("aws_access_key")
            )],
            "{shape:?}"
        );
    }
    assert_eq!(found(db, KEY).await, 0);
    assert_eq!(found(db, "Checking").await, SHAPES.len());
    assert!(!db.stored_anywhere(KEY).await);
}

async fn a_key_split_between_rounds_is_withheld_in_the_round_that_completes_it(db: &TestDb) {
    let (head, rest) = KEY.split_at(8);
    for shape in SHAPES {
        let (seen, records) = through_loop(
            db,
            shape,
            round(&format!("The key is {head}"), Some(json!({"q": "key"}))),
            round(&format!("{rest} and it rotates"), None),
            "found",
        )
        .await;
        // The client read the first round's text, then the notice: the key's end never reached it.
        let notice =
            "[The rest of this answer was withheld by the content policy (check `secrets`).]";
        assert_eq!(
            said(&seen.messages),
            format!("The key is {head}{notice}"),
            "{shape:?}"
        );
        assert_eq!(seen.finish_reason, Some(FinishReason::ContentFilter));
        assert_eq!(records.len(), 2, "{shape:?}");
        assert_eq!(records[0].text(), format!("The key is {head}"), "{shape:?}");
        assert_eq!(records[0].outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(records[1].text(), notice, "{shape:?}");
        // Together the records say what the client read.
        assert_eq!(
            format!("{}{}", records[0].text(), records[1].text()),
            said(&seen.messages)
        );
        assert_eq!(records[1].outcome, CallOutcome::Blocked, "{shape:?}");
        assert_eq!(
            records[1].finish_reason(),
            Some(&FinishReason::ContentFilter)
        );
        assert_eq!(
            verdicts(&records[1]),
            vec![(
                GuardrailStage::Output,
                GuardrailAction::Block,
                Some("aws_access_key")
            )],
            "{shape:?}"
        );
    }
    for withheld in [rest, "it rotates"] {
        assert_eq!(found(db, withheld).await, 0, "{withheld}");
        assert!(!db.stored_anywhere(withheld).await, "{withheld}");
    }
    assert!(!db.stored_anywhere(KEY).await);
    // The search index holds each round's answer: the first round's is found by its words.
    assert_eq!(found(db, "key is").await, SHAPES.len());
}

async fn a_round_a_whole_text_check_blocked_is_stored_withheld(db: &TestDb) {
    let asked = Arc::new(AtomicUsize::new(0));
    for shape in SHAPES {
        let (seen, records) = through_loop_under(
            db,
            policy().check(moderation(MARKER, asked.clone())),
            shape,
            round("Checking.", Some(json!({"q": "code"}))),
            round(&format!("The code is {MARKER}, use it"), None),
            "found",
        )
        .await;
        let notice =
            "[The rest of this answer was withheld by the content policy (check `moderation`).]";
        assert_eq!(
            said(&seen.messages),
            format!("Checking.{notice}"),
            "{shape:?}"
        );
        assert_eq!(seen.finish_reason, Some(FinishReason::ContentFilter));
        assert_eq!(records.len(), 2, "{shape:?}");
        assert_eq!(records[0].text(), "Checking.", "{shape:?}");
        assert_eq!(records[0].outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(records[1].text(), notice, "{shape:?}");
        assert_eq!(records[1].outcome, CallOutcome::Blocked, "{shape:?}");
        assert_eq!(
            records[1].finish_reason(),
            Some(&FinishReason::ContentFilter)
        );
        assert_eq!(
            verdicts(&records[1]),
            vec![(
                GuardrailStage::Output,
                GuardrailAction::Block,
                Some("violence")
            )],
            "{shape:?}"
        );
    }
    // One judgement per text of each answer, shared by the guard and the round's recorder.
    assert_eq!(asked.load(Ordering::SeqCst), 2 * SHAPES.len());
    for withheld in [MARKER, "use it"] {
        assert_eq!(found(db, withheld).await, 0, "{withheld}");
        assert!(!db.stored_anywhere(withheld).await, "{withheld}");
    }
    assert_eq!(found(db, "Checking").await, SHAPES.len());
}

async fn a_tool_call_a_whole_text_check_blocked_is_stored_withheld(db: &TestDb) {
    let asked = Arc::new(AtomicUsize::new(0));
    for shape in SHAPES {
        let check = moderation(MARKER, asked.clone()).on(&[GuardrailStage::ToolCall]);
        let (seen, records) = through_loop_under(
            db,
            policy().check(check),
            shape,
            round("Checking.", Some(json!({"code": MARKER}))),
            round("never asked", None),
            "never run",
        )
        .await;
        assert_eq!(seen.finish_reason, Some(FinishReason::ContentFilter));
        assert!(calls(&seen.messages).is_empty(), "{shape:?}");
        assert_eq!(
            seen.text(),
            "Checking.[The rest of this answer was withheld by the content policy (check `moderation`).]"
        );
        assert_eq!(records.len(), 1, "{shape:?}");
        let record = &records[0];
        assert_eq!(record.text(), seen.text(), "{shape:?}");
        assert!(calls(&record.response.messages).is_empty(), "{shape:?}");
        assert_eq!(record.outcome, CallOutcome::Blocked, "{shape:?}");
        assert_eq!(
            verdicts(record),
            vec![(
                GuardrailStage::ToolCall,
                GuardrailAction::Block,
                Some("violence")
            )],
            "{shape:?}"
        );
    }
    // The recorder judged each call (its key and its value); the guard took its judgement.
    assert_eq!(asked.load(Ordering::SeqCst), 2 * SHAPES.len());
    assert_eq!(found(db, MARKER).await, 0);
    assert!(!db.stored_anywhere(MARKER).await);
}

async fn a_tool_result_a_whole_text_check_redacted_is_stored_redacted(db: &TestDb) {
    let asked = Arc::new(AtomicUsize::new(0));
    for shape in SHAPES {
        let check = moderation(MARKER, asked.clone())
            .on(&[GuardrailStage::ToolResult])
            .redact();
        let (seen, records) = through_loop_under(
            db,
            policy().check(check),
            shape,
            round("", Some(json!({"q": "code"}))),
            round("Sent.", None),
            "the code is quokka-launch-code",
        )
        .await;
        assert_eq!(
            results(&seen.messages),
            ["the code is [REDACTED:violence]"],
            "{shape:?}"
        );
        assert_eq!(seen.text(), "Sent.");
        assert_eq!(records.len(), 2, "{shape:?}");
        // The next round's request carries the result as the client saw it, with the verdict.
        assert_eq!(
            results(&records[1].request.messages),
            results(&seen.messages),
            "{shape:?}"
        );
        assert_eq!(
            verdicts(&records[1]),
            vec![(
                GuardrailStage::ToolResult,
                GuardrailAction::Redact,
                Some("violence")
            )],
            "{shape:?}"
        );
    }
    // The guard judged each result (the tool loop, outside the recorders, ran the tool); the next round's
    // recorder took its judgement.
    assert_eq!(asked.load(Ordering::SeqCst), SHAPES.len());
    assert_eq!(found(db, MARKER).await, 0);
    assert!(!db.stored_anywhere(MARKER).await);
}

async fn a_text_a_whole_text_check_redacted_is_stored_redacted_in_the_next_request_too(
    db: &TestDb,
) {
    let asked = Arc::new(AtomicUsize::new(0));
    for shape in SHAPES {
        let (seen, records) = through_loop_under(
            db,
            policy().check(moderation(MARKER, asked.clone()).redact()),
            shape,
            round(
                &format!("The code is {MARKER}."),
                Some(json!({"q": "code"})),
            ),
            round("Sent.", None),
            "found",
        )
        .await;
        let redacted = "The code is [REDACTED:violence].";
        assert_eq!(
            said(&seen.messages),
            format!("{redacted}Sent."),
            "{shape:?}"
        );
        assert_eq!(records.len(), 2, "{shape:?}");
        assert_eq!(records[0].text(), redacted, "{shape:?}");
        assert_eq!(
            verdicts(&records[0]),
            vec![(
                GuardrailStage::Output,
                GuardrailAction::Redact,
                Some("violence")
            )],
            "{shape:?}"
        );
        // The next round's request carries the first round's text as the client saw it.
        assert_eq!(said(&records[1].request.messages), redacted, "{shape:?}");
        assert_eq!(records[1].text(), "Sent.", "{shape:?}");
    }
    // Each round's text judged once.
    assert_eq!(asked.load(Ordering::SeqCst), 2 * SHAPES.len());
    assert_eq!(found(db, MARKER).await, 0);
    assert!(!db.stored_anywhere(MARKER).await);
}
