//! The Messages API decoder, streamed and whole, against recorded and documented event sequences.

use serde_json::{json, Value};

use super::decode::{decode_message, provider_message, MessageDecoder};
use crate::error::ErrorKind;
use crate::event::{ChatEvent, FinishReason, Usage};
use crate::message::ToolCall;
use crate::reasoning::Continuation;
use crate::transport::EventDecoder;

fn decode_stream(text: &str) -> Vec<Result<ChatEvent, String>> {
    let mut decoder = EventDecoder::new(MessageDecoder::default());
    decoder.feed(text.as_bytes());
    decoder.end(None);
    std::iter::from_fn(|| decoder.next_item())
        .map(|item| item.map_err(|e| e.to_string()))
        .collect()
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Found by `fuzz/anthropic_stream`: the block index sized a `Vec` (capacity overflow, an abort).
#[test]
fn a_huge_block_index_is_just_a_key() {
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}})),
        event("content_block_start", json!({"type":"content_block_start","index":3_666_666_666_666_666_666_u64,"content_block":{"type":"text","text":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":3_666_666_666_666_666_666_u64,"delta":{"type":"text_delta","text":"hi"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":3_666_666_666_666_666_666_u64})),
        event("content_block_delta", json!({"type":"content_block_delta","index":3_666_666_666_666_666_666_u64,"delta":{"type":"text_delta","text":"late"}})),
    ]
    .concat();
    let items = decode_stream(&text);
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatEvent::TextDelta { text }) if text == "hi")),
        "{items:?}"
    );
    assert!(
        items.iter().any(|i| matches!(i, Err(e) if e.contains("content block 3666666666666666666 was never started"))),
        "a delta after the stop: {items:?}"
    );
}

fn tool_stream() -> String {
    [
        event("message_start", json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1,"cache_read_input_tokens":5}}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        event("ping", json!({"type":"ping"})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":0})),
        event("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Os"}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"lo\"}"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":1})),
        event("content_block_start", json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":2})),
        event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40}})),
        event("message_stop", json!({"type":"message_stop"})),
    ]
    .concat()
}

#[test]
fn event_names_are_only_a_shortcut_the_data_decides_without_them() {
    let named = decode_stream(&tool_stream());
    let unnamed: String = tool_stream()
        .lines()
        .filter(|line| !line.starts_with("event:"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(decode_stream(&unnamed), named);
    assert!(named.iter().all(Result::is_ok), "{named:?}");
}

#[test]
fn a_text_delta_without_its_text_is_a_protocol_error() {
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"m","model":"c"}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}})),
    ]
    .concat();
    let events = decode_stream(&text);
    assert!(
        matches!(events.last(), Some(Err(m)) if m.starts_with("protocol: malformed event") && m.contains("text")),
        "{events:?}"
    );
}

