//! Random limits and traces: small `N`, periods of a few ms to a few s,
//! non-decreasing times (ms- or ns-granular), costs from 0 up to and
//! occasionally above capacity.

use proptest::prelude::*;
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::Rate;

/// Time granularity of a trace: every instant and period is a multiple.
pub(crate) const MS: u64 = NANOS_PER_MS;
/// Nanosecond-granular traces.
pub(crate) const NS: u64 = 1;

/// Around 2020–2027 in ns since the epoch, to exercise large instants.
const EPOCH_NOW: u64 = 1_600_000_000_000_000_000;

/// A limit and where its trace starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    pub(crate) n: u64,
    pub(crate) p: u64,
    pub(crate) burst: u64,
    pub(crate) step: u64,
    pub(crate) start: u64,
}

impl Setup {
    pub(crate) fn rate(&self) -> Rate {
        Rate::from_nanos(self.n, self.p).expect("valid rate")
    }
}

/// One request: `dt` after the previous one, of `cost`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event {
    pub(crate) dt: u64,
    pub(crate) cost: u64,
}

/// A step in a trace that mixes checks and reservations.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Check(Event),
    Reserve(Event, Option<u64>),
}

/// A step in a trace that mixes checks and forced records.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RecordOp {
    Check(Event),
    /// `Algorithm::record`: the cost may exceed capacity (merged usage).
    Record(Event),
}

/// A step in a concurrency trace.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseOp {
    Check(Event),
    /// Releases the lease handed out `n`-th (modulo the count so far).
    Release(usize),
}

fn divisors(units: u64) -> Vec<u64> {
    (1..=units)
        .take_while(|d| d * d <= units)
        .filter(|d| units.is_multiple_of(*d))
        .flat_map(|d| [d, units / d])
        .collect()
}

fn period(gran: u64) -> BoxedStrategy<u64> {
    if gran == MS {
        prop_oneof![1..=20u64, 21..=1_000u64, 1_001..=5_000u64]
            .prop_map(|ms| ms * MS)
            .boxed()
    } else {
        prop_oneof![MS..=20 * MS, 20 * MS..=5_000 * MS].boxed()
    }
}

/// A step of at least 1 ms and at most `p`, in `gran` units: a divisor of the
/// period, or anything.
fn step(p: u64, gran: u64) -> BoxedStrategy<u64> {
    let units = p / gran;
    let min = MS / gran;
    let fitting: Vec<u64> = divisors(units).into_iter().filter(|&d| d >= min).collect();
    prop_oneof![
        prop::sample::select(fitting).prop_map(move |d| d * gran),
        (min..=units).prop_map(move |d| d * gran),
    ]
    .boxed()
}

pub(crate) fn setup(gran: u64) -> impl Strategy<Value = Setup> {
    let n = prop_oneof![3 => 1..=5u64, 1 => 6..=20u64];
    (n, period(gran)).prop_flat_map(move |(n, p)| {
        let start = prop_oneof![
            Just(0u64),
            0..=20 * p,
            EPOCH_NOW..=EPOCH_NOW + 1_000_000 * p,
        ]
        .prop_map(move |t| t / gran * gran);
        (1..=2 * n + 2, step(p, gran), start).prop_map(move |(burst, step, start)| Setup {
            n,
            p,
            burst,
            step,
            start,
        })
    })
}

/// Gaps between requests: often none, often a fraction of the emission
/// interval, sometimes up to a few periods.
fn gap(s: &Setup, gran: u64) -> BoxedStrategy<u64> {
    let p = s.p / gran;
    let interval = p / s.n;
    prop_oneof![
        2 => Just(0u64),
        3 => 0..=interval,
        2 => 0..=p,
        1 => 0..=3 * p,
    ]
    .prop_map(move |g| g * gran)
    .boxed()
}

fn cost(cap: u64) -> BoxedStrategy<u64> {
    prop_oneof![
        6 => Just(1u64),
        3 => 0..=cap,
        1 => Just(0u64),
        1 => cap + 1..=cap + 2,
    ]
    .boxed()
}

fn event(s: &Setup, gran: u64, cap: u64) -> impl Strategy<Value = Event> {
    (gap(s, gran), cost(cap)).prop_map(|(dt, cost)| Event { dt, cost })
}

/// Whether the algorithm's capacity is `burst` (buckets) or `N` (windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Capacity {
    Burst,
    Limit,
}

fn cap_of(s: &Setup, capacity: Capacity) -> u64 {
    match capacity {
        Capacity::Burst => s.burst,
        Capacity::Limit => s.n,
    }
}

/// A limit and a trace of up to 60 requests.
pub(crate) fn trace(gran: u64, capacity: Capacity) -> impl Strategy<Value = (Setup, Vec<Event>)> {
    setup(gran).prop_flat_map(move |s| {
        let events = prop::collection::vec(event(&s, gran, cap_of(&s, capacity)), 1..60);
        (Just(s), events)
    })
}

/// A limit and a trace of up to 60 checks and reservations, some of the
/// latter with a bound on the wait.
pub(crate) fn reservations(
    gran: u64,
    capacity: Capacity,
) -> impl Strategy<Value = (Setup, Vec<Op>)> {
    setup(gran).prop_flat_map(move |s| {
        let max_wait = prop_oneof![3 => Just(None), 1 => (0..=2 * s.p).prop_map(Some)];
        let op = prop_oneof![
            event(&s, gran, cap_of(&s, capacity)).prop_map(Op::Check),
            (event(&s, gran, cap_of(&s, capacity)), max_wait).prop_map(|(e, w)| Op::Reserve(e, w)),
        ];
        (Just(s), prop::collection::vec(op, 1..60))
    })
}

/// A concurrency limit (`N`, lease time) and a trace of checks and releases.
pub(crate) fn leases(gran: u64) -> impl Strategy<Value = (Setup, u64, Vec<LeaseOp>)> {
    setup(gran).prop_flat_map(move |s| {
        let ttl = (MS / gran..=3 * s.p / gran).prop_map(move |t| t * gran);
        let op = prop_oneof![
            3 => event(&s, gran, s.n).prop_map(LeaseOp::Check),
            1 => any::<usize>().prop_map(LeaseOp::Release),
        ];
        (Just(s), ttl, prop::collection::vec(op, 1..60))
    })
}

/// A limit and a trace of up to 60 checks and forced records; a record's
/// cost ranges up to three times the capacity, so debts both small and
/// deep are common.
pub(crate) fn records(
    gran: u64,
    capacity: Capacity,
) -> impl Strategy<Value = (Setup, Vec<RecordOp>)> {
    setup(gran).prop_flat_map(move |s| {
        let cap = cap_of(&s, capacity);
        let recorded = prop_oneof![
            2 => Just(1u64),
            2 => 0..=cap,
            1 => cap..=3 * cap + 2,
        ];
        let op = prop_oneof![
            3 => event(&s, gran, cap).prop_map(RecordOp::Check),
            1 => (gap(&s, gran), recorded).prop_map(|(dt, cost)| RecordOp::Record(Event { dt, cost })),
        ];
        (Just(s), prop::collection::vec(op, 1..60))
    })
}
