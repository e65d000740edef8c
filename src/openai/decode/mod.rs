//! Chat Completions responses — streamed `chat.completion.chunk`s and whole `chat.completion`s — mapped to chat
//! events.
//!
//! Real servers differ; each quirk handled here has a test: tool-call fragments keyed by `index` with `id` and
//! `name` only on the first one; servers that reuse index 0 for every call and tell calls apart by `id`
//! (Ollama); `tool_calls: []` on plain text chunks (vLLM); a final usage chunk with empty `choices`; no usage at
//! all; `finish_reason: "stop"` on a response that called tools; an `error` object inside the stream.
//!
//! `chunk.rs` decodes the stream, `completion.rs` a whole response (through the stream decoder's steps); what
//! both read (usage, finish reasons, error objects) is in `fields.rs`.

mod chunk;
mod completion;
mod extras;
mod fields;
mod parts;
mod text;

pub(crate) use chunk::ChunkDecoder;
pub(crate) use completion::decode_completion;
pub(crate) use fields::provider_message;
