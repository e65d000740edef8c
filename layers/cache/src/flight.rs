//! Single flight: identical calls in progress share one upstream call.
//!
//! The first caller of a key (the leader) starts a [`Flight`] and a detached task that drives the upstream call
//! and appends each event to the flight; every caller — the leader too — reads the flight's events from the
//! start and waits on a `watch` channel for more. The task ends the upstream call early only when no caller is
//! left (every receiver dropped), so the leader's cancellation never fails the callers that joined it.
//!
//! ```text
//!   leader ──► Flights::enter ──► Lead ──spawn──► drive: call ─► events … ─► End ─► store ─► leave
//!   others ──► Flights::enter ──► Follow            │ appends to Flight, bumps `version`
//!   every caller: wait_start (accepted / first event / end) ─► follow (replay events[pos..], await version)
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tower_chat::{ChatError, ChatEvent, ChatStream, ErrorKind};

use crate::answer::{replayed, whole, CachedAnswer};
use crate::key::CacheKey;

/// The flights in progress, by key.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    map: Mutex<HashMap<CacheKey, Arc<Flight>>>,
}

/// A caller's part in a flight.
pub(crate) enum Role {
    /// No identical call was in progress: this caller starts the upstream call.
    Lead(Arc<Flight>, watch::Receiver<u64>),
    /// An identical call is in progress: follow it.
    Follow(Arc<Flight>, watch::Receiver<u64>),
}

impl Flights {
    /// Join the flight of `key`, or start it.
    pub(crate) fn enter(&self, key: CacheKey) -> Role {
        let mut map = lock(&self.map);
        if let Some(flight) = map.get(&key) {
            // A flight every caller left is over; any other (even one that ended and is being stored) is joined.
            if !matches!(lock(&flight.progress).end, Some(End::Abandoned)) {
                let receiver = flight.version.subscribe();
                return Role::Follow(flight.clone(), receiver);
            }
        }
        let (version, receiver) = watch::channel(0);
        let flight = Arc::new(Flight {
            progress: Mutex::new(Progress::default()),
            version,
            failure: Mutex::new(None),
        });
        map.insert(key, flight.clone());
        Role::Lead(flight, receiver)
    }

    /// Forget `flight`, if it is still the one of `key`.
    pub(crate) fn leave(&self, key: &CacheKey, flight: &Arc<Flight>) {
        let mut map = lock(&self.map);
        if map.get(key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            map.remove(key);
        }
    }

    /// How many flights are in progress, and how many callers read them.
    pub(crate) fn load(&self) -> (usize, usize) {
        let map = lock(&self.map);
        let callers = map.values().map(|f| f.version.receiver_count()).sum();
        (map.len(), callers)
    }
}

/// One upstream call and the events it produced so far.
#[derive(Debug)]
pub(crate) struct Flight {
    progress: Mutex<Progress>,
    /// Bumped at every change of `progress`; its receivers are the callers still interested.
    version: watch::Sender<u64>,
    /// The upstream error itself, for the first caller that reports it (the others get a copy).
    failure: Mutex<Option<ChatError>>,
}

#[derive(Debug, Default)]
struct Progress {
    /// The upstream accepted the call (its service future resolved).
    accepted: bool,
    events: Vec<ChatEvent>,
    end: Option<End>,
}

#[derive(Clone, Debug)]
enum End {
    /// The stream ended.
    Complete,
    /// The call or its stream failed.
    Failed {
        kind: ErrorKind,
        message: String,
        status: Option<http::StatusCode>,
    },
    /// Every caller left before the end; the upstream call was dropped.
    Abandoned,
}

impl Flight {
    fn update(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut lock(&self.progress));
        self.version.send_modify(|v| *v += 1);
    }

    fn fail(&self, error: ChatError) {
        let end = End::Failed {
            kind: error.kind().clone(),
            message: error.message().to_owned(),
            status: error.status(),
        };
        *lock(&self.failure) = Some(error);
        self.update(|p| p.end = Some(end));
    }

    /// The error that ended the flight: the upstream's own for the first caller to ask, a copy for the others.
    fn error(
        &self,
        kind: &ErrorKind,
        message: &str,
        status: Option<http::StatusCode>,
    ) -> ChatError {
        lock(&self.failure).take().unwrap_or_else(|| {
            let copy = ChatError::new(kind.clone(), message);
            match status {
                Some(status) => copy.with_status(status),
                None => copy,
            }
        })
    }
}

/// Drive the upstream call of `flight` to its end: the answer to store, when the call completed with a storable
/// one. The caller stores it, then forgets the flight.
pub(crate) async fn drive(
    call: impl Future<Output = Result<ChatStream, ChatError>>,
    flight: &Flight,
) -> Option<CachedAnswer> {
    if run(call, flight).await {
        let events = lock(&flight.progress).events.clone();
        return CachedAnswer::storable(events);
    }
    None
}

