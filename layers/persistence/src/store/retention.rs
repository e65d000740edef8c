//! Retention: deleting the calls older than a period, with the message nodes, blobs and search index entries
//! only they reach, while the spend rollup keeps their sums.
//!
//! # What goes, what stays
//!
//! A call goes once it started and ended before the cutoff (now minus [`Retention::keep`]), unless it is still
//! in flight or paused awaiting an approval (`finish_reason = 'awaiting_approval'`: the approval that resumes it
//! reads it). The rollup (`chat_spend_daily`) is a table of its own, added to by the writer and never derived
//! from `chat_calls` again, so deleting calls leaves its sums as they were.
//!
//! Message nodes are shared: a conversation's calls share their history's prefix, and a stateless client's
//! resent history shares the nodes of the calls it continues, across conversations. A node is deleted only when
//! no remaining call has it as its head and no remaining node has it as its parent, that is when no remaining
//! call's history passes through it. Deletion starts at the heads of the deleted calls and walks up: a node
//! deleted hands its parent on to be checked, so a chain is pruned from its leaf up to the first node another
//! call still reaches (the index `chat_messages_by_parent`, migration 0015, answers "has it a child?"). A blob
//! goes when no remaining node refers to it; that check reads the message table (there is no index from blobs
//! to the nodes that refer to them), so it costs a scan per blob freed, paid only by batches that free one.
//! That scan runs inside the batch's transaction: on a large store, record writes wait for it (SQLite's write
//! lock; PostgreSQL's lock on `chat_messages`), so a batch that frees media holds them up for a scan's length.
//!
//! # Bounded transactions
//!
//! Each transaction deletes at most [`Retention::batch`] calls, with the nodes, blobs and index entries they
//! free, then commits; the next batch is a new transaction. In SQLite each batch is one job of the connection
//! thread, so record writes queued meanwhile run between two batches. In PostgreSQL a batch locks
//! `chat_blobs` and `chat_messages` against writes (`SHARE ROW EXCLUSIVE`) until it commits: a record
//! transaction that inserted a node the batch is about to judge finishes first (its call then reaches the
//! node), and one that starts later inserts the nodes it needs again (`ON CONFLICT DO NOTHING` finds them
//! gone). The same lock serialises two replicas' retention runs; a run is idempotent, so replicas may all run
//! it on a schedule.
//!
//! # The writers' caches
//!
//! Each store handle keeps the chains and blob hashes it wrote recently, and skips writing nodes and blobs it
//! believes stored (`chain.rs`, `blobs.rs`). Retention on one replica cannot reach the others' memory, so the
//! caches bound their own trust instead: a chain is remembered only if its record ended less than
//! [`CACHE_TRUST`](super::blobs::CACHE_TRUST) before its commit, and is trusted for [`CACHE_TRUST`](super::blobs::CACHE_TRUST) after that commit. A chain the cache
//! trusts is thus the history of a call that ended less than two hours ago, and retention deletes only calls
//! that ended at least [`Retention::MIN_KEEP`] (a day) ago: that call remains, so every node of the chain (its
//! ancestors) and every blob they refer to remain. The argument holds while replicas' clocks disagree by less
//! than the difference, twenty-two hours.

use std::time::{Duration, SystemTime};

use super::StoreError;

/// How long calls are kept, and how many one transaction deletes: the argument of [`crate::Store::delete_expired`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    keep: Duration,
    batch: usize,
}

impl Retention {
    /// The shortest period calls can be kept: a day. Shorter would let retention delete what a store handle's
    /// cache still trusts (see the module docs of `retention.rs`).
    pub const MIN_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

    /// How many calls a transaction deletes by default.
    pub const DEFAULT_BATCH: usize = 500;

    /// Keep calls for `keep`, at least [`Retention::MIN_KEEP`].
    pub fn keep_for(keep: Duration) -> Result<Self, RetentionTooShort> {
        if keep < Self::MIN_KEEP {
            return Err(RetentionTooShort { keep });
        }
        Ok(Retention {
            keep,
            batch: Self::DEFAULT_BATCH,
        })
    }

    /// Keep calls for `days` days (at least one).
    pub fn days(days: u32) -> Result<Self, RetentionTooShort> {
        Self::keep_for(Self::MIN_KEEP * days)
    }

    /// Delete at most `calls` calls per transaction (default [`Retention::DEFAULT_BATCH`]; at least one).
    pub fn batch(mut self, calls: usize) -> Self {
        self.batch = calls.max(1);
        self
    }

    /// How long calls are kept.
    pub fn keep(&self) -> Duration {
        self.keep
    }

    /// How many calls a transaction deletes at most.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    /// The cutoff at `now`, in the stores' microseconds: calls that started and ended before it go.
    pub(crate) fn cutoff_micros(&self, now: SystemTime) -> i64 {
        crate::record::to_micros(now.checked_sub(self.keep).unwrap_or(SystemTime::UNIX_EPOCH))
    }

    /// The batch size as a SQL limit.
    pub(crate) fn limit(&self) -> i64 {
        i64::try_from(self.batch).unwrap_or(i64::MAX)
    }
}

/// A retention period shorter than [`Retention::MIN_KEEP`] was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionTooShort {
    keep: Duration,
}

impl std::fmt::Display for RetentionTooShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "calls must be kept at least a day (asked: {} s)",
            self.keep.as_secs()
        )
    }
}

