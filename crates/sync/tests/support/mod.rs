//! A fake shared store for the sync mode's tests: version-1 values in a
//! map, usage recorded through the same core code and codec the Redis
//! module uses, a log of every record in the order it was applied, and a
//! switch that makes it unreachable.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tollgate_core::algorithm::Algorithm;
use tollgate_core::time::ManualClock;
use tollgate_core::{Limit, StoreError};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_state::{decode_value, format_of, AnyFormat, Format};
use tollgate_sync::{Exchange, SyncConfig, SyncStore, Transport, Usage, Value};

/// One record the fake applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) limit: Limit,
    pub(crate) key: Vec<u8>,
    pub(crate) usage: Usage,
}

/// Each (limit, key)'s version-1 value.
type Values = HashMap<(Limit, Vec<u8>), Vec<u8>>;

#[derive(Default)]
pub(crate) struct Remote {
    values: Mutex<Values>,
    pub(crate) log: Mutex<Vec<Recorded>>,
    pub(crate) down: AtomicBool,
    pub(crate) exchanges: AtomicUsize,
    /// Run by the next exchange before it answers: what happens while a
    /// batch is on its way.
    pub(crate) during: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

/// A handle on a shared [`Remote`] (one per instance).
#[derive(Clone)]
pub(crate) struct Fake(pub Arc<Remote>);

fn apply<F: Format>(format: &F, value: Option<&[u8]>, usage: &[Usage]) -> Vec<u8> {
    let mut state = decode_value(format, value).expect("a value the fake wrote");
    for u in usage {
        format.record(&mut state, u.at, u.cost);
    }
    let mut out = Vec::new();
    format.encode(&state, &mut out);
    out
}

/// `limit`'s value after recording `usage` on `value`.
pub(crate) fn applied(limit: &Limit, value: Option<&[u8]>, usage: &[Usage]) -> Vec<u8> {
    match format_of(limit).unwrap() {
        AnyFormat::Gcra(f) => apply(&f, value, usage),
        AnyFormat::TokenNarrow(f) => apply(&f, value, usage),
        AnyFormat::TokenWide(f) => apply(&f, value, usage),
        AnyFormat::Leaky(f) => apply(&f, value, usage),
        AnyFormat::Fixed(f) => apply(&f, value, usage),
        AnyFormat::Counter(f) => apply(&f, value, usage),
        AnyFormat::Log(f) => apply(&f, value, usage),
        AnyFormat::Steps(f) => apply(&f, value, usage),
        AnyFormat::Leases(_) => panic!("concurrency is never synced"),
    }
}

fn peek_of<F: Format>(format: &F, value: Option<&[u8]>, now: u64) -> u64 {
    let state = decode_value(format, value).unwrap();
    format.algorithm().peek(&state, now).remaining
}

/// What a unit request would find remaining in `value` at `now`.
pub(crate) fn remaining(limit: &Limit, value: Option<&[u8]>, now: u64) -> u64 {
    match format_of(limit).unwrap() {
        AnyFormat::Gcra(f) => peek_of(&f, value, now),
        AnyFormat::TokenNarrow(f) => peek_of(&f, value, now),
        AnyFormat::TokenWide(f) => peek_of(&f, value, now),
        AnyFormat::Leaky(f) => peek_of(&f, value, now),
        AnyFormat::Fixed(f) => peek_of(&f, value, now),
        AnyFormat::Counter(f) => peek_of(&f, value, now),
        AnyFormat::Log(f) => peek_of(&f, value, now),
        AnyFormat::Steps(f) => peek_of(&f, value, now),
        AnyFormat::Leases(_) => panic!("concurrency is never synced"),
    }
}

impl Remote {
    pub(crate) fn value(&self, limit: &Limit, key: &[u8]) -> Option<Vec<u8>> {
        self.values.lock().get(&(*limit, key.to_vec())).cloned()
    }

    pub(crate) fn recorded_cost(&self) -> u64 {
        self.log.lock().iter().map(|r| r.usage.cost).sum()
    }
}

impl Transport for Fake {
    fn exchange(
        &self,
        batch: &[Exchange<'_>],
    ) -> impl Future<Output = Result<Vec<Result<Value, StoreError>>, StoreError>> + Send {
        let during: Vec<_> = std::mem::take(&mut *self.0.during.lock());
        for run in during {
            run();
        }
        let result = if self.0.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("the fake is down".into()))
        } else {
            self.0.exchanges.fetch_add(1, Ordering::SeqCst);
            let mut values = self.0.values.lock();
            let mut log = self.0.log.lock();
            Ok(batch
                .iter()
                .map(|exchange| {
                    let id = (*exchange.limit, exchange.key.to_vec());
                    if !exchange.usage.is_empty() {
                        let value = applied(
                            exchange.limit,
                            values.get(&id).map(|v| v.as_slice()),
                            exchange.usage,
                        );
                        values.insert(id.clone(), value);
                        log.extend(exchange.usage.iter().map(|&usage| Recorded {
                            limit: *exchange.limit,
                            key: exchange.key.to_vec(),
                            usage,
                        }));
                    }
                    Ok(values.get(&id).cloned())
                })
                .collect())
        };
        std::future::ready(result)
    }
}

pub(crate) type Instance = SyncStore<Fake, LocalStore>;

/// An instance on `remote` with its own clock and exact store.
pub(crate) fn instance(
    remote: &Arc<Remote>,
    clock: &Arc<ManualClock>,
    config: SyncConfig,
) -> Instance {
    let exact = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock.clone());
    SyncStore::new(Fake(Arc::clone(remote)), exact, clock.clone(), config)
}

/// A plain memory store on `clock`: the reference.
pub(crate) fn memory(clock: &Arc<ManualClock>) -> LocalStore {
    LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock.clone())
}

/// Runs a future that never waits on anything (the fake answers at once).
pub(crate) fn now<F: Future>(future: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => panic!("the fake never waits"),
    }
}
