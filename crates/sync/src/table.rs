//! One limit's local copies: [`Table`], each key's state (the global state
//! last read from the shared store plus the usage admitted here since) and
//! the usage not yet acknowledged by the shared store, pending (not sent
//! yet) and in flight (in the batch on its way).
//!
//! A table is typed by its limit's [`Format`] (the version-1 codec of
//! `tollgate-state`), so a value read from the shared store becomes the
//! very state the core decides on; [`AnyTable`] hides the type behind one
//! object-safe interface for the store's map of limits.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_core::algorithm::Algorithm;
use tollgate_core::Decision;
use tollgate_state::{decode_value, Format, ValueError};

/// A cost counted at an instant (ns since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The instant the usage is counted at.
    pub at: u64,
    /// How much was used.
    pub cost: u64,
}

/// A key sent with a batch, shared with its table (no copy of its bytes),
/// and where its usage ends in [`Outgoing::usage`] (it starts where the
/// key before's ends).
pub(crate) type Sent = (Arc<[u8]>, usize);

/// A batch's keys and their usage, in buffers kept from batch to batch
/// (a batch of 10,000 keys allocated them anew, and the pages they took
/// were faulted in and zeroed each time).
#[derive(Default)]
pub(crate) struct Outgoing {
    /// Each key sent.
    pub(crate) keys: Vec<Sent>,
    /// The usage of every key sent, one key's after another.
    pub(crate) usage: Vec<Usage>,
}

impl Outgoing {
    /// Empties both, keeping their room.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.usage.clear();
    }
}

/// One limit's copies by key: foldhash, seeded at random per map (the
/// keys are clients'), where SipHash took a fair part of a local decision.
type Entries<S> = HashMap<Arc<[u8]>, Entry<S>, foldhash::fast::RandomState>;

/// One key's local copy.
struct Entry<S> {
    state: S,
    /// Admitted here and not sent yet, in order.
    pending: Vec<Usage>,
    /// Sent in the batch on its way, in order.
    in_flight: Vec<Usage>,
    /// Asked about since the last batch left: its state comes back with
    /// the next one, used or not.
    touched: bool,
    /// Batches in a row that left while nobody asked about the key; they
    /// still read its state while fewer than the table's `keep`.
    idle: u32,
    /// The last batch did not read the state (the key idle for `keep`
    /// batches): it is read again before its next use.
    stale: bool,
}

/// One limit's local copies behind an object-safe interface.
pub(crate) trait AnyTable: Send {
    /// How many keys the table holds.
    fn len(&self) -> usize;
    /// Whether `key` has a local copy (maybe stale).
    fn has(&self, key: &[u8]) -> bool;
    /// Whether `key` must be read from the shared store before it is
    /// decided on: it has no copy, or a stale one.
    fn needs_read(&self, key: &[u8]) -> bool;
    /// The largest cost a request may ask for.
    fn capacity(&self) -> u64;
    /// The decision for `cost` at `now` without changing anything but the
    /// key's mark as touched (a key without a copy as a fresh state).
    fn evaluate(&mut self, key: &[u8], now: u64, cost: u64) -> Decision;
    /// Counts an admitted `cost` at `now` in the copy and as pending usage.
    fn commit(&mut self, key: &[u8], now: u64, cost: u64);
    /// [`evaluate`](Self::evaluate) then, when admitted, [`commit`](Self::commit),
    /// on one look-up of the key; `None` (and nothing changed) when the
    /// key must be read first ([`needs_read`](Self::needs_read)).
    fn decide(&mut self, key: &[u8], now: u64, cost: u64) -> Option<Decision>;
    /// Counts `cost` at `at` whatever the limit says, in the copy and as
    /// pending usage; the usage the copy holds afterwards.
    fn record(&mut self, key: &[u8], at: u64, cost: u64) -> u64;
    /// The earliest instant at or after `now` at which `cost` fits.
    fn next_available(&mut self, key: &[u8], now: u64, cost: u64) -> u64;
    /// A copy of `key` from the shared store's `value` (`None`: the key
    /// holds no state there), in place of a stale one (with the usage
    /// admitted since counted on it); nothing when the key has a live copy
    /// already.
    fn install(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), ValueError>;
    /// Moves the pending usage of every key asked about in the last `keep`
    /// batches in flight; appends each such key and its usage (maybe none)
    /// to `out`. The others' copies go stale.
    fn send(&mut self, keep: u32, out: &mut Outgoing);
    /// The batch reached the shared store: the key's copy becomes the
    /// global state `value` with the usage admitted since the batch left
    /// counted on it again.
    fn merge(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), ValueError>;
    /// The batch did not reach it: the key's usage in flight goes back in
    /// front of its pending usage, to go with the next batch.
    fn restore(&mut self, key: &[u8]);
    /// Drops the stale copies that are as good as fresh at `now` and hold
    /// no usage to send; how many were dropped.
    fn sweep(&mut self, now: u64) -> usize;
    /// Drops `key`'s copy and its unsent usage; whether it had one.
    fn forget(&mut self, key: &[u8]) -> bool;
    /// Usage entries held, pending and in flight, over every key.
    fn unsent(&self) -> usize;
}

