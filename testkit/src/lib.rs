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

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub mod events;
pub mod media;
pub mod model;
pub mod process;
pub mod python;
pub mod replies;
pub mod schemas;
#[cfg(feature = "spans")]
pub mod spans;

pub use events::*;
pub use media::{base64, PDF, PNG};
pub use model::*;
pub use process::ProcessGroup;
pub use python::*;
pub use replies::*;
pub use schemas::*;
#[cfg(feature = "spans")]
pub use spans::*;

/// A generous bound on waiting for something that should happen, so a broken test fails instead of hanging.
pub const BOUND: Duration = Duration::from_secs(20);

/// `future`'s output, failing the test (naming `what`) if it takes longer than [`BOUND`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {BOUND:?}"))
}

/// Check `done` every 10 ms until it holds, failing the test (naming `what`) after [`BOUND`]: for a condition
/// that nothing announces (another process, a server's count, a reloaded file).
pub async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(what, async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// A run counter for a tool body or a callback.
pub fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// The value of a [`counter`].
pub fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// The PostgreSQL URL in `DATABASE_URL`, or `None` after a visible `SKIPPED` line (a failure under CI).
pub fn database_url() -> Option<String> {
    tower_chat::test_server::service_url("DATABASE_URL")
}

/// The Redis URL in `REDIS_URL`, or `None` after a visible `SKIPPED` line (a failure under CI).
pub fn redis_url() -> Option<String> {
    tower_chat::test_server::service_url("REDIS_URL")
}
