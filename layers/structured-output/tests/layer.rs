//! The answer check against a scripted inner service: repairs bounded and each a call of its own, refusals
//! typed, free text untouched — every case streamed and whole (all events at once).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{stream, StreamExt};
use serde_json::json;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ErrorKind, FinishReason, Message,
    ResponseFormat,
};
use tower_chat_structured_output::{
    AnswerSchema, Partial, PartialAnswers, StructuredError, StructuredExt, StructuredOutputLayer,
};

mod common;

/// How the scripted service delivers an answer.
#[derive(Clone, Copy, Debug)]
enum Delivery {
    /// A text delta per few characters.
    Streamed,
    /// One text delta with everything.
    Whole,
}

const DELIVERIES: [Delivery; 2] = [Delivery::Streamed, Delivery::Whole];

type Seen = Arc<Mutex<Vec<ChatRequest>>>;

/// A service answering the n-th call with `answers[n]` (text, finish reason); it records each request.
fn scripted(
    answers: Vec<(&'static str, FinishReason)>,
    delivery: Delivery,
) -> (
    impl tower::Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send>
        + Clone
        + Send
        + Sync
        + 'static,
    Seen,
) {
    let seen: Seen = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let record = seen.clone();
    let service = service_fn(move |request: ChatRequest| {
        record.lock().unwrap().push(request);
        let (text, reason) =
            answers[calls.fetch_add(1, Ordering::SeqCst).min(answers.len() - 1)].clone();
        async move {
            let mut events: Vec<ChatEvent> = match delivery {
                Delivery::Streamed => text
                    .as_bytes()
                    .chunks(3)
                    .map(|c| ChatEvent::text(String::from_utf8_lossy(c).into_owned()))
                    .collect(),
                Delivery::Whole => vec![ChatEvent::text(text)],
            };
            events.push(ChatEvent::finish(reason));
            Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
        }
    });
    (service, seen)
}

fn city_request() -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user("Norway's capital?")]);
    request.options.response_format = Some(city().response_format());
    request
}

fn city() -> AnswerSchema {
    AnswerSchema::new(
        "city",
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
    )
    .unwrap()
}

