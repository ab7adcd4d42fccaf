//! tollgate's extensions on a `rate_limit`: algorithm, burst, step, window,
//! lease_ttl, and the `rate_limits` list; and comparing rules across loads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::AlgorithmName;
use tollgate_rules::{RateLimitUnit, Rule, RuleSet};

fn rule(rate_limit: &str) -> Rule {
    let yaml = format!("domain: d\ndescriptors:\n  - key: k\n{rate_limit}");
    let rules = RuleSet::from_yaml(&yaml, "d.yaml").unwrap_or_else(|e| panic!("{e}"));
    rules.domain("d").unwrap().rules()[0].clone()
}

#[test]
fn every_algorithm_name_is_accepted() {
    for name in AlgorithmName::ALL {
        let r = rule(&format!(
            "    rate_limit: {{unit: second, requests_per_unit: 5, algorithm: {name}}}\n"
        ));
        assert_eq!(r.limits()[0].algorithm, name);
    }
}

#[test]
fn burst_step_and_lease_ttl_reach_the_limit() {
    let bucket = rule(
        "    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 25}\n",
    );
    assert_eq!(bucket.limits()[0].burst, Some(25));
    assert_eq!(bucket.limits()[0].rate.to_string(), "10/m");

    let stepped = rule(
        "    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: stepped_window, step: 5s}\n",
    );
    assert_eq!(stepped.limits()[0].step, Some(Duration::from_secs(5)));

    let concurrency = rule(
        "    rate_limit: {unit: second, requests_per_unit: 3, algorithm: concurrency, lease_ttl: 30s}\n",
    );
    assert_eq!(
        concurrency.limits()[0].lease_ttl,
        Some(Duration::from_secs(30))
    );
}

#[test]
fn window_replaces_the_unit() {
    let five_minutes = rule("    rate_limit: {window: 5m, requests_per_unit: 100}\n");
    let limit = five_minutes.limits()[0];
    assert_eq!(limit.rate.period(), Duration::from_secs(300));
    assert_eq!(limit.algorithm, AlgorithmName::FixedWindow);
    // Reported to envoy as 100 per the nearest unit.
    let reported = five_minutes.reported_limits()[0];
    assert_eq!(reported.requests_per_unit, 100);
    assert_eq!(reported.unit, RateLimitUnit::Minute);

    let ninety = rule("    rate_limit: {window: 90s, requests_per_unit: 7}\n");
    assert_eq!(ninety.limits()[0].rate.to_string(), "7/90s");
    let hour = rule("    rate_limit: {window: 1h, requests_per_unit: 7}\n");
    assert_eq!(hour.reported_limits()[0].unit, RateLimitUnit::Hour);
}

#[test]
fn week_is_a_unit_too() {
    let week = rule("    rate_limit: {unit: Week, requests_per_unit: 70}\n");
    assert_eq!(
        week.limits()[0].rate.period(),
        Duration::from_secs(7 * 86_400)
    );
    assert_eq!(week.reported_limits()[0].unit, RateLimitUnit::Week);
}

#[test]
fn rate_limits_lists_several_limits() {
    let r = rule(concat!(
        "    rate_limits:\n",
        "      - {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20, name: api}\n",
        "      - {unit: day, requests_per_unit: 10000}\n",
        "      - {window: 15m, requests_per_unit: 500, algorithm: sliding_window_log, replaces: [{name: old}]}\n",
    ));
    assert_eq!(r.limits().len(), 3);
    assert_eq!(r.reported_limits().len(), 3);
    assert_eq!(r.limits()[0].algorithm, AlgorithmName::Gcra);
    assert_eq!(r.limits()[1].rate.to_string(), "10000/d");
    assert_eq!(r.limits()[2].rate.period(), Duration::from_secs(900));
    assert_eq!(r.reported_limits()[1].unit, RateLimitUnit::Day);
    assert_eq!(r.name(), Some("api"));
    assert_eq!(r.replaces(), ["old".to_string()]);
    assert!(!r.unlimited() && !r.denies_all());
}

