//! Wildcard matching cost: resolving one descriptor against a rules file
//! with 1,000 wildcard values (prefix, suffix, middle and several stars),
//! against the baseline of an exact value in the same file, measured in the
//! same run.
//!
//! Run: `cargo bench -p tollgate-rules --bench wildcards`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_rules::RuleSet;

/// How many wildcard descriptors the file has (and as many exact ones).
const PATTERNS: usize = 1_000;

/// A rules file with [`PATTERNS`] exact values, [`PATTERNS`] wildcards of
/// four shapes in turn, and a key-only catch-all, all under one key.
fn rules() -> RuleSet {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    let mut push = |value: &str| {
        let _ = write!(
            yaml,
            "  - key: path\n    value: \"{value}\"\n    rate_limit: {{unit: second, requests_per_unit: 1000}}\n"
        );
    };
    for i in 0..PATTERNS {
        push(&format!("/exact/{i}"));
    }
    for i in 0..PATTERNS {
        match i % 4 {
            0 => push(&format!("/svc{i}/*")),
            1 => push(&format!("*/file{i}.json")),
            2 => push(&format!("/t{i}/*/items/*")),
            _ => push(&format!("/v{i}*-*-x")),
        }
    }
    yaml.push_str("  - key: path\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
    RuleSet::from_yaml(&yaml, "bench.yaml").unwrap()
}

fn resolve(c: &mut Criterion) {
    let rules = rules();
    let domain = rules.domain("bench").unwrap();
    let cases = [
        ("exact_value", "/exact/777"),
        ("prefix_wildcard_last", "/svc996/orders/7"),
        ("suffix_wildcard_last", "/a/b/file997.json"),
        ("middle_wildcards_last", "/t998/42/items/9"),
        ("several_stars_last", "/v999a-b-x"),
        ("no_wildcard_key_only", "/nothing/matches/here"),
    ];
    let mut group = c.benchmark_group("resolve_1000_wildcards");
    for (name, value) in cases {
        let descriptor = [("path", value)];
        assert!(domain.find(&descriptor).is_some(), "{name}");
        group.bench_function(name, |b| {
            b.iter(|| black_box(domain.find(black_box(&descriptor))).is_some())
        });
    }
    group.finish();
}

criterion_group!(benches, resolve);
criterion_main!(benches);
