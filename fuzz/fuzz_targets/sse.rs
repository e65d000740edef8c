//! The SSE decoder: never panics, and the events do not depend on how the body is split into chunks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_chat::sse::{SseDecoder, SseEvent};

fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut |event| events.push(event));
    }
    events.extend(decoder.finish());
    events
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let whole = decode(&[body]);
    let at = usize::from(split) % (body.len() + 1);
    let (a, b) = body.split_at(at);
    assert_eq!(whole, decode(&[a, b]), "split at {at}");
    let bytewise: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(whole, decode(&bytewise), "byte by byte");
});