proptest::proptest! {
    #[test]
    fn every_chunking_yields_the_same_events(cuts in proptest::collection::vec(0usize..3000, 0..16)) {
        let text = tool_stream().replace("Checking", "Chécking ✓");
        let bytes = text.as_bytes();
        let whole = decode_stream(&text);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut decoder = EventDecoder::new(MessageDecoder::default());
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

#[test]
fn a_tool_use_stream_maps_to_events() {
    let events = decode_stream(&tool_stream());
    let events: Vec<ChatEvent> = events.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events[0],
        ChatEvent::ResponseMetadata {
            id: Some("msg_1".into()),
            model: Some("claude-sonnet-4-5".into())
        }
    );
    assert_eq!(events[1], ChatEvent::text("Checking"));
    assert_eq!(
        events[2],
        ChatEvent::ToolCallStart {
            index: 0,
            id: "toolu_1".into(),
            name: "weather".into()
        }
    );
    assert!(events.contains(&ChatEvent::ToolCallEnd {
        index: 0,
        call: ToolCall::new("toolu_1", "weather", json!({"city": "Oslo"}))
    }));
    assert!(events.contains(&ChatEvent::ToolCallEnd {
        index: 1,
        call: ToolCall::new("toolu_2", "now", json!({}))
    }));
    let n = events.len();
    assert_eq!(
        events[n - 2],
        ChatEvent::Usage {
            usage: Usage {
                from_response_cache: false,
                input_tokens: 30,
                output_tokens: 40,
                cached_input_tokens: Some(5),
                reasoning_tokens: None,
                cache_write_input_tokens: None,
            }
        }
    );
    assert_eq!(events[n - 1], ChatEvent::finish(FinishReason::ToolCalls));
}

#[test]
fn a_forced_answer_call_comes_back_as_text_streamed_and_whole() {
    let stream = [
        event("message_start", json!({"type":"message_start","message":{"id":"msg_1","model":"claude-3-opus","usage":{"input_tokens":5,"output_tokens":0}}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"structured_answer","input":{}}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"name\":"}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":0})),
        event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}})),
        event("message_stop", json!({"type":"message_stop"})),
    ]
    .concat();
    let streamed: Vec<ChatEvent> = decode_stream(&stream)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let text: String = streamed
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, r#"{"name":"Oslo"}"#);
    assert!(!streamed.iter().any(|e| e.kind().starts_with("tool_call")));
    assert_eq!(
        streamed.last(),
        Some(&ChatEvent::finish(FinishReason::Stop))
    );

    let whole = decode_message(
        json!({"id":"msg_1","model":"claude-3-opus","content":[{"type":"tool_use","id":"toolu_1",
               "name":"structured_answer","input":{"name":"Oslo"}}],"stop_reason":"tool_use",
               "usage":{"input_tokens":5,"output_tokens":9}})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    assert!(whole.contains(&ChatEvent::text(r#"{"name":"Oslo"}"#)));
    assert_eq!(whole.last(), Some(&ChatEvent::finish(FinishReason::Stop)));
}

#[test]
fn thinking_deltas_are_reasoning() {
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"def"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":0})),
        event("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EnCrYpTeD"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":1})),
        event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":3}})),
        event("message_stop", json!({"type":"message_stop"})),
    ].concat();
    let events = decode_stream(&text);
    assert_eq!(
        events[1..4],
        [
            Ok(ChatEvent::ReasoningDelta { text: "hmm".into() }),
            Ok(ChatEvent::ReasoningEnd {
                continuation: Continuation::AnthropicThinking {
                    signature: "abcdef".into()
                }
            }),
            Ok(ChatEvent::ReasoningEnd {
                continuation: Continuation::AnthropicRedacted {
                    data: "EnCrYpTeD".into()
                }
            }),
        ]
    );
    assert_eq!(
        *events.last().unwrap(),
        Ok(ChatEvent::finish(FinishReason::Length))
    );
}

#[test]
fn a_stop_sequence_is_named_streamed_and_whole() {
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"one two"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":0})),
        event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"output_tokens":3}})),
        event("message_stop", json!({"type":"message_stop"})),
    ].concat();
    let stop = FinishReason::StopSequence("END".into());
    assert_eq!(
        *decode_stream(&text).last().unwrap(),
        Ok(ChatEvent::finish(stop.clone()))
    );
    let body = json!({"id":"m","type":"message","role":"assistant","model":"c",
        "content":[{"type":"text","text":"one two"}],
        "stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":1,"output_tokens":3}});
    let whole = decode_message(body.to_string().as_bytes()).unwrap();
    assert_eq!(*whole.last().unwrap(), ChatEvent::finish(stop));
    // A provider that says `stop_sequence` without naming it: a plain stop.
    let unnamed = text.replace(r#","stop_sequence":"END""#, "");
    assert_eq!(
        *decode_stream(&unnamed).last().unwrap(),
        Ok(ChatEvent::finish(FinishReason::Stop))
    );
}