impl std::error::Error for RetentionTooShort {}

/// What a retention run deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Calls deleted.
    pub calls: u64,
    /// Message nodes deleted (those no remaining call reaches).
    pub messages: u64,
    /// Blobs deleted (those no remaining message refers to).
    pub blobs: u64,
    /// Transactions committed, each deleting at most [`Retention::batch_size`] calls.
    pub batches: u64,
}

impl Purged {
    /// Add one batch's counts.
    pub(crate) fn add(&mut self, batch: Purged) {
        self.calls += batch.calls;
        self.messages += batch.messages;
        self.blobs += batch.blobs;
        self.batches += 1;
    }
}

/// The calls a batch deletes (id and history head; SQLite adds the rowid its search index is keyed by), oldest
/// first. Placeholders: the cutoff and the limit; `extra` adds columns.
pub(crate) fn expired_sql(extra: &str, cutoff: &str, limit: &str) -> String {
    format!(
        "SELECT call_id, history_head{extra} FROM chat_calls \
         WHERE started_at < {cutoff} AND ended_at < {cutoff} AND status <> 'in_flight' \
         AND COALESCE(finish_reason, '') <> 'awaiting_approval' \
         ORDER BY started_at, call_id LIMIT {limit}"
    )
}

/// Delete one node if no remaining call has it as its head and no node has it as its parent, returning its
/// parent and message (as text: `text` is the dialect's cast). Placeholder `id`.
pub(crate) fn prune_node_sql(id: &str, text: &str) -> String {
    format!(
        "DELETE FROM chat_messages WHERE id = {id} \
         AND NOT EXISTS (SELECT 1 FROM chat_calls WHERE history_head = {id}) \
         AND NOT EXISTS (SELECT 1 FROM chat_messages child WHERE child.parent_id = {id}) \
         RETURNING parent_id, {text}"
    )
}

/// Delete one blob if no remaining message refers to it (`contains` is the dialect's substring test over the
/// message column, with the hash as its needle). Placeholder `hash`.
pub(crate) fn prune_blob_sql(hash: &str, contains: &str) -> String {
    format!(
        "DELETE FROM chat_blobs WHERE hash = {hash} \
         AND NOT EXISTS (SELECT 1 FROM chat_messages WHERE {contains})"
    )
}

/// The index retention walks nodes downwards with, and the one it finds a node's calls with (both dialects).
pub(crate) const INDEXES_SQL: &str =
    "CREATE INDEX IF NOT EXISTS chat_messages_by_parent ON chat_messages (parent_id);
CREATE INDEX IF NOT EXISTS chat_calls_by_head ON chat_calls (history_head);";

/// The walk that prunes nodes from the deleted calls' heads upwards (see the module docs): the store deletes
/// each node [`Frontier::next`] names if nothing reaches it any more, and reports the deletion with
/// [`Frontier::deleted`], which hands the node's parent on.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug, Default)]
pub(crate) struct Frontier {
    waiting: Vec<String>,
    deleted: u64,
    blobs: std::collections::HashSet<String>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Frontier {
    /// A walk from the heads of the deleted calls.
    pub(crate) fn new(heads: impl IntoIterator<Item = String>) -> Self {
        let mut waiting: Vec<String> = heads.into_iter().collect();
        waiting.sort();
        waiting.dedup();
        Frontier {
            waiting,
            ..Frontier::default()
        }
    }

    /// The next node to try.
    pub(crate) fn next(&mut self) -> Option<String> {
        self.waiting.pop()
    }

    /// The node tried last was deleted: its parent is tried next, and the blobs its message refers to may be
    /// free now.
    pub(crate) fn deleted(
        &mut self,
        parent: Option<String>,
        message: String,
    ) -> Result<(), StoreError> {
        self.deleted += 1;
        self.blobs.extend(super::blobs::references([&message])?);
        self.waiting.extend(parent);
        Ok(())
    }

    /// How many nodes went, and the blobs their messages referred to.
    pub(crate) fn finish(self) -> (u64, std::collections::HashSet<String>) {
        (self.deleted, self.blobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_shorter_than_a_day_is_refused() {
        assert!(Retention::keep_for(Duration::from_secs(3600)).is_err());
        assert!(Retention::days(0).is_err());
        let week = Retention::days(7).unwrap();
        assert_eq!(week.keep(), Duration::from_secs(7 * 86_400));
        assert_eq!(week.batch(0).batch_size(), 1);
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    #[test]
    fn a_chain_is_pruned_from_its_leaf_until_a_node_something_still_reaches() {
        // a <- b <- c <- d; something else still reaches b (a call's head or another child).
        let parents = [("d", "c"), ("c", "b"), ("b", "a")];
        let mut asked = Vec::new();
        let mut walk = Frontier::new(["d".to_owned(), "d".to_owned()]);
        while let Some(id) = walk.next() {
            asked.push(id.clone());
            if id != "b" {
                let parent = parents.iter().find(|(node, _)| *node == id).unwrap().1;
                walk.deleted(Some(parent.to_owned()), "{}".to_owned())
                    .unwrap();
            }
        }
        assert_eq!(walk.finish().0, 2);
        assert_eq!(
            asked,
            ["d", "c", "b"],
            "the walk stops at b, never asks for a"
        );
    }
}
