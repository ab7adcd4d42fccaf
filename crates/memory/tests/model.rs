//! The store against the core algorithms on plain states: for random traces
//! of operations on a few keys, every answer the store gives equals what the
//! algorithm gives on a state kept in a plain map — including after sweeps,
//! which forget states the algorithm says have expired.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::Algorithm;
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::{AlgorithmName, AnyAlgorithm, Limit, LimitError, Rate};
use tollgate_memory::{Limiter, MemoryConfig, MemoryStore};

/// 2023-11-14, so lease ids and windows look like real ones.
const START: u64 = 1_700_000_000_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Check {
        key: u8,
        cost: u64,
    },
    NextAvailable {
        key: u8,
        cost: u64,
    },
    Reserve {
        key: u8,
        cost: u64,
        max_wait_ms: Option<u64>,
    },
    CheckAll {
        key: u8,
        cost: u64,
        twice: bool,
    },
    ReserveAll {
        key: u8,
        cost: u64,
        max_wait_ms: Option<u64>,
    },
    Release {
        key: u8,
        which: usize,
    },
    Reset {
        key: u8,
    },
    Record {
        key: u8,
        back_ms: u64,
        cost: u64,
    },
    Sweep,
}

fn op(capacity: u64) -> impl Strategy<Value = Op> {
    let key = 0..4u8;
    let cost = prop_oneof![4 => 0..=capacity, 1 => Just(capacity + 1)];
    let wait = proptest::option::of(0..3_000u64);
    // Forced records go beyond the limit too.
    let recorded = prop_oneof![4 => cost.clone(), 1 => capacity..=3 * capacity + 2];
    prop_oneof![
        6 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Check { key, cost }),
        1 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::NextAvailable { key, cost }),
        2 => (key.clone(), cost.clone(), wait.clone())
            .prop_map(|(key, cost, max_wait_ms)| Op::Reserve { key, cost, max_wait_ms }),
        2 => (key.clone(), cost.clone(), any::<bool>())
            .prop_map(|(key, cost, twice)| Op::CheckAll { key, cost, twice }),
        1 => (key.clone(), cost.clone(), wait)
            .prop_map(|(key, cost, max_wait_ms)| Op::ReserveAll { key, cost, max_wait_ms }),
        1 => (key.clone(), 0..4usize).prop_map(|(key, which)| Op::Release { key, which }),
        1 => key.clone().prop_map(|key| Op::Reset { key }),
        1 => (key, 0..500u64, recorded).prop_map(|(key, back_ms, cost)| Op::Record { key, back_ms, cost }),
        1 => Just(Op::Sweep),
    ]
}

/// Time steps: often none, often small, sometimes longer than a period.
fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        3 => 0..50 * NANOS_PER_MS,
        2 => 0..2_000 * NANOS_PER_MS,
        1 => 0..4_000 * NANOS_PER_MS,
    ]
}

fn trace(capacity: u64) -> impl Strategy<Value = Vec<(u64, Op)>> {
    proptest::collection::vec((advance(), op(capacity)), 1..80)
}

/// A plain-map model of one limit.
struct Model<'a, A: Algorithm> {
    alg: &'a A,
    states: HashMap<u8, A::State>,
    /// Per key: (store lease, model lease).
    leases: HashMap<u8, Vec<(u64, u64)>>,
}

