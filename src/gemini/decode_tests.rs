//! The Gemini decoder against documented responses (`tests/data/gemini_*`), whole and cut at every place.

use serde_json::json;

use super::blocked::PromptBlocked;
use super::decode::{decode_whole, GeminiDecoder};
use super::signature;
use crate::error::ErrorKind;
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::message::ToolCall;
use crate::transport::EventDecoder;

const THINKING: &str = include_str!("../../tests/data/gemini_stream_thinking.sse");
const CALLS: &str = include_str!("../../tests/data/gemini_stream_function_calls.sse");

/// Every item, errors as their display text.
fn decode_stream(text: &str) -> Vec<Result<ChatEvent, String>> {
    let mut decoder = EventDecoder::new(GeminiDecoder::default());
    decoder.feed(text.as_bytes());
    decoder.end(None);
    std::iter::from_fn(|| decoder.next_item())
        .map(|item| item.map_err(|e| e.to_string()))
        .collect()
}

#[test]
fn thoughts_text_signature_and_usage_map_to_events() {
    let events: Vec<ChatEvent> = decode_stream(THINKING)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ChatEvent::ResponseMetadata {
                id: Some("mzVOabC1Bv2YkdUPnOzRyQs".into()),
                model: Some("gemini-2.5-flash".into()),
            },
            ChatEvent::ReasoningDelta {
                text: "**Planning the answer**\n\nThe user wants a short poem.".into()
            },
            ChatEvent::text("Roses are red,\n"),
            ChatEvent::text("Gemini thinks — ✓ — ahead."),
            ChatEvent::ReasoningEnd {
                continuation: signature::on_text(
                    "CiQB0e2Kb7kGq0bWc7Z7i4GQ1SM2xmqVQ0d8uYlJ2wqM6lGdZQo="
                ),
            },
            ChatEvent::Usage {
                usage: Usage {
                    from_response_cache: false,
                    input_tokens: 9,
                    output_tokens: 14 + 406,
                    cached_input_tokens: Some(4),
                    cache_write_input_tokens: None,
                    reasoning_tokens: Some(406),
                }
            },
            ChatEvent::finish(FinishReason::Stop),
        ]
    );
}

#[test]
fn whole_function_calls_arrive_several_per_turn_with_the_first_ones_signature() {
    let events: Vec<ChatEvent> = decode_stream(CALLS)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let id = |n: usize| format!("Zm9vYmFyYmF6-{n}");
    assert_eq!(
        events[1..8],
        [
            ChatEvent::ReasoningEnd {
                continuation: signature::on_call(
                    "EtgDCtUDAdHtim9wPAr0VHUOd1H8tkVSDdAWyW4Vt0Zp",
                    &id(0)
                ),
            },
            ChatEvent::ToolCallStart {
                index: 0,
                id: id(0),
                name: "get_weather".into()
            },
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: r#"{"location": "Paris"}"#.into()
            },
            ChatEvent::ToolCallEnd {
                index: 0,
                call: ToolCall::new(id(0), "get_weather", json!({"location": "Paris"})),
            },
            ChatEvent::ToolCallStart {
                index: 1,
                id: id(1),
                name: "get_weather".into()
            },
            ChatEvent::ToolCallDelta {
                index: 1,
                arguments: r#"{"location": "London"}"#.into()
            },
            ChatEvent::ToolCallEnd {
                index: 1,
                call: ToolCall::new(id(1), "get_weather", json!({"location": "London"})),
            },
        ]
    );
    assert_eq!(
        events.last(),
        Some(&ChatEvent::finish(FinishReason::ToolCalls))
    );
}

#[test]
fn a_blocked_prompt_is_a_typed_error_streamed_or_whole() {
    let body = include_str!("../../tests/data/gemini_prompt_blocked.json");
    let err = decode_whole(body.as_bytes()).unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    let blocked = PromptBlocked::of(&err).expect("the block's detail");
    assert_eq!(blocked.reason, "SAFETY");
    let harassment = blocked.safety_ratings.iter().find(|r| r.blocked).unwrap();
    assert_eq!(harassment.category, "HARM_CATEGORY_HARASSMENT");
    assert_eq!(harassment.probability.as_deref(), Some("HIGH"));

    let compact: serde_json::Value = serde_json::from_str(body).unwrap();
    let streamed = decode_stream(&format!("data: {compact}\r\n\r\n"));
    assert!(
        matches!(streamed.last(), Some(Err(m)) if m.contains("blocked the prompt (SAFETY)")),
        "{streamed:?}"
    );
}

#[test]
fn finish_reasons_are_typed() {
    let body = include_str!("../../tests/data/gemini_finish_safety.json");
    let events = decode_whole(body.as_bytes()).unwrap();
    assert_eq!(events[1], ChatEvent::text("I can help with part of"));
    assert_eq!(
        events.last(),
        Some(&ChatEvent::finish(FinishReason::ContentFilter))
    );
    for (wire, reason) in [
        ("RECITATION", FinishReason::Recitation),
        (
            "MALFORMED_FUNCTION_CALL",
            FinishReason::MalformedFunctionCall,
        ),
        (
            "UNEXPECTED_TOOL_CALL",
            FinishReason::Other("unexpected_tool_call".into()),
        ),
        ("MAX_TOKENS", FinishReason::Length),
        ("PROHIBITED_CONTENT", FinishReason::ContentFilter),
    ] {
        let body = json!({"candidates": [{"content": {"parts": [], "role": "model"}, "finishReason": wire}]});
        let events = decode_whole(body.to_string().as_bytes()).unwrap();
        assert_eq!(events.last(), Some(&ChatEvent::finish(reason)), "{wire}");
    }
}