#[test]
fn an_error_event_mid_stream_is_typed() {
    let text = [
        event(
            "message_start",
            json!({"type":"message_start","message":{"id":"m","model":"c"}}),
        ),
        event(
            "error",
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        ),
    ]
    .concat();
    let events = decode_stream(&text);
    assert_eq!(
        events.last().unwrap(),
        &Err("upstream: Overloaded".to_owned())
    );
}

#[test]
fn a_stream_without_message_stop_is_a_connection_error() {
    let text = tool_stream();
    let cut = text.find("event: message_delta").unwrap();
    let events = decode_stream(&text[..cut]);
    assert!(matches!(events.last().unwrap(), Err(m) if m.starts_with("connection")));
}

#[test]
fn a_delta_for_a_block_never_started_is_a_protocol_error() {
    let text = event(
        "content_block_delta",
        json!({"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"x"}}),
    );
    assert!(matches!(&decode_stream(&text)[0], Err(m) if m.starts_with("protocol")));
}

#[test]
fn a_whole_message_gives_the_same_events_as_its_stream() {
    let body = json!({"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
        "content":[{"type":"text","text":"Checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Oslo"}},
                   {"type":"tool_use","id":"toolu_2","name":"now","input":{}}],
        "stop_reason":"tool_use","usage":{"input_tokens":25,"output_tokens":40,"cache_read_input_tokens":5}});
    let whole = decode_message(body.to_string().as_bytes()).unwrap();
    let streamed: Vec<ChatEvent> = decode_stream(&tool_stream())
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| !matches!(e, ChatEvent::ToolCallDelta { .. }))
        .collect();
    let whole: Vec<ChatEvent> = whole
        .into_iter()
        .filter(|e| !matches!(e, ChatEvent::ToolCallDelta { .. }))
        .collect();
    assert_eq!(whole, streamed);
}

#[test]
fn error_bodies_give_their_message() {
    let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#;
    assert_eq!(
        provider_message(body).as_deref(),
        Some("max_tokens: required")
    );
    assert_eq!(
        decode_message(body).unwrap_err().kind(),
        &ErrorKind::InvalidRequest
    );
}

/// The arguments a stream's deltas carry for each call, joined.
fn streamed_arguments(events: &[Result<ChatEvent, String>]) -> Vec<String> {
    let mut arguments: Vec<String> = Vec::new();
    for event in events.iter().flatten() {
        match event {
            ChatEvent::ToolCallStart { .. } => arguments.push(String::new()),
            ChatEvent::ToolCallDelta {
                index,
                arguments: delta,
            } => arguments[*index].push_str(delta),
            _ => {}
        }
    }
    arguments
}

/// Programmatic tool calling: a call its code made arrives whole in `content_block_start`, with no
/// `input_json_delta` after it.
#[test]
fn tool_input_sent_whole_in_the_start_block_is_streamed_as_its_arguments() {
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":9,"output_tokens":1}}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"query_sales","input":{"region":"West"},"caller":{"type":"code_execution_20250825","tool_id":"srvtoolu_1"}}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":0})),
        event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}})),
        event("message_stop", json!({"type":"message_stop"})),
    ]
    .concat();
    let events = decode_stream(&text);
    assert_eq!(
        streamed_arguments(&events),
        [r#"{"region":"West"}"#],
        "{events:?}"
    );
    assert!(events.contains(&Ok(ChatEvent::ToolCallEnd {
        index: 0,
        call: ToolCall::new("toolu_1", "query_sales", json!({"region": "West"}))
    })));
    // The usual empty start input followed by deltas still streams the deltas alone.
    assert_eq!(
        streamed_arguments(&decode_stream(&tool_stream())),
        [r#"{"city": "Oslo"}"#, ""]
    );
}

/// A `message_start` whose message is already complete: its content and `stop_reason`, then `message_stop`.
#[test]
fn a_message_start_carrying_the_whole_message_gives_its_content_and_stop_reason() {
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
            "content":[{"type":"text","text":"Checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Oslo"}}],
            "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":40}}})),
        event("message_stop", json!({"type":"message_stop"})),
    ]
    .concat();
    let events: Vec<ChatEvent> = decode_stream(&text)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(events.contains(&ChatEvent::text("Checking")), "{events:?}");
    assert!(events.contains(&ChatEvent::ToolCallEnd {
        index: 0,
        call: ToolCall::new("toolu_1", "weather", json!({"city": "Oslo"}))
    }));
    assert_eq!(
        events.last(),
        Some(&ChatEvent::finish(FinishReason::ToolCalls))
    );
    let body = json!({"id":"msg_1","model":"claude-sonnet-4-5",
        "content":[{"type":"text","text":"Checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Oslo"}}],
        "stop_reason":"tool_use","usage":{"input_tokens":25,"output_tokens":40}});
    assert_eq!(decode_message(body.to_string().as_bytes()).unwrap(), events);
}

