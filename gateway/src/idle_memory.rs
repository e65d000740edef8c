//! Memory freed by a load goes back to the operating system once the gateway is idle again.
//!
//! glibc's allocator hands freed memory back to the kernel only from the top of a heap. After 10,000 concurrent
//! streams the gateway's RSS stayed at its peak (262.6 MiB → 269.1 MiB a minute later, against 45.6 MiB idle)
//! although the program then held less than at idle: the freed chunks sat in the allocator's arenas, with live
//! allocations scattered between them. `malloc_trim(0)` gives every whole free page of every arena back
//! (`madvise(MADV_DONTNEED)`); the same run then measured 43.6 MiB.
//!
//! So the gateway counts the requests in flight ([`IdleTracker`]: one [`Busy`] per request, held by its
//! in-flight permit until the response body has been sent) and [`release_when_idle`] releases free memory once
//! none has been in flight, nor started, for a second ([`Schedule::quiet`]), at most once every 10 s
//! ([`Schedule::min_interval`]); then again 100, 200 and 300 s later while no request comes
//! ([`Schedule::follow_ups`]): the upstream connections a load used close on their pool's idle timer 90–180 s
//! later and free memory only then (an HTTP/2 connection that carried 10,000 streams holds ~7 MiB of their state
//! until it closes). No release happens while a request is in flight (a release holds each arena's lock while it
//! walks the arena), and none without a request since the last one, so an idle gateway does not wake up for it.
//! Releases run on the blocking pool (one took 70 µs on a small heap: `RUST_LOG=tower_chat_gateway=debug` logs
//! each with its duration).
//!
//! Elsewhere than on glibc (musl, macOS, Windows) [`release_free_memory`] does nothing: those allocators need
//! no such call or offer none.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The requests in flight, and how many ever started.
#[derive(Debug, Default)]
pub(crate) struct IdleTracker {
    in_flight: AtomicUsize,
    started: AtomicU64,
    /// Signalled when `in_flight` drops to zero (a permit is stored while nobody waits).
    idle: Notify,
}

/// One request in flight; dropping it ends it.
#[derive(Debug)]
pub(crate) struct Busy(Arc<IdleTracker>);

impl IdleTracker {
    /// A request starts.
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.started.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_one();
        }
    }
}

/// When [`release_when_idle`] releases.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    /// How long no request must be in flight, nor start, before the first release.
    pub(crate) quiet: Duration,
    /// The shortest time between two releases.
    pub(crate) min_interval: Duration,
    /// Further releases, each this long after the previous one, while no request comes.
    pub(crate) follow_ups: Vec<Duration>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            quiet: Duration::from_secs(1),
            min_interval: Duration::from_secs(10),
            // Upstream connections close 90–180 s after their last stream (the pool's idle timer ticks every
            // 90 s): by the second follow-up every connection the load used is gone.
            follow_ups: vec![Duration::from_secs(100); 3],
        }
    }
}

/// Runs until dropped: awaits `release()` as [`Schedule`] says.
pub(crate) async fn release_when_idle<F: Future<Output = ()>>(
    tracker: Arc<IdleTracker>,
    schedule: Schedule,
    mut release: impl FnMut() -> F,
) {
    // The next follow-up release: when, and its index in `schedule.follow_ups`.
    let mut follow_up: Option<(Instant, usize)> = None;
    let mut last_release: Option<Instant> = None;
    // `tracker.started` at the last release: the requests whose memory it gave back.
    let mut covered = 0;
    'schedule: loop {
        let idle_edge = match follow_up {
            Some((at, _)) => tokio::select! {
                () = tokio::time::sleep_until(at) => false,
                () = tracker.idle.notified() => true,
            },
            None => {
                tracker.idle.notified().await;
                true
            }
        };
        // Which follow-up comes after this release.
        let next = if idle_edge {
            // Quiet: none in flight and none started for `quiet`, and `min_interval` since the last release.
            loop {
                let seen = tracker.started.load(Ordering::SeqCst);
                let mut until = Instant::now() + schedule.quiet;
                if let Some(last) = last_release {
                    until = until.max(last + schedule.min_interval);
                }
                tokio::time::sleep_until(until).await;
                if !tracker.is_idle() {
                    // Busy again: its end signals again and starts the schedule afresh.
                    follow_up = None;
                    continue 'schedule;
                }
                if tracker.started.load(Ordering::SeqCst) == seen {
                    break;
                }
            }
            let started = tracker.started.load(Ordering::SeqCst);
            if started == covered {
                // Nothing since the last release (the signal came from requests it covered).
                continue;
            }
            covered = started;
            0
        } else {
            let Some((_, index)) = follow_up else {
                continue;
            };
            if !tracker.is_idle() || tracker.started.load(Ordering::SeqCst) != covered {
                // A new busy period: its end starts the schedule afresh.
                follow_up = None;
                continue;
            }
            index + 1
        };
        release().await;
        last_release = Some(Instant::now());
        follow_up = schedule
            .follow_ups
            .get(next)
            .map(|&wait| (Instant::now() + wait, next));
    }
}

