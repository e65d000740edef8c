//! The [`Store`] trait and its implementations.

use std::fmt;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use tower_chat::{ConversationId, Message};

use crate::call_log::{CallLogPage, CallLogQuery};
use crate::record::{
    CallId, CallOutcome, CallQuery, CallRecord, CallSummary, ConversationQuery,
    ConversationSummary, Spend, SpendQuery,
};
use crate::spend::{SpendRollupQuery, SpendRow};
use crate::usage::{UsageAggregate, UsageQuery};

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod blobs;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod blocked_status;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod call_log;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod call_lookups;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod chain;
mod error;
#[cfg(feature = "sqlite")]
mod legacy_journal;
pub(crate) mod retention;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rollup;
mod schema;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use error::decode_json;
pub use error::{StoreError, StoreErrorKind};
pub use retention::{Purged, Retention, RetentionTooShort};
pub use schema::Migration;

/// Where call records go, and how they are read back.
///
/// Implemented by [`sqlite::SqliteStore`] and [`postgres::PostgresStore`]; implement it for another database
/// (or a test double). The layer calls only [`Store::write_calls`], from its background writer; the read methods
/// are for applications.
pub trait Store: fmt::Debug + Send + Sync + 'static {
    /// Write a batch of records in one transaction: all or none. A record whose call id is already stored
    /// replaces the stored one only if that one is [`CallOutcome::InFlight`]: a final record is never
    /// overwritten, so a retried batch, or an in-flight record that reaches the store after the final one, is
    /// harmless. Returns once the transaction committed: the records are then visible to every connection,
    /// and the layer acknowledges them (a fail-closed call's `Finish` waits for that).
    fn write_calls<'a>(
        &'a self,
        records: &'a [CallRecord],
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// One call's record.
    fn call<'a>(
        &'a self,
        call_id: &'a CallId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>>;

    /// One message of a recorded call's history (its request messages, then its response messages) with the bytes
    /// of its parts, or `None` when the call or the message is unknown. For showing one message's media (the
    /// gateway console's thumbnails): the SQLite and PostgreSQL stores read only that message's blobs, where
    /// [`Store::call`] reads every blob of the history. Like every read, it reaches blobs only through a record.
    fn call_message<'a>(
        &'a self,
        call_id: &'a CallId,
        index: usize,
    ) -> BoxFuture<'a, Result<Option<Message>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .call(call_id)
                .await?
                .and_then(|call| call.history().into_iter().nth(index)))
        })
    }

    /// Every recorded call of a conversation, in the order they started.
    fn conversation_calls<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>>;

    /// Conversations, most recently active first.
    fn list_conversations<'a>(
        &'a self,
        query: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>>;

    /// Sum the usage and cost of the recorded calls that match `query` (per caller, per conversation, per
    /// period). The SQLite and PostgreSQL stores sum in the database; other stores answer with an error unless
    /// they implement it.
    fn spend<'a>(&'a self, query: &'a SpendQuery) -> BoxFuture<'a, Result<Spend, StoreError>> {
        let _ = query;
        Box::pin(async { Err(StoreError::new("this store cannot sum spend")) })
    }

    /// The calls that match `query`, without their messages, oldest first (the latest `limit` of them). For
    /// dashboards and usage statistics: reads scalar columns only. The SQLite and PostgreSQL stores implement
    /// it; other stores answer with an error unless they do.
    fn call_summaries<'a>(
        &'a self,
        query: &'a CallQuery,
    ) -> BoxFuture<'a, Result<Vec<CallSummary>, StoreError>> {
        let _ = query;
        Box::pin(async { Err(StoreError::new("this store cannot list call summaries")) })
    }

    /// The final calls of a period summed per group of `query` (time bucket, model, caller), with latency
    /// percentiles, ordered by bucket, model, caller. The SQLite and PostgreSQL stores aggregate in the
    /// database; other stores answer with an error unless they implement it.
    fn usage<'a>(
        &'a self,
        query: &'a UsageQuery,
    ) -> BoxFuture<'a, Result<Vec<UsageAggregate>, StoreError>> {
        let _ = query;
        Box::pin(async { Err(StoreError::new("this store cannot aggregate usage")) })
    }

    /// Spend from the rollup the store keeps per UTC day, caller, team and model (updated with each record,
    /// in its transaction), summed per group of `query`, ordered by day, caller, team, model. Costs as much
    /// for a year of records as for a day's: it never reads the records. The SQLite and PostgreSQL stores
    /// implement it; other stores answer with an error unless they do.
    fn spend_rollup<'a>(
        &'a self,
        query: &'a SpendRollupQuery,
    ) -> BoxFuture<'a, Result<Vec<SpendRow>, StoreError>> {
        let _ = query;
        Box::pin(async { Err(StoreError::new("this store keeps no spend rollup")) })
    }

    /// A page of the call log: the calls that match `query`'s filters and search, newest first, from its
    /// position. The SQLite and PostgreSQL stores search through their full-text index (FTS5, `tsvector`);
    /// other stores answer with an error unless they implement it.
    fn call_log<'a>(
        &'a self,
        query: &'a CallLogQuery,
    ) -> BoxFuture<'a, Result<CallLogPage, StoreError>> {
        let _ = query;
        Box::pin(async { Err(StoreError::new("this store cannot list the call log")) })
    }

    /// The latest completed call of a conversation (the one [`Store::load_conversation`] continues from).
    fn latest_completed_call<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        Box::pin(async move {
            let calls = self.conversation_calls(conversation_id).await?;
            Ok(calls
                .into_iter()
                .rev()
                .find(|c| c.outcome == CallOutcome::Completed))
        })
    }

    /// Delete the calls that started and ended longer than `retention` before `now`, with the messages, blobs
    /// and search index entries no remaining call reaches, in transactions of at most
    /// [`Retention::batch_size`] calls, keeping the spend rollup as it is and never a call in flight or paused
    /// awaiting an approval (see [`Retention`]). Idempotent: several replicas may run it. The SQLite and
    /// PostgreSQL stores implement it; other stores answer with an error unless they do.
    fn delete_expired<'a>(
        &'a self,
        retention: &'a Retention,
        now: SystemTime,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        let _ = (retention, now);
        Box::pin(async { Err(StoreError::new("this store cannot delete expired calls")) })
    }

    /// Writes have stopped for a while (the layer's writer calls this after
    /// [`RELEASE_CACHES_AFTER`](crate::RELEASE_CACHES_AFTER) without a record): drop what is kept in memory only
    /// to make the next writes cheaper, so that a burst of traffic does not hold memory for good. The SQLite and
    /// PostgreSQL stores forget the conversation chains, option sets and blob hashes they wrote recently (the
    /// next record of a forgotten conversation serialises and hashes its history once, as after a restart).
    /// Nothing a read returns depends on it. The default does nothing.
    fn release_caches(&self) {}

    /// A conversation's messages in order, ready to continue it: the request and response messages of its
    /// latest completed call (every record refers to its whole history, so the latest completed one holds it all,
    /// tool rounds included). Calls that failed, were cancelled or interrupted after it are not part of the
    /// history: their partial output stays readable through [`Store::conversation_calls`]. An unknown
    /// conversation has no messages.
    fn load_conversation<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<Message>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .latest_completed_call(conversation_id)
                .await?
                .map(|c| c.history())
                .unwrap_or_default())
        })
    }
}

