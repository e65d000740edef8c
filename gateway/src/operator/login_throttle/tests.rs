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
