//! A limit on failed operator logins — the console's login form and operator keys on the operator API (`/v1/approvals`,
//! decisions) share one limiter — so operator keys cannot be guessed as fast as the gateway answers.
//!
//! Failures drain two token buckets: one per client address (IPv6 by its /64, the block one subscriber usually
//! holds) and one for the whole gateway (a guesser spread over many addresses). A login from an address whose
//! bucket is empty, or while the global one is, is answered `429 Too Many Requests` with `Retry-After`,
//! **without looking at the key** — a right guess then is refused like a wrong one, so the limit holds against
//! a guesser. Successful logins cost nothing, and an address that logged in successfully lately is not held back
//! by the global bucket: a guesser elsewhere cannot lock known operators out.
//!
//! Memory is bounded: at most [`MAX_ADDRESSES`] buckets (a full bucket is dropped, it holds no state), past that
//! new addresses share one overflow bucket; at most [`MAX_TRUSTED`] recently successful addresses.
//!
//! The address is the TCP peer's. Behind a reverse proxy every login comes from the proxy's address, so the
//! per-address bucket acts as a second global one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins one address may make at once…
pub(crate) const PER_ADDRESS_BURST: f64 = 5.0;
/// …and then one per this interval.
pub(crate) const PER_ADDRESS_REFILL: Duration = Duration::from_secs(12);
/// Failed logins the whole gateway accepts at once…
pub(crate) const GLOBAL_BURST: f64 = 100.0;
/// …and then one per this interval.
pub(crate) const GLOBAL_REFILL: Duration = Duration::from_secs(1);
/// The most addresses with a bucket of their own.
pub(crate) const MAX_ADDRESSES: usize = 10_000;
/// The most addresses remembered as recently successful.
pub(crate) const MAX_TRUSTED: usize = 1024;
/// How long a successful login exempts its address from the global bucket (a console session's longest life).
const TRUSTED_FOR: Duration = crate::console::session::MAX_AGE;

/// Where a login comes from, as the limiter counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// An IPv4 address, or an IPv6 /64 (the first 64 bits).
    Address(u128),
    /// Addresses past [`MAX_ADDRESSES`], and requests whose peer is unknown.
    Overflow,
}

impl Source {
    /// The source of a peer address (`None`: the peer is unknown, e.g. a router called in-process).
    pub(crate) fn of(peer: Option<IpAddr>) -> Source {
        match peer {
            Some(IpAddr::V4(v4)) => Source::Address(u128::from(u32::from(v4))),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::Address(u128::from(u32::from(v4))),
                // Tagged above the IPv4 range so a /64 never equals an IPv4 address.
                None => Source::Address((u128::from(v6) >> 64) | (1 << 127)),
            },
            None => Source::Overflow,
        }
    }
}

/// Failures allowed now, refilled continuously up to the burst.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// Refill to `now`; returns the tokens.
    fn refill(&mut self, now: Instant, burst: f64, every: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed / every.as_secs_f64()).min(burst);
        self.at = now;
        self.tokens
    }

    /// How long until one failure is allowed again (zero when one is).
    fn wait(&self, every: Duration) -> Duration {
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            every.mul_f64(1.0 - self.tokens)
        }
    }
}

#[derive(Debug)]
struct State {
    global: Bucket,
    addresses: HashMap<Source, Bucket>,
    trusted: HashMap<Source, Instant>,
}

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct LoginLimiter {
    state: Mutex<State>,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter::new(Instant::now())
    }
}

