//! Memory per runtime override: every byte the process allocates for an
//! [`OverrideTable`] (the lookup table, the ordered listing, each
//! descriptor's key, the shared limits), counted by a global allocator and
//! divided by the number of overrides. The baseline, measured in the same
//! run: the same descriptor keys alone in a `HashSet<Box<[u8]>>`, the
//! least any table that finds them by value could hold.
//!
//! Run: `cargo bench -p tollgate-rules --bench override_bytes`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::collections::HashSet;

use cap::Cap;
use tollgate_rules::overrides::{entries_key, OverrideTable};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn live() -> isize {
    ALLOCATOR.allocated() as isize
}

const COUNTS: [usize; 3] = [100_000, 300_000, 1_000_000];

/// The tiers the overrides are spread over, as customers on plans.
const TIERS: [&str; 4] = [
    r#"{"rate_limit":{"requests_per_unit":100,"unit":"second"}}"#,
    r#"{"rate_limit":{"requests_per_unit":1000,"unit":"second"}}"#,
    r#"{"rate_limit":{"algorithm":"gcra","burst":50,"requests_per_unit":10,"unit":"second"}}"#,
    r#"{"rate_limits":[{"requests_per_unit":10,"unit":"second"},{"requests_per_unit":10000,"unit":"day"}]}"#,
];

/// The descriptor of override `i`: `api_key` = `customer-NNNNNNN`.
fn value(i: usize) -> String {
    format!("customer-{i:07}")
}

fn table_bytes(n: usize) -> f64 {
    let before = live();
    let table = OverrideTable::new();
    for i in 0..n {
        let v = value(i);
        table
            .put("api", &[("api_key", v.as_str())], TIERS[i % TIERS.len()])
            .unwrap();
    }
    assert_eq!(table.len(), n);
    let bytes = live() - before;
    drop(table);
    bytes as f64 / n as f64
}

fn keys_bytes(n: usize) -> f64 {
    let before = live();
    let mut keys: HashSet<Box<[u8]>> = HashSet::new();
    for i in 0..n {
        let v = value(i);
        keys.insert(entries_key(&[("api_key", v.as_str())]).into_boxed_slice());
    }
    assert_eq!(keys.len(), n);
    let bytes = live() - before;
    drop(keys);
    bytes as f64 / n as f64
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--bench` absent; stay quick then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let counts: &[usize] = if quick { &COUNTS[..1] } else { &COUNTS };
    let key_len = entries_key(&[("api_key", value(0).as_str())]).len();
    println!("bytes per override (descriptor keys of {key_len} bytes), allocator-measured");
    print!("{:<48}", "overrides");
    for n in counts {
        print!("{n:>12}");
    }
    println!();
    let keys: Vec<f64> = counts.iter().map(|&n| keys_bytes(n)).collect();
    let table: Vec<f64> = counts.iter().map(|&n| table_bytes(n)).collect();
    let row = |name: &str, values: &[f64], precision: usize| {
        print!("{name:<48}");
        for v in values {
            print!("{v:>12.precision$}");
        }
        println!();
    };
    row("keys alone in a HashSet<Box<[u8]>> (baseline)", &keys, 1);
    row("OverrideTable", &table, 1);
    let ratios: Vec<f64> = table.iter().zip(&keys).map(|(t, k)| t / k).collect();
    row("OverrideTable / baseline", &ratios, 2);
}
