//! Property tests of `concurrency` against a list of leases with expiries:
//! every decision field, `next_available` and every release match the model
//! (property 1); lease ids are never handed out twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reference;

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::algorithm::Concurrency;
use tollgate_core::Algorithm;

use reference::concurrency::ConcurrencyModel;
use reference::harness::{assert_cost_too_large, check};
use reference::strategy::{leases, LeaseOp, Setup, MS, NS};

fn run(s: &Setup, ttl: u64, ops: &[LeaseOp]) -> Result<(), TestCaseError> {
    let alg = Concurrency::new(s.n, Duration::from_nanos(ttl)).unwrap();
    let mut model = ConcurrencyModel::new(s.n, ttl);
    let mut state = alg.new_state();
    let mut now = s.start;
    let mut ids: Vec<u64> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            LeaseOp::Check(e) => {
                now += e.dt;
                if e.cost > s.n {
                    assert_cost_too_large(&alg, &mut state, now, e.cost)?;
                    continue;
                }
                prop_assert_eq!(
                    alg.next_available(&state, now, e.cost),
                    model.first_admit(now, e.cost),
                    "next_available, op {}",
                    i
                );
                let got = check(&alg, &mut state, now, e.cost)?;
                if let Some(id) = got.lease {
                    prop_assert!(!ids.contains(&id), "lease id {} handed out twice", id);
                    ids.push(id);
                }
                let expected = model.check(now, e.cost, got.lease);
                prop_assert_eq!(got, expected, "op {} at {} cost {}", i, now, e.cost);
            }
            LeaseOp::Release(k) => {
                if ids.is_empty() {
                    continue;
                }
                let id = ids[k % ids.len()];
                let held = alg.release(&mut state, id);
                if let Some(expected) = model.release(now, id) {
                    prop_assert_eq!(held, expected, "release of lease {} at {}", id, now);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn concurrency_matches_model_ms((s, ttl, ops) in leases(MS)) {
        run(&s, ttl, &ops)?;
    }

    #[test]
    fn concurrency_matches_model_ns((s, ttl, ops) in leases(NS)) {
        run(&s, ttl, &ops)?;
    }
}
