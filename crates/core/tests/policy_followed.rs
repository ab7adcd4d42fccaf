//! SPEC §7: the quota a limit announces (`RateLimit-Policy: q=Q;w=W`) can be
//! followed. For random limits of every algorithm, a client that sends
//! exactly `Q` requests every `W` seconds — spread evenly over each `W`, or
//! all at once at the start of each — from any starting instant, is never
//! refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate_core::time::{NANOS_PER_MS, NANOS_PER_SEC};
use tollgate_core::{Algorithm, AlgorithmName, AnyAlgorithm, Limit, Rate};

/// Around 2020 in ns since the epoch, plus a random offset, so windows and
/// steps are not aligned with the client's.
const EPOCH_NOW: u64 = 1_600_000_000_000_000_000;

/// How the client spends each window's quota.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// Request `i` at `start + i × W / Q`.
    Even,
    /// All `Q` at the start of each window.
    Burst,
}

/// The instants of a client following `quota` per `window_ns` for
/// `windows` windows from `start`.
fn schedule(pattern: Pattern, quota: u64, window_ns: u64, windows: u64, start: u64) -> Vec<u64> {
    (0..quota * windows)
        .map(|i| match pattern {
            Pattern::Even => {
                let offset = u128::from(i) * u128::from(window_ns) / u128::from(quota);
                start + u64::try_from(offset).unwrap()
            }
            Pattern::Burst => start + (i / quota) * window_ns,
        })
        .collect()
}

fn follow<A: Algorithm>(alg: &A, times: &[u64]) -> Result<(), TestCaseError> {
    let mut state = alg.new_state();
    for (i, &t) in times.iter().enumerate() {
        let decision = alg.check(&mut state, t, 1).unwrap();
        prop_assert!(
            decision.allowed,
            "request {} at +{} ns refused (retry after {:?})",
            i,
            t - times[0],
            decision.retry_after
        );
    }
    Ok(())
}

fn follow_any(alg: &AnyAlgorithm, times: &[u64]) -> Result<(), TestCaseError> {
    match alg {
        AnyAlgorithm::TokenBucket(a) => follow(a, times),
        AnyAlgorithm::WideTokenBucket(a) => follow(a, times),
        AnyAlgorithm::Gcra(a) => follow(a, times),
        AnyAlgorithm::LeakyBucket(a) => follow(a, times),
        AnyAlgorithm::FixedWindow(a) => follow(a, times),
        AnyAlgorithm::SlidingWindowLog(a) => follow(a, times),
        AnyAlgorithm::SlidingWindowCounter(a) => follow(a, times),
        AnyAlgorithm::SteppedWindow(a) => follow(a, times),
        AnyAlgorithm::Concurrency(a) => follow(a, times),
    }
}

/// A random valid limit: `N` up to 40, periods from 1 ms to 20 s (whole
/// seconds half of the time), and the algorithm's options.
fn limits() -> impl Strategy<Value = Limit> {
    let period_ms = prop_oneof![1u64..20_000, (1u64..20).prop_map(|s| s * 1_000)];
    (
        proptest::sample::select(AlgorithmName::ALL.to_vec()),
        1u64..40,
        period_ms,
        proptest::option::of(1u64..60),
        proptest::option::of(0.0f64..1.0),
        proptest::option::of(1u64..5_000),
    )
        .prop_map(|(algorithm, n, period_ms, burst, step, ttl_ms)| {
            let rate = Rate::from_nanos(n, period_ms * NANOS_PER_MS).unwrap();
            let mut limit = Limit::new(algorithm, rate);
            match algorithm {
                a if a.has_burst() => limit.burst = burst,
                AlgorithmName::SteppedWindow => {
                    // Between 1 ms and the period.
                    limit.step = step.map(|f| {
                        let ms = 1 + (f * (period_ms - 1) as f64) as u64;
                        Duration::from_millis(ms)
                    });
                }
                AlgorithmName::Concurrency => {
                    limit.lease_ttl = ttl_ms.map(Duration::from_millis);
                }
                _ => {}
            }
            limit
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_client_following_the_policy_is_never_refused(
        limit in limits(),
        even in any::<bool>(),
        offset in 0u64..100 * NANOS_PER_SEC,
        windows in 2u64..6,
    ) {
        let alg = limit.build().unwrap();
        let policy = limit.policy();
        prop_assert!(policy.window_secs >= 1 && policy.quota >= 1);
        let pattern = if even { Pattern::Even } else { Pattern::Burst };
        let times = schedule(
            pattern,
            policy.quota,
            policy.window_secs * NANOS_PER_SEC,
            windows,
            EPOCH_NOW + offset,
        );
        follow_any(&alg, &times)?;
    }
}

/// The announced window is not needlessly long: for buckets and the exact
/// windows, a client sending the quota a little faster (`Q` per `W` − 1 s,
/// in bursts) is refused once the window is longer than a second — the
/// policy states the real quota, not a safe fraction of it.
#[test]
fn a_faster_client_is_refused() {
    let cases = [
        Limit::new(AlgorithmName::TokenBucket, "10/s".parse().unwrap()).with_burst(20),
        Limit::new(AlgorithmName::Gcra, "10/s".parse().unwrap()).with_burst(20),
        Limit::new(AlgorithmName::LeakyBucket, "10/s".parse().unwrap()).with_burst(20),
        Limit::new(AlgorithmName::FixedWindow, "5/2s".parse().unwrap()),
        Limit::new(AlgorithmName::SlidingWindowLog, "5/2s".parse().unwrap()),
    ];
    for limit in cases {
        let policy = limit.policy();
        let faster = (policy.window_secs - 1) * NANOS_PER_SEC;
        let times = schedule(Pattern::Burst, policy.quota, faster, 3, EPOCH_NOW);
        let alg = limit.build().unwrap();
        assert!(follow_any(&alg, &times).is_err(), "{limit}: {policy:?}");
    }
}