#[test]
fn a_stream_without_a_finish_reason_is_an_error_and_an_error_object_is_typed() {
    let cut = THINKING
        .split("\n\n")
        .take(2)
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n\n";
    let events = decode_stream(&cut);
    assert!(
        matches!(events.last(), Some(Err(m)) if m.starts_with("connection")),
        "{events:?}"
    );

    let error =
        r#"data: {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}"#;
    let mut decoder = EventDecoder::new(GeminiDecoder::default());
    decoder.feed(format!("{error}\n\n").as_bytes());
    let err = decoder.next_item().unwrap().unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::RateLimited { retry_after: None });
}

#[test]
fn malformed_chunks_are_protocol_errors() {
    let events = decode_stream("data: {\"candidates\": [\n\n");
    assert!(
        matches!(events.last(), Some(Err(m)) if m.starts_with("protocol")),
        "{events:?}"
    );
}

proptest::proptest! {
    #[test]
    fn every_chunking_yields_the_same_events(cuts in proptest::collection::vec(0usize..3000, 0..16), calls: bool) {
        let text = if calls { CALLS } else { THINKING };
        let bytes = text.as_bytes();
        let whole = decode_stream(text);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut decoder = EventDecoder::new(GeminiDecoder::default());
        let mut events = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([bytes.len()]) {
            decoder.feed(&bytes[start..cut]);
            start = cut;
            events.extend(std::iter::from_fn(|| decoder.next_item()));
        }
        decoder.end(None);
        events.extend(std::iter::from_fn(|| decoder.next_item()));
        let events: Vec<_> = events.into_iter().map(|item| item.map_err(|e| e.to_string())).collect();
        proptest::prop_assert_eq!(events, whole);
    }
}

/// Gemini 3 with `streamFunctionCallArguments`: the call's name first, then its arguments in `partialArgs` pieces
/// (a string may come in several, each but the last `willContinue`), then an empty `functionCall` ending it.
#[test]
fn function_call_arguments_streamed_in_partial_args_are_assembled_into_one_call() {
    let chunk = |call: serde_json::Value, finish: Option<&str>| {
        let mut candidate =
            json!({"content":{"role":"model","parts":[{"functionCall": call}]},"index":0});
        if let Some(finish) = finish {
            candidate["finishReason"] = json!(finish);
        }
        format!(
            "data: {}\n\n",
            json!({"candidates":[candidate],"modelVersion":"gemini-3-pro-preview","responseId":"r3"})
        )
    };
    let text = [
        chunk(json!({"name":"get_weather","willContinue":true}), None),
        chunk(json!({"partialArgs":[{"jsonPath":"$.location","stringValue":"Bos","willContinue":true}],"willContinue":true}), None),
        chunk(json!({"partialArgs":[{"jsonPath":"$.location","stringValue":"ton, MA"}],"willContinue":true}), None),
        chunk(json!({"partialArgs":[{"jsonPath":"$.days","numberValue":3},{"jsonPath":"$.units[0]","stringValue":"celsius"},
            {"jsonPath":"$.alerts","boolValue":true}],"willContinue":true}), None),
        chunk(json!({}), Some("STOP")),
    ]
    .concat();
    let events = decode_stream(&text);
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    let expected = json!({"location":"Boston, MA","days":3,"units":["celsius"],"alerts":true});
    let ends: Vec<&ChatEvent> = events
        .iter()
        .flatten()
        .filter(|e| matches!(e, ChatEvent::ToolCallEnd { .. }))
        .collect();
    assert_eq!(
        ends,
        [&ChatEvent::ToolCallEnd {
            index: 0,
            call: ToolCall::new("r3-0", "get_weather", expected.clone())
        }]
    );
    let streamed: String = events
        .iter()
        .flatten()
        .filter_map(|e| match e {
            ChatEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&streamed).unwrap(),
        expected
    );
    assert_eq!(
        events.last(),
        Some(&Ok(ChatEvent::finish(FinishReason::ToolCalls)))
    );
}

#[test]
fn a_retry_info_delay_is_read_from_either_error_body_shape_within_a_day() {
    use super::decode::retry_delay;
    use std::time::Duration;
    let body = |delay: &str| {
        json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.Help"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]}})
    };
    let bytes = |value: serde_json::Value| value.to_string().into_bytes();
    assert_eq!(
        retry_delay(&bytes(body("37s"))),
        Some(Duration::from_secs(37))
    );
    assert_eq!(
        retry_delay(&bytes(json!([body("1.5s")]))),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(retry_delay(&bytes(body("999999s"))), None);
    assert_eq!(retry_delay(&bytes(body("soon"))), None);
    assert_eq!(retry_delay(b"not json"), None);
}

/// Two calls in one answer without a `responseId` (as some Gemini deployments answer).
const CALLS_WITHOUT_RESPONSE_ID: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[",
    "{\"functionCall\":{\"name\":\"exec_command\",\"args\":{\"cmd\":\"ls\"}}},",
    "{\"functionCall\":{\"name\":\"exec_command\",\"args\":{\"cmd\":\"pwd\"}}}]},",
    "\"finishReason\":\"STOP\",\"index\":0}]}\r\n\r\n"
);

fn call_ids(events: &[Result<ChatEvent, String>]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Ok(ChatEvent::ToolCallStart { id, .. }) => Some(id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn calls_of_answers_without_a_response_id_never_share_an_id_across_turns() {
    let first = call_ids(&decode_stream(CALLS_WITHOUT_RESPONSE_ID));
    let second = call_ids(&decode_stream(CALLS_WITHOUT_RESPONSE_ID));
    assert_eq!(first.len(), 2);
    assert_ne!(first[0], first[1], "{first:?}");
    assert!(
        first.iter().all(|id| !second.contains(id)),
        "a later turn's calls reuse an earlier turn's ids: {first:?} {second:?}"
    );
}
