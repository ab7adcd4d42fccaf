//! What a million runtime overrides cost a check that has none: planning a
//! request (overrides looked up, rules resolved, store keys written, as
//! every decision route does before asking the store) with no override at
//! all, with 1,000,000 overrides in another domain, and with 1,000,000 in
//! the request's own domain (none of them the request's descriptor); and,
//! for scale, the request whose descriptor is one of the million. All in
//! one run.
//!
//! Run: `cargo bench -p tollgate-rules --bench overrides`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_rules::check::Plan;
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::RuleSet;

/// How many overrides the loaded tables hold.
const OVERRIDES: usize = 1_000_000;

/// A few tiers, as customers on plans would have.
const TIERS: [&str; 4] = [
    r#"{"rate_limit":{"requests_per_unit":100,"unit":"second"}}"#,
    r#"{"rate_limit":{"requests_per_unit":1000,"unit":"second"}}"#,
    r#"{"rate_limit":{"algorithm":"gcra","burst":50,"requests_per_unit":10,"unit":"second"}}"#,
    r#"{"rate_limits":[{"requests_per_unit":10,"unit":"second"},{"requests_per_unit":10000,"unit":"day"}]}"#,
];

fn rules() -> RuleSet {
    let yaml = "domain: api\n\
                descriptors:\n\
                \x20 - key: api_key\n\
                \x20   rate_limit: {unit: second, requests_per_unit: 10}\n";
    RuleSet::from_yaml(yaml, "api.yaml").unwrap()
}

fn loaded(domain: &str) -> OverrideTable {
    let table = OverrideTable::new();
    for i in 0..OVERRIDES {
        let key = format!("customer-{i:07}");
        table
            .put(domain, &[("api_key", key.as_str())], TIERS[i % TIERS.len()])
            .unwrap();
    }
    assert_eq!(table.len(), OVERRIDES);
    table
}

fn plan(c: &mut Criterion) {
    let rules = rules();
    let none = OverrideTable::new();
    let elsewhere = loaded("web");
    let here = loaded("api");
    let plain = [vec![("api_key", "not-a-customer")]];
    let overridden = [vec![("api_key", "customer-0777777")]];
    let mut group = c.benchmark_group("plan_one_descriptor");
    let cases = [
        ("no_overrides", &none, &plain),
        ("1m_overrides_other_domain", &elsewhere, &plain),
        (
            "1m_overrides_same_domain_not_this_descriptor",
            &here,
            &plain,
        ),
        (
            "1m_overrides_this_descriptor_overridden",
            &here,
            &overridden,
        ),
    ];
    for (name, table, request) in cases {
        group.bench_function(name, |b| {
            b.iter(|| {
                let found = table.find("api", black_box(request));
                let plan = Plan::resolve_with(&rules, "api", request, &found, false).unwrap();
                black_box(plan.descriptors().len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, plan);
criterion_main!(benches);