/// A shared store is a store: `Arc<SqliteStore>`, `Arc<dyn Store>`.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn write_calls<'a>(
        &'a self,
        records: &'a [CallRecord],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).write_calls(records)
    }

    fn call<'a>(
        &'a self,
        call_id: &'a CallId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        (**self).call(call_id)
    }

    fn call_message<'a>(
        &'a self,
        call_id: &'a CallId,
        index: usize,
    ) -> BoxFuture<'a, Result<Option<Message>, StoreError>> {
        (**self).call_message(call_id, index)
    }

    fn conversation_calls<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        (**self).conversation_calls(conversation_id)
    }

    fn list_conversations<'a>(
        &'a self,
        query: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
        (**self).list_conversations(query)
    }

    fn latest_completed_call<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        (**self).latest_completed_call(conversation_id)
    }

    fn spend<'a>(&'a self, query: &'a SpendQuery) -> BoxFuture<'a, Result<Spend, StoreError>> {
        (**self).spend(query)
    }

    fn call_summaries<'a>(
        &'a self,
        query: &'a CallQuery,
    ) -> BoxFuture<'a, Result<Vec<CallSummary>, StoreError>> {
        (**self).call_summaries(query)
    }

    fn usage<'a>(
        &'a self,
        query: &'a UsageQuery,
    ) -> BoxFuture<'a, Result<Vec<UsageAggregate>, StoreError>> {
        (**self).usage(query)
    }

    fn call_log<'a>(
        &'a self,
        query: &'a CallLogQuery,
    ) -> BoxFuture<'a, Result<CallLogPage, StoreError>> {
        (**self).call_log(query)
    }

    fn spend_rollup<'a>(
        &'a self,
        query: &'a SpendRollupQuery,
    ) -> BoxFuture<'a, Result<Vec<SpendRow>, StoreError>> {
        (**self).spend_rollup(query)
    }

    fn load_conversation<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<Message>, StoreError>> {
        (**self).load_conversation(conversation_id)
    }

    fn delete_expired<'a>(
        &'a self,
        retention: &'a Retention,
        now: SystemTime,
    ) -> BoxFuture<'a, Result<Purged, StoreError>> {
        (**self).delete_expired(retention, now)
    }

    fn release_caches(&self) {
        (**self).release_caches()
    }
}
