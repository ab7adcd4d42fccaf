//! An envoyproxy/ratelimit-style rules file loads unchanged and matches as
//! envoy matches: order, nesting, key-only and wildcard values, unlimited,
//! replaces, shadow mode, detailed metrics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_rules::{RateLimitUnit, Resolved, RuleSet};

/// Written in the style of envoyproxy/ratelimit's README examples: only
/// envoy's own fields, upper- and lower-case units.
const ENVOY: &str = r#"
domain: edge
descriptors:
  # Every client address gets 10 a second...
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # ...except this one, which is blocked.
  - key: remote_address
    value: 198.51.100.7
    rate_limit:
      unit: SECOND
      requests_per_unit: 0

  # Paths under /api/ share a wildcard rule; /api/health is exact.
  - key: path
    value: /api/*
    rate_limit:
      unit: minute
      requests_per_unit: 600
  - key: path
    value: /api/health
    rate_limit:
      unlimited: true
  - key: path
    value: /a*
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 1000

  # Per tenant, per user, nested.
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit:
          name: acme_user
          unit: day
          requests_per_unit: 50000
        detailed_metric: true
      - key: user
        value: vip
        shadow_mode: true
        rate_limit:
          unit: day
          requests_per_unit: 10
  - key: tenant
    value: acme-premium
    descriptors:
      - key: user
        rate_limit:
          replaces:
            - name: acme_user
          unit: day
          requests_per_unit: 90000

  # A placeholder without a limit, and a leaf without one (whitelisted).
  - key: plan
    value: free
    rate_limit:
      unit: month
      requests_per_unit: 1000
    descriptors:
      - key: feature
        value: export
        rate_limit:
          unit: year
          requests_per_unit: 12
  - key: internal
"#;

fn rules() -> RuleSet {
    RuleSet::from_yaml(ENVOY, "edge.yaml").unwrap()
}

fn one<'a>(rules: &'a RuleSet, descriptor: &'a [Vec<(&'a str, &'a str)>]) -> Option<Resolved<'a>> {
    rules.resolve("edge", descriptor).unwrap()[0]
}

fn id_of(rules: &RuleSet, entries: &[(&str, &str)]) -> Option<String> {
    let request = [entries.to_vec()];
    one(rules, &request).map(|r| r.rule().id().to_string())
}

#[test]
fn envoy_example_loads_with_envoy_meanings() {
    let rules = rules();
    let edge = rules.domain("edge").unwrap();
    assert_eq!(edge.rules().len(), 11);
    let per_address = edge.rule("edge.remote_address").unwrap();
    assert_eq!(per_address.limits().len(), 1);
    let limit = per_address.limits()[0];
    assert_eq!(limit.algorithm.as_str(), "fixed_window");
    assert_eq!(limit.rate.to_string(), "10/s");
    assert_eq!(per_address.reported_limits()[0].unit, RateLimitUnit::Second);
    let blocked = edge.rule("edge.remote_address_198.51.100.7").unwrap();
    assert!(blocked.denies_all());
    assert!(blocked.limits().is_empty());
    assert_eq!(blocked.reported_limits()[0].requests_per_unit, 0);
    let monthly = edge.rule("edge.plan_free").unwrap();
    assert_eq!(monthly.limits()[0].rate.period().as_secs(), 30 * 86_400);
    let yearly = edge.rule("edge.plan_free.feature_export").unwrap();
    assert_eq!(yearly.limits()[0].rate.period().as_secs(), 365 * 86_400);
    assert_eq!(yearly.reported_limits()[0].unit, RateLimitUnit::Year);
}

#[test]
fn exact_value_beats_wildcard_beats_key_only() {
    let rules = rules();
    assert_eq!(
        id_of(&rules, &[("remote_address", "198.51.100.7")]).as_deref(),
        Some("edge.remote_address_198.51.100.7")
    );
    assert_eq!(
        id_of(&rules, &[("remote_address", "203.0.113.1")]).as_deref(),
        Some("edge.remote_address")
    );
    assert_eq!(
        id_of(&rules, &[("path", "/api/health")]).as_deref(),
        Some("edge.path_/api/health")
    );
    // Both `/api/*` and `/a*` match; the first in the file wins.
    assert_eq!(
        id_of(&rules, &[("path", "/api/users")]).as_deref(),
        Some("edge.path_/api/*")
    );
    assert_eq!(
        id_of(&rules, &[("path", "/admin")]).as_deref(),
        Some("edge.path_/a*")
    );
    assert_eq!(
        id_of(&rules, &[("path", "/login")]).as_deref(),
        Some("edge.path")
    );
    // A `*` is a wildcard only at the end: no match for a key that has none.
    assert_eq!(id_of(&rules, &[("nothing", "x")]), None);
}

#[test]
fn a_limit_applies_only_where_the_request_ends() {
    let rules = rules();
    // Nested: tenant then user.
    assert_eq!(
        id_of(&rules, &[("tenant", "acme"), ("user", "bob")]).as_deref(),
        Some("edge.tenant_acme.user")
    );
    // The request stops at a placeholder level without a limit.
    assert_eq!(id_of(&rules, &[("tenant", "acme")]), None);
    // The request goes deeper than the rules.
    assert_eq!(
        id_of(
            &rules,
            &[("remote_address", "203.0.113.1"), ("user", "bob")]
        ),
        None
    );
    // A level with a limit and children: both depths have their rule.
    assert_eq!(
        id_of(&rules, &[("plan", "free")]).as_deref(),
        Some("edge.plan_free")
    );
    assert_eq!(
        id_of(&rules, &[("plan", "free"), ("feature", "export")]).as_deref(),
        Some("edge.plan_free.feature_export")
    );
    assert_eq!(
        id_of(&rules, &[("plan", "free"), ("feature", "print")]),
        None
    );
    // Order matters: the same entries the other way round match nothing.
    assert_eq!(id_of(&rules, &[("user", "bob"), ("tenant", "acme")]), None);
    // A descriptor without a limit or children matches but limits nothing.
    assert_eq!(id_of(&rules, &[("internal", "yes")]), None);
    // No entries at all.
    let empty: [Vec<(&str, &str)>; 1] = [vec![]];
    assert!(one(&rules, &empty).is_none());
}

#[test]
fn key_only_and_wildcard_values_count_separately_exact_ones_share() {
    let rules = rules();
    let key = |entries: &[(&str, &str)]| {
        let request = [entries.to_vec()];
        one(&rules, &request).unwrap().counter_key()
    };
    // Key-only: one counter per address.
    assert_ne!(
        key(&[("remote_address", "203.0.113.1")]),
        key(&[("remote_address", "203.0.113.2")])
    );
    // Wildcard: one counter per path, as in envoy's cache key.
    assert_ne!(key(&[("path", "/api/a")]), key(&[("path", "/api/b")]));
    // Exact: always the same counter.
    assert_eq!(
        key(&[("tenant", "acme"), ("user", "vip")]),
        key(&[("tenant", "acme"), ("user", "vip")])
    );
    // Same values, different rules: different counters.
    assert_ne!(
        key(&[("tenant", "acme"), ("user", "bob")]),
        key(&[("tenant", "acme-premium"), ("user", "bob")])
    );
}

#[test]
fn counter_keys_are_unambiguous() {
    let yaml = r#"
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
"#;
    let rules = RuleSet::from_yaml(yaml, "d.yaml").unwrap();
    let key = |a: &str, b: &str| {
        let request = [vec![("a", a), ("b", b)]];
        rules.resolve("d", &request).unwrap()[0]
            .unwrap()
            .counter_key()
    };
    // Values that a separator-joined key would confuse.
    assert_ne!(key("x:y", "z"), key("x", "y:z"));
    assert_ne!(key("1:x", ""), key("", "1:x"));
    assert_ne!(key("x_y", "z"), key("x", "y_z"));
    // Stable: the same request gives the same bytes.
    assert_eq!(key("x", "y"), key("x", "y"));
    let mut buf = b"prefix".to_vec();
    let request = [vec![("a", "x"), ("b", "y")]];
    rules.resolve("d", &request).unwrap()[0]
        .unwrap()
        .write_counter_key(&mut buf);
    assert_eq!(&buf[6..], key("x", "y").as_slice());
}

#[test]
fn unlimited_rules_resolve_without_limits() {
    let rules = rules();
    let request = [vec![("path", "/api/health")]];
    let rule = one(&rules, &request).unwrap().rule();
    assert!(rule.unlimited());
    assert!(rule.limits().is_empty());
    assert!(rule.reported_limits().is_empty());
}

#[test]
fn replaces_drops_the_named_limit_across_descriptors() {
    let rules = rules();
    let request = [
        vec![("tenant", "acme"), ("user", "bob")],
        vec![("tenant", "acme-premium"), ("user", "bob")],
        vec![("remote_address", "203.0.113.1")],
    ];
    let resolved = rules.resolve("edge", &request).unwrap();
    assert!(resolved[0].is_none(), "acme_user is replaced");
    assert_eq!(
        resolved[1].unwrap().rule().replaces(),
        ["acme_user".to_string()]
    );
    assert!(resolved[2].is_some());
    // Alone, the named rule applies.
    let alone = [vec![("tenant", "acme"), ("user", "bob")]];
    let resolved = rules.resolve("edge", &alone).unwrap();
    assert_eq!(resolved[0].unwrap().rule().name(), Some("acme_user"));
}

#[test]
fn replaces_follows_envoy_for_unlimited_rules() {
    let yaml = r#"
domain: d
descriptors:
  - key: a
    rate_limit: {name: first, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unlimited: true, replaces: [{name: first}]}
  - key: c
    rate_limit: {name: second, unlimited: true}
  - key: e
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: second}]}
"#;
    let rules = RuleSet::from_yaml(yaml, "d.yaml").unwrap();
    let request = [
        vec![("a", "1")],
        vec![("b", "1")],
        vec![("c", "1")],
        vec![("e", "1")],
    ];
    let resolved = rules.resolve("d", &request).unwrap();
    // An unlimited rule's `replaces` still counts...
    assert!(resolved[0].is_none());
    // ...and an unlimited rule is never dropped.
    assert!(resolved[2].unwrap().rule().unlimited());
    assert!(resolved[1].is_some() && resolved[3].is_some());
}

#[test]
fn shadow_mode_and_detailed_metric_are_reported() {
    let rules = rules();
    let request = [
        vec![("tenant", "acme"), ("user", "vip")],
        vec![("tenant", "acme"), ("user", "bob")],
    ];
    let resolved = rules.resolve("edge", &request).unwrap();
    let vip = resolved[0].unwrap();
    assert!(vip.rule().shadow_mode());
    assert!(!vip.rule().detailed_metric());
    assert_eq!(vip.metric_label(), "edge.tenant_acme.user_vip");
    let bob = resolved[1].unwrap();
    assert!(!bob.rule().shadow_mode());
    assert!(bob.rule().detailed_metric());
    assert_eq!(bob.metric_label(), "edge.tenant_acme.user_bob");
    assert_eq!(bob.rule().id(), "edge.tenant_acme.user");
}

#[test]
fn unknown_domains_are_an_error_and_answers_keep_request_order() {
    let rules = rules();
    let request: Vec<Vec<(String, String)>> = vec![
        vec![("path".into(), "/login".into())],
        vec![("nothing".into(), "x".into())],
        vec![("remote_address".into(), "1.2.3.4".into())],
    ];
    let resolved = rules.resolve("edge", &request).unwrap();
    assert_eq!(resolved.len(), 3);
    assert_eq!(resolved[0].unwrap().rule().id(), "edge.path");
    assert!(resolved[1].is_none());
    assert_eq!(resolved[2].unwrap().rule().id(), "edge.remote_address");
    let err = rules.resolve("nope", &request).unwrap_err();
    assert_eq!(err.to_string(), "unknown domain \"nope\"");
}
