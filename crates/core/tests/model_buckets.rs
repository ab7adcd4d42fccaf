//! Property tests of the bucket algorithms against exact-fraction models:
//! every decision field matches the model (property 1), and `token_bucket`,
//! `gcra` and `leaky_bucket` admit exactly the same requests (property 2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use proptest::prelude::*;
use tollgate_core::algorithm::{Gcra, LeakyBucket, TokenBucket, Wide};
use tollgate_core::{Algorithm, Decision};

use reference::buckets::{LeakyBucketModel, TokenBucketModel};
use reference::harness::{check, run_against_model};
use reference::ratio::Ratio;
use reference::strategy::{reservations, trace, Capacity, Op, Setup, MS, NS};

fn token_bucket(s: &Setup) -> TokenBucket {
    TokenBucket::new(s.rate(), s.burst).unwrap()
}

/// The same bucket with a 128-bit token count, which `Limit::build` picks
/// only for extreme capacities: it must decide exactly alike.
fn wide_token_bucket(s: &Setup) -> TokenBucket<Wide> {
    TokenBucket::with_storage(s.rate(), s.burst).unwrap()
}

fn gcra(s: &Setup) -> Gcra {
    Gcra::new(s.rate(), s.burst).unwrap()
}

fn leaky_bucket(s: &Setup) -> LeakyBucket {
    LeakyBucket::new(s.rate(), s.burst).unwrap()
}

fn tb_model(s: &Setup) -> TokenBucketModel {
    TokenBucketModel::new(s.n, s.p, s.burst)
}

fn leaky_model(s: &Setup) -> LeakyBucketModel {
    LeakyBucketModel::new(s.n, s.p, s.burst)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn token_bucket_matches_model_ms((s, t) in trace(MS, Capacity::Burst)) {
        run_against_model(&token_bucket(&s), tb_model(&s), &s, &t)?;
    }

    #[test]
    fn token_bucket_matches_model_ns((s, t) in trace(NS, Capacity::Burst)) {
        run_against_model(&token_bucket(&s), tb_model(&s), &s, &t)?;
    }

    #[test]
    fn wide_token_bucket_matches_model_ns((s, t) in trace(NS, Capacity::Burst)) {
        run_against_model(&wide_token_bucket(&s), tb_model(&s), &s, &t)?;
    }

    #[test]
    fn gcra_matches_token_bucket_model_ms((s, t) in trace(MS, Capacity::Burst)) {
        run_against_model(&gcra(&s), tb_model(&s), &s, &t)?;
    }

    #[test]
    fn gcra_matches_token_bucket_model_ns((s, t) in trace(NS, Capacity::Burst)) {
        run_against_model(&gcra(&s), tb_model(&s), &s, &t)?;
    }

    #[test]
    fn leaky_bucket_matches_model_ms((s, t) in trace(MS, Capacity::Burst)) {
        run_against_model(&leaky_bucket(&s), leaky_model(&s), &s, &t)?;
    }

    #[test]
    fn leaky_bucket_matches_model_ns((s, t) in trace(NS, Capacity::Burst)) {
        run_against_model(&leaky_bucket(&s), leaky_model(&s), &s, &t)?;
    }

    /// Property 2: the three buckets admit the same requests; token bucket
    /// and GCRA agree on every field, the leaky bucket on all but `delay`.
    #[test]
    fn buckets_decide_alike((s, t) in trace(NS, Capacity::Burst)) {
        let (tb, g, lb) = (token_bucket(&s), gcra(&s), leaky_bucket(&s));
        let (mut tbs, mut gs, mut lbs) = (tb.new_state(), g.new_state(), lb.new_state());
        let mut now = s.start;
        for e in &t {
            now += e.dt;
            if e.cost > s.burst {
                continue;
            }
            let a = check(&tb, &mut tbs, now, e.cost)?;
            let b = check(&g, &mut gs, now, e.cost)?;
            let c = check(&lb, &mut lbs, now, e.cost)?;
            prop_assert_eq!(a.allowed, c.allowed, "leaky bucket disagrees at {}", now);
            prop_assert_eq!(a, b, "gcra disagrees at {}", now);
            prop_assert_eq!(a, Decision { delay: a.delay, ..c }, "leaky bucket disagrees at {}", now);
        }
    }

    /// Property 2 with reservations: token bucket and GCRA book the same
    /// waits and decide alike around them.
    #[test]
    fn token_bucket_and_gcra_reserve_alike((s, ops) in reservations(NS, Capacity::Burst)) {
        let (tb, g) = (token_bucket(&s), gcra(&s));
        let (mut tbs, mut gs) = (tb.new_state(), g.new_state());
        let mut now = s.start;
        for op in &ops {
            match *op {
                Op::Check(e) => {
                    now += e.dt;
                    prop_assert_eq!(tb.check(&mut tbs, now, e.cost), g.check(&mut gs, now, e.cost));
                }
                Op::Reserve(e, w) => {
                    now += e.dt;
                    let w = w.map(std::time::Duration::from_nanos);
                    prop_assert_eq!(
                        tb.reserve(&mut tbs, now, e.cost, w),
                        g.reserve(&mut gs, now, e.cost, w),
                        "at {}", now
                    );
                }
            }
        }
    }
}

#[test]
fn ratio_rounds_both_ways() {
    assert_eq!(Ratio::new(7, 2).ceil(), 4);
    assert_eq!(Ratio::new(7, 2).floor(), 3);
    assert_eq!(Ratio::new(-7, 2).ceil(), -3);
    assert_eq!(Ratio::new(-7, 2).floor(), -4);
    assert_eq!(Ratio::new(6, 3), Ratio::int(2));
    assert!(Ratio::new(1, 3).add(Ratio::new(1, 3)) < Ratio::new(2, 3).add(Ratio::new(1, 100)));
}
