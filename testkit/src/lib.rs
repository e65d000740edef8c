//! Test helpers shared by the workspace's test suites, so that a helper is written once.
//!
//! - [`model`](mod@model): scripted in-process models that record what they were sent, in either delivery shape.
//! - [`events`]: running a request through a service and reading its events.
//! - [`replies`]: provider replies for [`ScriptedProvider`](tower_chat::test_server::ScriptedProvider).
//! - [`python`]: running the official Python clients against a server, skipping visibly without them.
//! - [`process`]: a child process leading its own process group, the whole group killed on drop.
//! - [`schemas`]: JSON Schemas built to cost more than their size (`$ref` chains, DAGs, billion laughs).
//! - `spans` (feature `spans`): a tracing layer that records spans and events.
//!
//! Everything is re-exported at the root: a test file says `use tower_chat_testkit::*;`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod counting;
pub mod events;
pub mod media;
pub mod model;
pub mod process;
pub mod python;
pub mod replies;
pub mod schemas;
mod services;
#[cfg(feature = "spans")]
pub mod spans;
mod wait;

pub use counting::{count, counter};
pub use events::*;
pub use media::{base64, PDF, PNG};
pub use model::*;
pub use process::ProcessGroup;
pub use python::*;
pub use replies::*;
pub use schemas::*;
pub use services::{database_url, redis_url};
#[cfg(feature = "spans")]
pub use spans::*;
pub use wait::{until, within, BOUND};
