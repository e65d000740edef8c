//! The background writer: records arrive through a bounded channel and are written in batches.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tower_chat::{ChatError, ErrorKind};

use crate::record::CallRecord;
use crate::store::{Store, StoreError};

/// What happens when a record cannot be stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The default: a call is not reported complete unless its record is stored. At the end of a stream the
    /// layer waits for the write (batched with other calls' records) before yielding the final
    /// [`tower_chat::ChatEvent::Finish`]; if the store fails, the stream yields an [`ErrorKind::Store`] error in
    /// its place. When the buffer is full the stream's end waits for room (backpressure on finishing calls only;
    /// events in flight are never delayed).
    #[default]
    FailClosed,
    /// Calls never wait for, nor fail because of, the store: records are handed to the writer without waiting,
    /// a full buffer drops the record, and every dropped or failed record is counted in [`PersistenceStats`] and
    /// logged (`tracing` at `error` level: the first ten, then every thousandth with the running count).
    FailOpen,
}

/// Counters of the background writer, shared by every clone of a layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PersistenceStats {
    /// Records the store accepted (in-flight records included).
    pub recorded: u64,
    /// Records the store refused (logged at `error` level).
    pub failed: u64,
    /// Records never handed to the store: buffer full in fail-open mode, the writer gone (its runtime shut
    /// down), or a stream dropped outside any Tokio runtime while the buffer was full.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    recorded: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> PersistenceStats {
        PersistenceStats {
            recorded: self.recorded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    fn drop_record(&self, record: &CallRecord, why: &str) {
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if worth_logging(dropped) {
            tracing::error!(
                call_id = %record.call_id,
                conversation_id = %record.conversation_id,
                dropped_so_far = dropped,
                "call record dropped: {why}"
            );
        }
    }

    fn fail_record(&self, record: &CallRecord, error: &StoreError) {
        let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
        if worth_logging(failed) {
            tracing::error!(
                call_id = %record.call_id,
                conversation_id = %record.conversation_id,
                failed_so_far = failed,
                "call record not stored: {error}"
            );
        }
    }
}

/// Under sustained overload or a long outage every record fails the same way: log the first ten, then every
/// thousandth (with the running count), so the log shows the problem without drowning in it.
fn worth_logging(count: u64) -> bool {
    count <= 10 || count.is_multiple_of(1000)
}

type Ack = oneshot::Sender<Result<(), StoreError>>;

enum Job {
    Record(Box<CallRecord>, Option<Ack>),
    Flush(oneshot::Sender<()>),
}

/// The handle the layer, its services and their streams share: the sending side of the writer's channel.
#[derive(Clone)]
pub(crate) struct Recorder {
    jobs: mpsc::Sender<Job>,
    counters: Arc<Counters>,
    store: Arc<dyn Store>,
    policy: FailurePolicy,
    writer: Arc<PendingWriter>,
}

/// The writer task before it runs: it is started on the first record or flush, which always happens inside a
/// Tokio runtime, so building the layer needs none (and cannot panic for the lack of one).
struct PendingWriter {
    started: std::sync::atomic::AtomicBool,
    receiver: std::sync::Mutex<Option<(mpsc::Receiver<Job>, usize)>>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("store", &self.store)
            .field("policy", &self.policy)
            .field("buffer_free", &self.jobs.capacity())
            .field("stats", &self.counters.snapshot())
            .finish()
    }
}

pub(crate) type Finalize = Pin<Box<dyn Future<Output = Result<(), ChatError>> + Send>>;

impl Recorder {
    /// A recorder whose writer task starts with the first record or flush (see [`PendingWriter`]).
    pub(crate) fn new(
        store: Arc<dyn Store>,
        policy: FailurePolicy,
        buffer: usize,
        max_batch: usize,
    ) -> Recorder {
        let (jobs, receiver) = mpsc::channel(buffer.max(1));
        Recorder {
            jobs,
            counters: Arc::new(Counters::default()),
            store,
            policy,
            writer: Arc::new(PendingWriter {
                started: std::sync::atomic::AtomicBool::new(false),
                receiver: std::sync::Mutex::new(Some((receiver, max_batch.max(1)))),
            }),
        }
    }

    /// Start the writer on the current runtime if it is not running yet: one atomic load once it runs. Without a
    /// runtime it stays pending and records wait in the channel (a full channel then drops them, counted).
    fn start_writer(&self) {
        if self.writer.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut pending = self
            .writer
            .receiver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((receiver, max_batch)) = pending.take() {
            runtime.spawn(run_writer(
                self.store.clone(),
                receiver,
                max_batch,
                self.counters.clone(),
            ));
            self.writer.started.store(true, Ordering::Release);
        }
    }

    pub(crate) fn policy(&self) -> FailurePolicy {
        self.policy
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub(crate) fn stats(&self) -> PersistenceStats {
        self.counters.snapshot()
    }

    /// Hand a record over and wait until it is stored (fail-closed end of a stream). The record is handed
    /// over before the returned future is first polled, so dropping the future never loses it.
    pub(crate) fn submit_and_wait(&self, record: CallRecord) -> Finalize {
        let (ack, stored) = oneshot::channel();
        self.hand_over(Job::Record(Box::new(record), Some(ack)));
        Box::pin(async move {
            match stored.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(ChatError::new(
                    ErrorKind::Store,
                    format!("the call's record could not be stored: {e}"),
                )
                .with_source(e)),
                // The ack was dropped with the record: the writer stopped (see the logged error).
                Err(_) => Err(ChatError::new(
                    ErrorKind::Store,
                    "the call's record could not be stored: the persistence writer has stopped",
                )),
            }
        })
    }

