//! Every algorithm's states, driven by random checks, bookings and records,
//! read back from their version-1 values exactly; and values the script
//! writes, read as it reads them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, LeakyBucket, Narrow, SlidingWindowCounter,
    SlidingWindowLog, SteppedWindow, TokenBucket, Wide,
};
use tollgate_core::Rate;

use super::*;

const START: u64 = 1_763_000_000_000_000_000;

/// Runs `steps` (time advance, cost, kind) on a fresh state; after each,
/// the state's value reads back as the same state and writes the same
/// value again.
fn round_trips<F>(format: &F, steps: &[(u64, u64, u8)])
where
    F: Format,
    <F::Algorithm as Algorithm>::State: PartialEq + Debug,
{
    let algorithm = format.algorithm();
    let mut state = algorithm.new_state();
    let mut now = START;
    for &(advance, cost, kind) in steps {
        // Short of the end of time, where lease ids run out.
        now = now.saturating_add(advance).min(u64::MAX - 1_000_000);
        let cost = cost.min(algorithm.capacity());
        match kind % 3 {
            0 => {
                if algorithm.evaluate(&state, now, cost).allowed && cost > 0 {
                    algorithm.commit(&mut state, now, cost);
                }
            }
            1 => {
                if let Some(slot) = algorithm.slot(&state, now, cost) {
                    algorithm.book(&mut state, now, slot, cost);
                }
            }
            _ => {
                format.record(&mut state, now.saturating_sub(advance / 2), cost);
            }
        }
        let mut value = Vec::new();
        format.encode(&state, &mut value);
        assert!(value[0].is_ascii_digit(), "{value:?}");
        let back = format.decode(&value);
        assert_eq!(
            back.as_ref(),
            Some(&state),
            "{:?}",
            String::from_utf8_lossy(&value)
        );
        let mut again = Vec::new();
        format.encode(&back.unwrap(), &mut again);
        assert_eq!(again, value);
    }
}

fn rate(n: u64, p: Duration) -> Rate {
    Rate::new(n, p).unwrap()
}

fn steps() -> impl Strategy<Value = Vec<(u64, u64, u8)>> {
    let advance = prop_oneof![
        Just(0u64),
        0u64..2_000_000_000,
        0u64..400_000_000_000_000,
        Just(u64::MAX / 4),
    ];
    proptest::collection::vec((advance, 0u64..6, any::<u8>()), 1..40)
}

proptest! {
    #[test]
    fn bucket_states_round_trip(steps in steps()) {
        let s = Duration::from_secs(1);
        let longest = Duration::from_nanos(1 << 62);
        for (r, burst) in [(rate(10, s), 4), (rate(1, longest), 1), (rate(1_000_000_007, s), 3)] {
            round_trips(&GcraFormat(Gcra::new(r, burst).unwrap()), &steps);
            round_trips(&LeakyFormat(LeakyBucket::new(r, burst).unwrap()), &steps);
            let math = u128::from(r.period_nanos()) / u128::from(gcd(r.limit(), r.period_nanos()));
            if let Ok(bucket) = TokenBucket::<Narrow>::with_storage(r, burst) {
                round_trips(&TokenFormat { bucket, capacity: u128::from(burst) * math }, &steps);
            }
            let bucket = TokenBucket::<Wide>::with_storage(r, burst).unwrap();
            round_trips(&TokenFormat { bucket, capacity: u128::from(burst) * math }, &steps);
        }
    }

    #[test]
    fn window_states_round_trip(steps in steps()) {
        for (n, p) in [(3, 1_000_000_000), (10_000_000, 10_000_000), (7, 1_001_000_000), (3, 200_000_000_000_000)] {
            let r = Rate::from_nanos(n, p).unwrap();
            round_trips(&FixedFormat(FixedWindow::new(r)), &steps);
            round_trips(&CounterFormat(SlidingWindowCounter::new(r)), &steps);
            round_trips(&Log::new(SlidingWindowLog::new(r), n, p), &steps);
            let window = SteppedWindow::new(r, None).unwrap();
            let whole = u128::from(p / u64::try_from(window.step().as_nanos()).unwrap());
            round_trips(&Steps { window, room: [(whole + 2) * 4, u128::from(n) * 10] }, &steps);
        }
    }

    #[test]
    fn lease_states_round_trip(steps in steps()) {
        for (n, ttl) in [(3, 1_000_000), (100, 60_000_000_000)] {
            let concurrency = Concurrency::new(n, Duration::from_nanos(ttl)).unwrap();
            let span = u128::from(ttl) * 4;
            round_trips(&Leases { concurrency, room: [span, span, u128::from(n)] }, &steps);
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Values as the script writes them (a packed body after its header's
/// space, a log across a wrap of its residues) read as it reads them.
#[test]
fn values_the_script_writes_read_back() {
    let concurrency = Concurrency::new(3, Duration::from_secs(10)).unwrap();
    let leases = Leases {
        concurrency,
        room: [40_000_000_000, 40_000_000_000, 3],
    };
    // Two leases of cost 1: ids START and START + 1, both expiring at
    // START + 10 s; bases of the three columns, widths 11, 11, 1.
    let value = format!(
        "2 {} {START} 11 {} 11 1 1 {}{}",
        START + 2,
        START + 10_000_000_000,
        "00000000000000000000000",
        "00000000001000000000000",
    );
    let state = leases.decode(value.as_bytes()).expect("a valid state");
    assert_eq!(leases.forgotten_at(&state), START + 10_000_000_000);
    let empty = leases.decode(format!("0 {} 0 1 0 1 0 1 ", START + 2).as_bytes());
    assert!(empty.is_some());
    assert_eq!(leases.forgotten_at(&empty.unwrap()), START + 2);
    // The log of 9,999,999 per 10 ms: one limb each; marks at START − 3
    // (total 6,000,000) and START + 2 (total 9,999,999).
    let r = Rate::from_nanos(9_999_999, 10_000_000).unwrap();
    let log = Log::new(SlidingWindowLog::new(r), 9_999_999, 10_000_000);
    let mut value = format!("0 {} 9999999 11|", START + 2).into_bytes();
    for limb in [9_999_997u32, 6_000_000, 2, 9_999_999] {
        value.extend_from_slice(&limb.to_be_bytes()[1..]);
    }
    let state = log.decode(&value).expect("a valid log");
    let mut again = Vec::new();
    log.encode(&state, &mut again);
    assert_eq!(again, value);
}

#[test]
fn garbage_is_refused() {
    let r = Rate::per_second(3).unwrap();
    let fixed = FixedFormat(FixedWindow::new(r));
    for bad in [
        &b""[..],
        b"1",
        b"1 2 3",
        b"1 x",
        b"1 18446744073709551615",
        b"1 -2",
    ] {
        assert!(fixed.decode(bad).is_none(), "{bad:?}");
    }
    let log = Log::new(SlidingWindowLog::new(r), 3, 1_000_000_000);
    for bad in [
        &b"0|x"[..],
        b"0 1 1 11|",
        b"0 1 1 41|\x00\x00\x01\x00\x00\x01",
        b"|",
    ] {
        assert!(log.decode(bad).is_none(), "{bad:?}");
    }
    let concurrency = Concurrency::new(3, Duration::from_secs(10)).unwrap();
    let leases = Leases {
        concurrency,
        room: [1, 1, 1],
    };
    for bad in [
        &b"0 0 0 0 0 1 0 1 "[..],
        b"1 0 0 1 0 1 0 1 000",
        b"0 0 0 99 0 1 0 1 ",
    ] {
        assert!(leases.decode(bad).is_none(), "{bad:?}");
    }
}
