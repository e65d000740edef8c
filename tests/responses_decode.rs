//! The Responses stream decoder on the documented examples: the same events however the bytes are cut, and
//! whether or not the SSE events carry their names.

use proptest::prelude::*;
use tower_chat::responses::StreamDecoder;
use tower_chat::{ChatEvent, Continuation, FinishReason};

const FIXTURES: [&str; 3] = [
    include_str!("data/responses/stream_text.sse"),
    include_str!("data/responses/stream_function_call.sse"),
    include_str!("data/responses/stream_reasoning.sse"),
];

/// Every item (an error as its text), the body fed in the pieces between `cuts`; up to the first error, where
/// the decoder's contract ends.
fn decode(body: &[u8], cuts: &[usize]) -> Vec<Result<ChatEvent, String>> {
    let mut decoder = StreamDecoder::new();
    let mut items = Vec::new();
    let mut drain = |decoder: &mut StreamDecoder| {
        while let Some(item) = decoder.next_event() {
            let failed = item.is_err();
            items.push(item.map_err(|e| e.to_string()));
            if failed {
                return false;
            }
        }
        true
    };
    let mut start = 0;
    for &cut in cuts.iter().chain([&body.len()]) {
        decoder.feed(&body[start..cut]);
        start = cut;
        if !drain(&mut decoder) {
            return items;
        }
    }
    decoder.finish();
    drain(&mut decoder);
    items
}

#[test]
fn the_documented_streams_decode_without_errors_and_finish() {
    let finishes = [
        FinishReason::Stop,
        FinishReason::ToolCalls,
        FinishReason::Stop,
    ];
    for (fixture, finish) in FIXTURES.iter().zip(finishes) {
        let items = decode(fixture.as_bytes(), &[]);
        assert!(items.iter().all(Result::is_ok), "{items:?}");
        assert_eq!(items.last(), Some(&Ok(ChatEvent::finish(finish))));
    }
    let reasoning = decode(FIXTURES[2].as_bytes(), &[]);
    let ends: Vec<_> = reasoning
        .iter()
        .filter_map(|item| match item {
            Ok(ChatEvent::ReasoningEnd {
                continuation: Continuation::OpenAiReasoning { id, .. },
            }) => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        ["rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7"]
    );
}

#[test]
fn event_names_are_only_a_shortcut_the_data_decides_without_them() {
    for fixture in FIXTURES {
        let unnamed: String = fixture
            .lines()
            .filter(|line| !line.starts_with("event:"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(
            decode(unnamed.as_bytes(), &[]),
            decode(fixture.as_bytes(), &[])
        );
    }
}

#[test]
fn a_delta_for_an_item_never_announced_is_a_protocol_error() {
    let body = "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":18446744073709551615,\"delta\":\"{\"}\n\n";
    let items = decode(body.as_bytes(), &[]);
    assert!(
        matches!(&items[..], [Err(m)] if m.starts_with("protocol") && m.contains("never started")),
        "{items:?}"
    );
}

#[test]
fn raw_reasoning_text_streams_as_reasoning_and_its_item_still_ends_it() {
    let event = |data: &str| format!("data: {data}\n\n");
    let body = [
        event(r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_x","summary":[]}}"#),
        event(r#"{"type":"response.reasoning_text.delta","output_index":0,"content_index":0,"delta":"Let me think"}"#),
        event(r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_x","summary":[{"type":"summary_text","text":"Thought."}],"content":[{"type":"reasoning_text","text":"Let me think"}]}}"#),
        event(r#"{"type":"response.completed","response":{"status":"completed"}}"#),
    ]
    .concat();
    assert_eq!(
        decode(body.as_bytes(), &[]),
        vec![
            Ok(ChatEvent::ReasoningDelta {
                text: "Let me think".into()
            }),
            Ok(ChatEvent::ReasoningEnd {
                continuation: Continuation::OpenAiReasoning {
                    id: "rs_x".into(),
                    encrypted_content: None,
                    summary: vec!["Thought.".into()],
                }
            }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ]
    );
}

#[test]
fn a_refusal_ends_as_content_filter() {
    let event = |data: &str| format!("data: {data}\n\n");
    let body = [
        event(r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_x","content":[]}}"#),
        event(r#"{"type":"response.refusal.delta","output_index":0,"content_index":0,"delta":"I can't help with that."}"#),
        event(r#"{"type":"response.completed","response":{"status":"completed"}}"#),
    ]
    .concat();
    let events = decode(body.as_bytes(), &[]);
    assert!(events.contains(&Ok(ChatEvent::text("I can't help with that."))));
    assert_eq!(
        events.last(),
        Some(&Ok(ChatEvent::finish(FinishReason::ContentFilter)))
    );
}

proptest! {
    #[test]
    fn every_chunking_yields_the_same_events(
        fixture in 0..FIXTURES.len(),
        cuts in proptest::collection::vec(0usize..8000, 0..16),
    ) {
        // Multi-byte characters, so that cuts also fall inside UTF-8 sequences.
        let text = FIXTURES[fixture].replace("Paris", "Pärïs ✓").replace("Hi there", "Hï thère ✓");
        let body = text.as_bytes();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(decode(body, &cuts), decode(body, &[]));
    }
}