impl LoginLimiter {
    /// A limiter whose buckets are full at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        LoginLimiter {
            state: Mutex::new(State {
                global: Bucket::full(GLOBAL_BURST, now),
                addresses: HashMap::new(),
                trusted: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the buckets consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a login from `source` may be tried at `now`; `Err(retry_after)` when it may not (the key must
    /// then not be checked).
    pub(crate) fn admit(&self, source: Source, now: Instant) -> Result<(), Duration> {
        let mut state = self.lock();
        let state = &mut *state;
        // An address that found no room has its failures counted in the overflow bucket.
        let counted =
            if state.addresses.contains_key(&source) || state.addresses.len() < MAX_ADDRESSES {
                source
            } else {
                Source::Overflow
            };
        if let Some(bucket) = state.addresses.get_mut(&counted) {
            if bucket.refill(now, PER_ADDRESS_BURST, PER_ADDRESS_REFILL) < 1.0 {
                return Err(bucket.wait(PER_ADDRESS_REFILL));
            }
        }
        let trusted = state
            .trusted
            .get(&source)
            .is_some_and(|since| now.saturating_duration_since(*since) < TRUSTED_FOR);
        if !trusted && state.global.refill(now, GLOBAL_BURST, GLOBAL_REFILL) < 1.0 {
            return Err(state.global.wait(GLOBAL_REFILL));
        }
        Ok(())
    }

    /// Count a failed login from `source`.
    pub(crate) fn failed(&self, source: Source, now: Instant) {
        let mut state = self.lock();
        state.global.refill(now, GLOBAL_BURST, GLOBAL_REFILL);
        // Never below empty: a burst of failures admitted at once (or a trusted address's) must not lock the
        // gateway out for longer than one refill.
        state.global.tokens = (state.global.tokens - 1.0).max(0.0);
        let source = if state.addresses.contains_key(&source) || make_room(&mut state, now) {
            source
        } else {
            Source::Overflow
        };
        let bucket = state
            .addresses
            .entry(source)
            .or_insert_with(|| Bucket::full(PER_ADDRESS_BURST, now));
        bucket.refill(now, PER_ADDRESS_BURST, PER_ADDRESS_REFILL);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
    }

    /// Count a successful login from `source`: its address is trusted past the global bucket for a while.
    pub(crate) fn succeeded(&self, source: Source, now: Instant) {
        if source == Source::Overflow {
            return;
        }
        let mut state = self.lock();
        if !state.trusted.contains_key(&source) && state.trusted.len() >= MAX_TRUSTED {
            state
                .trusted
                .retain(|_, since| now.saturating_duration_since(*since) < TRUSTED_FOR);
            if state.trusted.len() >= MAX_TRUSTED {
                if let Some(oldest) = state
                    .trusted
                    .iter()
                    .min_by_key(|(_, t)| **t)
                    .map(|(s, _)| *s)
                {
                    state.trusted.remove(&oldest);
                }
            }
        }
        state.trusted.insert(source, now);
    }

    /// How many addresses have a bucket (for tests of the bound).
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.lock().addresses.len()
    }
}

/// Whether a new address may have a bucket of its own: drops the buckets that refilled (they hold no state)
/// when the map is full.
fn make_room(state: &mut State, now: Instant) -> bool {
    if state.addresses.len() < MAX_ADDRESSES {
        return true;
    }
    state
        .addresses
        .retain(|_, b| b.refill(now, PER_ADDRESS_BURST, PER_ADDRESS_REFILL) < PER_ADDRESS_BURST);
    state.addresses.len() < MAX_ADDRESSES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Source {
        Source::of(Some(text.parse().unwrap()))
    }

    #[test]
    fn an_address_is_held_back_after_its_burst_and_others_are_not() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        let (guesser, operator) = (ip("203.0.113.7"), ip("198.51.100.1"));
        for _ in 0..5 {
            assert_eq!(limiter.admit(guesser, start), Ok(()));
            limiter.failed(guesser, start);
        }
        assert_eq!(limiter.admit(guesser, start), Err(PER_ADDRESS_REFILL));
        assert_eq!(limiter.admit(operator, start), Ok(()), "another address");
        // One more try per refill interval.
        let later = start + PER_ADDRESS_REFILL;
        assert_eq!(limiter.admit(guesser, later), Ok(()));
        limiter.failed(guesser, later);
        assert_eq!(
            limiter.admit(guesser, later + Duration::from_secs(3)),
            Err(Duration::from_secs(9))
        );
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_bit_prefix_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8::1"), ip("2001:db8::ffff:2"));
        assert_ne!(ip("2001:db8::1"), ip("2001:db8:0:1::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_ne!(ip("::1"), ip("0.0.0.1"));
        // Upper 64 bits that read as an IPv4 address (0:0:a00:1::/64 and 10.0.0.1): still two sources.
        assert_ne!(ip("0:0:a00:1::5"), ip("10.0.0.1"));
    }

    #[test]
    fn many_addresses_meet_the_global_limit_but_recent_operators_do_not() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        let operator = ip("198.51.100.1");
        limiter.succeeded(operator, start);
        for i in 0..GLOBAL_BURST as u32 {
            let source = Source::Address(u128::from(i));
            assert_eq!(limiter.admit(source, start), Ok(()));
            limiter.failed(source, start);
        }
        assert_eq!(
            limiter.admit(ip("192.0.2.200"), start),
            Err(GLOBAL_REFILL),
            "a fresh address meets the global limit"
        );
        assert_eq!(
            limiter.admit(operator, start),
            Ok(()),
            "a known operator does not"
        );
        assert_eq!(
            limiter.admit(ip("192.0.2.200"), start + GLOBAL_REFILL),
            Ok(())
        );
    }

    #[test]
    fn addresses_past_the_bound_share_the_overflow_bucket_and_others_do_not() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        // Unknown peers count in the overflow bucket; emptying it holds back no address that has room.
        for _ in 0..PER_ADDRESS_BURST as u32 {
            limiter.failed(Source::Overflow, start);
        }
        assert_eq!(
            limiter.admit(Source::Overflow, start),
            Err(PER_ADDRESS_REFILL)
        );
        assert_eq!(limiter.admit(ip("192.0.2.1"), start), Ok(()));
        // Once the buckets reach the bound (the overflow one included), a new address counts in the overflow
        // bucket: held back by it (12 s), not only by the global bucket the failures also emptied (1 s).
        for i in 0..(MAX_ADDRESSES as u128 - 1) {
            limiter.failed(Source::Address(i), start);
        }
        assert_eq!(limiter.addresses(), MAX_ADDRESSES);
        assert_eq!(
            limiter.admit(ip("198.51.100.7"), start),
            Err(PER_ADDRESS_REFILL)
        );
    }

    #[test]
    fn a_login_exempts_its_address_from_the_global_bucket_for_a_session_and_no_longer() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        let operator = ip("198.51.100.1");
        limiter.succeeded(operator, start);
        let expiry = start + TRUSTED_FOR;
        for i in 0..GLOBAL_BURST as u32 {
            limiter.failed(Source::Address(u128::from(i)), expiry);
        }
        let just_before = expiry - Duration::from_millis(1);
        assert_eq!(limiter.admit(operator, just_before), Ok(()));
        assert_eq!(limiter.admit(operator, expiry), Err(GLOBAL_REFILL));
    }

