//! Test support: a driver that runs calls against a waiter on a manual clock
//! (polling a future only when it has been woken, so a lost wake-up shows up
//! as a stuck run), and simple reference models of the two schedules.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tollgate_client::clock::{Clock, ManualClock};
use tollgate_client::waiter::{GcraWaiter, RingWaiter, TooManyPermits};

pub(crate) const MS: u64 = 1_000_000;
pub(crate) const SEC: u64 = 1_000_000_000;

/// A call for `permits` that arrives (is first polled) at `arrival`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) arrival: u64,
    pub(crate) permits: u64,
}

pub(crate) fn call(arrival: u64, permits: u64) -> Call {
    Call { arrival, permits }
}

/// A waker that remembers being woken.
#[derive(Default)]
pub(crate) struct Flag(AtomicBool);

impl Flag {
    pub(crate) fn woken() -> Arc<Flag> {
        Arc::new(Flag(AtomicBool::new(true)))
    }

    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A future polled by hand with a [`Flag`] waker.
pub(crate) struct Task<'a, T> {
    future: Pin<Box<dyn Future<Output = T> + 'a>>,
    pub(crate) flag: Arc<Flag>,
}

impl<'a, T> Task<'a, T> {
    pub(crate) fn new(future: impl Future<Output = T> + 'a) -> Self {
        Task {
            future: Box::pin(future),
            flag: Flag::woken(),
        }
    }

    /// Polls, clearing the woken flag first.
    pub(crate) fn poll(&mut self) -> Poll<T> {
        self.flag.take();
        let waker = Waker::from(Arc::clone(&self.flag));
        self.future.as_mut().poll(&mut Context::from_waker(&waker))
    }

    /// Polls only when woken since the last poll.
    pub(crate) fn poll_if_woken(&mut self) -> Option<Poll<T>> {
        self.flag.0.load(Ordering::SeqCst).then(|| self.poll())
    }
}

/// A waiter on a manual clock, as the driver sees it.
pub(crate) trait Paced {
    fn until_n(&self, n: u64) -> Pin<Box<dyn Future<Output = Result<(), TooManyPermits>> + '_>>;
    fn manual_clock(&self) -> &ManualClock;
    fn waiting_now(&self) -> usize;
    /// Polls a call for one permit once, dropping it if it must wait:
    /// whether it got its permit.
    fn poll_once(&self) -> bool;
}

/// Polls `future` once on the stack (no allocation): whether it finished.
pub(crate) fn ready_at_once<F: Future>(future: F) -> bool {
    let future = std::pin::pin!(future);
    future
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
}

impl Paced for RingWaiter<ManualClock> {
    fn until_n(&self, n: u64) -> Pin<Box<dyn Future<Output = Result<(), TooManyPermits>> + '_>> {
        Box::pin(self.until_n_ready(n))
    }

    fn manual_clock(&self) -> &ManualClock {
        self.clock()
    }

    fn waiting_now(&self) -> usize {
        self.waiting()
    }

    fn poll_once(&self) -> bool {
        ready_at_once(self.until_ready())
    }
}

impl Paced for GcraWaiter<ManualClock> {
    fn until_n(&self, n: u64) -> Pin<Box<dyn Future<Output = Result<(), TooManyPermits>> + '_>> {
        Box::pin(self.until_n_ready(n))
    }

    fn manual_clock(&self) -> &ManualClock {
        self.clock()
    }

    fn waiting_now(&self) -> usize {
        self.waiting()
    }

    fn poll_once(&self) -> bool {
        ready_at_once(self.until_ready())
    }
}

