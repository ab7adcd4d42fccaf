//! `check::OneLimit` against `check::Plan`: for every request of one
//! descriptor that `OneLimit::find` takes, asking the store for its one
//! limit gives what the plan decides (admission, top decision, the limits
//! the headers show, the rejecting rule, the key and what was counted), on
//! two stores fed the same requests at the same times. The rules mix every
//! kind `find` must leave to the plan.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::time::ManualClock;
use tollgate_core::{LimitKey, Moment, Store};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::check::{OneLimit, Outcome, Plan};
use tollgate_rules::RuleSet;

const RULES: &str = r#"
domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3, name: per_user}
  - key: leaky
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: leaky_bucket, burst: 2}
  - key: gcra
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra}
  - key: window
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_window_counter}
  - key: seats
    rate_limit: {requests_per_unit: 2, algorithm: concurrency, unit: minute}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 10}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: health
    rate_limit: {unlimited: true}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: nested
    descriptors:
      - key: inner
        value: x
        rate_limit: {unit: second, requests_per_unit: 2}
"#;

const REPLACING: &str = r#"
domain: r
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3, name: per_user}
  - key: plan
    rate_limit: {unit: second, requests_per_unit: 9, replaces: [{name: other}]}
"#;

/// The descriptors requests are drawn from, and whether `find` takes each
/// (without the global switches).
const DESCRIPTORS: &[(&[(&str, &str)], bool)] = &[
    (&[("user", "a")], true),
    (&[("user", "b")], true),
    (&[("leaky", "a")], true),
    (&[("gcra", "a")], true),
    (&[("window", "a")], true),
    (&[("seats", "a")], true),
    (&[("nested", "n"), ("inner", "x")], true),
    (&[("tenant", "a")], false),
    (&[("trial", "a")], false),
    (&[("quota", "a")], false),
    (&[("blocked", "a")], false),
    (&[("health", "a")], false),
    (&[("detailed", "a")], false),
    (&[("path", "/a")], false),
    (&[("nested", "n"), ("inner", "y")], false),
    (&[("unknown", "a")], false),
];

fn store(clock: &Arc<ManualClock>) -> LocalStore {
    LocalStore::new(
        MemoryStore::new(MemoryConfig::default()),
        Arc::clone(clock) as Arc<dyn tollgate_core::time::Clock>,
    )
}

/// What a front door reads from a decision, comparable across the two
/// ways of reaching it.
#[derive(Debug, PartialEq)]
struct Seen {
    allowed: bool,
    top: Option<tollgate_core::Decision>,
    applied: Vec<(
        String,
        tollgate_core::policy::QuotaPolicy,
        tollgate_core::Decision,
    )>,
    rejecting: Option<String>,
    counted: Vec<Vec<u8>>,
    keys: Vec<Vec<u8>>,
    labels: Vec<String>,
}

impl Seen {
    fn of(outcome: &Outcome<'_>) -> Seen {
        Seen {
            allowed: outcome.allowed,
            top: outcome.top,
            applied: outcome
                .applied()
                .into_iter()
                .map(|a| (a.name.into_owned(), a.policy, a.decision))
                .collect(),
            rejecting: outcome.rejecting_rule().map(|d| d.rule.id().to_string()),
            counted: outcome.counted().map(|(_, key)| key.to_vec()).collect(),
            keys: outcome
                .descriptors
                .iter()
                .flatten()
                .map(|d| d.key.clone())
                .collect(),
            labels: outcome
                .descriptors
                .iter()
                .flatten()
                .map(|d| d.metric_label().to_string())
                .collect(),
        }
    }
}

#[test]
fn find_takes_exactly_the_single_ordinary_limits() {
    let rules = RuleSet::from_yaml(RULES, "d.yaml").unwrap();
    let domain = rules.domain("d").unwrap();
    for (descriptor, taken) in DESCRIPTORS {
        let found = OneLimit::find(domain, *descriptor, false, false);
        assert_eq!(found.is_some(), *taken, "{descriptor:?}");
        // Either global switch sends every request through a plan.
        assert!(OneLimit::find(domain, *descriptor, true, false).is_none());
        assert!(OneLimit::find(domain, *descriptor, false, true).is_none());
    }
    // A domain with `replaces` resolves across descriptors: never taken.
    let replacing = RuleSet::from_yaml(REPLACING, "r.yaml").unwrap();
    let domain = replacing.domain("r").unwrap();
    assert!(OneLimit::find(domain, &[("user", "a")], false, false).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn one_limit_decides_as_the_plan(
        requests in proptest::collection::vec(
            (0..DESCRIPTORS.len(), 0u64..3, 0u64..400),
            1..60,
        ),
    ) {
        let rules = RuleSet::from_yaml(RULES, "d.yaml").unwrap();
        let domain = rules.domain("d").unwrap();
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let (planned_store, single_store) = (store(&clock), store(&clock));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (index, cost, wait_ms) in requests {
            clock.advance(Duration::from_millis(wait_ms));
            let descriptor = DESCRIPTORS[index].0;
            let request = [descriptor];
            let planned = runtime.block_on(async {
                Plan::new(domain, &request, false)
                    .check(&planned_store, Moment::Now, cost)
                    .await
            });
            let Some(one) = OneLimit::find(domain, descriptor, false, false) else {
                // Keep the second store in step.
                let _ = runtime.block_on(async {
                    Plan::new(domain, &request, false)
                        .check(&single_store, Moment::Now, cost)
                        .await
                });
                continue;
            };
            let mut key = Vec::new();
            one.write_key(descriptor, &mut key);
            let limit_key = LimitKey { limit: one.limit(), key: &key };
            let decided = runtime.block_on(single_store.check_one(limit_key, Moment::Now, cost));
            // A cost the limit can never admit is refused alike.
            let (planned, decision) = match (planned, decided) {
                (Ok(planned), Ok(decision)) => (planned, decision),
                (Err(theirs), Err(ours)) => {
                    prop_assert_eq!(ours.to_string(), theirs.to_string());
                    continue;
                }
                (theirs, ours) => {
                    prop_assert!(false, "plan {:?}, one limit {:?}", theirs.map(|o| o.allowed), ours);
                    continue;
                }
            };
            let expected = Seen::of(&planned);
            // The parts a front door uses, and the outcome they stand for.
            prop_assert_eq!(one.applied(decision), planned.applied()[0].clone());
            let outcome = one.outcome(key.clone(), decision);
            prop_assert_eq!(Seen::of(&outcome), expected);
            let (ours, theirs) = (&outcome.descriptors[0], &planned.descriptors[0]);
            let (ours, theirs) = (ours.as_ref().unwrap(), theirs.as_ref().unwrap());
            prop_assert_eq!(&ours.decisions, &theirs.decisions);
            prop_assert_eq!(ours.decision, theirs.decision);
            prop_assert_eq!((ours.shadow, ours.quota), (theirs.shadow, theirs.quota));
            prop_assert_eq!(&ours.detailed, &theirs.detailed);
            // Release a lease on both, as the front door does at the end.
            if let Some(id) = decision.lease {
                let theirs_lease = theirs.decisions[0].lease.unwrap();
                runtime.block_on(async {
                    single_store.release(limit_key, id).await.unwrap();
                    planned_store.release(limit_key, theirs_lease).await.unwrap();
                });
            }
        }
    }
}