/// The local copies of one limit of format `F`.
pub(crate) struct Table<F: Format> {
    format: F,
    entries: Entries<<F::Algorithm as Algorithm>::State>,
    /// Usage within one quantum (same window or step) coalesces exactly.
    quantum: u64,
    /// The most usage entries a key keeps pending: past it, new usage is
    /// merged into the newest entry at the later instant.
    max_pending: usize,
}

impl<F: Format + Copy> Table<F> {
    /// An empty table of `format`, coalescing usage within `quantum` ns
    /// (1: only equal instants) and keeping at most `max_pending` entries
    /// per key.
    pub(crate) fn new(format: F, quantum: u64, max_pending: usize) -> Table<F> {
        Table {
            format,
            entries: HashMap::default(),
            quantum: quantum.max(1),
            max_pending: max_pending.max(1),
        }
    }

    fn entry(&mut self, key: &[u8]) -> &mut Entry<<F::Algorithm as Algorithm>::State> {
        let algorithm = self.format.algorithm();
        if self.entries.contains_key(key) {
            // The key is copied only when it is new (`entry` wants it
            // owned).
            return self
                .entries
                .get_mut(key)
                .unwrap_or_else(|| unreachable!("just looked up"));
        }
        self.entries.entry(Arc::from(key)).or_insert_with(|| Entry {
            state: algorithm.new_state(),
            pending: Vec::new(),
            in_flight: Vec::new(),
            touched: false,
            idle: 0,
            stale: false,
        })
    }

    /// Adds `usage` to a key's pending list: into the newest entry when it
    /// lies in the same quantum (or the list is full, at the later instant,
    /// which holds the usage as long or longer: never less usage anywhere).
    fn push(pending: &mut Vec<Usage>, usage: Usage, quantum: u64, max: usize) {
        let full = pending.len() >= max;
        if let Some(last) = pending.last_mut() {
            let same = last.at / quantum == usage.at / quantum;
            if same || full {
                last.cost = last.cost.saturating_add(usage.cost);
                last.at = last.at.max(usage.at);
                return;
            }
        }
        pending.push(usage);
    }
}

