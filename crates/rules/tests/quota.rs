//! `quota_mode` through the shared rules decision (`tollgate_rules::check`)
//! and the memory store: a quota rule over its limit rejects the request
//! only when every quota rule of the request is over; quota rules are
//! debited on their own; the global quota switch makes every rule a quota.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use tollgate_core::time::ManualClock;
use tollgate_core::Moment;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::check::{Outcome, Plan};
use tollgate_rules::RuleSet;

fn setup() -> (RuleSet, LocalStore) {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dropin/quota-mode.yaml");
    let rules = RuleSet::load(path).unwrap();
    let store = LocalStore::new(
        MemoryStore::new(MemoryConfig::default()),
        Arc::new(ManualClock::new(0)),
    );
    (rules, store)
}

async fn decide<'r>(
    rules: &'r RuleSet,
    store: &LocalStore,
    descriptors: &[Vec<(&str, &str)>],
    global_quota: bool,
) -> Outcome<'r> {
    let plan = Plan::resolve(rules, "quota", descriptors, false)
        .unwrap()
        .with_global_quota(global_quota);
    plan.check(store, Moment::Now, 1).await.unwrap()
}

fn remaining(outcome: &Outcome<'_>, d: usize) -> u64 {
    outcome.descriptors[d].as_ref().unwrap().decision.remaining
}

#[tokio::test]
async fn one_quota_over_is_still_allowed_all_over_is_rejected() {
    let (rules, store) = setup();
    let request = [vec![("daily_quota", "u")], vec![("monthly_quota", "u")]];
    let first = decide(&rules, &store, &request, false).await;
    assert!(first.allowed);
    assert!(first.descriptors.iter().flatten().all(|d| d.quota));
    // The daily quota (1) is now over, the monthly one (2) is not.
    let second = decide(&rules, &store, &request, false).await;
    assert!(second.allowed);
    assert!(!second.descriptors[0].as_ref().unwrap().decision.allowed);
    assert!(second.descriptors[1].as_ref().unwrap().decision.allowed);
    assert!(!second.quotas_exhausted);
    assert!(second.rejecting_rule().is_none());
    assert!(second.top.unwrap().allowed);
    // Both over: rejected, and the rejecting rule is a quota.
    let third = decide(&rules, &store, &request, false).await;
    assert!(!third.allowed);
    assert!(third.quotas_exhausted);
    assert!(third.rejecting_rule().unwrap().quota);
    assert!(!third.top.unwrap().allowed);
}

#[tokio::test]
async fn an_ordinary_rule_over_rejects_whatever_the_quotas_say() {
    let (rules, store) = setup();
    // Mixed: one quota over beside an ordinary rule that admits: allowed.
    let mixed = [
        vec![("user", "m")],
        vec![("daily_quota", "m")],
        vec![("monthly_quota", "m")],
    ];
    assert!(decide(&rules, &store, &mixed, false).await.allowed);
    let second = decide(&rules, &store, &mixed, false).await;
    assert!(second.allowed);
    assert!(!second.descriptors[1].as_ref().unwrap().decision.allowed);
    // The user (3) admits three times; a fresh quota each time admits too.
    let quotas = ["q0", "q1", "q2", "q3"];
    for q in &quotas[..3] {
        let request = [vec![("user", "u")], vec![("daily_quota", *q)]];
        assert!(decide(&rules, &store, &request, false).await.allowed);
    }
    // Now the user is over: rejected, although the quota admits.
    let request = [vec![("user", "u")], vec![("daily_quota", quotas[3])]];
    let fourth = decide(&rules, &store, &request, false).await;
    assert!(!fourth.allowed);
    assert!(!fourth.quotas_exhausted);
    assert_eq!(fourth.rejecting_rule().unwrap().rule.id(), "quota.user");
    assert_eq!(remaining(&fourth, 1), 0);
}

#[tokio::test]
async fn quota_rules_are_debited_when_over() {
    let (rules, store) = setup();
    let request = [vec![("daily_quota", "q")], vec![("monthly_quota", "q")]];
    decide(&rules, &store, &request, false).await;
    decide(&rules, &store, &request, false).await;
    // The monthly counter took both requests although the daily one was
    // over for the second.
    let monthly = decide(&rules, &store, &[vec![("monthly_quota", "q")]], false).await;
    assert!(!monthly.allowed);
}

#[tokio::test]
async fn the_global_switch_makes_every_rule_a_quota() {
    let (rules, store) = setup();
    let request = [vec![("user", "g")], vec![("monthly_quota", "g")]];
    for _ in 0..3 {
        assert!(decide(&rules, &store, &request, true).await.allowed);
    }
    // The user is over, the monthly quota too since the third: all over.
    let fourth = decide(&rules, &store, &request, true).await;
    assert!(!fourth.allowed);
    // Without the switch, a user alone over its limit is rejected...
    let user = [vec![("user", "h")]];
    for _ in 0..3 {
        decide(&rules, &store, &user, false).await;
    }
    assert!(!decide(&rules, &store, &user, false).await.allowed);
    // ...and with it too: the one quota is over.
    assert!(!decide(&rules, &store, &user, true).await.allowed);
}

#[tokio::test]
async fn quotas_combine_with_replaces_and_shared_thresholds() {
    let (rules, store) = setup();
    // `plan: *` is a shared quota of 1 for every plan.
    let silver = [vec![("plan", "silver")], vec![("daily_quota", "p")]];
    assert!(decide(&rules, &store, &silver, false).await.allowed);
    let bronze = [vec![("plan", "bronze")], vec![("daily_quota", "p")]];
    // Both quotas over (the plan's is shared across plans): rejected.
    assert!(!decide(&rules, &store, &bronze, false).await.allowed);
    // gold replaces plan_quota: with `plan: silver` beside it, only gold's
    // quota (5) and the daily one (over) apply, so it is allowed.
    let gold = [
        vec![("plan", "gold")],
        vec![("plan", "silver")],
        vec![("daily_quota", "p")],
    ];
    let outcome = decide(&rules, &store, &gold, false).await;
    assert!(outcome.descriptors[1].is_none());
    assert!(outcome.allowed);
}