    /// Hand a record over without waiting: the end of a stream in fail-open mode, and every path that cannot
    /// wait (a dropped stream or future) or has nothing left to report (the call already failed).
    pub(crate) fn submit(&self, record: CallRecord) {
        self.hand_over(Job::Record(Box::new(record), None));
    }

    fn hand_over(&self, job: Job) {
        self.start_writer();
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(job)) => {
                if let Job::Record(record, _) = &job {
                    self.counters
                        .drop_record(record, "the persistence writer has stopped");
                }
            }
            Err(mpsc::error::TrySendError::Full(job)) => match self.policy {
                FailurePolicy::FailOpen => {
                    if let Job::Record(record, _) = &job {
                        self.counters
                            .drop_record(record, "the persistence buffer is full (fail-open)");
                    }
                }
                FailurePolicy::FailClosed => self.submit_when_room(job),
            },
        }
    }

    /// Fail-closed overflow: a task waits for room, so a burst of finishing or dropped streams costs memory (one
    /// parked record each) rather than records, and a caller dropping its stream meanwhile loses nothing.
    fn submit_when_room(&self, job: Job) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let jobs = self.jobs.clone();
                let counters = self.counters.clone();
                runtime.spawn(async move {
                    if let Err(mpsc::error::SendError(Job::Record(record, _))) =
                        jobs.send(job).await
                    {
                        counters.drop_record(&record, "the persistence writer has stopped");
                    }
                });
            }
            Err(_) => {
                if let Job::Record(record, _) = &job {
                    self.counters.drop_record(
                        record,
                        "the persistence buffer is full and no Tokio runtime is running to wait for room",
                    );
                }
            }
        }
    }

    /// Wait until every record handed over before this call has been written (or has failed).
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        self.start_writer();
        let (done, flushed) = oneshot::channel();
        self.jobs
            .send(Job::Flush(done))
            .await
            .map_err(|_| StoreError::new("the persistence writer has stopped"))?;
        flushed
            .await
            .map_err(|_| StoreError::new("the persistence writer has stopped"))
    }
}

/// How long the writer waits without a record before it asks the store to release its caches
/// ([`Store::release_caches`]): the release comes between one and two of these after the last record. A
/// conversation's turns usually follow within a minute; after a longer pause its next record costs what it
/// costs after a restart (its history serialised and hashed once).
pub const RELEASE_CACHES_AFTER: Duration = Duration::from_secs(60);

async fn run_writer(
    store: Arc<dyn Store>,
    mut receiver: mpsc::Receiver<Job>,
    max_batch: usize,
    counters: Arc<Counters>,
) {
    let mut jobs = Vec::with_capacity(max_batch);
    let mut records = Vec::with_capacity(max_batch);
    let mut acks = Vec::with_capacity(max_batch);
    // One timer for the writer's life, not one per wait: a record marks the current period busy, and a
    // period that passes with none releases the caches once.
    let mut quiet = tokio::time::interval_at(
        tokio::time::Instant::now() + RELEASE_CACHES_AFTER,
        RELEASE_CACHES_AFTER,
    );
    quiet.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut busy, mut released) = (false, true);
    // Ends when every Recorder clone is gone and the buffer is drained.
    loop {
        let received = tokio::select! {
            biased;
            received = receiver.recv_many(&mut jobs, max_batch) => received,
            _ = quiet.tick() => {
                if !busy && !released {
                    store.release_caches();
                    released = true;
                }
                busy = false;
                continue;
            }
        };
        if received == 0 {
            break;
        }
        (busy, released) = (true, false);
        for job in jobs.drain(..) {
            match job {
                Job::Record(record, ack) => {
                    records.push(*record);
                    acks.push(ack);
                }
                Job::Flush(done) => {
                    write_batch(&*store, &mut records, &mut acks, &counters).await;
                    let _ = done.send(());
                }
            }
        }
        write_batch(&*store, &mut records, &mut acks, &counters).await;
    }
}

async fn write_batch(
    store: &dyn Store,
    records: &mut Vec<CallRecord>,
    acks: &mut Vec<Option<Ack>>,
    counters: &Counters,
) {
    if records.is_empty() {
        return;
    }
    match store.write_calls(records).await {
        Ok(()) => {
            counters
                .recorded
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            for ack in acks.drain(..).flatten() {
                let _ = ack.send(Ok(()));
            }
        }
        Err(batch_error) => {
            tracing::warn!(
                records = records.len(),
                "batch write failed ({batch_error}); retrying record by record"
            );
            // One bad record must not sink the batch: write each alone so only the bad ones fail.
            for (record, ack) in records.iter().zip(acks.drain(..)) {
                let result = if records.len() == 1 {
                    Err(StoreError::new(batch_error.to_string()))
                } else {
                    store.write_calls(std::slice::from_ref(record)).await
                };
                match &result {
                    Ok(()) => {
                        counters.recorded.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => counters.fail_record(record, e),
                }
                if let Some(ack) = ack {
                    let _ = ack.send(result);
                }
            }
        }
    }
    records.clear();
}