/// Calls the provider's own code execution made (their `caller` is the code execution tool) sit in a message
/// that ended its turn: the provider's `end_turn` is the finish, not a request for the client to run them.
#[test]
fn an_end_turn_with_calls_the_provider_ran_itself_stays_a_stop() {
    let body = json!({"id":"msg_1","model":"claude-sonnet-4-5",
        "content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{"code":"print(1)"}},
                   {"type":"tool_use","id":"toolu_1","name":"query_sales","input":{"region":"West"},
                    "caller":{"type":"code_execution_20250825","tool_id":"srvtoolu_1"}},
                   {"type":"text","text":"West sold most."}],
        "stop_reason":"end_turn","usage":{"input_tokens":25,"output_tokens":40}});
    let whole = decode_message(body.to_string().as_bytes()).unwrap();
    assert_eq!(whole.last(), Some(&ChatEvent::finish(FinishReason::Stop)));
    let streamed =
        tool_stream().replace(r#""stop_reason":"tool_use""#, r#""stop_reason":"end_turn""#);
    assert_eq!(
        decode_stream(&streamed).last(),
        Some(&Ok(ChatEvent::finish(FinishReason::Stop)))
    );
}

/// A cited answer: its citations end their text block, a text block right after another ends the first, and an
/// event of an unknown type is kept; the whole message gives the same events as its stream.
#[test]
fn citations_end_their_block_and_unknown_events_are_kept() {
    let citation = json!({"type": "char_location", "cited_text": "x", "document_index": 0});
    let notice = json!({"type": "content_policy_notice", "level": "info"});
    let text = [
        event("message_start", json!({"type":"message_start","message":{"id":"msg_1","model":"m","content":[],"usage":{"input_tokens":1,"output_tokens":1}}})),
        event("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"A "}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":0})),
        event("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":citation}})),
        event("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"cited"}})),
        event("content_block_stop", json!({"type":"content_block_stop","index":1})),
        event("content_policy_notice", notice.clone()),
        event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}})),
        event("message_stop", json!({"type":"message_stop"})),
    ]
    .concat();
    let end = |citations: Vec<Value>| ChatEvent::ProviderExtra {
        format: crate::ApiFormat::Messages,
        extra: crate::ProviderExtra::TextBlockEnd { citations },
    };
    let streamed: Vec<ChatEvent> = decode_stream(&text)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        &streamed[1..6],
        [
            ChatEvent::text("A "),
            end(Vec::new()),
            ChatEvent::text("cited"),
            end(vec![citation.clone()]),
            ChatEvent::ProviderExtra {
                format: crate::ApiFormat::Messages,
                extra: crate::ProviderExtra::Event { event: notice },
            },
        ]
    );
    let whole = json!({"id": "msg_1", "model": "m", "stop_reason": "end_turn", "content": [
        {"type": "text", "text": "A "},
        {"type": "text", "text": "cited", "citations": [citation.clone()]},
    ]});
    let events = decode_message(whole.to_string().as_bytes()).unwrap();
    assert_eq!(
        &events[1..5],
        [
            ChatEvent::text("A "),
            end(Vec::new()),
            ChatEvent::text("cited"),
            end(vec![citation]),
        ]
    );
}
