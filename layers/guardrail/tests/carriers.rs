//! Text the request and the answer carry outside the plain message text, and text split so that no single piece
//! holds a whole match: across adjacent text parts, across tool-loop rounds, behind zero-width characters, in the
//! keys of tool arguments. And the work a check may do per request: bounded, refused past the bound.

use futures_util::{stream, StreamExt};
use serde_json::json;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    AssistantMessage, ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ErrorKind,
    FinishReason, Message, Part, ToolCall, ToolMessage,
};
use tower_chat_guardrail::{Check, GuardrailLayer};

mod common;
use common::answering;

const KEY: &str = "sk-proj-ABCDEFGHIJKLMNOPQRSTUV123";

async fn answer(layer: &GuardrailLayer, events: Vec<ChatEvent>) -> (Vec<ChatEvent>, String) {
    let stream = layer
        .layer(service_fn(answering(events)))
        .oneshot(ChatRequest::new(vec![Message::user("go")]))
        .await
        .unwrap();
    let events: Vec<ChatEvent> = stream.map(|e| e.unwrap()).collect().await;
    let text = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (events, text)
}

/// What the request-stage checks make of `messages`: the error, or the messages as the inner service got them.
async fn sent(layer: &GuardrailLayer, messages: Vec<Message>) -> Result<Vec<Message>, ChatError> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let inner = service_fn(move |request: ChatRequest| {
        *record.lock().unwrap() = request.messages.to_vec();
        std::future::ready(Ok::<ChatStream, ChatError>(Box::pin(stream::iter(vec![
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ]))))
    });
    let stream = layer
        .layer(inner)
        .oneshot(ChatRequest::new(messages))
        .await?;
    stream.collect_response().await?;
    let messages = seen.lock().unwrap().clone();
    Ok(messages)
}

/// The request's error, asserting that `check` blocked it (the messages sent are not shown: they can be long).
fn assert_blocked_by(sent: Result<Vec<Message>, ChatError>, check: &str) -> ChatError {
    let Err(error) = sent else {
        panic!("not refused by `{check}`");
    };
    assert_eq!(
        error.kind(),
        &ErrorKind::PolicyBlocked {
            check: check.into()
        }
    );
    error
}

