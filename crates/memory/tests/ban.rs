//! Bans in the memory store: a key refused often enough is refused outright
//! until its ban ends, through a single limiter and through a multi-limit
//! check (where only the limit that refused takes a strike); a reset lifts
//! the ban; a snapshot keeps it; and a flood of new keys under the memory
//! cap does not evict a banned key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::ban::Ban;
use tollgate_core::time::NANOS_PER_SEC;
use tollgate_core::{AlgorithmName, Limit, Rate};
use tollgate_memory::{MemoryConfig, MemoryStore};

const S: u64 = NANOS_PER_SEC;

/// 1 request a second; refused 3 times within 10 s: banned for a minute.
fn banned_limit(algorithm: AlgorithmName) -> Limit {
    let ban = Ban::new(3, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    Limit::new(algorithm, Rate::per_second(1).unwrap()).with_ban(ban)
}

#[test]
fn the_third_strike_bans_every_algorithm_until_the_ban_ends() {
    for algorithm in AlgorithmName::ALL {
        let store = MemoryStore::new(MemoryConfig::default());
        let limiter = store.limiter(&banned_limit(algorithm)).unwrap();
        assert!(limiter.check(b"k", 0, 1).unwrap().allowed, "{algorithm}");
        for strike in 1..=2 {
            let d = limiter.check(b"k", S / 10 * strike, 1).unwrap();
            assert!(!d.allowed, "{algorithm}");
            assert!(d.retry_after < Duration::from_secs(60), "{algorithm}");
        }
        let third = limiter.check(b"k", S / 2, 1).unwrap();
        assert!(!third.allowed, "{algorithm}");
        assert_eq!(third.retry_after, Duration::from_secs(60), "{algorithm}");
        // Banned even when the limit itself would admit again.
        let during = limiter.check(b"k", 30 * S, 1).unwrap();
        assert!(!during.allowed, "{algorithm}");
        assert_eq!(
            during.retry_after,
            Duration::from_millis(30_500),
            "{algorithm}"
        );
        let other = limiter.check(b"other", 30 * S, 1).unwrap();
        assert!(other.allowed, "{algorithm}: another key is not banned");
        if algorithm != AlgorithmName::Concurrency {
            assert_eq!(
                limiter.next_available(b"k", 30 * S, 1).unwrap(),
                S / 2 + 60 * S,
                "{algorithm}"
            );
            assert!(
                limiter.check(b"k", S / 2 + 60 * S, 1).unwrap().allowed,
                "{algorithm}"
            );
        }
    }
}

#[test]
fn a_request_that_spends_the_burst_then_two_refusals_ban() {
    let ban = Ban::new(2, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(1).unwrap())
        .with_burst(2)
        .with_ban(ban);
    let store = MemoryStore::new(MemoryConfig::default());
    let limiter = store.limiter(&limit).unwrap();
    limiter.check(b"k", 0, 2).unwrap();
    assert!(!limiter.check(b"k", 0, 1).unwrap().allowed);
    assert!(!limiter.check(b"k", 0, 1).unwrap().allowed);
    assert_eq!(
        limiter.check(b"k", S, 1).unwrap().retry_after,
        Duration::from_secs(59)
    );
}

#[test]
fn in_a_multi_limit_check_only_the_limit_that_refused_strikes() {
    let store = MemoryStore::new(MemoryConfig::default());
    let ban = Ban::new(1, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    let tight = store
        .limiter(&Limit::new(
            AlgorithmName::FixedWindow,
            Rate::per_second(1).unwrap(),
        ))
        .unwrap();
    let loose = store
        .limiter(
            &Limit::new(AlgorithmName::FixedWindow, Rate::per_second(5).unwrap()).with_ban(ban),
        )
        .unwrap();
    let both = [(&tight, &b"k"[..]), (&loose, &b"k"[..])];
    assert!(store
        .check_all(&both, 0, 1)
        .unwrap()
        .iter()
        .all(|d| d.allowed));
    // The unbanned limit refuses: the banned one would admit, no strike.
    let refused = store.check_all(&both, 0, 1).unwrap();
    assert!(!refused[0].allowed && refused[1].allowed);
    assert!(loose.check(b"k", S, 1).unwrap().allowed);
    // Now the banned limit itself refuses (cost 5 of 4 left): banned.
    let d = store.check_all(&[(&loose, &b"k"[..])], S, 5).unwrap();
    assert!(!d[0].allowed);
    assert_eq!(d[0].retry_after, Duration::from_secs(60));
    assert!(!store.check_all(&both, 30 * S, 1).unwrap()[1].allowed);
}

#[test]
fn a_reset_lifts_the_ban() {
    let store = MemoryStore::new(MemoryConfig::default());
    let limiter = store.limiter(&banned_limit(AlgorithmName::Gcra)).unwrap();
    for _ in 0..4 {
        limiter.check(b"k", 0, 1).unwrap();
    }
    assert!(!limiter.check(b"k", 2 * S, 1).unwrap().allowed);
    assert_eq!(store.reset(b"k"), 1);
    assert!(limiter.check(b"k", 2 * S, 1).unwrap().allowed);
}

#[test]
fn a_snapshot_keeps_the_ban() {
    let store = MemoryStore::new(MemoryConfig::default());
    let limit = banned_limit(AlgorithmName::SlidingWindowLog);
    let limiter = store.limiter(&limit).unwrap();
    for _ in 0..4 {
        limiter.check(b"k", 0, 1).unwrap();
    }
    let restored =
        MemoryStore::from_snapshot(MemoryConfig::default(), &store.snapshot(S), S).unwrap();
    let d = restored
        .limiter(&limit)
        .unwrap()
        .check(b"k", 10 * S, 1)
        .unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_secs(50));
}

#[test]
fn a_flood_of_new_keys_does_not_free_a_banned_key() {
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: 64 * 1024,
        shards: 1,
    });
    // Two a second: a flood key that sent one is not refusing, and goes
    // before any refusing state.
    let ban = Ban::new(3, Duration::from_secs(10), Duration::from_secs(60)).unwrap();
    let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(2).unwrap()).with_ban(ban);
    let limiter = store.limiter(&limit).unwrap();
    for _ in 0..5 {
        limiter.check(b"victim", 0, 1).unwrap();
    }
    // Long after the window, the limit alone would admit the victim.
    for i in 0..20_000u32 {
        limiter.check(&i.to_le_bytes(), 5 * S, 1).unwrap();
    }
    assert!(store.len() < 20_000, "the cap was reached");
    let d = limiter.check(b"victim", 5 * S, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_secs(55));
}