/// Runs `calls` (in arrival order) against `waiter`: each call's future is
/// first polled at its arrival, every future is polled again only when woken,
/// and time jumps to the next arrival or the next sleeper's deadline. Returns
/// each call's release instant. Panics when calls wait and nothing will ever
/// wake them.
pub(crate) fn run(waiter: &impl Paced, calls: &[Call]) -> Vec<u64> {
    let clock = waiter.manual_clock();
    let mut released = vec![u64::MAX; calls.len()];
    let mut tasks: Vec<(usize, Task<'_, Result<(), TooManyPermits>>)> = Vec::new();
    let mut next = 0;
    loop {
        while next < calls.len() && calls[next].arrival <= clock.now() {
            tasks.push((next, Task::new(waiter.until_n(calls[next].permits))));
            next += 1;
        }
        let mut quiet = false;
        while !quiet {
            quiet = true;
            let mut i = 0;
            while i < tasks.len() {
                match tasks[i].1.poll_if_woken() {
                    Some(Poll::Ready(result)) => {
                        result.expect("permits within capacity");
                        released[tasks[i].0] = clock.now();
                        tasks.remove(i);
                        quiet = false;
                    }
                    Some(Poll::Pending) => {
                        quiet = false;
                        i += 1;
                    }
                    None => i += 1,
                }
            }
        }
        if next == calls.len() && tasks.is_empty() {
            return released;
        }
        let next_arrival = calls.get(next).map(|c| c.arrival);
        let until = [next_arrival, clock.next_deadline()]
            .into_iter()
            .flatten()
            .min()
            .expect("lost wake-up: calls wait and nothing will wake them");
        clock.advance_to(until);
    }
}

/// The reference for the ring: the earliest instant at or after `from` at
/// which `n` more permits keep every span `(t − P, t]` at `limit` or fewer,
/// given the earlier grants `(instant, permits)`.
pub(crate) fn window_earliest(
    grants: &[(u64, u64)],
    from: u64,
    n: u64,
    limit: u64,
    period: u64,
) -> u64 {
    let mut t = from;
    loop {
        let inside = || grants.iter().filter(move |(g, _)| g + period > t);
        let count: u64 = inside().map(|(_, k)| k).sum();
        if count + n <= limit {
            return t;
        }
        // The oldest grant in the window leaves it first.
        t = inside()
            .map(|(g, _)| g + period)
            .min()
            .expect("a full window holds grants");
    }
}

/// The ring's reference run: first come, first served, each call at the
/// earliest instant the window rule allows.
pub(crate) fn window_model(calls: &[Call], limit: u64, period: u64) -> Vec<u64> {
    let mut grants: Vec<(u64, u64)> = Vec::new();
    let mut previous = 0;
    for c in calls {
        let at = window_earliest(&grants, c.arrival.max(previous), c.permits, limit, period);
        grants.push((at, c.permits));
        previous = at;
    }
    grants.into_iter().map(|(at, _)| at).collect()
}

/// Panics unless every span `(t − P, t]` holds at most `limit` permits.
pub(crate) fn assert_window(grants: &[(u64, u64)], limit: u64, period: u64) {
    for &(t, _) in grants {
        let count: u64 = grants
            .iter()
            .filter(|(g, _)| *g <= t && g + period > t)
            .map(|(_, k)| k)
            .sum();
        assert!(count <= limit, "{count} permits in the span ending at {t}");
    }
}

/// The reference for GCRA: a token bucket that starts full, holds `burst`
/// tokens and refills `limit` per `period`, in exact integer units (a token
/// is `period` units; `limit` units refill per nanosecond).
pub(crate) struct BucketModel {
    limit: u128,
    period: u128,
    capacity: u128,
    level: u128,
    last: u64,
}

impl BucketModel {
    pub(crate) fn new(limit: u64, period: u64, burst: u64) -> Self {
        let capacity = u128::from(burst) * u128::from(period);
        BucketModel {
            limit: limit.into(),
            period: period.into(),
            capacity,
            level: capacity,
            last: 0,
        }
    }

    fn level_at(&self, t: u64) -> u128 {
        let refill = u128::from(t.saturating_sub(self.last)) * self.limit;
        (self.level + refill).min(self.capacity)
    }

    /// The earliest instant at or after `from` with `n` tokens.
    pub(crate) fn earliest(&self, from: u64, n: u64) -> u64 {
        let level = self.level_at(from);
        let need = u128::from(n) * self.period;
        if level >= need {
            return from;
        }
        let wait = (need - level).div_ceil(self.limit);
        from + u64::try_from(wait).expect("a wait within u64")
    }

    pub(crate) fn take(&mut self, at: u64, n: u64) {
        self.level = self.level_at(at) - u128::from(n) * self.period;
        self.last = at;
    }

    /// The reference run: first come, first served, each call at the
    /// earliest instant the bucket has its tokens.
    pub(crate) fn run(mut self, calls: &[Call]) -> Vec<u64> {
        let mut previous = 0;
        calls
            .iter()
            .map(|c| {
                let at = self.earliest(c.arrival.max(previous), c.permits);
                self.take(at, c.permits);
                previous = at;
                at
            })
            .collect()
    }
}

/// Pairs release instants with their calls' permits.
pub(crate) fn grants(released: &[u64], calls: &[Call]) -> Vec<(u64, u64)> {
    released
        .iter()
        .zip(calls)
        .map(|(&at, c)| (at, c.permits))
        .collect()
}

/// Spins (yielding, never sleeping) until `done` holds; panics if it never
/// does, rather than hang.
pub(crate) fn spin_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..50_000_000u64 {
        if done() {
            return;
        }
        std::thread::yield_now();
    }
    panic!("gave up waiting until {what}");
}
