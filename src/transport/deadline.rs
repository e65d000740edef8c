//! A future given a deadline, its expiry a typed timeout naming the phase it cut short.

use std::time::Duration;

use crate::error::{ChatError, ErrorKind, TimeoutPhase};

/// `future` within `limit` (no limit: as long as it takes).
pub(super) async fn with_timeout<F: std::future::Future>(
    limit: Option<Duration>,
    phase: TimeoutPhase,
    future: F,
) -> Result<F::Output, ChatError> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, future).await.map_err(|_| {
            ChatError::new(
                ErrorKind::Timeout(phase),
                format!("no answer within {limit:?}"),
            )
        }),
        None => Ok(future.await),
    }
}
