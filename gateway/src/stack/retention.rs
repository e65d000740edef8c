//! `--retention-days`: a task that asks the store to delete the calls past the period, once at start and then
//! hourly ([`tower_chat_persistence::Store::delete_expired`]: bounded batches, the spend rollup kept).
//!
//! Every replica sharing a PostgreSQL database runs it: the store serialises the runs (a lock per batch) and a
//! run is idempotent, so a second replica finds what is left, usually nothing. The task holds the store weakly
//! and ends with it.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use tower_chat_persistence::{Retention, Store};

/// How often the store is asked to delete expired calls.
pub const RETENTION_EVERY: Duration = Duration::from_secs(60 * 60);

/// Start the retention task for `store`.
pub fn spawn(store: &Arc<dyn Store>, retention: Retention) -> tokio::task::JoinHandle<()> {
    let store: Weak<dyn Store> = Arc::downgrade(store);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(RETENTION_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(store) = store.upgrade() else { return };
            match store.delete_expired(&retention, SystemTime::now()).await {
                Ok(purged) if purged.calls > 0 => tracing::info!(
                    calls = purged.calls,
                    messages = purged.messages,
                    blobs = purged.blobs,
                    batches = purged.batches,
                    "deleted calls past the retention period"
                ),
                Ok(_) => {}
                // Tried again at the next tick: what a failed batch did not commit is still there.
                Err(error) => {
                    tracing::warn!(%error, "cannot delete calls past the retention period")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use futures_util::future::BoxFuture;
    use tower_chat::ConversationId;
    use tower_chat_persistence::{
        CallId, CallRecord, ConversationQuery, ConversationSummary, Purged, StoreError,
    };

    use super::*;

    /// A store that only counts the retention runs it is asked for.
    #[derive(Debug, Default)]
    struct Counting(AtomicU64);

    impl Store for Counting {
        fn write_calls<'a>(&'a self, _: &'a [CallRecord]) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async { Ok(()) })
        }

        fn call<'a>(
            &'a self,
            _: &'a CallId,
        ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
            Box::pin(async { Ok(None) })
        }

        fn conversation_calls<'a>(
            &'a self,
            _: &'a ConversationId,
        ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn list_conversations<'a>(
            &'a self,
            _: &'a ConversationQuery,
        ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn delete_expired<'a>(
            &'a self,
            _: &'a Retention,
            _: SystemTime,
        ) -> BoxFuture<'a, Result<Purged, StoreError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(Purged::default()) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retention_runs_at_start_then_hourly_and_ends_with_the_store() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn Store> = counting.clone();
        let task = spawn(&store, Retention::days(30).unwrap());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(counting.0.load(Ordering::SeqCst), 1, "once at start");
        tokio::time::sleep(RETENTION_EVERY).await;
        assert_eq!(counting.0.load(Ordering::SeqCst), 2, "then every hour");
        drop((store, counting));
        tokio::time::sleep(RETENTION_EVERY).await;
        assert!(task.is_finished(), "the task ends once the store is gone");
    }
}