#[test]
fn rules_compare_equal_across_reloads_unless_changed() {
    let before = RuleSet::from_yaml(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        "d.yaml",
    )
    .unwrap();
    // `a` moved down a few lines (a comment was added); `b` changed.
    let after = RuleSet::from_yaml(
        "domain: d\n# limits\n\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
        "d.yaml",
    )
    .unwrap();
    let old = before.domain("d").unwrap();
    let new = after.domain("d").unwrap();
    assert_ne!(
        old.rule("d.a").unwrap().line(),
        new.rule("d.a").unwrap().line()
    );
    assert_eq!(old.rule("d.a"), new.rule("d.a"));
    assert_ne!(old.rule("d.b"), new.rule("d.b"));
    assert_ne!(before, after);
    assert_eq!(
        before,
        RuleSet::from_yaml(
            "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n",
            "other.yaml"
        )
        .unwrap()
    );
}

#[test]
fn yaml_conveniences_envoy_also_accepts() {
    // Anchors and aliases, YAML 1.1 booleans, numbers as values.
    let yaml = r#"
domain: d
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit: &standard
      unit: second
      requests_per_unit: 1_000
  - key: other
    rate_limit: *standard
"#;
    let rules = RuleSet::from_yaml(yaml, "d.yaml").unwrap();
    let d = rules.domain("d").unwrap();
    let port = d.rule("d.port_8080").unwrap();
    assert!(port.shadow_mode());
    assert_eq!(port.limits()[0].rate.limit(), 1000);
    assert_eq!(d.rule("d.other").unwrap().limits(), port.limits());
}

#[test]
fn a_ban_goes_with_its_limit_in_either_form() {
    let ban =
        |after, within, duration| tollgate_core::ban::Ban::new(after, within, duration).unwrap();
    let hour = Duration::from_secs(3600);
    let login = rule(
        "    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      algorithm: sliding_window_log\n      ban: {after: 3, within: 10m, for: 1h}\n",
    );
    assert_eq!(
        login.limits()[0].ban,
        Some(ban(3, Duration::from_secs(600), hour))
    );
    let reset = rule(
        "    rate_limits:\n      - unit: hour\n        requests_per_unit: 3\n        ban:\n          after: 1\n          within: 1h\n          for: 1d\n      - unit: day\n        requests_per_unit: 10\n",
    );
    assert_eq!(reset.limits()[0].ban, Some(ban(1, hour, 24 * hour)));
    assert_eq!(reset.limits()[1].ban, None);
}

#[test]
fn a_sync_mode_goes_with_its_limit_in_either_form_and_changes_the_rule() {
    use tollgate_core::SyncMode;
    let exact = rule(
        "    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, sync: exact}\n",
    );
    assert_eq!(exact.limits()[0].sync, Some(SyncMode::Exact));
    let listed = rule(
        "    rate_limits:\n      - {unit: second, requests_per_unit: 5, sync: async}\n      - {unit: day, requests_per_unit: 50}\n      - {unit: minute, requests_per_unit: 3, algorithm: concurrency, sync: exact}\n",
    );
    assert_eq!(listed.limits()[0].sync, Some(SyncMode::Async));
    assert_eq!(listed.limits()[1].sync, None, "the process's --sync");
    assert_eq!(listed.limits()[2].sync, Some(SyncMode::Exact));
    // The same limits in another mode: another rule (a reload applies it),
    // though the limits count the same state.
    let plain = rule("    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra}\n");
    let synced = rule(
        "    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, sync: async}\n",
    );
    assert_eq!(plain.limits(), synced.limits());
    assert_ne!(plain, synced);
    assert_ne!(exact, synced);
    assert_eq!(
        synced,
        rule(
            "    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, sync: async}\n"
        )
    );
}