impl<A: Algorithm> Model<'_, A> {
    fn state(&mut self, key: u8) -> &mut A::State {
        self.states
            .entry(key)
            .or_insert_with(|| self.alg.new_state())
    }

    /// Keys whose state differs from a fresh one: the most the store may hold.
    fn changed_keys(&self) -> usize {
        let fresh = format!("{:?}", self.alg.new_state());
        self.states
            .values()
            .filter(|s| format!("{s:?}") != fresh)
            .count()
    }

    fn remember_lease(&mut self, key: u8, store: Option<u64>, model: Option<u64>) {
        if let (Some(s), Some(m)) = (store, model) {
            self.leases.entry(key).or_default().push((s, m));
        }
    }

    fn apply(
        &mut self,
        store: &MemoryStore,
        limiter: &Limiter,
        now: u64,
        op: &Op,
    ) -> Result<(), TestCaseError> {
        let alg = self.alg;
        match *op {
            Op::Check { key, cost } => {
                let got = limiter.check(&[key], now, cost);
                let want = alg.check(self.state(key), now, cost);
                self.remember_lease(key, lease(&got), lease(&want));
                prop_assert_eq!(without_lease(got), without_lease(want), "check");
            }
            Op::NextAvailable { key, cost } => {
                let want = alg.earliest(self.state(key), now, cost);
                prop_assert_eq!(limiter.next_available(&[key], now, cost), want);
            }
            Op::Reserve {
                key,
                cost,
                max_wait_ms,
            } => {
                let max_wait = max_wait_ms.map(Duration::from_millis);
                let want = alg.reserve(self.state(key), now, cost, max_wait);
                prop_assert_eq!(limiter.reserve(&[key], now, cost, max_wait), want);
            }
            Op::CheckAll { key, cost, twice } => {
                let requests: &[(&Limiter, &[u8])] = if twice {
                    &[(limiter, &[key]), (limiter, &[key])]
                } else {
                    &[(limiter, &[key])]
                };
                let got = store.check_all(requests, now, cost);
                let total = if twice { cost.saturating_mul(2) } else { cost };
                let want = alg.check(self.state(key), now, total);
                self.remember_lease(
                    key,
                    got.as_ref().ok().and_then(|d| d[0].lease),
                    lease(&want),
                );
                let want = want.map(|d| vec![strip(d); requests.len()]);
                prop_assert_eq!(
                    got.map(|ds| ds.into_iter().map(strip).collect()),
                    want,
                    "check_all"
                );
            }
            Op::ReserveAll {
                key,
                cost,
                max_wait_ms,
            } => {
                let max_wait = max_wait_ms.map(Duration::from_millis);
                let got = store.reserve_all(&[(limiter, &[key])], now, cost, max_wait);
                let want = alg.reserve(self.state(key), now, cost, max_wait);
                match (got, want) {
                    (Ok(got), Ok(want)) => {
                        prop_assert_eq!(got.wait, want.wait);
                        prop_assert_eq!(got.booked, want.decision.allowed);
                        prop_assert_eq!(got.decisions, vec![want.decision]);
                        if !got.booked {
                            prop_assert_eq!(got.retry_after, want.decision.retry_after);
                        }
                    }
                    (got, want) => prop_assert_eq!(got.err(), want.err(), "reserve_all"),
                }
            }
            Op::Release { key, which } => {
                let held = self.leases.get(&key).and_then(|l| l.get(which)).copied();
                if let Some((in_store, in_model)) = held {
                    let want = self
                        .states
                        .get_mut(&key)
                        .is_some_and(|s| alg.release(s, in_model));
                    let got = limiter.release(&[key], in_store);
                    // A forgotten state held no live lease: releasing frees nothing.
                    prop_assert!(got == want || !got, "release");
                }
            }
            Op::Reset { key } => {
                limiter.reset(&[key]);
                self.states.remove(&key);
                self.leases.remove(&key);
            }
            Op::Record { key, back_ms, cost } => {
                let at = now - back_ms * NANOS_PER_MS;
                let got = limiter.record(&[key], at, cost);
                // The store treats a zero-cost record as a peek.
                let want = if cost == 0 {
                    alg.record(&mut self.state(key).clone(), at, 0)
                } else {
                    alg.record(self.state(key), at, cost)
                };
                match want {
                    Some(usage) => prop_assert_eq!(got, Ok(usage), "record"),
                    None => prop_assert!(
                        matches!(
                            got,
                            Err(LimitError::Option {
                                option: "record",
                                ..
                            })
                        ),
                        "{:?}",
                        got
                    ),
                }
            }
            Op::Sweep => {
                store.sweep(now, usize::MAX);
                // The model forgets what the store does: a record dated
                // before the sweep then finds a fresh state in both.
                self.states.retain(|_, s| alg.expires_at(s) > now);
            }
        }
        prop_assert!(
            store.len() <= self.changed_keys(),
            "a key was inserted without a change"
        );
        Ok(())
    }
}

fn lease(d: &Result<tollgate_core::Decision, LimitError>) -> Option<u64> {
    d.as_ref().ok().and_then(|d| d.lease)
}

/// Lease ids are compared through the lease map: after a sweep forgets a
/// concurrency state, the store's ids restart from the clock.
fn strip(mut d: tollgate_core::Decision) -> tollgate_core::Decision {
    d.lease = d.lease.map(|_| 0);
    d
}

