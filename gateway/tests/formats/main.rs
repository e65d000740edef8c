//! The three wire formats end to end: Chat Completions, Messages and Responses, their official clients, media, files, fields carried and mapped across formats, model routes, structured answers, recorded provider streams.
//!
//! One test binary for the whole area: the suite links a few binaries, not one per file.

#[path = "../common/mod.rs"]
mod common;

mod agent_endpoints;
mod answer_extras;
mod carried_blocks;
mod chat;
mod codex_namespaces;
mod codex_tools;
mod fields_across_formats;
mod files;
mod media;
mod messages;
mod model_routes;
mod passthrough;
mod previous_response;
mod python_client;
mod recorded;
mod responses;
mod responses_reasoning;
mod structured;
