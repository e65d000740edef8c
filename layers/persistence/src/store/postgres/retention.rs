//! [`PostgresStore::delete_expired`](crate::Store::delete_expired): retention in PostgreSQL (see
//! `store/retention.rs` for what goes and why it is safe).
//!
//! Each batch is one transaction that first locks `chat_blobs` and `chat_messages` in `SHARE ROW EXCLUSIVE` mode:
//! record transactions that insert nodes or blobs wait for the batch (and the batch for those already inserting),
//! so no record can come to reach a node or blob between the batch judging it free and deleting it. The mode
//! conflicts with itself, so replicas running retention at once take turns; what one deleted the other no longer
//! finds. The search index is a column of `chat_calls`: it goes with the row.

use std::time::SystemTime;

use super::{pg_error, PostgresStore};
use crate::store::retention::{expired_sql, prune_blob_sql, prune_node_sql, Frontier};
use crate::store::{Purged, Retention, StoreError};

impl PostgresStore {
    /// Retention's batches, one transaction each, until a batch finds fewer calls than it may delete.
    pub(super) async fn delete_expired_in_batches(
        &self,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<Purged, StoreError> {
        let (cutoff, limit) = (retention.cutoff_micros(now), retention.limit());
        let mut purged = Purged::default();
        loop {
            let batch = self.delete_batch(cutoff, limit).await?;
            if batch.calls == 0 {
                return Ok(purged);
            }
            purged.add(batch);
            if i64::try_from(batch.calls).unwrap_or(i64::MAX) < limit {
                return Ok(purged);
            }
        }
    }

    async fn delete_batch(&self, cutoff: i64, limit: i64) -> Result<Purged, StoreError> {
        const WHAT: &str = "cannot delete expired calls";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error(WHAT))?;
        tx.batch_execute("LOCK TABLE chat_blobs, chat_messages IN SHARE ROW EXCLUSIVE MODE")
            .await
            .map_err(pg_error(WHAT))?;
        let expired = tx
            .query(&expired_sql("", "$1", "$2"), &[&cutoff, &limit])
            .await
            .map_err(pg_error(WHAT))?;
        let ids = expired
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>();
        let mut purged = Purged {
            calls: tx
                .execute("DELETE FROM chat_calls WHERE call_id = ANY($1)", &[&ids])
                .await
                .map_err(pg_error(WHAT))?,
            ..Purged::default()
        };
        let mut walk = Frontier::new(
            expired
                .iter()
                .filter_map(|row| row.get::<_, Option<String>>(1)),
        );
        let prune = tx
            .prepare(&prune_node_sql("$1", "message::text"))
            .await
            .map_err(pg_error(WHAT))?;
        while let Some(id) = walk.next() {
            if let Some(row) = tx.query_opt(&prune, &[&id]).await.map_err(pg_error(WHAT))? {
                walk.deleted(row.get(0), row.get(1))?;
            }
        }
        let (messages, blobs) = walk.finish();
        purged.messages = messages;
        let prune_blob = tx
            .prepare(&prune_blob_sql("$1", "strpos(message::text, $1) > 0"))
            .await
            .map_err(pg_error(WHAT))?;
        for hash in blobs {
            purged.blobs += tx
                .execute(&prune_blob, &[&hash])
                .await
                .map_err(pg_error(WHAT))?;
        }
        tx.commit().await.map_err(pg_error(WHAT))?;
        Ok(purged)
    }
}
