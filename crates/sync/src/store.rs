//! [`SyncStore`]: the core's [`Store`] over local copies of the shared
//! store's states (see the crate docs for the protocol).
//!
//! One lock guards every copy, held for a decision's evaluation and commit
//! (or a batch's bookkeeping), never across an `.await`: a multi-limit
//! check is all-or-nothing under it, as in the memory store.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tollgate_core::algorithm::{Algorithm, Settled};
use tollgate_core::time::Clock;
use tollgate_core::{
    AlgorithmName, Decision, Limit, LimitError, LimitKey, Moment, MultiReservation, Store,
    StoreError, StoreStatus, SyncMode,
};
use tollgate_state::{format_of, AnyFormat, Format};

use crate::table::{AnyTable, Outgoing, Sent, Table};
use crate::transport::{Exchange, Transport};

/// How many keys of a batch's answer are merged under one hold of the
/// lock.
const MERGE_SLICE: usize = 512;

/// How the async sync mode runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncConfig {
    /// How often the touched keys' usage goes to the shared store (default
    /// 100 ms).
    pub interval: Duration,
    /// The most keys (limit and key pairs) held locally (default
    /// 1,000,000); a request for a new key past it is decided by the
    /// shared store, exactly, until copies expire.
    pub max_keys: usize,
    /// The most usage entries a key keeps unsent (default 1,024); past it,
    /// usage is merged into the newest entry at the later instant.
    pub max_pending: usize,
    /// Unsent usage of the buckets and the sliding log within one span of
    /// this length (aligned to the epoch) goes as one record at the later
    /// instant (default 10 ms; zero: only equal instants): it is then held
    /// up to this much longer, never less. The windows' usage coalesces
    /// per window (or step) whatever this says, exactly.
    pub coalesce: Duration,
    /// How many batches in a row still read a copy nobody asked about
    /// (default 10: a second at the default interval), so that it stays
    /// as fresh as a used one and its next use needs no round trip. After
    /// them the copy is stale: read again before its next use (decided
    /// on as it is only when that read fails), dropped once its state is
    /// as good as fresh. Zero: only the keys asked about since the last
    /// batch are read.
    pub refresh_idle: u32,
    /// The mode of a limit that does not say ([`Limit::sync`]): the
    /// process's `--sync` (default `async`). Under `exact`, only limits
    /// that say `sync: async` are decided locally, and the store's clock
    /// and status are the shared store's.
    pub mode: SyncMode,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            mode: SyncMode::Async,
            interval: Duration::from_millis(100),
            max_keys: 1_000_000,
            max_pending: 1_024,
            coalesce: Duration::from_millis(10),
            refresh_idle: 10,
        }
    }
}

/// What the sync mode has done so far (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// Batches that reached the shared store.
    pub batches: u64,
    /// Batches that did not (an outage); their usage went with a later one.
    pub failed_batches: u64,
    /// Keys in the last batch sent.
    pub last_batch_keys: u64,
    /// Keys sent over all batches that reached the shared store.
    pub keys_sent: u64,
    /// Keys whose exchange failed on its own (a state that could not be
    /// read, an engine that cannot record it); their usage stays unsent.
    pub key_errors: u64,
    /// Decisions taken locally while the shared store was unreachable.
    pub degraded_decisions: u64,
    /// The oldest the global state behind the copies has been so far: the
    /// longest time from a batch that reached the shared store leaving to
    /// the next one coming back (see [`SyncStore::max_lag`]).
    pub max_lag: Duration,
    /// Keys held locally now.
    pub keys: usize,
    /// Usage entries not yet acknowledged by the shared store.
    pub unsent: usize,
}

/// Decides from local copies of a shared store's states and syncs them in
/// the background: `transport` carries the batches, `exact` decides what
/// must stay exact (see the crate docs). Cheap to clone.
pub struct SyncStore<T, E> {
    inner: Arc<Inner<T, E>>,
}