impl<F: Format + Copy + Send> AnyTable for Table<F>
where
    <F::Algorithm as Algorithm>::State: Send,
{
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn has(&self, key: &[u8]) -> bool {
        self.entries.contains_key(key)
    }

    fn needs_read(&self, key: &[u8]) -> bool {
        self.entries.get(key).is_none_or(|entry| entry.stale)
    }

    fn capacity(&self) -> u64 {
        self.format.algorithm().capacity()
    }

    fn evaluate(&mut self, key: &[u8], now: u64, cost: u64) -> Decision {
        let algorithm = self.format.algorithm();
        let mut decision = match self.entries.get_mut(key) {
            Some(entry) => {
                entry.touched = true;
                algorithm.evaluate(&entry.state, now, cost)
            }
            None => algorithm.evaluate(&algorithm.new_state(), now, cost),
        };
        if cost == 0 {
            decision.allowed = true;
            decision.retry_after = std::time::Duration::ZERO;
            decision.delay = std::time::Duration::ZERO;
        }
        decision
    }

    fn decide(&mut self, key: &[u8], now: u64, cost: u64) -> Option<Decision> {
        let (quantum, max) = (self.quantum, self.max_pending);
        let algorithm = self.format.algorithm();
        let entry = self.entries.get_mut(key).filter(|entry| !entry.stale)?;
        entry.touched = true;
        let mut decision = algorithm.evaluate(&entry.state, now, cost);
        if cost == 0 {
            decision.allowed = true;
            decision.retry_after = std::time::Duration::ZERO;
            decision.delay = std::time::Duration::ZERO;
        } else if decision.allowed {
            algorithm.commit(&mut entry.state, now, cost);
            Self::push(&mut entry.pending, Usage { at: now, cost }, quantum, max);
        }
        Some(decision)
    }

    fn commit(&mut self, key: &[u8], now: u64, cost: u64) {
        let (quantum, max) = (self.quantum, self.max_pending);
        let format = self.format;
        let entry = self.entry(key);
        entry.touched = true;
        format.algorithm().commit(&mut entry.state, now, cost);
        Self::push(&mut entry.pending, Usage { at: now, cost }, quantum, max);
    }

    fn record(&mut self, key: &[u8], at: u64, cost: u64) -> u64 {
        let (quantum, max) = (self.quantum, self.max_pending);
        let format = self.format;
        let entry = self.entry(key);
        entry.touched = true;
        let usage = format.record(&mut entry.state, at, cost).unwrap_or(0);
        if cost > 0 {
            Self::push(&mut entry.pending, Usage { at, cost }, quantum, max);
        }
        usage
    }

    fn next_available(&mut self, key: &[u8], now: u64, cost: u64) -> u64 {
        let algorithm = self.format.algorithm();
        match self.entries.get_mut(key) {
            Some(entry) => {
                entry.touched = true;
                algorithm.next_available(&entry.state, now, cost)
            }
            None => algorithm.next_available(&algorithm.new_state(), now, cost),
        }
    }

    fn install(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), ValueError> {
        let format = self.format;
        if let Some(entry) = self.entries.get_mut(key) {
            if !entry.stale {
                return Ok(());
            }
            let mut state = decode_value(&format, value)?;
            for usage in entry.in_flight.iter().chain(&entry.pending) {
                format.record(&mut state, usage.at, usage.cost);
            }
            entry.state = state;
            entry.stale = false;
            entry.touched = true;
            return Ok(());
        }
        let state = decode_value(&format, value)?;
        self.entries.insert(
            Arc::from(key),
            Entry {
                state,
                pending: Vec::new(),
                in_flight: Vec::new(),
                touched: true,
                idle: 0,
                stale: false,
            },
        );
        Ok(())
    }

    fn send(&mut self, keep: u32, out: &mut Outgoing) {
        for (key, entry) in &mut self.entries {
            let used = entry.touched || !entry.pending.is_empty();
            entry.idle = if used {
                0
            } else {
                entry.idle.saturating_add(1)
            };
            if !used && (entry.idle > keep || entry.stale) {
                // Nobody asked for `keep` batches: not read any more, the
                // copy ages; its next use reads it first.
                entry.stale = true;
                continue;
            }
            entry.touched = false;
            if entry.in_flight.is_empty() {
                // The lists trade places: the pending one goes on with the
                // room the last batch's left (no allocation per key).
                std::mem::swap(&mut entry.in_flight, &mut entry.pending);
            } else {
                entry.in_flight.append(&mut entry.pending);
            }
            out.usage.extend_from_slice(&entry.in_flight);
            out.keys.push((Arc::clone(key), out.usage.len()));
        }
    }

    fn merge(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), ValueError> {
        let format = self.format;
        let Some(entry) = self.entries.get_mut(key) else {
            return Ok(());
        };
        let mut state = match decode_value(&format, value) {
            Ok(state) => state,
            Err(error) => {
                Self::requeue(entry, self.quantum, self.max_pending);
                return Err(error);
            }
        };
        for usage in &entry.pending {
            format.record(&mut state, usage.at, usage.cost);
        }
        entry.state = state;
        entry.in_flight.clear();
        entry.stale = false;
        Ok(())
    }

    fn restore(&mut self, key: &[u8]) {
        if let Some(entry) = self.entries.get_mut(key) {
            Self::requeue(entry, self.quantum, self.max_pending);
        }
    }

    fn sweep(&mut self, now: u64) -> usize {
        let algorithm = self.format.algorithm();
        let before = self.entries.len();
        self.entries.retain(|_, entry| {
            !entry.stale
                || !entry.pending.is_empty()
                || !entry.in_flight.is_empty()
                || algorithm.expires_at(&entry.state) > now
        });
        before - self.entries.len()
    }

    fn forget(&mut self, key: &[u8]) -> bool {
        self.entries.remove(key).is_some()
    }

    fn unsent(&self) -> usize {
        self.entries
            .values()
            .map(|e| e.pending.len() + e.in_flight.len())
            .sum()
    }
}

impl<F: Format + Copy> Table<F> {
    /// Usage in flight back in front of the pending usage, coalesced
    /// within the bound.
    fn requeue(entry: &mut Entry<<F::Algorithm as Algorithm>::State>, quantum: u64, max: usize) {
        let mut all = std::mem::take(&mut entry.in_flight);
        all.reserve(entry.pending.len());
        let mut merged: Vec<Usage> = Vec::with_capacity(all.len() + entry.pending.len());
        for usage in all.drain(..).chain(entry.pending.drain(..)) {
            Self::push(&mut merged, usage, quantum, max);
        }
        entry.pending = merged;
    }
}
