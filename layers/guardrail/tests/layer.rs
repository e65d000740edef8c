//! The layer over the real leaf and a scripted provider on loopback: requests, answers (streamed and whole), tool
//! calls and results, moderation, schema and custom checks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use serde_json::json;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatResponse, ChatStream, ChatStreamExt, ErrorKind,
    FinishReason, GuardrailAction, GuardrailAudit, GuardrailStage, Message, TimeoutPhase,
    ToolArguments, ToolMessage,
};
use tower_chat_guardrail::{Check, Finding, GuardrailLayer, Moderation};

mod common;
use common::answering;

fn leaf(provider: &ScriptedProvider) -> OpenAiChat {
    OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("test")
        .model("gpt-4o-mini")
        .build()
        .unwrap()
}

async fn ask(
    layer: &GuardrailLayer,
    provider: &ScriptedProvider,
    messages: Vec<Message>,
    streaming: bool,
) -> (Result<ChatResponse, ChatError>, GuardrailAudit) {
    let audit = GuardrailAudit::new();
    let request = ChatRequest::new(messages)
        .stream(streaming)
        .with_extension(audit.clone());
    let answer = match layer.layer(leaf(provider)).oneshot(request).await {
        Ok(stream) => stream.collect_response().await,
        Err(error) => Err(error),
    };
    (answer, audit)
}

#[tokio::test]
async fn a_request_is_redacted_before_it_leaves_and_recorded_as_sent() {
    for streaming in [true, false] {
        let provider = ScriptedProvider::start(|_r, _i| Reply::openai_text("Noted.")).await;
        let layer = GuardrailLayer::new().check(Check::personal_data());
        let (answer, audit) = ask(
            &layer,
            &provider,
            vec![
                Message::system("Be brief."),
                Message::user("I am jane@example.com, card 4242 4242 4242 4242."),
            ],
            streaming,
        )
        .await;
        assert_eq!(answer.unwrap().text(), "Noted.");
        let sent = &provider.requests()[0].body["messages"][1]["content"];
        assert_eq!(sent, "I am [REDACTED:email], card [REDACTED:card].");
        let verdicts = audit.verdicts();
        assert_eq!(verdicts.len(), 2);
        assert_eq!(verdicts[0].stage, GuardrailStage::Request);
        assert_eq!(verdicts[0].location, "messages[1]");
        assert_eq!(verdicts[0].span.map(|s| (s.start, s.end)), Some((5, 21)));
        assert_eq!(verdicts[1].detail.as_deref(), Some("card"));
        let recorded = audit.sent_messages().unwrap();
        assert_eq!(
            recorded[1],
            Message::user("I am [REDACTED:email], card [REDACTED:card].")
        );
    }
}

#[tokio::test]
async fn a_blocked_request_is_a_typed_error_and_never_reaches_the_provider() {
    let provider = ScriptedProvider::start(|_r, _i| Reply::openai_text("Hi")).await;
    let layer = GuardrailLayer::new()
        .check(Check::personal_data())
        .check(Check::secrets());
    let (answer, audit) = ask(
        &layer,
        &provider,
        vec![Message::user(
            "here: -----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXk",
        )],
        true,
    )
    .await;
    let error = answer.unwrap_err();
    assert_eq!(
        error.kind(),
        &ErrorKind::PolicyBlocked {
            check: "secrets".into()
        }
    );
    assert!(error.is_refused_before_sending());
    assert!(error.message().contains("private_key"), "{error}");
    assert!(!error.message().contains("OPENSSH"), "{error}");
    assert!(provider.requests().is_empty());
    assert_eq!(audit.verdicts()[0].action, GuardrailAction::Block);
}

