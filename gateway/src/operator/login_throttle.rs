//! A limit on failed operator logins — the console's login form and operator keys on the operator API (`/v1/approvals`,
//! decisions) share one limiter — so operator keys cannot be guessed as fast as the gateway answers, and a
//! client that keeps sending one wrong key locks out nobody but itself.
//!
//! A failure is counted by the key presented, as a keyed fingerprint ([`LoginLimiter::fingerprint`]: a digest
//! under a secret drawn at start, never the key), and by the client address (IPv6 by its /64, the block one
//! subscriber usually holds; behind a reverse proxy the address it reports, see [`crate::edge::client_addr`]). It
//! drains up to three token buckets:
//!
//! - **the key's, at this address**: the same wrong key sent again and again (a stale key in a script, a
//!   client's key on an operator route) is held back, and only it: other keys from the address are not;
//! - **the address's**, once per *different* key that failed there: a guesser tries new keys, so this is the
//!   one that stops guessing from one address;
//! - **the gateway's**: a guesser spread over many addresses.
//!
//! A login is answered `429 Too Many Requests` with `Retry-After` **without looking at the key** when its key's
//! bucket at its address is empty; or, for a key that has not failed there lately, when the address's is; or
//! while the gateway's is (unless the address logged in successfully lately). A right guess is then refused like
//! a wrong one, so the limit holds against a guesser — which is also why an operator who shares an address with
//! a guesser (one NAT, or a proxy whose header is not configured) is held back with it: a key that is new at the
//! address cannot be told from a guess. Successful logins cost nothing, and an address that logged in
//! successfully lately is not held back by the gateway's bucket: a guesser elsewhere cannot lock known
//! operators out. Requests that present no key, and client keys on operator routes, guess nothing and are not
//! counted (the operator routes answer them 401 at once).
//!
//! Memory is bounded: at most [`MAX_ADDRESSES`] address buckets (past that new addresses share one overflow
//! bucket) and [`MAX_KEYS`] key buckets (past that a key gets none: each of its failures counts as a new key's
//! at its address); a full bucket is dropped when room is needed, it holds no state; at most [`MAX_TRUSTED`]
//! recently successful addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Failures of one key from one address at once…
pub(crate) const PER_KEY_BURST: f64 = 5.0;
/// …and then one per this interval.
pub(crate) const PER_KEY_REFILL: Duration = Duration::from_secs(12);
/// Different keys that may fail from one address at once…
pub(crate) const PER_ADDRESS_BURST: f64 = 5.0;
/// …and then one per this interval.
pub(crate) const PER_ADDRESS_REFILL: Duration = Duration::from_secs(12);
/// Failed logins the whole gateway accepts at once…
pub(crate) const GLOBAL_BURST: f64 = 100.0;
/// …and then one per this interval.
pub(crate) const GLOBAL_REFILL: Duration = Duration::from_secs(1);
/// The most addresses with a bucket of their own.
pub(crate) const MAX_ADDRESSES: usize = 10_000;
/// The most (address, key) pairs with a bucket of their own.
pub(crate) const MAX_KEYS: usize = 10_000;
/// The most addresses remembered as recently successful.
pub(crate) const MAX_TRUSTED: usize = 1024;
/// How long a successful login exempts its address from the global bucket (a console session's longest life).
const TRUSTED_FOR: Duration = crate::operator::console::session::MAX_AGE;

/// Where a login comes from, as the limiter counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// An IPv4 address, or an IPv6 /64 (the first 64 bits).
    Address(u128),
    /// Addresses past [`MAX_ADDRESSES`], and requests whose peer is unknown.
    Overflow,
}

impl Source {
    /// The source of a client address (`None`: unknown, e.g. a router called in-process).
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

/// A presented key as the limiter knows it: 128 bits of a digest of the key under the limiter's secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fingerprint(u128);

/// Which limit refused a login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    /// This key failed too often from this address.
    Key,
    /// Too many different keys failed from this address.
    Address,
    /// Too many failures at the whole gateway.
    Global,
}

/// A login refused before its key was looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) limit: Limit,
    /// When a login may be tried again.
    pub(crate) retry_after: Duration,
}