/// Whether the upstream call completed.
async fn run(call: impl Future<Output = Result<ChatStream, ChatError>>, flight: &Flight) -> bool {
    let abandoned = || {
        flight.update(|p| p.end = Some(End::Abandoned));
        false
    };
    let everyone_left = flight.version.closed();
    tokio::pin!(everyone_left);
    let mut stream = tokio::select! {
        result = call => match result {
            Ok(stream) => stream,
            Err(error) => {
                flight.fail(error);
                return false;
            }
        },
        () = &mut everyone_left => return abandoned(),
    };
    flight.update(|p| p.accepted = true);
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(event)) => {
                    flight.update(|p| p.events.push(event));
                }
                Some(Err(error)) => {
                    flight.fail(error);
                    return false;
                }
                None => {
                    flight.update(|p| p.end = Some(End::Complete));
                    return true;
                }
            },
            () = &mut everyone_left => return abandoned(),
        }
    }
}

/// How waiting for a flight's start ended.
pub(crate) enum Start {
    /// The upstream accepted the call (or it already ended well): follow it.
    Started,
    /// The upstream refused the call: this is its error.
    Failed(ChatError),
    /// Nothing happened within the bound, or every caller left: call the upstream yourself.
    GiveUp,
}

/// Wait until the flight's upstream call is accepted or ends, at most `bound` between two changes.
pub(crate) async fn wait_start(
    flight: &Flight,
    receiver: &mut watch::Receiver<u64>,
    bound: Option<Duration>,
) -> Start {
    loop {
        {
            let progress = lock(&flight.progress);
            match &progress.end {
                // Refused before its stream began: the service error itself.
                Some(End::Failed {
                    kind,
                    message,
                    status,
                    ..
                }) if !progress.accepted => {
                    return Start::Failed(flight.error(kind, message, *status))
                }
                Some(End::Abandoned) => return Start::GiveUp,
                Some(_) => return Start::Started,
                None if progress.accepted => return Start::Started,
                None => {}
            }
        }
        let changed = receiver.changed();
        let changed = match bound {
            Some(bound) => match tokio::time::timeout(bound, changed).await {
                Ok(changed) => changed,
                Err(_) => return Start::GiveUp,
            },
            None => changed.await,
        };
        if changed.is_err() {
            // The driving task is gone without an end (its runtime shut down).
            return Start::GiveUp;
        }
    }
}

/// The flight's events as a response stream, from the first one: event by event (`streamed`) or, once the
/// flight ended, merged into whole parts. `replay` marks usage reports as replayed (for the callers that did
/// not pay for the call).
pub(crate) fn follow(
    flight: Arc<Flight>,
    receiver: watch::Receiver<u64>,
    streamed: bool,
    replay: bool,
) -> ChatStream {
    struct Reader {
        flight: Arc<Flight>,
        receiver: watch::Receiver<u64>,
        next: usize,
        done: bool,
    }
    let mark = move |event: ChatEvent| if replay { replayed(event) } else { event };
    let reader = Reader {
        flight,
        receiver,
        next: 0,
        done: false,
    };
    if streamed {
        Box::pin(futures_util::stream::unfold(
            reader,
            move |mut r| async move {
                loop {
                    if r.done {
                        return None;
                    }
                    {
                        let progress = lock(&r.flight.progress);
                        if let Some(event) = progress.events.get(r.next) {
                            r.next += 1;
                            let event = mark(event.clone());
                            drop(progress);
                            return Some((Ok(event), r));
                        }
                        if let Some(end) = progress.end.clone() {
                            drop(progress);
                            r.done = true;
                            return match end {
                                End::Complete => None,
                                End::Failed {
                                    kind,
                                    message,
                                    status,
                                    ..
                                } => Some((Err(r.flight.error(&kind, &message, status)), r)),
                                End::Abandoned => Some((Err(ChatError::cancelled()), r)),
                            };
                        }
                    }
                    if r.receiver.changed().await.is_err() {
                        r.done = true;
                        return Some((Err(ChatError::cancelled()), r));
                    }
                }
            },
        ))
    } else {
        Box::pin(
            futures_util::stream::once(async move {
                let mut r = reader;
                loop {
                    {
                        let progress = lock(&r.flight.progress);
                        match progress.end.clone() {
                            Some(End::Complete) => {
                                let events: Vec<_> =
                                    whole(progress.events.iter().cloned().map(mark));
                                return events.into_iter().map(Ok).collect::<Vec<_>>();
                            }
                            Some(End::Failed {
                                kind,
                                message,
                                status,
                                ..
                            }) => {
                                drop(progress);
                                return vec![Err(r.flight.error(&kind, &message, status))];
                            }
                            Some(End::Abandoned) => return vec![Err(ChatError::cancelled())],
                            None => {}
                        }
                    }
                    if r.receiver.changed().await.is_err() {
                        return vec![Err(ChatError::cancelled())];
                    }
                }
            })
            .flat_map(futures_util::stream::iter),
        )
    }
}

/// The mutex's value, also after a panic elsewhere (the data is a plain list; a panic cannot leave it torn).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
