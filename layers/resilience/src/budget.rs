//! The default retry budget: tower's `TpsBudget`, with a cheaper deposit.

use std::fmt;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::budget::Budget;

/// tower's `TpsBudget` (same parameters, same accounting: ten slots over `ttl`, a reserve of `min_per_sec` per
/// second, a retry costing `1 / retry_percent` deposits), whose window check compares the clock with the end of
/// the current window (kept with it) instead of computing the time since its start on every call: every call of
/// a [`RetryLayer`](crate::RetryLayer) deposits, so this runs on the happy path.
pub(crate) struct WindowBudget {
    generation: Mutex<Generation>,
    reserve: isize,
    slots: Box<[AtomicIsize]>,
    window: Duration,
    writer: AtomicIsize,
    deposit_amount: isize,
    withdraw_amount: isize,
}

struct Generation {
    index: usize,
    time: Instant,
    /// `time + window`: before it, nothing expires.
    ends: Instant,
}

impl WindowBudget {
    /// As `TpsBudget::new` (the same assertions on the parameters).
    pub(crate) fn new(ttl: Duration, min_per_sec: u32, retry_percent: f32) -> Self {
        assert!(ttl >= Duration::from_secs(1));
        assert!(ttl <= Duration::from_secs(60));
        assert!(retry_percent >= 0.0);
        assert!(retry_percent <= 1000.0);
        assert!(min_per_sec < i32::MAX as u32);
        let (deposit_amount, withdraw_amount) = if retry_percent == 0.0 {
            (0, 1)
        } else if retry_percent <= 1.0 {
            (1, (1.0 / retry_percent) as isize)
        } else {
            (1000, (1000.0 / retry_percent) as isize)
        };
        let reserve = (min_per_sec as isize)
            .saturating_mul(ttl.as_secs() as isize)
            .saturating_mul(withdraw_amount);
        let windows = 10u32;
        let window = ttl / windows;
        let now = Instant::now();
        WindowBudget {
            generation: Mutex::new(Generation {
                index: 0,
                time: now,
                ends: now + window,
            }),
            reserve,
            slots: (0..windows).map(|_| AtomicIsize::new(0)).collect(),
            window,
            writer: AtomicIsize::new(0),
            deposit_amount,
            withdraw_amount,
        }
    }

    /// Move the slots on when a window has passed (tower's `expire`, the check first).
    fn expire(&self) {
        let mut generation = self
            .generation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        // `now < time + window` is `now - time < window` (tower's test), without the subtraction.
        if now < generation.ends {
            return;
        }
        let mut diff = now.saturating_duration_since(generation.time);
        let to_commit = self.writer.swap(0, Ordering::SeqCst);
        self.slots[generation.index].store(to_commit, Ordering::SeqCst);
        let mut index = (generation.index + 1) % self.slots.len();
        while diff > self.window {
            self.slots[index].store(0, Ordering::SeqCst);
            diff -= self.window;
            index = (index + 1) % self.slots.len();
        }
        generation.index = index;
        generation.time = now;
        generation.ends = now + self.window;
    }

    fn sum(&self) -> isize {
        let windowed: isize = self
            .slots
            .iter()
            .map(|slot| slot.load(Ordering::SeqCst))
            .fold(0, isize::saturating_add);
        self.writer
            .load(Ordering::SeqCst)
            .saturating_add(windowed)
            .saturating_add(self.reserve)
    }
}

impl Budget for WindowBudget {
    fn deposit(&self) {
        self.expire();
        self.writer.fetch_add(self.deposit_amount, Ordering::SeqCst);
    }

    fn withdraw(&self) -> bool {
        self.expire();
        if self.sum() >= self.withdraw_amount {
            self.writer
                .fetch_add(-self.withdraw_amount, Ordering::SeqCst);
            true
        } else {
            false
        }
    }
}

impl fmt::Debug for WindowBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowBudget")
            .field("deposit", &self.deposit_amount)
            .field("withdraw", &self.withdraw_amount)
            .field("balance", &self.sum())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::retry::budget::TpsBudget;

    /// The same calls at the same (paused) times give the same answers as tower's `TpsBudget`, across window
    /// changes, gaps longer than the whole ttl, and an exhausted budget.
    #[tokio::test(start_paused = true)]
    async fn answers_as_tower_s_tps_budget_does() {
        for (ttl, min_per_sec, percent) in [(10, 10, 0.2), (1, 0, 0.5), (5, 1, 0.1), (2, 1, 0.0)] {
            let ours = WindowBudget::new(Duration::from_secs(ttl), min_per_sec, percent);
            let tower = TpsBudget::new(Duration::from_secs(ttl), min_per_sec, percent);
            let mut rng = fastrand::Rng::with_seed(ttl);
            let (mut granted, mut refused) = (0, 0);
            for step in 0..5000 {
                match rng.u8(0..10) {
                    0..=5 => {
                        ours.deposit();
                        tower.deposit();
                    }
                    6..=8 => {
                        let answer = ours.withdraw();
                        assert_eq!(answer, tower.withdraw(), "step {step}, ttl {ttl}");
                        if answer {
                            granted += 1;
                        } else {
                            refused += 1;
                        }
                    }
                    _ => {
                        let ms = if rng.u8(0..50) == 0 {
                            25_000
                        } else {
                            rng.u64(0..400)
                        };
                        tokio::time::advance(Duration::from_millis(ms)).await;
                    }
                }
            }
            assert!(
                granted > 0 && refused > 0,
                "ttl {ttl}: {granted} granted, {refused} refused"
            );
        }
    }
}
