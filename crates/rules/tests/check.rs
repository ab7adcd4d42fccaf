//! The shared rules decision (`tollgate_rules::check`) through the memory
//! store: all-or-nothing enforced rules, shadow-mode rules on their own,
//! deny-all and unlimited rules, global shadow, the top decision and the
//! names of applied limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tollgate_core::time::ManualClock;
use tollgate_core::Moment;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::check::{Outcome, Plan, RULES_KEY_PREFIX};
use tollgate_rules::RuleSet;

const RULES: &str = r#"
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: day, requests_per_unit: 100}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: health
    rate_limit: {unlimited: true}
"#;

fn setup() -> (RuleSet, LocalStore) {
    let rules = RuleSet::from_yaml(RULES, "d.yaml").unwrap();
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
    shadow: bool,
) -> Outcome<'r> {
    let plan = Plan::resolve(rules, "d", descriptors, shadow).unwrap();
    plan.check(store, Moment::Now, 1).await.unwrap()
}

#[tokio::test]
async fn enforced_rules_are_all_or_nothing() {
    let (rules, store) = setup();
    let both = [vec![("user", "u")], vec![("tenant", "t")]];
    let tenant = [vec![("tenant", "t")]];
    for _ in 0..2 {
        assert!(decide(&rules, &store, &both, false).await.allowed);
    }
    // The user is out; the tenant's third admission must not be counted.
    let third = decide(&rules, &store, &both, false).await;
    assert!(!third.allowed);
    assert_eq!(
        third.rejecting_rule().unwrap().rule.name(),
        Some("per_user")
    );
    assert!(decide(&rules, &store, &tenant, false).await.allowed);
    assert!(!decide(&rules, &store, &tenant, false).await.allowed);

    let names: Vec<String> = third.applied().iter().map(|a| a.name.to_string()).collect();
    assert_eq!(names, ["per_user", "d.tenant:3/s", "d.tenant:100/d"]);
    let key = &third.descriptors[0].as_ref().unwrap().key;
    assert_eq!(key[0], RULES_KEY_PREFIX);
}

#[tokio::test]
async fn shadow_rules_count_alone_and_never_reject() {
    let (rules, store) = setup();
    let request = [vec![("trial", "x")], vec![("user", "u")]];
    assert!(decide(&rules, &store, &request, false).await.allowed);
    let second = decide(&rules, &store, &request, false).await;
    assert!(second.allowed && second.shadow_rejected);
    let trial = second.descriptors[0].as_ref().unwrap();
    assert!(trial.shadow && !trial.decision.allowed);
    // The top decision is the enforced rule's.
    assert_eq!(second.top.unwrap().remaining, 0);
    assert_eq!(second.top.unwrap().limit, 2);
    // The user rule counted both: the third is over.
    assert!(
        !decide(&rules, &store, &[vec![("user", "u")]], false)
            .await
            .allowed
    );
}

#[tokio::test]
async fn deny_all_rejects_and_counts_nothing_else() {
    let (rules, store) = setup();
    let request = [vec![("blocked", "b")], vec![("user", "u")]];
    for _ in 0..3 {
        let outcome = decide(&rules, &store, &request, false).await;
        assert!(!outcome.allowed);
        assert_eq!(outcome.top.unwrap().retry_after.as_secs(), 3600);
    }
    let user = [vec![("user", "u")]];
    assert!(decide(&rules, &store, &user, false).await.allowed);
    assert!(decide(&rules, &store, &user, false).await.allowed);
}

#[tokio::test]
async fn unlimited_and_unmatched_descriptors_report_nothing() {
    let (rules, store) = setup();
    let outcome = decide(
        &rules,
        &store,
        &[vec![("health", "h")], vec![("nothing", "n")]],
        false,
    )
    .await;
    assert!(outcome.allowed && outcome.top.is_none() && outcome.applied().is_empty());
    assert!(!outcome.descriptors[0].as_ref().unwrap().decided());
    assert!(outcome.descriptors[1].is_none());
}

#[tokio::test]
async fn global_shadow_reports_without_enforcing() {
    let (rules, store) = setup();
    let user = [vec![("user", "u")]];
    for _ in 0..2 {
        decide(&rules, &store, &user, true).await;
    }
    let over = decide(&rules, &store, &user, true).await;
    assert!(over.allowed && over.shadow_rejected);
    assert!(over.descriptors[0].as_ref().unwrap().shadow);
    assert!(!over.top.unwrap().allowed);
}

#[test]
fn unknown_domains_are_refused() {
    let (rules, _) = setup();
    let e = Plan::resolve(&rules, "nope", &[vec![("user", "u")]], false).unwrap_err();
    assert_eq!(e.to_string(), "unknown domain \"nope\"");
}
