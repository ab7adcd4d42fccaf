//! Several limits in one all-or-nothing operation: [`check_all`] and
//! [`reserve_all`] (exposed as [`MemoryStore`](crate::MemoryStore) methods).
//!
//! Requests are merged into cells (the same key of the same table twice is
//! one cell with the summed cost), the cells' shards are locked in one global
//! order — table address, then shard index, each shard once — and every
//! limit is evaluated before anything is counted. Holding all the shards
//! while deciding is what makes the operation atomic; the global order is
//! what keeps two overlapping operations from deadlocking.
//!
//! A reservation looks for the first instant `T` at which every limit
//! admits the cost (admission only ever becomes easier as time passes, so
//! taking the latest "next available" over all limits converges in a couple
//! of rounds), then books every limit as of `T`, when the call will really
//! be made. Booking a bucket at `now` instead, as debt, would let every
//! reservation that a slower limit defers to the same `T` land there
//! together, beyond the bucket's burst.

use std::time::Duration;

use smallvec::SmallVec;
use tollgate_core::algorithm::Slot;
use tollgate_core::time::duration_to_nanos;
use tollgate_core::{Decision, LimitError};

use crate::fingerprint::{Fingerprint, Seed};
use crate::limiter::Limiter;
use crate::table::LockedShard;

/// Rounds of "latest next_available over all limits" before a reservation
/// gives up. Admission is monotone in time for every algorithm, so two
/// rounds suffice; the cap only guards against a broken algorithm.
const MAX_ROUNDS: usize = 64;

pub use tollgate_core::MultiReservation;

/// Room on the stack for the cells of an operation: a request names a few
/// limits, so the usual one allocates nothing for its bookkeeping.
const INLINE_CELLS: usize = 4;

/// Cells, or anything kept per cell or per request.
type PerCell<T> = SmallVec<[T; INLINE_CELLS]>;

/// One (table, key) of a multi-limit operation.
struct Cell<'r> {
    limiter: &'r Limiter,
    table_id: usize,
    fp: Fingerprint,
    shard: usize,
    cost: u64,
    /// Index of the cell's shard guard.
    lock: usize,
}

/// Requests merged into cells, and each request's cell.
fn plan<'r>(
    requests: &[(&'r Limiter, &[u8])],
    cost: u64,
) -> Result<(PerCell<Cell<'r>>, PerCell<usize>), LimitError> {
    let mut cells: PerCell<Cell<'r>> = SmallVec::with_capacity(requests.len());
    let mut of_request: PerCell<usize> = SmallVec::with_capacity(requests.len());
    // The key of the request before, its seed and its fingerprint: a
    // descriptor's limits are asked one after the other with the very same
    // key, and the tables of one store fingerprint under its seed. Other
    // keys are looked up among the thread's recent ones, as a single
    // check's are: a request's global descriptor comes back on every
    // request.
    let mut last: Option<(&[u8], Seed, Fingerprint)> = None;
    for &(limiter, key) in requests {
        let table = limiter.table();
        let seed = table.seed();
        let fp = match last {
            Some((last_key, last_seed, fp)) if std::ptr::eq(last_key, key) && last_seed == seed => {
                fp
            }
            _ => seed.fingerprint_recent(key),
        };
        last = Some((key, seed, fp));
        let table_id = limiter.table_id();
        match cells
            .iter()
            .position(|c| c.table_id == table_id && c.fp == fp)
        {
            Some(i) => {
                cells[i].cost = cells[i].cost.saturating_add(cost);
                of_request.push(i);
            }
            None => {
                of_request.push(cells.len());
                let shard = table.shard_of(fp);
                cells.push(Cell {
                    limiter,
                    table_id,
                    fp,
                    shard,
                    cost,
                    lock: 0,
                });
            }
        }
    }
    for cell in &cells {
        cell.limiter.table().validate_cost(cell.cost)?;
    }
    Ok((cells, of_request))
}

/// Locks every cell's shard once, in (table address, shard) order, and
/// points each cell at its guard.
fn lock_all<'r>(cells: &mut [Cell<'r>]) -> PerCell<Box<dyn LockedShard + 'r>> {
    let mut order: PerCell<usize> = (0..cells.len()).collect();
    order.sort_unstable_by_key(|&i| (cells[i].table_id, cells[i].shard));
    let mut guards: PerCell<Box<dyn LockedShard + 'r>> = SmallVec::with_capacity(cells.len());
    let mut last = None;
    for i in order {
        let cell = &mut cells[i];
        let id = (cell.table_id, cell.shard);
        if last != Some(id) {
            guards.push(cell.limiter.table().lock(cell.shard));
            last = Some(id);
        }
        cell.lock = guards.len() - 1;
    }
    guards
}