#[tokio::test]
async fn a_key_split_across_two_tool_loop_rounds_never_reaches_the_client_whole() {
    let layer = GuardrailLayer::new().check(Check::secrets());
    let (head, tail) = KEY.split_at(14);
    let events = vec![
        ChatEvent::text(format!("the key is {head}")),
        ChatEvent::ToolCallEnd {
            index: 0,
            call: ToolCall::new("c1", "lookup", json!({})),
        },
        ChatEvent::ToolResult {
            result: ToolMessage::success("c1", "lookup", "nothing"),
        },
        ChatEvent::text(format!("{tail} as I said")),
        ChatEvent::finish(FinishReason::Stop),
    ];
    let (events, text) = answer(&layer, events).await;
    assert!(!text.contains(KEY), "{text:?}");
    assert!(!text.contains(tail), "{text:?}");
    assert!(
        events.contains(&ChatEvent::finish(FinishReason::ContentFilter)),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_keys_of_a_tool_calls_arguments_are_scanned() {
    let layer = GuardrailLayer::new().check(Check::secrets());
    let events = vec![
        ChatEvent::ToolCallEnd {
            index: 0,
            call: ToolCall::new("c1", "store", json!({"nested": {KEY: true}})),
        },
        ChatEvent::finish(FinishReason::ToolCalls),
    ];
    let (events, _) = answer(&layer, events).await;
    assert!(
        !format!("{events:?}").contains(KEY),
        "the call went out: {events:?}"
    );
    assert!(events.contains(&ChatEvent::finish(FinishReason::ContentFilter)));
}

#[tokio::test]
async fn a_key_hidden_by_zero_width_characters_is_caught_in_answers_and_requests() {
    let layer = GuardrailLayer::new().check(Check::secrets());
    let hidden = "sk-proj-ABCDEFGH\u{200b}IJKLMNOPQRST\u{2060}UV123";
    let (events, text) = answer(
        &layer,
        vec![
            ChatEvent::text(format!("key: {hidden}")),
            ChatEvent::finish(FinishReason::Stop),
        ],
    )
    .await;
    assert!(!text.contains("IJKLMNOP"), "{text:?}");
    assert!(events.contains(&ChatEvent::finish(FinishReason::ContentFilter)));

    let refused = sent(&layer, vec![Message::user(format!("use {hidden}"))]).await;
    assert_blocked_by(refused, "secrets");
}

#[tokio::test]
async fn a_key_split_over_adjacent_text_parts_is_refused() {
    let layer = GuardrailLayer::new().check(Check::secrets());
    let (head, tail) = KEY.split_at(12);
    let refused = sent(
        &layer,
        vec![Message::user(vec![Part::text(head), Part::text(tail)])],
    )
    .await;
    assert_blocked_by(refused, "secrets");
}

#[tokio::test]
async fn personal_data_split_over_text_parts_is_redacted_in_each_part() {
    let layer = GuardrailLayer::new().check(Check::personal_data());
    let messages = sent(
        &layer,
        vec![Message::user(vec![
            Part::text("mail jane@exa"),
            Part::text("mple.com today"),
        ])],
    )
    .await
    .unwrap();
    let Message::User { content } = &messages[0] else {
        panic!("{messages:?}")
    };
    let texts: Vec<&str> = content
        .parts()
        .iter()
        .map(|part| match part {
            Part::Text(text) => text.text.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["mail [REDACTED:email]", "[REDACTED:email] today"]);
}

#[tokio::test]
async fn assistant_history_is_redacted_text_and_tool_call_arguments() {
    let layer = GuardrailLayer::new().check(Check::personal_data());
    let messages = sent(
        &layer,
        vec![
            Message::user("who?"),
            Message::Assistant(AssistantMessage {
                content: "ask jane@example.com".into(),
                tool_calls: vec![ToolCall::new(
                    "c1",
                    "mail",
                    json!({"jane@example.com": {"cc": ["bob@example.org"]}}),
                )],
                ..AssistantMessage::default()
            }),
            Message::tool_result("c1", "mail", "sent"),
        ],
    )
    .await
    .unwrap();
    let Message::Assistant(assistant) = &messages[1] else {
        panic!("{messages:?}")
    };
    assert_eq!(assistant.content, "ask [REDACTED:email]");
    assert_eq!(
        assistant.tool_calls[0].arguments.json(),
        Some(&json!({"[REDACTED:email]": {"cc": ["[REDACTED:email]"]}}))
    );
}

/// IBAN-shaped words: every one starts a candidate the mod-97 check must examine.
fn iban_shaped(bytes: usize) -> String {
    "AB12 ".repeat(bytes / 5)
}

#[tokio::test]
async fn a_body_past_the_checks_work_budget_is_refused_naming_the_budget() {
    let layer = GuardrailLayer::new().check(Check::personal_data());
    let refused = sent(&layer, vec![Message::user(iban_shaped(600_000))]).await;
    let refused = assert_blocked_by(refused, "personal_data");
    assert!(
        refused.message().contains("max_candidates"),
        "{}",
        refused.message()
    );

    // The same text in an answer ends it the same way: what was examined goes out, the rest does not.
    let (events, text) = answer(
        &layer,
        vec![
            ChatEvent::text(iban_shaped(600_000)),
            ChatEvent::finish(FinishReason::Stop),
        ],
    )
    .await;
    assert!(text.len() < 600_000, "{} bytes went out", text.len());
    assert!(events.contains(&ChatEvent::finish(FinishReason::ContentFilter)));

    // Under the budget, the same shape passes.
    assert!(sent(&layer, vec![Message::user(iban_shaped(5_000))])
        .await
        .is_ok());
}
