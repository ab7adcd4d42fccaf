//! Instructions per acquired permit, for callgrind: `until_ready().await` on
//! a waiter that never waits, or on governor's direct limiter.
//!
//! ```sh
//! cargo build --release -p tollgate-client --example waiter_ir
//! valgrind --tool=callgrind target/release/examples/waiter_ir ring 100000
//! valgrind --tool=callgrind target/release/examples/waiter_ir ring 1100000
//! ```
//!
//! The difference between the two totals, divided by 1,000,000, is the cost
//! of one permit (setup cancels out). `scripts/bench-client` does this for
//! `governor`, `ring` and `gcra` when valgrind is installed.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    let permits: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    match which.as_str() {
        "ring" => {
            let waiter = RingWaiter::new(Rate::from_nanos(1 << 19, 1_000_000).unwrap()).unwrap();
            runtime.block_on(ring(&waiter, permits));
        }
        "gcra" => {
            let waiter = GcraWaiter::new(Rate::per_second(1_000_000_000).unwrap()).unwrap();
            runtime.block_on(gcra(&waiter, permits));
        }
        "governor" => {
            let quota = Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
            runtime.block_on(governor(&RateLimiter::direct(quota), permits));
        }
        _ => eprintln!("usage: waiter_ir ring|gcra|governor [PERMITS]"),
    }
}

async fn ring(waiter: &RingWaiter, permits: u64) {
    for _ in 0..permits {
        waiter.until_ready().await;
    }
}

async fn gcra(waiter: &GcraWaiter, permits: u64) {
    for _ in 0..permits {
        waiter.until_ready().await;
    }
}

async fn governor(limiter: &DefaultDirectRateLimiter, permits: u64) {
    for _ in 0..permits {
        limiter.until_ready().await;
    }
}