/// Give the allocator's free pages back to the operating system (glibc: `malloc_trim(0)`), on the blocking pool.
pub(crate) async fn release_free_memory() {
    let _ = tokio::task::spawn_blocking(trim).await;
}

fn trim() {
    let started = std::time::Instant::now();
    let released = glibc::trim();
    tracing::debug!(
        released,
        took = ?started.elapsed(),
        "gave free memory back to the operating system"
    );
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    use std::ffi::c_int;

    extern "C" {
        /// glibc, `<malloc.h>`: `int malloc_trim(size_t pad)`. Releases free memory at the top of the main heap
        /// and every whole free page inside every arena; returns 1 if any memory was released.
        fn malloc_trim(pad: usize) -> c_int;
    }

    /// `malloc_trim(0)`: whether memory was released.
    pub(super) fn trim() -> bool {
        // SAFETY: `malloc_trim` takes a plain integer and no pointer; glibc locks each arena while trimming it,
        // so it may run concurrently with allocations on other threads (it is MT-Safe per glibc's manual). It
        // frees nothing in use: only pages of free chunks are given back. `size_t` is `usize` on every Linux
        // target Rust supports. When the global allocator is another one (a program that links this crate
        // with jemalloc), glibc's heap is merely small and the call cheap.
        unsafe { malloc_trim(0) == 1 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod glibc {
    /// No glibc: nothing to call.
    pub(super) fn trim() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Runs `release_when_idle` (paused clock) with a release that records the second it ran at.
    fn start(tracker: &Arc<IdleTracker>) -> (Arc<Mutex<Vec<u64>>>, Instant) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let recorded = calls.clone();
        let schedule = Schedule {
            quiet: Duration::from_secs(1),
            min_interval: Duration::from_secs(10),
            follow_ups: vec![Duration::from_secs(60), Duration::from_secs(120)],
        };
        tokio::spawn(release_when_idle(tracker.clone(), schedule, move || {
            recorded.lock().unwrap().push(start.elapsed().as_secs());
            std::future::ready(())
        }));
        (calls, start)
    }

    /// Requests start and end on whole seconds; releases are checked half a second later.
    async fn at(start: Instant, secs: u64) {
        tokio::time::sleep_until(start + Duration::from_secs(secs)).await;
    }

    async fn released_by(start: Instant, secs: u64, calls: &Mutex<Vec<u64>>) -> Vec<u64> {
        tokio::time::sleep_until(start + Duration::from_millis(secs * 1000 + 500)).await;
        calls.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn releases_after_a_quiet_second_then_on_the_follow_ups() {
        let tracker = Arc::new(IdleTracker::default());
        let (calls, start) = start(&tracker);
        assert_eq!(
            released_by(start, 10, &calls).await,
            [0; 0],
            "no request yet"
        );

        at(start, 11).await;
        let a = tracker.begin();
        let b = tracker.begin();
        at(start, 12).await;
        drop(a);
        assert_eq!(
            released_by(start, 19, &calls).await,
            [0; 0],
            "one still in flight"
        );
        at(start, 20).await;
        drop(b);
        assert_eq!(
            released_by(start, 20, &calls).await,
            [0; 0],
            "quiet for less than 1 s"
        );
        assert_eq!(released_by(start, 21, &calls).await, [21]);
        assert_eq!(released_by(start, 80, &calls).await, [21]);
        assert_eq!(released_by(start, 81, &calls).await, [21, 81]);
        assert_eq!(released_by(start, 201, &calls).await, [21, 81, 201]);
        assert_eq!(
            released_by(start, 2000, &calls).await,
            [21, 81, 201],
            "no release without requests"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_within_the_quiet_time_postpones_the_release() {
        let tracker = Arc::new(IdleTracker::default());
        let (calls, start) = start(&tracker);
        drop(tracker.begin());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let busy = tracker.begin();
        assert_eq!(
            released_by(start, 29, &calls).await,
            [0; 0],
            "in flight since 0.5 s"
        );
        at(start, 30).await;
        drop(busy);
        assert_eq!(released_by(start, 31, &calls).await, [31]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_busy_period_restarts_the_schedule() {
        let tracker = Arc::new(IdleTracker::default());
        let (calls, start) = start(&tracker);
        drop(tracker.begin());
        assert_eq!(released_by(start, 1, &calls).await, [1]);
        // A request before the first follow-up (due at 61 s) and still running then: no follow-up release, a
        // fresh schedule once it ends.
        at(start, 30).await;
        let busy = tracker.begin();
        assert_eq!(released_by(start, 99, &calls).await, [1]);
        at(start, 100).await;
        drop(busy);
        assert_eq!(released_by(start, 101, &calls).await, [1, 101]);
        assert_eq!(released_by(start, 161, &calls).await, [1, 101, 161]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_ends_before_a_follow_up_starts_a_fresh_schedule() {
        let tracker = Arc::new(IdleTracker::default());
        let (calls, start) = start(&tracker);
        drop(tracker.begin());
        assert_eq!(released_by(start, 1, &calls).await, [1]);
        at(start, 30).await;
        drop(tracker.begin());
        // Released 1 s after it ended (not at the follow-up due at 61 s), then the schedule starts afresh.
        assert_eq!(released_by(start, 31, &calls).await, [1, 31]);
        assert_eq!(released_by(start, 90, &calls).await, [1, 31]);
        assert_eq!(released_by(start, 91, &calls).await, [1, 31, 91]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_starting_within_the_quiet_second_restarts_it_and_releases_are_ten_seconds_apart(
    ) {
        let tracker = Arc::new(IdleTracker::default());
        let (calls, start) = start(&tracker);
        drop(tracker.begin());
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(tracker.begin());
        // Not at 1 s (a request started at 0.5 s): one more quiet second.
        assert_eq!(released_by(start, 1, &calls).await, [0; 0]);
        assert_eq!(released_by(start, 2, &calls).await, [2]);
        at(start, 5).await;
        drop(tracker.begin());
        // Not before 12 s (10 s after the previous release); the wait that ended then saw this request start
        // (it began at 2 s, the end of the 0.5 s request having signalled again), so one more quiet second.
        assert_eq!(released_by(start, 12, &calls).await, [2]);
        assert_eq!(released_by(start, 13, &calls).await, [2, 13]);
        // No request since: the follow-up, 60 s later.
        assert_eq!(released_by(start, 73, &calls).await, [2, 13, 73]);
    }

    /// On glibc a free region between live allocations is given back: `free` alone keeps it.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trimming_gives_back_a_free_region_between_live_allocations() {
        // 8,192 chunks of 1 KiB (below the mmap threshold: they come from an arena), all but the last freed;
        // the last keeps the freed 8 MiB from being the top of the heap, which `free` would trim itself.
        let mut chunks: Vec<Box<[u8]>> = (0..8192)
            .map(|i| vec![i as u8; 1024].into_boxed_slice())
            .collect();
        let last = chunks.pop();
        drop(chunks);
        assert!(glibc::trim(), "malloc_trim released nothing");
        drop(last);
    }
}