fn without_lease(
    d: Result<tollgate_core::Decision, LimitError>,
) -> Result<tollgate_core::Decision, LimitError> {
    d.map(strip)
}

fn run<A: Algorithm>(alg: &A, limit: &Limit, steps: &[(u64, Op)]) -> Result<(), TestCaseError> {
    let store = MemoryStore::new(MemoryConfig {
        max_bytes: usize::MAX,
        shards: 4,
    });
    let limiter = store
        .limiter(limit)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut model = Model {
        alg,
        states: HashMap::new(),
        leases: HashMap::new(),
    };
    let mut now = START;
    for (advance, op) in steps {
        now += advance;
        model.apply(&store, &limiter, now, op)?;
    }
    Ok(())
}

fn run_limit(limit: &Limit, steps: &[(u64, Op)]) -> Result<(), TestCaseError> {
    let algorithm = limit
        .build()
        .map_err(|e| TestCaseError::reject(e.to_string()))?;
    match algorithm {
        AnyAlgorithm::TokenBucket(a) => run(&a, limit, steps),
        AnyAlgorithm::WideTokenBucket(a) => run(&a, limit, steps),
        AnyAlgorithm::Gcra(a) => run(&a, limit, steps),
        AnyAlgorithm::LeakyBucket(a) => run(&a, limit, steps),
        AnyAlgorithm::FixedWindow(a) => run(&a, limit, steps),
        AnyAlgorithm::SlidingWindowLog(a) => run(&a, limit, steps),
        AnyAlgorithm::SlidingWindowCounter(a) => run(&a, limit, steps),
        AnyAlgorithm::SteppedWindow(a) => run(&a, limit, steps),
        AnyAlgorithm::Concurrency(a) => run(&a, limit, steps),
    }
}

/// A limit of `algorithm` with up to 5 per 0.1–3 s (bucket algorithms get a
/// burst of up to 8; stepped windows a step of a tenth of the period or the
/// default).
fn limit(algorithm: AlgorithmName) -> impl Strategy<Value = Limit> {
    (1..=5u64, 100..=3_000u64, 1..=8u64, any::<bool>()).prop_map(move |(n, ms, burst, option)| {
        let rate = Rate::new(n, Duration::from_millis(ms))
            .unwrap_or_else(|_| Rate::per_second(1).unwrap());
        let limit = Limit::new(algorithm, rate);
        match algorithm {
            _ if algorithm.has_burst() && option => limit.with_burst(burst),
            AlgorithmName::SteppedWindow if option => {
                limit.with_step(Duration::from_millis(ms / 10))
            }
            AlgorithmName::Concurrency if option => limit.with_lease_ttl(Duration::from_millis(ms)),
            _ => limit,
        }
    })
}

fn case(algorithm: AlgorithmName) -> impl Strategy<Value = (Limit, Vec<(u64, Op)>)> {
    limit(algorithm).prop_flat_map(|limit| {
        let capacity = limit.build().map_or(1, |a| match a {
            AnyAlgorithm::TokenBucket(_) | AnyAlgorithm::Gcra(_) | AnyAlgorithm::LeakyBucket(_) => {
                limit.burst.unwrap_or(limit.rate.limit())
            }
            _ => limit.rate.limit(),
        });
        (Just(limit), trace(capacity))
    })
}

macro_rules! same_as_the_core {
    ($($name:ident => $algorithm:expr,)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            $(
                #[test]
                fn $name((limit, steps) in case($algorithm)) {
                    run_limit(&limit, &steps)?;
                }
            )*
        }
    };
}

same_as_the_core! {
    token_bucket_matches_the_core => AlgorithmName::TokenBucket,
    gcra_matches_the_core => AlgorithmName::Gcra,
    leaky_bucket_matches_the_core => AlgorithmName::LeakyBucket,
    fixed_window_matches_the_core => AlgorithmName::FixedWindow,
    sliding_window_log_matches_the_core => AlgorithmName::SlidingWindowLog,
    sliding_window_counter_matches_the_core => AlgorithmName::SlidingWindowCounter,
    stepped_window_matches_the_core => AlgorithmName::SteppedWindow,
    concurrency_matches_the_core => AlgorithmName::Concurrency,
}
