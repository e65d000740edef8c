//! # tower-chat-structured-output
//!
//! Typed answers from any chat service: the request asks for JSON matching a schema (each leaf rewrites the
//! schema for its provider: OpenAI strict mode, Anthropic structured outputs or a forced tool, Gemini's response
//! schema), the [`StructuredOutputLayer`] validates the answer against the schema as written and asks again with
//! the violations when it does not match (twice by default, each a model call of its own), and
//! [`StructuredExt`] reads it into a Rust type — whole, or growing while it streams ([`Partial`]).
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use tower_chat::openai::OpenAiChat;
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, Message};
//! use tower_chat_structured_output::{StructuredError, StructuredExt};
//!
//! #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
//! struct City {
//!     name: String,
//!     /// Inhabitants, if known.
//!     population: Option<u64>,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), StructuredError> {
//! // A scripted provider: the first answer breaks the schema, the repair matches it.
//! let server = ScriptedProvider::start(|_request, index| match index {
//!     0 => Reply::openai_text(r#"{"name": 7}"#),
//!     _ => Reply::openai_text(r#"{"name": "Oslo", "population": 709000}"#),
//! })
//! .await;
//! let chat = OpenAiChat::builder().base_url(server.base_url()).api_key("test").model("gpt-4o-mini").build()?;
//!
//! let city: City = chat.structured(ChatRequest::new(vec![Message::user("Norway's capital?")])).await?;
//! assert_eq!(city, City { name: "Oslo".into(), population: Some(709000) });
//! assert_eq!(server.requests().len(), 2);
//! # Ok(()) }
//! ```
//!
//! A runtime schema works the same way through [`StructuredExt::structured_value`] and an [`AnswerSchema`].
//!
//! Any consumer of a checked stream (a gateway, a user's own service above the layer) can see the answer grow
//! without the helper: with [`StructuredOutputLayer::partial_answers`] (or the [`PartialAnswers`] request
//! extension) the layer adds a `ChatEvent::PartialAnswer` with the JSON so far after each text delta that changed
//! it, read once by one [`PartialJson`] per attempt and spaced so that copying the values stays linear in the
//! answer (see [`PartialAnswers`]); values start again after each `AnswerRejected`, and the last one before
//! `Finish` is the validated answer. [`StructuredExt::structured_stream`] reads these events.
//! Refusals (a content filter, a safety stop) are [`StructuredError::Refused`], not a parse failure.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod answer;
mod config;
mod error;
mod ext;
mod growing;
mod layer;
pub mod partial;
mod service;
mod stream;

/// The schema derive, for answer types (`#[derive(JsonSchema)]`).
pub use schemars;

pub use answer::AnswerSchema;
pub use error::StructuredError;
pub use ext::{Partial, PartialStream, StructuredExt};
pub use growing::{PartialAnswers, EVERY_DELTA_BELOW, GROWTH_DIVISOR};
pub use layer::StructuredOutputLayer;
pub use partial::{PartialJson, PartialJsonError};
pub use service::StructuredOutput;
