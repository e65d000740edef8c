//! Waiting on something that should happen, within a bound, so a broken test fails instead of hanging.

use std::future::Future;
use std::time::Duration;

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
