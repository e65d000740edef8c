//! Upstreams: configuration and reload, every provider kind, streams held to each provider's recorded behaviour, client schemas each kind can or cannot take.
//!
//! One test binary for the whole area: the suite links a few binaries, not one per file.

#[path = "../common/mod.rs"]
mod common;

mod provider_matrix;
mod schema_bombs;
mod upstream_anthropic_vertex;
mod upstream_azure_responses;
mod upstream_fidelity;
mod upstream_kinds;
mod upstream_responses;
mod upstreams;