/// Checks every request together; see
/// [`MemoryStore::check_all`](crate::MemoryStore::check_all).
pub(crate) fn check_all(
    requests: &[(&Limiter, &[u8])],
    now: u64,
    cost: u64,
) -> Result<Vec<Decision>, LimitError> {
    let (mut cells, of_request) = plan(requests, cost)?;
    let mut guards = lock_all(&mut cells);
    let mut decisions = cells
        .iter()
        .map(|c| guards[c.lock].evaluate(c.fp, now, c.cost))
        .collect::<Result<PerCell<_>, _>>()?;
    if cost > 0 && decisions.iter().all(|d| d.allowed) {
        for (c, decision) in cells.iter().zip(&mut decisions) {
            decision.lease = guards[c.lock].commit(c.fp, now, c.cost);
        }
    } else if cost > 0 {
        // Each limit that refused takes a strike (its ban's, if any); the
        // limits that would have admitted count nothing.
        for (c, decision) in cells.iter().zip(&mut decisions) {
            if !decision.allowed {
                guards[c.lock].strike(c.fp, now, decision);
            }
        }
    }
    drop(guards);
    Ok(of_request.iter().map(|&i| decisions[i]).collect())
}

/// Reserves every request together; see
/// [`MemoryStore::reserve_all`](crate::MemoryStore::reserve_all).
pub(crate) fn reserve_all(
    requests: &[(&Limiter, &[u8])],
    now: u64,
    cost: u64,
    max_wait: Option<Duration>,
) -> Result<MultiReservation, LimitError> {
    let (mut cells, of_request) = plan(requests, cost)?;
    if cells
        .iter()
        .any(|c| !c.limiter.table().takes_reservations())
    {
        return Err(LimitError::ReservationUnsupported);
    }
    let mut guards = lock_all(&mut cells);
    if cost == 0 {
        return Ok(outcome(&cells, &guards, &of_request, now, 0, None));
    }
    let (at, converged) = common_instant(&cells, &guards, now);
    // Every limit is booked as of `at`, when the call will be made; a shaping
    // queue may add its own delay beyond it.
    let slots: PerCell<Option<Slot>> = cells
        .iter()
        .map(|c| guards[c.lock].slot(c.fp, at, c.cost))
        .collect();
    let shaping = slots.iter().flatten().map(|s| s.wait).max().unwrap_or(0);
    let wait = (at - now).saturating_add(shaping);
    let limit = max_wait.map_or(u64::MAX, duration_to_nanos);
    let refused = (!converged || wait > limit).then(|| wait.saturating_sub(limit).max(1));
    if refused.is_none() {
        for (c, slot) in cells.iter().zip(slots) {
            if let Some(slot) = slot {
                guards[c.lock].book(c.fp, at, slot, c.cost);
            }
        }
    }
    Ok(outcome(&cells, &guards, &of_request, now, wait, refused))
}

/// The answer to a reservation: each request's limit as of `now`, marked
/// refused (with `retry_after` in ns) when nothing was booked.
fn outcome(
    cells: &[Cell<'_>],
    guards: &[Box<dyn LockedShard + '_>],
    of_request: &[usize],
    now: u64,
    wait: u64,
    refused: Option<u64>,
) -> MultiReservation {
    let retry_after = Duration::from_nanos(refused.unwrap_or(0));
    let decisions: PerCell<Decision> = cells
        .iter()
        .map(|c| {
            let mut decision = guards[c.lock].peek(c.fp, now);
            if refused.is_some() {
                decision.allowed = false;
                decision.retry_after = retry_after;
            }
            decision
        })
        .collect();
    MultiReservation {
        wait: Duration::from_nanos(wait),
        booked: refused.is_none(),
        retry_after,
        decisions: of_request.iter().map(|&i| decisions[i]).collect(),
    }
}

/// The earliest instant at or after `now` at which every cell's reservation
/// lands where it was made, and whether the search converged.
fn common_instant(
    cells: &[Cell<'_>],
    guards: &[Box<dyn LockedShard + '_>],
    now: u64,
) -> (u64, bool) {
    let mut at = now;
    for _ in 0..MAX_ROUNDS {
        let next = cells
            .iter()
            .map(|c| landing(&*guards[c.lock], c, at))
            .fold(at, u64::max);
        if next == at {
            return (at, true);
        }
        at = next;
    }
    (at, false)
}

/// Where a reservation of the cell made at `t` would land: when the cost is
/// admitted, or later when the algorithm queues it (a shaping queue).
fn landing(guard: &dyn LockedShard, cell: &Cell<'_>, t: u64) -> u64 {
    let admitted = guard.next_available(cell.fp, t, cell.cost);
    let slot = guard.slot(cell.fp, t, cell.cost).map_or(t, |s| s.at);
    admitted.max(slot)
}