impl Refused {
    /// What went wrong, for the person refused.
    pub(crate) fn reason(&self) -> &'static str {
        match self.limit {
            Limit::Key => "this key failed too often from this address",
            Limit::Address => "too many different keys failed from this address",
            Limit::Global => "too many failed logins at this gateway",
        }
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up (at least 1).
    pub(crate) fn retry_after_secs(&self) -> u64 {
        let wait = self.retry_after;
        (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
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

    /// Take one token (never below empty: a burst of failures admitted at once must not lock out for longer
    /// than one refill).
    fn take(&mut self, now: Instant, burst: f64, every: Duration) {
        self.refill(now, burst, every);
        self.tokens = (self.tokens - 1.0).max(0.0);
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
    /// Different keys failed, per address.
    addresses: HashMap<Source, Bucket>,
    /// Failures of one key, per address.
    keys: HashMap<(Source, Fingerprint), Bucket>,
    trusted: HashMap<Source, Instant>,
}

/// See the [module docs](self).
pub(crate) struct LoginLimiter {
    /// The fingerprints' key, drawn at start: fingerprints mean nothing outside this process.
    secret: [u8; 32],
    state: Mutex<State>,
}

impl std::fmt::Debug for LoginLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginLimiter").finish_non_exhaustive()
    }
}

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter::new(Instant::now())
    }
}