    #[test]
    fn the_full_trusted_list_keeps_a_returning_address_and_drops_expired_ones_first() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        // Addresses 0 and 1 log in at `start`, each later one a millisecond after the one before.
        for i in 0..MAX_TRUSTED as u64 {
            let at = start + Duration::from_millis(i.saturating_sub(1));
            limiter.succeeded(Source::Address(u128::from(i)), at);
        }
        let trusted = |limiter: &LoginLimiter| limiter.lock().trusted.len();
        // An address already trusted logging in again pushes nobody out of the full list.
        limiter.succeeded(Source::Address(5), start + Duration::from_secs(1));
        assert_eq!(trusted(&limiter), MAX_TRUSTED);
        // A session's age after `start`, 0 and 1 have expired: a new address takes a free place, nobody else
        // is pushed out.
        limiter.succeeded(Source::Address(u128::MAX), start + TRUSTED_FOR);
        assert_eq!(trusted(&limiter), MAX_TRUSTED - 1);
    }

    #[test]
    fn memory_is_bounded() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        for i in 0..(MAX_ADDRESSES as u128 + 50) {
            limiter.failed(Source::Address(i), start);
        }
        assert_eq!(
            limiter.addresses(),
            MAX_ADDRESSES + 1,
            "the overflow bucket"
        );
        // Refilled buckets make room again.
        let later = start + PER_ADDRESS_REFILL * 5;
        limiter.failed(Source::Address(u128::MAX), later);
        assert_eq!(limiter.addresses(), 1);
        for i in 0..(MAX_TRUSTED as u128 + 10) {
            limiter.succeeded(Source::Address(i), start);
        }
        assert_eq!(limiter.lock().trusted.len(), MAX_TRUSTED);
    }
}
