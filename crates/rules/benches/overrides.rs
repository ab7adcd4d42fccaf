//! What a million runtime overrides cost a check that has none, all in one
//! run:
//!
//! - `plan_one_descriptor`: planning a request (overrides looked up, rules
//!   resolved, store keys written, as every decision route does before
//!   asking the store);
//! - `check_one_descriptor`: the whole rules-based check, the plan then
//!   the memory store's decision, for one descriptor value asked again and
//!   again (its override probe stays in the CPU's caches);
//! - `check_spread_descriptors`: the same check for 65,536 values in turn,
//!   so that a probe of the million-override table misses the caches as a
//!   real stream of tenants would.
//!
//! Each group measures the request with no override at all, with
//! 1,000,000 overrides in another domain, with 1,000,000 in the request's
//! own domain (none of them the request's descriptor), and, for scale, the
//! request whose descriptor is one of the million.
//!
//! Run: `cargo bench -p tollgate-rules --bench overrides`
//! (`scripts/bench-overrides` prints the ratios).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::hint::black_box;
use std::task::{Context, Poll, Waker};

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_core::Moment;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::check::Plan;
use tollgate_rules::overrides::OverrideTable;
use tollgate_rules::RuleSet;

/// How many overrides the loaded tables hold.
const OVERRIDES: usize = 1_000_000;

/// How many distinct descriptor values the spread group takes in turn.
const SPREAD: usize = 65_536;

/// A few tiers, as customers on plans would have; generous enough that
/// the overridden request is admitted, as the others are.
const TIERS: [&str; 4] = [
    r#"{"rate_limit":{"requests_per_unit":100000000,"unit":"second"}}"#,
    r#"{"rate_limit":{"requests_per_unit":1000000000,"unit":"second"}}"#,
    r#"{"rate_limit":{"algorithm":"gcra","burst":1000,"requests_per_unit":100000000,"unit":"second"}}"#,
    r#"{"rate_limits":[{"requests_per_unit":100000000,"unit":"second"},{"requests_per_unit":4000000000,"unit":"day"}]}"#,
];

fn rules() -> RuleSet {
    let yaml = "domain: api\n\
                descriptors:\n\
                \x20 - key: api_key\n\
                \x20   rate_limit: {unit: second, requests_per_unit: 1000000000}\n";
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

/// The output of a future that is ready on its first poll, as the memory
/// store's are.
fn ready<F: Future>(future: F) -> F::Output {
    let mut context = Context::from_waker(Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory store's check waited"),
    }
}

/// The tables of the four cases, built once for every group.
struct Tables {
    none: OverrideTable,
    elsewhere: OverrideTable,
    here: OverrideTable,
}

/// Descriptor values no override names.
fn plain_values(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("visitor-{i:07}")).collect()
}

/// Descriptor values every one of which has an override in `Tables::here`
/// (spread over the million).
fn overridden_values(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("customer-{:07}", i * (OVERRIDES / n)))
        .collect()
}

fn groups(c: &mut Criterion) {
    let rules = rules();
    let tables = Tables {
        none: OverrideTable::new(),
        elsewhere: loaded("web"),
        here: loaded("api"),
    };
    let cases = |plain: Vec<String>, overridden: Vec<String>| {
        [
            ("no_overrides", &tables.none, plain.clone()),
            (
                "1m_overrides_other_domain",
                &tables.elsewhere,
                plain.clone(),
            ),
            (
                "1m_overrides_same_domain_not_this_descriptor",
                &tables.here,
                plain,
            ),
            (
                "1m_overrides_this_descriptor_overridden",
                &tables.here,
                overridden,
            ),
        ]
    };

    let mut group = c.benchmark_group("plan_one_descriptor");
    for (name, table, values) in cases(plain_values(1), overridden_values(1)) {
        let request = [vec![("api_key", values[0].as_str())]];
        group.bench_function(name, |b| {
            b.iter(|| {
                let found = table.find("api", black_box(&request));
                let plan = Plan::resolve_with(&rules, "api", &request, &found, false).unwrap();
                black_box(plan.descriptors().len())
            })
        });
    }
    group.finish();

    for (group_name, spread) in [
        ("check_one_descriptor", 1),
        ("check_spread_descriptors", SPREAD),
    ] {
        let mut group = c.benchmark_group(group_name);
        for (name, table, values) in cases(plain_values(spread), overridden_values(spread)) {
            let requests: Vec<[Vec<(&str, &str)>; 1]> = values
                .iter()
                .map(|v| [vec![("api_key", v.as_str())]])
                .collect();
            let store = LocalStore::system(MemoryStore::new(MemoryConfig::default()));
            let mut next = 0;
            group.bench_function(name, |b| {
                b.iter(|| {
                    let request = &requests[next];
                    next = (next + 1) % requests.len();
                    let found = table.find("api", black_box(request));
                    let plan = Plan::resolve_with(&rules, "api", request, &found, false).unwrap();
                    let outcome = ready(plan.check(&store, Moment::Now, 1)).unwrap();
                    assert!(outcome.allowed);
                    black_box(outcome.descriptors.len())
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, groups);
criterion_main!(benches);
