//! The waiters on real tokio runtimes with tokio's clock paused (through
//! `TokioClock`, which follows it): sleeping on tokio's timer, cancellation
//! by `timeout`, arrival order across tasks, and the limit under many
//! concurrent tasks. No real time passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{timeout, Instant};
use tollgate_client::clock::{Clock, RealClock, TokioClock, WaitClock};
use tollgate_client::waiter::{GcraWaiter, RingWaiter};
use tollgate_core::Rate;

use support::{assert_window, MS, SEC};

fn since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn gcra_sleeps_on_tokios_timer() {
    let waiter = GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 1)
        .unwrap()
        .with_clock(TokioClock::new());
    let start = Instant::now();
    let mut at = Vec::new();
    for _ in 0..4 {
        waiter.until_ready().await;
        at.push(since(start));
    }
    assert_eq!(at, [0, 100 * MS, 200 * MS, 300 * MS]);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_leaves_the_line_and_takes_nothing() {
    let waiter = RingWaiter::new(Rate::per_second(1).unwrap())
        .unwrap()
        .with_clock(TokioClock::new());
    let start = Instant::now();
    waiter.until_ready().await;
    let gave_up = timeout(Duration::from_millis(300), waiter.until_ready()).await;
    assert!(gave_up.is_err());
    assert_eq!(waiter.waiting(), 0);
    // The slot at 1 s is still there for the next call.
    waiter.until_ready().await;
    assert_eq!(since(start), SEC);
}

#[tokio::test(start_paused = true)]
async fn tasks_go_in_the_order_they_arrive() {
    let waiter = Arc::new(
        GcraWaiter::with_burst(Rate::per_second(10).unwrap(), 3)
            .unwrap()
            .with_clock(TokioClock::new()),
    );
    waiter.until_n_ready(3).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..20u64 {
        let (w, order) = (Arc::clone(&waiter), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            w.until_n_ready(1 + (i * 5) % 3).await.unwrap();
            order.lock().unwrap().push(i);
        }));
        // Let the task arrive before spawning the next.
        while waiter.waiting() < (i + 1) as usize {
            tokio::task::yield_now().await;
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn many_tasks_never_exceed_the_ring() {
    let waiter = Arc::new(
        RingWaiter::new(Rate::per_second(5).unwrap())
            .unwrap()
            .with_clock(TokioClock::new()),
    );
    let start = Instant::now();
    let released = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..25 {
        let (w, released) = (Arc::clone(&waiter), Arc::clone(&released));
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                w.until_ready().await;
                released.lock().unwrap().push((since(start), 1));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let released = released.lock().unwrap();
    assert_eq!(released.len(), 100);
    assert_window(&released, 5, SEC);
    // 100 calls at 5 per second: the last goes in the 20th second.
    assert_eq!(released.iter().map(|r| r.0).max(), Some(19 * SEC));
}

#[test]
fn threads_with_their_own_runtimes_share_one_waiter() {
    // Four threads, each with its own runtime, take the 1,000 permits of a
    // ring of 1,000 per hour without waiting. Then the ring is full: a
    // 1,001st call times out (on a paused clock: no real time passes) and
    // leaves the line.
    let waiter = Arc::new(
        RingWaiter::new("1000/h".parse().unwrap())
            .unwrap()
            .with_clock(TokioClock::new()),
    );
    std::thread::scope(|s| {
        for _ in 0..4 {
            let waiter = Arc::clone(&waiter);
            s.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    for _ in 0..250 {
                        waiter.until_ready().await;
                    }
                });
            });
        }
    });
    assert_eq!(waiter.waiting(), 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let next = timeout(Duration::from_secs(60), waiter.until_ready()).await;
        assert!(next.is_err(), "the ring is full for the hour");
    });
    assert_eq!(waiter.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_real_clock_sleep_outlasts_an_early_timer() {
    // On a paused runtime tokio's timer fires as soon as the runtime idles,
    // long before the real clock reaches the deadline: the sleep must set
    // the timer again rather than end early.
    let clock = RealClock::new();
    let sleep = clock.sleep_until(clock.now() + 3_600 * SEC);
    assert!(timeout(Duration::from_secs(10_000), sleep).await.is_err());
}
