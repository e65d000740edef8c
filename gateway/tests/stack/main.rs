//! The stack's optional parts through the gateway: cache, guardrails, limits and team budgets, the plain-proxy profile, the tool sandbox and OTLP export.
//!
//! One test binary for the whole area: the suite links a few binaries, not one per file.

#[path = "../common/mod.rs"]
mod common;

mod cache;
mod guardrail;
mod guardrail_carriers;
mod guardrail_records;
mod limits;
#[cfg(feature = "otlp")]
mod otlp;
mod proxy;
mod sandbox;
mod team_budget;
