//! The gateway's configuration, as plain data: the options ([`cli`]: the command line, the environment and the
//! `[gateway]` table), the configuration file ([`file`](mod@file)) with one module per table, and what they are merged
//! into ([`Config`]). The runtime modules take a table and build their part of the gateway from it.

pub mod cache;
pub mod cli;
pub mod connections;
pub mod credential;
pub mod file;
pub mod guardrail;
pub mod hosts;
pub mod keys;
pub mod limits;
pub mod mcp;
pub mod provider;
pub mod proxies;
mod settings;
pub mod structured;
pub mod upstreams;

pub use provider::Provider;
pub use settings::*;