impl LoginLimiter {
    /// A limiter whose buckets are full at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        // 244 random bits from the operating system's generator (two v4 UUIDs), spread over 256.
        let secret = Sha256::new()
            .chain_update(uuid::Uuid::new_v4().as_bytes())
            .chain_update(uuid::Uuid::new_v4().as_bytes())
            .finalize()
            .into();
        LoginLimiter {
            secret,
            state: Mutex::new(State {
                global: Bucket::full(GLOBAL_BURST, now),
                addresses: HashMap::new(),
                keys: HashMap::new(),
                trusted: HashMap::new(),
            }),
        }
    }

    /// The fingerprint of a presented key: SHA-256 of the limiter's secret and the key (the secret has a fixed
    /// length, so no two inputs share a preimage), cut to 128 bits. The key itself is never kept.
    pub(crate) fn fingerprint(&self, key: &str) -> Fingerprint {
        let digest = Sha256::new()
            .chain_update(self.secret)
            .chain_update(key.as_bytes())
            .finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        Fingerprint(u128::from_le_bytes(first))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the buckets consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a login presenting `key` from `source` may be tried at `now`; `Err` when it may not (the key
    /// must then not be checked).
    pub(crate) fn admit(
        &self,
        source: Source,
        key: Fingerprint,
        now: Instant,
    ) -> Result<(), Refused> {
        let mut state = self.lock();
        let state = &mut *state;
        match state.keys.get_mut(&(source, key)) {
            // This key failed here lately: its own bucket decides; it cost the address once already.
            Some(bucket) => {
                if bucket.refill(now, PER_KEY_BURST, PER_KEY_REFILL) < 1.0 {
                    return Err(Refused {
                        limit: Limit::Key,
                        retry_after: bucket.wait(PER_KEY_REFILL),
                    });
                }
            }
            // A key new at this address: a guess, as far as the limiter can tell.
            None => {
                // An address that found no room has its failures counted in the overflow bucket.
                let counted = if state.addresses.contains_key(&source)
                    || state.addresses.len() < MAX_ADDRESSES
                {
                    source
                } else {
                    Source::Overflow
                };
                if let Some(bucket) = state.addresses.get_mut(&counted) {
                    if bucket.refill(now, PER_ADDRESS_BURST, PER_ADDRESS_REFILL) < 1.0 {
                        return Err(Refused {
                            limit: Limit::Address,
                            retry_after: bucket.wait(PER_ADDRESS_REFILL),
                        });
                    }
                }
            }
        }
        let trusted = state
            .trusted
            .get(&source)
            .is_some_and(|since| now.saturating_duration_since(*since) < TRUSTED_FOR);
        if !trusted && state.global.refill(now, GLOBAL_BURST, GLOBAL_REFILL) < 1.0 {
            return Err(Refused {
                limit: Limit::Global,
                retry_after: state.global.wait(GLOBAL_REFILL),
            });
        }
        Ok(())
    }

    /// Count a failed login presenting `key` from `source`.
    pub(crate) fn failed(&self, source: Source, key: Fingerprint, now: Instant) {
        let mut state = self.lock();
        state.global.take(now, GLOBAL_BURST, GLOBAL_REFILL);
        if let Some(bucket) = state.keys.get_mut(&(source, key)) {
            bucket.take(now, PER_KEY_BURST, PER_KEY_REFILL);
            return;
        }
        // A key new at this address costs the address one.
        let counted = if state.addresses.contains_key(&source) || make_room(&mut state, now) {
            source
        } else {
            Source::Overflow
        };
        state
            .addresses
            .entry(counted)
            .or_insert_with(|| Bucket::full(PER_ADDRESS_BURST, now))
            .take(now, PER_ADDRESS_BURST, PER_ADDRESS_REFILL);
        if make_key_room(&mut state, now) {
            let mut bucket = Bucket::full(PER_KEY_BURST, now);
            bucket.take(now, PER_KEY_BURST, PER_KEY_REFILL);
            state.keys.insert((source, key), bucket);
        }
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

/// The same for a new (address, key) pair.
fn make_key_room(state: &mut State, now: Instant) -> bool {
    if state.keys.len() < MAX_KEYS {
        return true;
    }
    state
        .keys
        .retain(|_, b| b.refill(now, PER_KEY_BURST, PER_KEY_REFILL) < PER_KEY_BURST);
    state.keys.len() < MAX_KEYS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Source {
        Source::of(Some(text.parse().unwrap()))
    }

    fn refused(limit: Limit, retry_after: Duration) -> Result<(), Refused> {
        Err(Refused { limit, retry_after })
    }

    /// A fresh key for every guess.
    fn guess(limiter: &LoginLimiter, n: u32) -> Fingerprint {
        limiter.fingerprint(&format!("sk-guess-{n}"))
    }

    #[test]
    fn fingerprints_are_keyed_per_limiter_and_tell_keys_apart() {
        let start = Instant::now();
        let (one, two) = (LoginLimiter::new(start), LoginLimiter::new(start));
        assert_eq!(one.fingerprint("sk-a"), one.fingerprint("sk-a"));
        assert_ne!(one.fingerprint("sk-a"), one.fingerprint("sk-b"));
        assert_ne!(
            one.fingerprint("sk-a"),
            two.fingerprint("sk-a"),
            "another secret"
        );
        let plain: [u8; 32] = Sha256::digest(b"sk-a").into();
        assert_ne!(
            one.fingerprint("sk-a").0.to_le_bytes(),
            plain[..16],
            "not the key's plain digest"
        );
    }

    #[test]
    fn an_address_guessing_different_keys_is_held_back_and_others_are_not() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        let (guesser, operator) = (ip("203.0.113.7"), ip("198.51.100.1"));
        for n in 0..5 {
            assert_eq!(limiter.admit(guesser, guess(&limiter, n), start), Ok(()));
            limiter.failed(guesser, guess(&limiter, n), start);
        }
        let right = limiter.fingerprint("sk-ops");
        assert_eq!(
            limiter.admit(guesser, right, start),
            refused(Limit::Address, PER_ADDRESS_REFILL),
            "a key new at the address is a guess, the right one too"
        );
        assert_eq!(
            limiter.admit(operator, right, start),
            Ok(()),
            "another address"
        );
        // One more new key per refill interval.
        let later = start + PER_ADDRESS_REFILL;
        assert_eq!(limiter.admit(guesser, guess(&limiter, 5), later), Ok(()));
        limiter.failed(guesser, guess(&limiter, 5), later);
        assert_eq!(
            limiter.admit(guesser, guess(&limiter, 6), later + Duration::from_secs(3)),
            refused(Limit::Address, Duration::from_secs(9))
        );
    }

    /// The finding: one bad key sent again and again from an address (a stale key in a script, a client key on
    /// an operator route) locked every operator at that address out, for as long as it kept coming.
    #[test]
    fn one_key_failing_again_and_again_holds_back_only_itself() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        let (office, stale, right) = (
            ip("198.51.100.1"),
            limiter.fingerprint("sk-stale"),
            limiter.fingerprint("sk-ops"),
        );
        let mut now = start;
        for _ in 0..5 {
            assert_eq!(limiter.admit(office, stale, now), Ok(()));
            limiter.failed(office, stale, now);
        }
        assert_eq!(
            limiter.admit(office, stale, now),
            refused(Limit::Key, PER_KEY_REFILL)
        );
        assert_eq!(
            limiter.admit(office, right, now),
            Ok(()),
            "the operator's key"
        );
        // One bad request per refill interval, for an hour: the stale key stays held back, the operator does not.
        for _ in 0..300 {
            now += PER_KEY_REFILL;
            assert_eq!(limiter.admit(office, stale, now), Ok(()));
            limiter.failed(office, stale, now);
            assert_eq!(
                limiter.admit(office, stale, now).map_err(|r| r.limit),
                Err(Limit::Key)
            );
            assert_eq!(limiter.admit(office, right, now), Ok(()));
        }
        // Its repeats cost the address nothing (one key's worth at first, long refilled): five new keys may
        // still fail there, and only then is the address held back.
        for n in 0..5 {
            assert_eq!(limiter.admit(office, guess(&limiter, n), now), Ok(()));
            limiter.failed(office, guess(&limiter, n), now);
        }
        assert_eq!(
            limiter
                .admit(office, guess(&limiter, 5), now)
                .map_err(|r| r.limit),
            Err(Limit::Address)
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
        let key = limiter.fingerprint("sk-ops");
        limiter.succeeded(operator, start);
        for i in 0..GLOBAL_BURST as u32 {
            let source = Source::Address(u128::from(i));
            assert_eq!(limiter.admit(source, guess(&limiter, i), start), Ok(()));
            limiter.failed(source, guess(&limiter, i), start);
        }
        assert_eq!(
            limiter.admit(ip("192.0.2.200"), key, start),
            refused(Limit::Global, GLOBAL_REFILL),
            "a fresh address meets the global limit"
        );
        assert_eq!(
            limiter.admit(operator, key, start),
            Ok(()),
            "a known operator does not"
        );
        assert_eq!(
            limiter.admit(ip("192.0.2.200"), key, start + GLOBAL_REFILL),
            Ok(())
        );
    }

    #[test]
    fn addresses_past_the_bound_share_the_overflow_bucket_and_others_do_not() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        // Unknown peers count in the overflow bucket; emptying it holds back no address that has room.
        for n in 0..PER_ADDRESS_BURST as u32 {
            limiter.failed(Source::Overflow, guess(&limiter, n), start);
        }
        let key = limiter.fingerprint("sk-new");
        assert_eq!(
            limiter.admit(Source::Overflow, key, start),
            refused(Limit::Address, PER_ADDRESS_REFILL)
        );
        assert_eq!(limiter.admit(ip("192.0.2.1"), key, start), Ok(()));
        // Once the buckets reach the bound (the overflow one included), a new address counts in the overflow
        // bucket: held back by it (12 s), not only by the global bucket the failures also emptied (1 s).
        for i in 0..(MAX_ADDRESSES as u128 - 1) {
            limiter.failed(Source::Address(i), key, start);
        }
        assert_eq!(limiter.addresses(), MAX_ADDRESSES);
        assert_eq!(
            limiter.admit(ip("198.51.100.7"), key, start),
            refused(Limit::Address, PER_ADDRESS_REFILL)
        );
    }

    #[test]
    fn a_login_exempts_its_address_from_the_global_bucket_for_a_session_and_no_longer() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        let operator = ip("198.51.100.1");
        let key = limiter.fingerprint("sk-ops");
        limiter.succeeded(operator, start);
        let expiry = start + TRUSTED_FOR;
        for i in 0..GLOBAL_BURST as u32 {
            limiter.failed(Source::Address(u128::from(i)), guess(&limiter, i), expiry);
        }
        let just_before = expiry - Duration::from_millis(1);
        assert_eq!(limiter.admit(operator, key, just_before), Ok(()));
        assert_eq!(
            limiter.admit(operator, key, expiry),
            refused(Limit::Global, GLOBAL_REFILL)
        );
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
            limiter.failed(Source::Address(i), guess(&limiter, 0), start);
        }
        assert_eq!(
            limiter.addresses(),
            MAX_ADDRESSES + 1,
            "the overflow bucket"
        );
        assert_eq!(limiter.lock().keys.len(), MAX_KEYS);
        // Refilled buckets make room again.
        let later = start + PER_ADDRESS_REFILL * 5;
        limiter.failed(Source::Address(u128::MAX), guess(&limiter, 1), later);
        assert_eq!(limiter.addresses(), 1);
        assert_eq!(limiter.lock().keys.len(), 1);
        for i in 0..(MAX_TRUSTED as u128 + 10) {
            limiter.succeeded(Source::Address(i), start);
        }
        assert_eq!(limiter.lock().trusted.len(), MAX_TRUSTED);
    }

    #[test]
    fn past_the_key_bound_every_failure_of_a_key_costs_its_address() {
        let start = Instant::now();
        let limiter = LoginLimiter::new(start);
        // One address guessed many keys: the key buckets are full, the address buckets are not.
        for i in 0..MAX_KEYS as u32 {
            limiter.failed(ip("192.0.2.1"), guess(&limiter, i), start);
        }
        let (office, stale) = (ip("198.51.100.1"), limiter.fingerprint("sk-stale"));
        for _ in 0..PER_ADDRESS_BURST as u32 {
            limiter.failed(office, stale, start);
        }
        assert_eq!(
            limiter.admit(office, stale, start).map_err(|r| r.limit),
            Err(Limit::Address),
            "no bucket of its own: counted as new keys"
        );
    }
}