#[tokio::test]
async fn answers_are_redacted_and_blocked_streamed_or_whole() {
    for streaming in [true, false] {
        let provider = ScriptedProvider::start(|_r, _i| {
            Reply::openai_text(
                "Call +1 415 555 0100 or mail ops@corp.example. The token is ghp_abcdefghijklmnopqrstuvwxyz0123456789 for you",
            )
        })
        .await;
        let layer = GuardrailLayer::new()
            .check(Check::secrets())
            .check(Check::personal_data())
            .block_message("[withheld: {check}]");
        let (answer, audit) = ask(&layer, &provider, vec![Message::user("how?")], streaming).await;
        let answer = answer.unwrap();
        assert_eq!(
            answer.text(),
            "Call [REDACTED:phone] or mail [REDACTED:email]. The token is \n\n[withheld: secrets]",
            "streaming: {streaming}"
        );
        assert_eq!(answer.finish_reason, Some(FinishReason::ContentFilter));
        let kinds: Vec<_> = audit
            .verdicts()
            .into_iter()
            .map(|v| v.detail.unwrap())
            .collect();
        assert_eq!(kinds, ["phone", "email", "github_token"]);
    }
}

#[tokio::test]
async fn tool_call_arguments_are_judged_before_the_call_goes_out() {
    let provider = ScriptedProvider::start(|_r, _i| {
        Reply::openai_tool_calls(&[("c1", "send_mail", r#"{"to":"bob@example.org","body":"hi"}"#)])
    })
    .await;
    let layer = GuardrailLayer::new().check(Check::personal_data());
    let model = layer.layer(leaf(&provider));
    let audit = GuardrailAudit::new();
    let request = ChatRequest::new(vec![Message::user("mail bob")]).with_extension(audit.clone());
    let events: Vec<ChatEvent> = model
        .oneshot(request)
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    let fragments: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    // Redacting keeps the model's own key order.
    assert_eq!(fragments, [r#"{"to":"[REDACTED:email]","body":"hi"}"#]);
    let call = events
        .iter()
        .find_map(|e| match e {
            ChatEvent::ToolCallEnd { call, .. } => Some(call.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        call.arguments,
        ToolArguments::Json(json!({"to": "[REDACTED:email]", "body": "hi"}))
    );
    let verdict = &audit.verdicts()[0];
    assert_eq!(verdict.stage, GuardrailStage::ToolCall);
    assert_eq!(verdict.location, "tool_call:c1/to");
}

#[tokio::test]
async fn tool_results_are_judged_as_events_and_as_messages_of_the_next_request() {
    // As events, from a tool loop inside the layer.
    let model = service_fn(|_request: ChatRequest| async {
        let events = vec![
            ChatEvent::ToolResult {
                result: ToolMessage::success("c1", "lookup", "owner: ann@example.net"),
            },
            ChatEvent::text("Done."),
            ChatEvent::finish(FinishReason::Stop),
        ];
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
    });
    let layer = GuardrailLayer::new().check(Check::personal_data());
    let response = layer
        .layer(model)
        .oneshot(ChatRequest::new(vec![Message::user("who?")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(
        response.messages[0],
        Message::tool_result("c1", "lookup", "owner: [REDACTED:email]")
    );

    // As a tool message of the request.
    let provider = ScriptedProvider::start(|_r, _i| Reply::openai_text("ok")).await;
    let (answer, audit) = ask(
        &layer,
        &provider,
        vec![
            Message::user("who?"),
            Message::Assistant(tower_chat::AssistantMessage {
                tool_calls: vec![tower_chat::ToolCall::new("c1", "lookup", json!({}))],
                ..Default::default()
            }),
            Message::tool_result("c1", "lookup", "owner: ann@example.net"),
        ],
        true,
    )
    .await;
    answer.unwrap();
    let sent = &provider.requests()[0].body["messages"][2]["content"];
    assert_eq!(sent, "owner: [REDACTED:email]");
    assert_eq!(audit.verdicts()[0].location, "tool_result:c1");
    assert_eq!(audit.verdicts()[0].stage, GuardrailStage::ToolResult);
}

#[tokio::test]
async fn moderation_blocks_flagged_requests_and_answers_and_fails_closed_on_timeout() {
    let moderation = ScriptedProvider::start(|request, _i| {
        let input = request.body["input"].as_str().unwrap_or_default();
        let flagged = input.contains("attack");
        if input.contains("slow") {
            return Reply::json(200, json!({"results": [{"flagged": false}]}))
                .delayed(Duration::from_secs(5));
        }
        Reply::json(
            200,
            json!({"id": "modr-1", "results": [{"flagged": flagged,
                "categories": {"violence": flagged, "hate": false}}]}),
        )
    })
    .await;
    let model = ScriptedProvider::start(|request, _i| {
        let asked = request.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Reply::openai_text(if asked == "story" {
            "an attack at dawn"
        } else {
            "fine"
        })
    })
    .await;
    let service = Moderation::new(&moderation.base_url())
        .unwrap()
        .api_key("mod-key")
        .model("omni-moderation-latest")
        .timeout(Duration::from_millis(200));
    let layer = GuardrailLayer::new().check(Check::moderation(service));

    let (answer, _) = ask(&layer, &model, vec![Message::user("plan an attack")], true).await;
    assert_eq!(
        answer.unwrap_err().kind(),
        &ErrorKind::PolicyBlocked {
            check: "moderation".into()
        }
    );
    let sent = &moderation.requests()[0];
    assert_eq!(sent.path, "/v1/moderations");
    assert_eq!(sent.headers["authorization"], "Bearer mod-key");
    assert_eq!(sent.body["model"], "omni-moderation-latest");
    assert!(model.requests().is_empty());

    for streaming in [true, false] {
        let (answer, audit) = ask(&layer, &model, vec![Message::user("story")], streaming).await;
        let answer = answer.unwrap();
        assert!(!answer.text().contains("attack"), "{}", answer.text());
        assert_eq!(answer.finish_reason, Some(FinishReason::ContentFilter));
        let verdict = audit.verdicts().pop().unwrap();
        assert_eq!(
            (verdict.stage, verdict.detail.as_deref()),
            (GuardrailStage::Output, Some("violence"))
        );
    }

    let (answer, _) = ask(&layer, &model, vec![Message::user("slow")], true).await;
    let error = answer.unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::Timeout(TimeoutPhase::Total));
}

#[tokio::test]
async fn a_custom_check_flags_without_changing_the_text() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let layer = GuardrailLayer::new().check(
        Check::from_fn("mentions_budget", move |text: String, _stage| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok::<_, ChatError>(match text.find("budget") {
                    Some(at) => vec![Finding {
                        span: Some(tower_chat::TextSpan {
                            start: at,
                            end: at + 6,
                        }),
                        detail: Some("finance".into()),
                    }],
                    None => vec![],
                })
            }
        })
        .flag(),
    );
    let provider =
        ScriptedProvider::start(|_r, _i| Reply::openai_text("The budget is fine.")).await;
    let (answer, audit) = ask(&layer, &provider, vec![Message::user("budget?")], true).await;
    assert_eq!(answer.unwrap().text(), "The budget is fine.");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let verdicts = audit.verdicts();
    assert_eq!(verdicts.len(), 2);
    assert!(verdicts.iter().all(|v| v.action == GuardrailAction::Flag));
    assert_eq!(verdicts[1].span.map(|s| s.start), Some(4));
}

#[tokio::test]
async fn structured_answers_are_held_until_they_match_the_schema() {
    let layer = GuardrailLayer::new().check(
        Check::json_schema(&json!({"type": "object", "required": ["city"],
            "properties": {"city": {"type": "string"}}}))
        .unwrap(),
    );
    let provider = ScriptedProvider::start(|request, _i| {
        let asked = request.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Reply::openai_text(if asked == "good" {
            r#"{"city": "Oslo"}"#
        } else {
            r#"{"city": 7}"#
        })
    })
    .await;
    let (good, _) = ask(&layer, &provider, vec![Message::user("good")], true).await;
    assert_eq!(good.unwrap().text(), r#"{"city": "Oslo"}"#);
    let (bad, audit) = ask(&layer, &provider, vec![Message::user("bad")], true).await;
    let bad = bad.unwrap();
    assert!(!bad.text().contains("city"), "{}", bad.text());
    assert_eq!(bad.finish_reason, Some(FinishReason::ContentFilter));
    assert_eq!(audit.verdicts()[0].detail.as_deref(), Some("schema:/city"));

    let error = Check::json_schema(&json!({"type": 7})).unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
}

#[tokio::test]
async fn a_long_answer_is_cut_at_the_limit() {
    let provider =
        ScriptedProvider::start(|_r, _i| Reply::openai_text("one two three four five")).await;
    for (check, text, finish) in [
        (
            Check::output_length(9),
            "one two t\n\n[The rest of this answer was withheld by the content policy (check `output_length`).]",
            FinishReason::ContentFilter,
        ),
        (Check::output_length(9).flag(), "one two three four five", FinishReason::Stop),
    ] {
        let layer = GuardrailLayer::new().check(check);
        let (answer, audit) = ask(&layer, &provider, vec![Message::user("count")], true).await;
        let answer = answer.unwrap();
        assert_eq!(answer.text(), text);
        assert_eq!(answer.finish_reason, Some(finish));
        assert_eq!(audit.verdicts()[0].span.map(|s| s.start), Some(9));
    }
}

fn reasoning_then_text(reasoning: &[&str]) -> Vec<ChatEvent> {
    let mut events: Vec<ChatEvent> = reasoning
        .iter()
        .map(|text| ChatEvent::ReasoningDelta {
            text: (*text).to_owned(),
        })
        .collect();
    events.push(ChatEvent::ReasoningEnd {
        continuation: tower_chat::Continuation::AnthropicThinking {
            signature: "sig".into(),
        },
    });
    events.push(ChatEvent::text("Done."));
    events.push(ChatEvent::finish(FinishReason::Stop));
    events
}

async fn guarded(
    layer: &GuardrailLayer,
    events: Vec<ChatEvent>,
) -> (Vec<ChatEvent>, GuardrailAudit) {
    let audit = GuardrailAudit::new();
    let request = ChatRequest::new(vec![Message::user("go")])
        .stream(true)
        .with_extension(audit.clone());
    let stream = layer
        .layer(service_fn(answering(events)))
        .oneshot(request)
        .await
        .unwrap();
    let events = stream.map(|e| e.unwrap()).collect::<Vec<_>>().await;
    (events, audit)
}

#[tokio::test]
async fn reasoning_is_scanned_whole_redacted_without_its_signature_or_blocked() {
    // An address split across deltas is redacted; the signature no longer matches, so the block ends without it.
    let redact = GuardrailLayer::new().check(Check::personal_data().redact());
    let (events, audit) = guarded(
        &redact,
        reasoning_then_text(&["Mail bob@exa", "mple.com the plan"]),
    )
    .await;
    let reasoning: String = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ReasoningDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(!reasoning.contains("bob@example.com"), "{reasoning}");
    assert!(
        reasoning.starts_with("Mail ") && reasoning.ends_with(" the plan"),
        "{reasoning}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ChatEvent::ReasoningEnd { .. })),
        "{events:?}"
    );
    assert!(audit.verdicts().iter().any(|v| v.location == "reasoning"));

    // Clean reasoning keeps its signature.
    let (events, _) = guarded(&redact, reasoning_then_text(&["Think ", "it through"])).await;
    assert!(events
        .iter()
        .any(|e| matches!(e, ChatEvent::ReasoningEnd { .. })));

    // A secret in reasoning blocks the answer: nothing of it goes out.
    let block = GuardrailLayer::new().check(Check::secrets().block());
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
    let (events, _) = guarded(&block, reasoning_then_text(&["Use ", key])).await;
    let everything = format!("{events:?}");
    assert!(!everything.contains(key), "{everything}");
    assert!(matches!(
        events.last(),
        Some(ChatEvent::Finish {
            reason: FinishReason::ContentFilter
        })
    ));
}

#[tokio::test]
async fn partial_answers_do_not_pass_output_checks_unredacted() {
    let inner = service_fn(|_request: ChatRequest| async {
        let events = vec![
            Ok(ChatEvent::text(r#"{"mail": "ops@corp"#)),
            Ok(ChatEvent::PartialAnswer {
                value: json!({"mail": "ops@corp"}),
            }),
            Ok(ChatEvent::text(r#".example"}"#)),
            Ok(ChatEvent::PartialAnswer {
                value: json!({"mail": "ops@corp.example"}),
            }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ];
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events)))
    });
    let events: Vec<ChatEvent> = GuardrailLayer::new()
        .check(Check::personal_data())
        .layer(inner)
        .oneshot(ChatRequest::new(vec![Message::user("?")]))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ChatEvent::PartialAnswer { .. })),
        "{events:?}"
    );
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, r#"{"mail": "[REDACTED:email]"}"#);
}
