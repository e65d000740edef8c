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
mod tests;
