//! The Bedrock ConverseStream decoder (AWS event-stream frames with CRCs, then the event mapping): never panics,
//! and what it yields does not depend on how the body is chunked.
#![no_main]

#[macro_use]
#[path = "common/split_invariance.rs"]
mod split_invariance;

split_invariance_target!(tower_chat::bedrock::StreamDecoder);