impl<T, E> Clone for SyncStore<T, E> {
    fn clone(&self) -> Self {
        SyncStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<T, E> {
    transport: T,
    exact: E,
    clock: Arc<dyn Clock>,
    config: SyncConfig,
    local: Mutex<Local>,
    /// One batch at a time, with the buffers every batch reuses.
    syncing: tokio::sync::Mutex<Outbox>,
    /// The last exchange failed: decisions are degraded until one passes.
    outage: AtomicBool,
    /// When (clock ns) the last batch that reached the shared store left,
    /// or when the store was made.
    synced_at: AtomicU64,
    /// The longest lag a batch ended (ns): see [`SyncStore::max_lag`].
    max_lag: AtomicU64,
    batches: AtomicU64,
    failed_batches: AtomicU64,
    last_batch_keys: AtomicU64,
    keys_sent: AtomicU64,
    key_errors: AtomicU64,
    degraded_decisions: AtomicU64,
}

/// A batch's keys, kept from batch to batch so that their buffers are
/// reused.
#[derive(Default)]
struct Outbox {
    /// Each limit with keys in the batch and where its keys end in
    /// `out.keys` (they start where the limit before ends).
    limits: Vec<(Limit, usize)>,
    out: Outgoing,
}

impl Outbox {
    /// Each limit's keys (with where their usage ends) and where its first
    /// key's usage starts.
    fn runs(&self) -> impl Iterator<Item = (&Limit, &[Sent], usize)> {
        let mut start = 0;
        self.limits.iter().map(move |(limit, end)| {
            let keys = &self.out.keys[start..*end];
            let from = start
                .checked_sub(1)
                .map_or(0, |before| self.out.keys[before].1);
            start = *end;
            (limit, keys, from)
        })
    }
}

#[derive(Default)]
struct Local {
    tables: HashMap<Limit, Box<dyn AnyTable>, foldhash::fast::RandomState>,
}

impl Local {
    fn keys(&self) -> usize {
        self.tables.values().map(|t| t.len()).sum()
    }

    /// `limit`'s table, made on first use (errors when the limit is
    /// invalid).
    fn table(
        &mut self,
        limit: &Limit,
        config: &SyncConfig,
    ) -> Result<&mut Box<dyn AnyTable>, StoreError> {
        // One hash of the limit, whether its table is there or not.
        Ok(match self.tables.entry(*limit) {
            std::collections::hash_map::Entry::Occupied(table) => table.into_mut(),
            std::collections::hash_map::Entry::Vacant(place) => {
                place.insert(new_table(limit, config)?)
            }
        })
    }
}

/// Whether a limit's usage can be merged: not `concurrency`, no ban.
pub(crate) fn mergeable(limit: &Limit) -> bool {
    limit.algorithm != AlgorithmName::Concurrency && limit.ban.is_none()
}

fn new_table(limit: &Limit, config: &SyncConfig) -> Result<Box<dyn AnyTable>, StoreError> {
    limit.build()?;
    let format = format_of(limit).map_err(|e| {
        StoreError::Unavailable(format!("tollgate: no state format for {limit}: {e}"))
    })?;
    let period = limit.rate.period_nanos();
    let max = config.max_pending;
    fn boxed<F: Format + Copy + Send + 'static>(f: F, quantum: u64, max: usize) -> Box<dyn AnyTable>
    where
        <F::Algorithm as Algorithm>::State: Send,
    {
        Box::new(Table::new(f, quantum, max))
    }
    // Usage in one window (or step) counts the same at any instant in it:
    // it coalesces exactly. Elsewhere within `coalesce`.
    let span = u64::try_from(config.coalesce.as_nanos()).unwrap_or(u64::MAX);
    Ok(match format {
        AnyFormat::Fixed(f) => boxed(f, period, max),
        AnyFormat::Counter(f) => boxed(f, period, max),
        AnyFormat::Steps(f) => {
            let step = u64::try_from(f.window.step().as_nanos()).unwrap_or(u64::MAX);
            boxed(f, step, max)
        }
        AnyFormat::Gcra(f) => boxed(f, span, max),
        AnyFormat::TokenNarrow(f) => boxed(f, span, max),
        AnyFormat::TokenWide(f) => boxed(f, span, max),
        AnyFormat::Leaky(f) => boxed(f, span, max),
        AnyFormat::Log(f) => boxed(f, span, max),
        AnyFormat::Leases(_) => {
            return Err(LimitError::Option {
                option: "sync",
                algorithm: AlgorithmName::Concurrency,
            }
            .into())
        }
    })
}

impl<T: Transport, E: Store> SyncStore<T, E> {
    /// Local copies synced through `transport`, `exact` deciding what stays
    /// exact, `clock` telling the time of local decisions.
    pub fn new(transport: T, exact: E, clock: Arc<dyn Clock>, config: SyncConfig) -> Self {
        let now = clock.now();
        SyncStore {
            inner: Arc::new(Inner {
                transport,
                exact,
                clock,
                config,
                local: Mutex::new(Local::default()),
                syncing: tokio::sync::Mutex::new(Outbox::default()),
                outage: AtomicBool::new(false),
                synced_at: AtomicU64::new(now),
                max_lag: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                failed_batches: AtomicU64::new(0),
                last_batch_keys: AtomicU64::new(0),
                keys_sent: AtomicU64::new(0),
                key_errors: AtomicU64::new(0),
                degraded_decisions: AtomicU64::new(0),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> SyncConfig {
        self.inner.config
    }

    /// The store deciding what stays exact.
    pub fn exact(&self) -> &E {
        &self.inner.exact
    }

    /// What the mode has done so far.
    pub fn stats(&self) -> SyncStats {
        let (keys, unsent) = {
            let local = self.inner.local.lock();
            (
                local.keys(),
                local.tables.values().map(|t| t.unsent()).sum(),
            )
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SyncStats {
            batches: load(&self.inner.batches),
            failed_batches: load(&self.inner.failed_batches),
            last_batch_keys: load(&self.inner.last_batch_keys),
            keys_sent: load(&self.inner.keys_sent),
            key_errors: load(&self.inner.key_errors),
            degraded_decisions: load(&self.inner.degraded_decisions),
            max_lag: self.max_lag(),
            keys,
            unsent,
        }
    }

    /// How old the global state behind the local copies is: the time since
    /// the last batch that reached the shared store left (since the store
    /// was made, before any).
    pub fn lag(&self) -> Duration {
        let now = self.inner.clock.now();
        Duration::from_nanos(now.saturating_sub(self.inner.synced_at.load(Ordering::Relaxed)))
    }

    /// The oldest the global state behind the copies has been so far: at
    /// each batch that reaches the shared store (or has nothing to send),
    /// the time since the previous such batch left, the lag just before
    /// this one brought the newer state back; the largest of them: the
    /// `L` of the bound in docs/semantics.md. (Every batch reads the copies
    /// asked about in its last [`SyncConfig::refresh_idle`] batches; an
    /// older copy is read again before it decides.)
    pub fn max_lag(&self) -> Duration {
        Duration::from_nanos(self.inner.max_lag.load(Ordering::Relaxed))
    }

    /// A batch that left at `started` came back (or had nothing to send)
    /// at `now`: the lag it ended counts toward [`max_lag`](Self::max_lag),
    /// and the global state is now as of `started`.
    fn synced(&self, started: u64, now: u64) {
        let before = self.inner.synced_at.swap(started, Ordering::Relaxed);
        self.inner
            .max_lag
            .fetch_max(now.saturating_sub(before), Ordering::Relaxed);
    }

    /// Whether requests against `limit` are decided locally: its own
    /// [`sync`](Limit::sync) mode, else the configured one, and only when
    /// its usage can be merged.
    pub fn is_async(&self, limit: &Limit) -> bool {
        limit.sync.unwrap_or(self.inner.config.mode) == SyncMode::Async && mergeable(limit)
    }

    /// Runs [`sync`](Self::sync) every interval until the task is aborted.
    /// Must be called inside a tokio runtime.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(store.inner.config.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                if let Err(error) = store.sync().await {
                    tracing::warn!(%error, "sync batch did not reach the shared store; deciding locally");
                }
            }
        })
    }

    /// One batch: the pending usage of every key asked about in the last
    /// [`SyncConfig::refresh_idle`] batches to the shared store, its
    /// global state back into the copy. Returns how many keys went; an
    /// error when the batch did not get through (its usage goes with the
    /// next one). Stale copies as good as fresh with nothing to send are
    /// dropped first.
    pub async fn sync(&self) -> Result<usize, StoreError> {
        let mut outbox = self.inner.syncing.lock().await;
        let outbox = &mut *outbox;
        let result = self.sync_with(outbox).await;
        // The keys' bytes are not held until the next batch.
        outbox.limits.clear();
        outbox.out.clear();
        result
    }

    /// [`sync`](Self::sync) in `outbox`'s buffers.
    async fn sync_with(&self, outbox: &mut Outbox) -> Result<usize, StoreError> {
        let started = self.inner.clock.now();
        outbox.limits.clear();
        outbox.out.clear();
        // Per limit (each table looked up once, not per key), its keys
        // and their usage.
        {
            let mut local = self.inner.local.lock();
            for (limit, table) in &mut local.tables {
                table.sweep(started);
                table.send(self.inner.config.refresh_idle, &mut outbox.out);
                let end = outbox.out.keys.len();
                if end > outbox.limits.last().map_or(0, |&(_, end)| end) {
                    outbox.limits.push((*limit, end));
                }
            }
            local.tables.retain(|_, t| t.len() > 0);
        }
        let count = outbox.out.keys.len();
        self.inner
            .last_batch_keys
            .store(count as u64, Ordering::Relaxed);
        if count == 0 {
            self.synced(started, started);
            return Ok(0);
        }
        let outbox = &*outbox;
        let mut batch: Vec<Exchange<'_>> = Vec::with_capacity(count);
        for (limit, keys, mut from) in outbox.runs() {
            for (key, end) in keys {
                batch.push(Exchange {
                    limit,
                    key,
                    usage: &outbox.out.usage[from..*end],
                });
                from = *end;
            }
        }
        let result = match self.inner.transport.exchange(&batch).await {
            Ok(values) if values.len() == batch.len() => Ok(values),
            Ok(values) => Err(StoreError::Unavailable(format!(
                "tollgate: {} values for a batch of {} keys",
                values.len(),
                batch.len()
            ))),
            Err(error) => Err(error),
        };
        drop(batch);
        match result {
            Ok(values) => {
                // In slices, each under the lock once, so that decisions
                // waiting for it are not held up by a whole large batch.
                let mut values = values.into_iter();
                let mut in_slice = 0;
                for (limit, keys, _) in outbox.runs() {
                    let mut rest = keys;
                    while !rest.is_empty() {
                        if in_slice == MERGE_SLICE {
                            tokio::task::yield_now().await;
                            in_slice = 0;
                        }
                        let (slice, after) = rest.split_at(rest.len().min(MERGE_SLICE - in_slice));
                        rest = after;
                        in_slice += slice.len();
                        let mut local = self.inner.local.lock();
                        let Some(table) = local.tables.get_mut(limit) else {
                            values.by_ref().take(slice.len()).for_each(drop);
                            continue;
                        };
                        for ((key, _), value) in slice.iter().zip(values.by_ref()) {
                            let merged = match value {
                                Ok(value) => table
                                    .merge(key, value.as_deref())
                                    .map_err(|e| e.to_string()),
                                Err(error) => {
                                    table.restore(key);
                                    Err(error.to_string())
                                }
                            };
                            if let Err(error) = merged {
                                self.inner.key_errors.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(%error, limit = %limit, "a key's usage was not synced; kept to send again");
                            }
                        }
                    }
                }
                self.inner.outage.store(false, Ordering::Relaxed);
                self.synced(started, self.inner.clock.now());
                self.inner.batches.fetch_add(1, Ordering::Relaxed);
                self.inner
                    .keys_sent
                    .fetch_add(count as u64, Ordering::Relaxed);
                Ok(count)
            }
            Err(error) => {
                let mut local = self.inner.local.lock();
                for (limit, keys, _) in outbox.runs() {
                    if let Some(table) = local.tables.get_mut(limit) {
                        for (key, _) in keys {
                            table.restore(key);
                        }
                    }
                }
                self.inner.outage.store(true, Ordering::Relaxed);
                self.inner.failed_batches.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    fn now(&self, at: Moment) -> u64 {
        match at {
            Moment::Now => self.inner.clock.now(),
            Moment::At(ns) => ns,
        }
    }

    /// Makes sure every (limit, key) of `requests` has a live local copy,
    /// reading the missing and stale ones from the shared store in one
    /// exchange (when it cannot be reached: a stale copy as it is, else a
    /// fresh one, degraded). `false` when the
    /// copies would pass [`SyncConfig::max_keys`]: the request goes exact.
    async fn load(&self, requests: &[LimitKey<'_>], now: u64) -> Result<bool, StoreError> {
        let missing: Vec<(Limit, Vec<u8>)> = {
            let mut local = self.inner.local.lock();
            let mut missing: Vec<(Limit, Vec<u8>)> = Vec::new();
            for request in requests {
                let table = local.table(request.limit, &self.inner.config)?;
                if table.needs_read(request.key)
                    && !missing
                        .iter()
                        .any(|(l, k)| l == request.limit && k == request.key)
                {
                    missing.push((*request.limit, request.key.to_vec()));
                }
            }
            if missing.is_empty() {
                return Ok(true);
            }
            if local.keys() + missing.len() > self.inner.config.max_keys {
                for table in local.tables.values_mut() {
                    table.sweep(now);
                }
                if local.keys() + missing.len() > self.inner.config.max_keys {
                    return Ok(false);
                }
            }
            missing
        };
        let batch: Vec<Exchange<'_>> = missing
            .iter()
            .map(|(limit, key)| Exchange {
                limit,
                key,
                usage: &[],
            })
            .collect();
        let values = self.inner.transport.exchange(&batch).await;
        let mut local = self.inner.local.lock();
        let mut failure = None;
        for (i, (limit, key)) in missing.iter().enumerate() {
            let value = match &values {
                Ok(values) => values.get(i).cloned().unwrap_or(Ok(None)),
                Err(error) => Err(error.clone()),
            };
            let table = local.table(limit, &self.inner.config)?;
            match value {
                Ok(value) => {
                    if let Err(error) = table.install(key, value.as_deref()) {
                        failure = Some(StoreError::Unavailable(format!(
                            "tollgate: the state of {limit} in the shared store: {error}"
                        )));
                    }
                }
                Err(StoreError::Limit(error)) => failure = Some(StoreError::Limit(error)),
                Err(_) => {
                    // Unreachable: decide from the stale copy, or from a
                    // fresh one; the next batch that gets through brings
                    // the global state.
                    self.inner.outage.store(true, Ordering::Relaxed);
                    if !table.has(key) {
                        table.install(key, None).ok();
                    }
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(true),
        }
    }

    fn degraded(&self) -> bool {
        let degraded = self.inner.outage.load(Ordering::Relaxed);
        if degraded {
            self.inner
                .degraded_decisions
                .fetch_add(1, Ordering::Relaxed);
        }
        degraded
    }

    /// The local decision for one key of one limit whose copy is live: one
    /// lock, one look-up of the limit and of the key (the common request).
    /// `None` when the key must be read first.
    fn decide_one(
        &self,
        request: &LimitKey<'_>,
        now: u64,
        cost: u64,
    ) -> Result<Option<Decision>, StoreError> {
        let decision = {
            let mut local = self.inner.local.lock();
            let table = local.table(request.limit, &self.inner.config)?;
            let capacity = table.capacity();
            if cost > capacity {
                return Err(LimitError::CostTooLarge { cost, capacity }.into());
            }
            table.decide(request.key, now, cost)
        };
        Ok(decision.map(|mut decision| {
            decision.degraded = self.degraded();
            decision.asynchronous = true;
            decision
        }))
    }

    /// The local decision for `requests` at `now`, all-or-nothing.
    fn decide(
        &self,
        requests: &[LimitKey<'_>],
        now: u64,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        // The same key of the same limit twice is one cell, summed cost.
        let mut cells: Vec<(usize, u64)> = Vec::with_capacity(requests.len());
        let mut of_request = Vec::with_capacity(requests.len());
        for (i, request) in requests.iter().enumerate() {
            match cells.iter().position(|&(j, _)| {
                requests[j].limit == request.limit && requests[j].key == request.key
            }) {
                Some(c) => {
                    cells[c].1 = cells[c].1.saturating_add(cost);
                    of_request.push(c);
                }
                None => {
                    of_request.push(cells.len());
                    cells.push((i, cost));
                }
            }
        }
        let degraded = self.degraded();
        let mut local = self.inner.local.lock();
        let mut decisions = Vec::with_capacity(cells.len());
        for &(i, cell_cost) in &cells {
            let request = &requests[i];
            let table = local.table(request.limit, &self.inner.config)?;
            let capacity = table.capacity();
            if cell_cost > capacity {
                return Err(LimitError::CostTooLarge {
                    cost: cell_cost,
                    capacity,
                }
                .into());
            }
            let mut decision = table.evaluate(request.key, now, cell_cost);
            decision.degraded = degraded;
            decision.asynchronous = true;
            decisions.push(decision);
        }
        if cost > 0 && decisions.iter().all(|d| d.allowed) {
            for &(i, cell_cost) in &cells {
                let request = &requests[i];
                local
                    .table(request.limit, &self.inner.config)?
                    .commit(request.key, now, cell_cost);
            }
        }
        Ok(of_request.iter().map(|&c| decisions[c]).collect())
    }
}

impl<T: Transport, E: Store> Store for SyncStore<T, E> {
    async fn check(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        if !requests.iter().all(|r| self.is_async(r.limit)) {
            return self.inner.exact.check(requests, at, cost).await;
        }
        let now = self.now(at);
        if let [request] = requests {
            if let Some(decision) = self.decide_one(request, now, cost)? {
                return Ok(vec![decision]);
            }
        }
        if !self.load(requests, now).await? {
            return self.inner.exact.check(requests, at, cost).await;
        }
        self.decide(requests, now, cost)
    }

    /// One limit: decided on its live copy without a list of decisions or
    /// [`check`](Store::check)'s larger future (the common request); a key
    /// to read first, or a limit that stays exact, as `check` does it.
    async fn check_one(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        if !self.is_async(request.limit) {
            return Box::pin(self.inner.exact.check_one(request, at, cost)).await;
        }
        if let Some(decision) = self.decide_one(&request, self.now(at), cost)? {
            return Ok(decision);
        }
        let decisions = Box::pin(self.check(&[request], at, cost)).await?;
        Ok(decisions.first().copied().unwrap_or_default())
    }

    /// Reservations book time slots ahead in the shared store: exact.
    fn reserve(
        &self,
        requests: &[LimitKey<'_>],
        at: Moment,
        cost: u64,
        max_wait: Option<Duration>,
    ) -> impl Future<Output = Result<MultiReservation, StoreError>> + Send {
        self.inner.exact.reserve(requests, at, cost, max_wait)
    }

    async fn next_available(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        if !self.is_async(request.limit) {
            return self.inner.exact.next_available(request, at, cost).await;
        }
        let now = self.now(at);
        if !self.load(&[request], now).await? {
            return self.inner.exact.next_available(request, at, cost).await;
        }
        let mut local = self.inner.local.lock();
        let table = local.table(request.limit, &self.inner.config)?;
        if cost > table.capacity() {
            return Err(LimitError::CostTooLarge {
                cost,
                capacity: table.capacity(),
            }
            .into());
        }
        if cost == 0 {
            return Ok(now);
        }
        Ok(table.next_available(request.key, now, cost))
    }

    async fn record(
        &self,
        request: LimitKey<'_>,
        at: Moment,
        cost: u64,
    ) -> Result<u64, StoreError> {
        if !self.is_async(request.limit) {
            return self.inner.exact.record(request, at, cost).await;
        }
        let now = self.now(at);
        if !self.load(&[request], now).await? {
            return self.inner.exact.record(request, at, cost).await;
        }
        let mut local = self.inner.local.lock();
        let table = local.table(request.limit, &self.inner.config)?;
        Ok(table.record(request.key, now, cost))
    }

    /// Settles in the shared store, exactly, whatever the limit's mode:
    /// the charge or the refund is one atomic step on the global state,
    /// which a limit decided locally takes back with the next batch. An
    /// estimate admitted here and not sent yet is then counted after its
    /// settle: a charge adds up alike; a refund finds the global state
    /// without it and gives back at most what that state can take (a full
    /// bucket, an empty window, a log without the request's mark: then
    /// `refund_dropped`), so it may be lost but never creates quota.
    fn settle(
        &self,
        request: LimitKey<'_>,
        admitted_at: u64,
        at: Moment,
        estimate: u64,
        actual: u64,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        self.inner
            .exact
            .settle(request, admitted_at, at, estimate, actual)
    }

    fn settles(&self) -> bool {
        self.inner.exact.settles()
    }

    fn release(
        &self,
        request: LimitKey<'_>,
        lease: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.exact.release(request, lease)
    }

    /// Resets the key in the shared store and drops its local copies with
    /// their unsent usage.
    async fn reset(&self, key: &[u8]) -> Result<usize, StoreError> {
        let held = self.inner.exact.reset(key).await?;
        let mut local = self.inner.local.lock();
        let mut dropped = 0;
        for table in local.tables.values_mut() {
            dropped += usize::from(table.forget(key));
        }
        Ok(held.max(dropped))
    }

    /// The local clock, which decisions here are taken on; the shared
    /// store's when limits are exact unless they say otherwise.
    async fn now(&self) -> Result<u64, StoreError> {
        match self.inner.config.mode {
            SyncMode::Async => Ok(self.inner.clock.now()),
            SyncMode::Exact => self.inner.exact.now().await,
        }
    }

    fn engine(&self) -> Option<&'static str> {
        self.inner.exact.engine()
    }

    /// Ready when the shared store is; degraded (deciding locally) when it
    /// is not. When limits are exact unless they say otherwise, the shared
    /// store's status as it is.
    async fn status(&self) -> StoreStatus {
        if self.inner.config.mode == SyncMode::Exact {
            return self.inner.exact.status().await;
        }
        match self.inner.exact.status().await {
            StoreStatus::Ready => StoreStatus::Ready,
            StoreStatus::Degraded(reason) | StoreStatus::Unavailable(reason) => {
                StoreStatus::Degraded(format!("deciding locally (async sync mode): {reason}"))
            }
        }
    }
}