#[tokio::test]
async fn a_broken_answer_is_repaired_with_its_violations_in_a_call_of_its_own() {
    for delivery in DELIVERIES {
        let (inner, seen) = scripted(
            vec![
                (r#"{"name": 7}"#, FinishReason::Stop),
                (r#"{"name": "Oslo"}"#, FinishReason::Stop),
            ],
            delivery,
        );
        let chat = StructuredOutputLayer::new().layer(inner);
        let events: Vec<ChatEvent> = chat
            .oneshot(city_request())
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        assert!(
            events.contains(&ChatEvent::AnswerRejected {
                violations: vec!["/name: expected string, found integer 7".into()]
            }),
            "{delivery:?}: {events:?}"
        );
        assert_eq!(events.last(), Some(&ChatEvent::finish(FinishReason::Stop)));
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 2, "{delivery:?}");
        let repair = &requests[1].messages;
        assert_eq!(repair.len(), 3);
        assert_eq!(repair[1], Message::assistant(r#"{"name": 7}"#));
        let Message::User { content } = &repair[2] else {
            panic!("{repair:?}")
        };
        assert!(content
            .as_text()
            .unwrap()
            .contains("/name: expected string, found integer 7"));

        // Collected, the response holds the repaired answer only.
        let (inner, _) = scripted(
            vec![
                (r#"{"name": 7}"#, FinishReason::Stop),
                (r#"{"name": "Oslo"}"#, FinishReason::Stop),
            ],
            delivery,
        );
        let response = StructuredOutputLayer::new()
            .layer(inner)
            .oneshot(city_request())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), r#"{"name": "Oslo"}"#);
    }
}

#[tokio::test]
async fn partial_answers_grow_restart_after_a_repair_and_end_with_the_validated_answer() {
    for delivery in DELIVERIES {
        let (inner, _) = scripted(
            vec![
                (r#"{"name": 7}"#, FinishReason::Stop),
                (
                    r#"{"name": "Oslo", "population": 709000}"#,
                    FinishReason::Stop,
                ),
            ],
            delivery,
        );
        let chat = StructuredOutputLayer::new()
            .partial_answers(true)
            .layer(inner);
        let events: Vec<ChatEvent> = chat
            .oneshot(city_request())
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        let answer = json!({"name": "Oslo", "population": 709000});
        common::assert_grows_to(&events, &answer);
        let attempts = common::attempts(&events);
        assert_eq!(attempts.len(), 2, "{delivery:?}: {events:?}");
        assert_eq!(
            attempts[0].last(),
            Some(&json!({"name": 7})),
            "{delivery:?}"
        );
        match delivery {
            // Values after each 3-byte delta that changed them: the string grows, the number comes whole.
            Delivery::Streamed => {
                assert_eq!(attempts[1][0], json!({}));
                assert!(attempts[1].contains(&json!({"name": "Os"})), "{attempts:?}");
                assert!(
                    attempts[1].contains(&json!({"name": "Oslo"})),
                    "{attempts:?}"
                );
                assert!(!attempts[1]
                    .iter()
                    .any(|v| v == &json!({"name": "Oslo", "population": 709})));
                // Never the same value twice in a row.
                assert!(attempts[1].windows(2).all(|pair| pair[0] != pair[1]));
            }
            // One delta, complete: its value is the answer, not sent again before the finish.
            Delivery::Whole => assert_eq!(attempts[1], std::slice::from_ref(&answer)),
        }
        // The text is what it is without the values.
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                ChatEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, r#"{"name": 7}{"name": "Oslo", "population": 709000}"#);
    }
}

#[tokio::test]
async fn partial_answers_are_off_by_default_and_one_request_can_ask_for_them() {
    for delivery in DELIVERIES {
        let answers = vec![(r#"{"name": "Oslo"}"#, FinishReason::Stop)];
        let run = |layer: StructuredOutputLayer, request: ChatRequest| {
            let (inner, _) = scripted(answers.clone(), delivery);
            async move {
                layer
                    .layer(inner)
                    .oneshot(request)
                    .await
                    .unwrap()
                    .map(Result::unwrap)
                    .collect::<Vec<ChatEvent>>()
                    .await
            }
        };
        let plain = run(StructuredOutputLayer::new(), city_request()).await;
        assert!(
            !plain
                .iter()
                .any(|e| matches!(e, ChatEvent::PartialAnswer { .. })),
            "{delivery:?}: {plain:?}"
        );
        let asked = run(
            StructuredOutputLayer::new(),
            city_request().with_extension(PartialAnswers),
        )
        .await;
        common::assert_grows_to(&asked, &json!({"name": "Oslo"}));
        // Free text is not an answer to read, whatever was asked.
        let free = run(
            StructuredOutputLayer::new().partial_answers(true),
            ChatRequest::new(vec![Message::user("?")]),
        )
        .await;
        assert!(!free
            .iter()
            .any(|e| matches!(e, ChatEvent::PartialAnswer { .. })));
    }
}

#[tokio::test]
async fn a_fenced_answer_shows_only_its_validated_value() {
    let (inner, _) = scripted(
        vec![("```json\n{\"name\": \"Oslo\"}\n```", FinishReason::Stop)],
        Delivery::Streamed,
    );
    let events: Vec<ChatEvent> = StructuredOutputLayer::new()
        .partial_answers(true)
        .layer(inner)
        .oneshot(city_request())
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    common::assert_grows_to(&events, &json!({"name": "Oslo"}));
    assert_eq!(common::attempts(&events), [[json!({"name": "Oslo"})]]);
}

#[tokio::test]
async fn repairs_are_bounded_and_the_error_carries_the_last_output() {
    for delivery in DELIVERIES {
        let (inner, seen) = scripted(vec![("Oslo, I think", FinishReason::Stop)], delivery);
        let error = StructuredOutputLayer::new()
            .layer(inner)
            .oneshot(city_request())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Protocol);
        let Some(StructuredError::Invalid {
            raw,
            violations,
            attempts,
        }) = StructuredError::from_chat(&error)
        else {
            panic!("{error:?}")
        };
        assert_eq!(raw, "Oslo, I think");
        assert!(violations[0].starts_with("not JSON"), "{violations:?}");
        assert_eq!(*attempts, 3);
        assert_eq!(
            seen.lock().unwrap().len(),
            3,
            "{delivery:?}: the first call and two repairs"
        );

        let (inner, seen) = scripted(vec![("[]", FinishReason::Stop)], delivery);
        let result = StructuredOutputLayer::new()
            .repairs(0)
            .layer(inner)
            .oneshot(city_request())
            .await;
        assert!(result.unwrap().collect_response().await.is_err());
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_refusal_is_typed_and_not_repaired() {
    for delivery in DELIVERIES {
        for reason in [
            FinishReason::ContentFilter,
            FinishReason::Other("SAFETY".into()),
        ] {
            let (inner, seen) =
                scripted(vec![("I can't help with that.", reason.clone())], delivery);
            let error = inner
                .structured_value(ChatRequest::new(vec![Message::user("?")]), city())
                .await
                .unwrap_err();
            let StructuredError::Refused { reason: got, text } = &error else {
                panic!("{error:?}")
            };
            assert_eq!(got, &reason);
            assert_eq!(text, "I can't help with that.");
            assert_eq!(seen.lock().unwrap().len(), 1, "{delivery:?}");
        }
    }
}

#[tokio::test]
async fn free_text_and_tool_rounds_pass_through_unchecked() {
    for delivery in DELIVERIES {
        let (inner, seen) = scripted(vec![("not JSON at all", FinishReason::Stop)], delivery);
        let response = StructuredOutputLayer::new()
            .layer(inner)
            .oneshot(ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "not JSON at all");
        assert_eq!(seen.lock().unwrap().len(), 1);

        let (inner, _) = scripted(vec![("", FinishReason::ToolCalls)], delivery);
        let response = StructuredOutputLayer::new()
            .layer(inner)
            .oneshot(city_request())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    }
}

#[tokio::test]
async fn json_object_answers_must_be_objects() {
    let (inner, seen) = scripted(
        vec![
            ("[1, 2]", FinishReason::Stop),
            (r#"{"n": [1, 2]}"#, FinishReason::Stop),
        ],
        Delivery::Whole,
    );
    let mut request = ChatRequest::new(vec![Message::user("?")]);
    request.options.response_format = Some(ResponseFormat::JsonObject);
    let response = StructuredOutputLayer::new()
        .layer(inner)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), r#"{"n": [1, 2]}"#);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_schema_that_does_not_compile_is_refused_before_any_call() {
    let (inner, seen) = scripted(vec![("{}", FinishReason::Stop)], Delivery::Whole);
    let mut request = ChatRequest::new(vec![Message::user("?")]);
    request.options.response_format = Some(ResponseFormat::JsonSchema {
        name: "bad".into(),
        schema: json!({"type": "object", "properties": {"n": {"minimum": "3"}}}),
        strict: None,
    });
    let error = StructuredOutputLayer::new()
        .layer(inner)
        .oneshot(request)
        .await
        .err()
        .unwrap();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    assert!(error.to_string().contains("minimum"), "{error}");
    assert!(seen.lock().unwrap().is_empty());
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, PartialEq)]
struct City {
    name: String,
    population: Option<u64>,
}

#[tokio::test]
async fn a_typed_answer_streams_as_partials_then_completes_across_a_repair() {
    let (inner, _) = scripted(
        vec![
            (r#"{"name": 7}"#, FinishReason::Stop),
            (
                r#"{"name": "Oslo", "population": 709000}"#,
                FinishReason::Stop,
            ),
        ],
        Delivery::Streamed,
    );
    let steps: Vec<Partial<City>> = inner
        .structured_stream::<City>(ChatRequest::new(vec![Message::user("?")]))
        .map(Result::unwrap)
        .collect()
        .await;
    let restart = steps
        .iter()
        .position(|s| matches!(s, Partial::Restarted { .. }))
        .unwrap();
    assert!(steps[..restart]
        .iter()
        .any(|s| s.value() == Some(&json!({"name": 7}))));
    assert!(steps[restart..]
        .iter()
        .any(|s| s.value() == Some(&json!({"name": "Os"}))));
    assert!(steps[restart..]
        .iter()
        .any(|s| s.value() == Some(&json!({"name": "Oslo"}))));
    // Typed as soon as the JSON so far reads as a `City`; never while `name` is a number.
    assert!(steps[..restart].iter().all(|s| s.typed().is_none()));
    let os = City {
        name: "Os".into(),
        population: None,
    };
    assert!(steps[restart..].iter().any(|s| s.typed() == Some(&os)));
    assert_eq!(
        steps.last(),
        Some(&Partial::Complete(City {
            name: "Oslo".into(),
            population: Some(709000)
        }))
    );

    let (inner, _) = scripted(
        vec![(r#"{"name": "Oslo"}"#, FinishReason::Stop)],
        Delivery::Whole,
    );
    let city: City = inner
        .structured(ChatRequest::new(vec![Message::user("?")]))
        .await
        .unwrap();
    assert_eq!(
        city,
        City {
            name: "Oslo".into(),
            population: None
        }
    );
}
