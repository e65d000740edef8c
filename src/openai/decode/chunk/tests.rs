//! The chunk decoder against the quirks of real servers, streamed and cut anywhere.

use super::*;
use crate::transport::EventDecoder;
use crate::ToolArguments;
use proptest::prelude::*;
use serde_json::json;

/// Decode a whole SSE byte stream, cut into the given chunks, the way the leaf's body stream does.
pub(crate) fn decode_stream(chunks: &[&[u8]]) -> Vec<Result<ChatEvent, String>> {
    let mut decoder = EventDecoder::new(ChunkDecoder::default());
    for chunk in chunks {
        decoder.feed(chunk);
    }
    decoder.end(None);
    std::iter::from_fn(|| decoder.next_item())
        .map(|item| item.map_err(|e| e.to_string()))
        .collect()
}

fn sse(chunks: &[Value]) -> String {
    let mut text = String::new();
    for chunk in chunks {
        text.push_str(&format!("data: {chunk}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    text
}

fn calls(events: &[Result<ChatEvent, String>]) -> Vec<ToolCall> {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(ChatEvent::ToolCallEnd { call, .. }) => Some(call.clone()),
            _ => None,
        })
        .collect()
}

fn last(events: &[Result<ChatEvent, String>]) -> &Result<ChatEvent, String> {
    events.last().unwrap()
}

#[test]
fn parallel_interleaved_calls_keyed_by_index() {
    let text = sse(&[
        json!({"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[
            {"index":0,"id":"call_a","type":"function","function":{"name":"weather","arguments":""}},
            {"index":1,"id":"call_b","type":"function","function":{"name":"time","arguments":"{\"tz\""}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":\"UTC\"}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        json!({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        calls(&events),
        vec![
            ToolCall::new("call_a", "weather", json!({"city": "Oslo"})),
            ToolCall::new("call_b", "time", json!({"tz": "UTC"})),
        ]
    );
    let n = events.len();
    assert_eq!(
        events[n - 2],
        Ok(ChatEvent::Usage {
            usage: Usage {
                input_tokens: 9,
                output_tokens: 4,
                ..Usage::default()
            }
        })
    );
    assert_eq!(
        events[n - 1],
        Ok(ChatEvent::finish(FinishReason::ToolCalls))
    );
}

#[test]
fn ollama_reuses_index_zero_and_differs_by_id() {
    let text = sse(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"a","arguments":"{\"x\":1}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","function":{"name":"b","arguments":"{\"y\":2}"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        calls(&events),
        vec![
            ToolCall::new("call_1", "a", json!({"x": 1})),
            ToolCall::new("call_2", "b", json!({"y": 2}))
        ]
    );
    assert_eq!(
        *last(&events),
        Ok(ChatEvent::finish(FinishReason::ToolCalls))
    );
}

#[test]
fn vllm_empty_tool_calls_on_text_chunks_and_no_usage() {
    let text = sse(&[
        json!({"choices":[{"index":0,"delta":{"content":"Hel","tool_calls":[]}}]}),
        json!({"choices":[{"index":0,"delta":{"content":"lo","tool_calls":[]},"finish_reason":null}]}),
        json!({"choices":[{"index":0,"delta":{"content":""},"finish_reason":"length"}]}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        events,
        vec![
            Ok(ChatEvent::text("Hel")),
            Ok(ChatEvent::text("lo")),
            Ok(ChatEvent::finish(FinishReason::Length))
        ]
    );
}

#[test]
fn only_the_choice_with_index_zero_is_mapped_wherever_it_is() {
    let text = sse(&[
        json!({"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"mine"}}]}),
        json!({"choices":[{"index":0,"delta":{"content":"too"},"finish_reason":"stop"},{"index":1,"delta":{"content":"x"},"finish_reason":"length"}]}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        events,
        vec![
            Ok(ChatEvent::text("mine")),
            Ok(ChatEvent::text("too")),
            Ok(ChatEvent::finish(FinishReason::Stop))
        ]
    );
}

#[test]
fn escaped_strings_and_escaped_keys_decode_like_plain_ones() {
    // Strings without escapes are borrowed from the event; these must be unescaped into owned ones.
    let text = "data: {\"id\":\"c\\u0031\",\"choices\":[{\"index\":0,\"delta\":{\"cont\\u0065nt\":\"a\\n\\\"b\\\"\",\
                \"reasoning\":\"r\\u00e9\",\"refusal\":null,\"unknown\":{\"x\":[1]}}}]}\n\ndata: [DONE]\n\n";
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        events,
        vec![
            Ok(ChatEvent::ResponseMetadata {
                id: Some("c1".into()),
                model: None
            }),
            Ok(ChatEvent::ReasoningDelta { text: "ré".into() }),
            Ok(ChatEvent::text("a\n\"b\"")),
            // A field no layer models is kept for a Chat Completions client; a `null` one is not.
            Ok(ChatEvent::ProviderExtra {
                format: crate::ApiFormat::ChatCompletions,
                extra: crate::ProviderExtra::Fields {
                    message: json!({"unknown": {"x": [1]}}).as_object().unwrap().clone(),
                    choice: serde_json::Map::new(),
                },
            }),
            Ok(ChatEvent::finish(FinishReason::Stop))
        ]
    );
}

#[test]
fn reasoning_content_is_a_reasoning_delta() {
    let text = sse(&[
        json!({"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}),
        json!({"choices":[{"index":0,"delta":{"content":"answer"},"finish_reason":"stop"}]}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        events[0],
        Ok(ChatEvent::ReasoningDelta {
            text: "think".into()
        })
    );
}

#[test]
fn every_text_of_a_delta_is_an_event_in_order() {
    let text = sse(&[json!({"choices":[{"index":0,"delta":{
        "reasoning_content":"r1","reasoning":"r2","content":"c","refusal":"no"}}]})]);
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(
        events[..4],
        [
            Ok(ChatEvent::ReasoningDelta { text: "r1".into() }),
            Ok(ChatEvent::ReasoningDelta { text: "r2".into() }),
            Ok(ChatEvent::text("c")),
            Ok(ChatEvent::text("no")),
        ]
    );
}

#[test]
fn a_refusal_ends_as_content_filter_streamed_and_whole() {
    let text = sse(&[
        json!({"choices":[{"index":0,"delta":{"refusal":"I can't help with that."}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    assert!(events.contains(&Ok(ChatEvent::text("I can't help with that."))));
    assert_eq!(
        events.last(),
        Some(&Ok(ChatEvent::finish(FinishReason::ContentFilter)))
    );
    let plain = sse(&[
        json!({"choices":[{"index":0,"delta":{"content":"ok","refusal":null},"finish_reason":"stop"}]}),
    ]);
    assert_eq!(
        decode_stream(&[plain.as_bytes()]).last(),
        Some(&Ok(ChatEvent::finish(FinishReason::Stop)))
    );
}

#[test]
fn invalid_argument_json_is_kept_raw() {
    let text = sse(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    let events = decode_stream(&[text.as_bytes()]);
    match &calls(&events)[0].arguments {
        ToolArguments::Invalid { raw, .. } => assert_eq!(raw, "{\"a\":"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_error_object_inside_the_stream_is_a_typed_error() {
    let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\
                data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n";
    let events = decode_stream(&[text.as_bytes()]);
    assert_eq!(events[0], Ok(ChatEvent::text("a")));
    assert_eq!(events[1], Err("upstream: overloaded".into()));
    assert_eq!(events.len(), 2);
}

#[test]
fn a_malformed_chunk_is_a_protocol_error_quoting_it() {
    let events = decode_stream(&[b"data: {not json}\n\n"]);
    match &events[0] {
        Err(message) => assert!(
            message.starts_with("protocol: malformed chunk") && message.contains("{not json}"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stream_cut_before_finishing_is_a_connection_error() {
    let events =
        decode_stream(&[b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"]);
    assert_eq!(events[0], Ok(ChatEvent::text("a")));
    assert!(
        matches!(&events[1], Err(m) if m.starts_with("connection")),
        "{events:?}"
    );
}

#[test]
fn finish_without_done_is_complete() {
    let events = decode_stream(&[b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n"]);
    assert_eq!(*last(&events), Ok(ChatEvent::finish(FinishReason::Stop)));
}

proptest! {
    #[test]
    fn every_chunking_of_a_tool_stream_yields_the_same_events(cuts in proptest::collection::vec(0usize..2000, 0..16)) {
        let text = sse(&[
            json!({"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"héllo ✓ "}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"q\":"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ü\"}"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}),
        ]).replace("\n\n", "\r\n\r\n");
        let bytes = text.as_bytes();
        let whole = decode_stream(&[bytes]);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for cut in cuts {
            chunks.push(&bytes[start..cut]);
            start = cut;
        }
        chunks.push(&bytes[start..]);
        prop_assert_eq!(&decode_stream(&chunks), &whole);
        // Drained after every chunk, the way the leaf's body stream takes events.
        let mut decoder = EventDecoder::new(ChunkDecoder::default());
        let mut drained = Vec::new();
        for chunk in &chunks {
            decoder.push(bytes::Bytes::copy_from_slice(chunk));
            drained.extend(std::iter::from_fn(|| decoder.next_item()));
        }
        decoder.end(None);
        drained.extend(std::iter::from_fn(|| decoder.next_item()));
        let drained: Vec<_> = drained.into_iter().map(|item| item.map_err(|e| e.to_string())).collect();
        prop_assert_eq!(drained, whole);
    }
}
