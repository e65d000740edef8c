//! The gemini stream decoder: never panics, and what it yields does not depend on how the body is chunked.
#![no_main]

#[macro_use]
#[path = "common/split_invariance.rs"]
mod split_invariance;

split_invariance_target!(tower_chat::gemini::StreamDecoder);
