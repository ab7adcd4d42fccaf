//! The operations of one call over its cells, as the script's driver.lua
//! runs them (and tollgate-memory's multi.rs, which it mirrors): every
//! limit is evaluated before anything is counted, and a rejection counts
//! nothing anywhere, but a limit with a ban that refused takes a strike
//! (tollgate-core's `Banned`, whose rules these are: refused while banned,
//! reservations landing after the ban). Pure: the caller reads the states
//! before and writes the ones named in the [`Outcome`] after.

use std::time::Duration;

use smallvec::SmallVec;

use tollgate_core::algorithm::{Settled, Slot};
use tollgate_core::{BanRefusal, Decision};

use crate::ban::Banned;
use crate::cell::AnyCell;
use crate::error::Error;
use tollgate_state::text::parse_u64;

/// Rounds of "latest landing over all limits" before a reservation gives
/// up (multi.rs's `MAX_ROUNDS`).
const MAX_ROUNDS: usize = 64;

/// An operation of `TOLLGATE.DECIDE2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Decide every cell; count when all admit.
    Check,
    /// Decide every cell, counting nothing.
    Probe,
    /// Book the earliest instant every cell admits.
    Reserve,
    /// When one cell would admit its cost.
    Next,
    /// Count a call already made (`stepped_window`).
    Record,
    /// End a `concurrency` lease.
    Release,
    /// Charge or refund the difference between a request's estimated and
    /// actual cost.
    Settle,
}

impl Op {
    /// The operation named `word`.
    pub(crate) fn parse(word: &[u8]) -> Result<Op, Error> {
        Ok(match word {
            b"check" => Op::Check,
            b"probe" => Op::Probe,
            b"reserve" => Op::Reserve,
            b"next" => Op::Next,
            b"record" => Op::Record,
            b"release" => Op::Release,
            b"settle" => Op::Settle,
            _ => return Err(Error::UnknownOperation),
        })
    }

    /// Whether the operation takes exactly one cell.
    pub(crate) fn single(self) -> bool {
        matches!(self, Op::Next | Op::Record | Op::Release | Op::Settle)
    }
}

/// A cell and the cost the call asks of it.
pub(crate) struct Planned {
    pub(crate) cell: AnyCell,
    pub(crate) cost: u64,
    /// The limit's ban and its state, when it has one.
    pub(crate) ban: Option<Banned>,
}

impl Planned {
    /// The earliest instant at or after `t` the ban lets a request in.
    fn open_from(&self, t: u64) -> u64 {
        self.ban.as_ref().map_or(t, |b| t.max(b.state.until))
    }

    /// The limit's decision for `cost` at `now`, or the ban's while banned.
    fn evaluate(&self, now: u64, cost: u64) -> Decision {
        match &self.ban {
            Some(b) if b.ban.is_banned(&b.state, now) => {
                b.ban
                    .refusal(&b.state, now, self.cell.evaluate(now, 0), false)
            }
            _ => self.cell.evaluate(now, cost),
        }
    }

    /// The limit's slot for a reservation made at `t`, from when the ban
    /// lets it in, with the wait for the ban.
    fn slot(&self, t: u64) -> Option<Slot> {
        let open = self.open_from(t);
        let slot = self.cell.slot(open, self.cost)?;
        Some(Slot {
            at: slot.at,
            wait: slot.wait.saturating_add(open - t),
        })
    }
}

/// One word of a reply: a number, empty (no lease), or a ban's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Word {
    Number(u64),
    Empty,
    /// `s` (a ban started) or `b` (a ban in force), in a decision's lease
    /// place, which a ban's decision never needs.
    Ban(u8),
}

/// Words and cells of a call, held in place up to a few limits (a call
/// usually has one).
pub(crate) type Words = SmallVec<[Word; 16]>;

/// What a call answers and which states it changed.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The instant the operation was decided at, which the writes use:
    /// the call's, or for a settle never before the admission.
    pub(crate) now: u64,
    /// The reply: the instant used, then the operation's words.
    pub(crate) reply: Words,
    /// The cells to write back, and whether without an instant (a release
    /// deletes only a state that is as good as new at any time).
    pub(crate) changed: SmallVec<[(usize, bool); 4]>,
    /// The cells whose ban states to write back.
    pub(crate) bans_changed: SmallVec<[usize; 2]>,
    /// Whether the changed states are written even when they are as good
    /// as new (a settle: the memory store keeps a settled state, which an
    /// out-of-order record at an earlier instant still counts).
    pub(crate) kept: bool,
}

/// Runs `op` at `now` over `cells`; `extra` is the reservation's max wait
/// in ns (empty for none), the lease to release, or a settle's words
/// (`admitted_at estimate actual`).
pub(crate) fn run(op: Op, now: u64, extra: &[u8], cells: &mut [Planned]) -> Result<Outcome, Error> {
    if op == Op::Settle {
        return settle(now, extra, single(cells)?);
    }
    // A recorded call was already made: it counts whatever its cost.
    for planned in cells.iter().filter(|_| op != Op::Record) {
        let capacity = planned.cell.capacity();
        if planned.cost > capacity {
            return Err(Error::CostTooLarge {
                cost: planned.cost,
                capacity,
            });
        }
    }
    let mut out = Outcome {
        now,
        reply: smallvec::smallvec![Word::Number(now)],
        changed: SmallVec::new(),
        bans_changed: SmallVec::new(),
        kept: false,
    };
    match op {
        Op::Check => check(now, cells, true, &mut out),
        Op::Probe => check(now, cells, false, &mut out),
        Op::Reserve => reserve(now, extra, cells, &mut out)?,
        Op::Next => {
            let c = single(cells)?;
            let at = match c.cost {
                0 => now,
                cost => c.cell.next_available(c.open_from(now), cost),
            };
            out.reply.push(Word::Number(at));
        }
        Op::Record => {
            let c = single(cells)?;
            let count = c.cell.record(now, c.cost).ok_or(Error::RecordUnsupported)?;
            out.reply.push(Word::Number(count));
            // Cost 0 records nothing and writes nothing back (not even the
            // deletion of a state expired at `now`, which an out-of-order
            // record at an earlier instant still counts), as in memory.
            if c.cost != 0 {
                out.changed.push((0, false));
            }
        }
        Op::Release => {
            let c = single(cells)?;
            let held = parse_u64(extra).is_some_and(|lease| c.cell.release(lease));
            if held {
                out.changed.push((0, true));
            }
            out.reply.push(Word::Number(u64::from(held)));
        }
        Op::Settle => return Err(Error::Usage("settle takes exactly one limit")),
    }
    Ok(out)
}

/// Settles a request admitted at `admitted_at` with cost `estimate` whose
/// actual cost is `actual` (the words of `extra`), as the core's
/// [`Algorithm::settle`](tollgate_core::Algorithm::settle) does, at `now`
/// or at the admission when later; a ban stands. Answers the outcome: 0
/// exact (nothing changed), 1 charged, 2 refunded, 3 refund dropped; only
/// a charge or a refund given back writes, and it deletes nothing
/// ([`Outcome::kept`]). Bad words or a limit that does not settle
/// (`concurrency`) are errors, and nothing changes.
fn settle(now: u64, extra: &[u8], c: &mut Planned) -> Result<Outcome, Error> {
    let mut words = extra.split(|&b| b == b' ').map(parse_u64);
    let (Some(Some(admitted_at)), Some(Some(estimate)), Some(Some(actual)), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(Error::Bad("settle words (admitted_at estimate actual)"));
    };
    let now = now.max(admitted_at);
    let settled = c
        .cell
        .settle(admitted_at, now, estimate, actual)
        .ok_or(Error::SettleUnsupported)?;
    let (code, changed) = match settled {
        Settled::Exact => (0, false),
        Settled::Charged => (1, true),
        Settled::Refunded { dropped: false } => (2, true),
        Settled::Refunded { dropped: true } => (3, false),
    };
    let mut out = Outcome {
        now,
        reply: smallvec::smallvec![Word::Number(now), Word::Number(code)],
        changed: SmallVec::new(),
        bans_changed: SmallVec::new(),
        kept: true,
    };
    if changed {
        out.changed.push((0, false));
    }
    Ok(out)
}

fn single(cells: &mut [Planned]) -> Result<&mut Planned, Error> {
    match cells {
        [one] => Ok(one),
        _ => Err(Error::Usage("this operation takes exactly one limit")),
    }
}

/// Decides every cell; counts only when `count` and every cell admits.
fn check(now: u64, cells: &mut [Planned], count: bool, out: &mut Outcome) {
    let mut decisions: SmallVec<[Decision; 4]> = cells
        .iter()
        .map(|c| {
            let mut d = c.evaluate(now, c.cost);
            if c.cost == 0 {
                d.allowed = true;
                d.retry_after = Duration::ZERO;
                d.delay = Duration::ZERO;
            }
            d
        })
        .collect();
    let counted = cells.first().is_some_and(|c| c.cost > 0);
    if count && counted && decisions.iter().all(|d| d.allowed) {
        for (i, (c, d)) in cells.iter_mut().zip(&mut decisions).enumerate() {
            d.lease = c.cell.commit(now, c.cost);
            out.changed.push((i, false));
        }
    } else if count && counted {
        // Each limit that refused takes a strike (its ban's, if any).
        for (i, (c, d)) in cells.iter_mut().zip(&mut decisions).enumerate() {
            let Some(b) = c.ban.as_mut().filter(|_| !d.allowed) else {
                continue;
            };
            if b.ban.is_banned(&b.state, now) {
                continue;
            }
            if b.ban.strike(&mut b.state, now) {
                *d = b.ban.refusal(&b.state, now, *d, true);
            }
            out.bans_changed.push(i);
        }
    }
    for d in &decisions {
        push_decision(&mut out.reply, d);
    }
}

/// Where a reservation of `c` made at `t` lands: when its cost is
/// admitted, or later when the algorithm queues it.
fn landing(c: &Planned, t: u64) -> u64 {
    let admitted = c.cell.next_available(c.open_from(t), c.cost);
    match c.slot(t) {
        Some(slot) => admitted.max(slot.at),
        None => admitted,
    }
}

fn reserve(now: u64, extra: &[u8], cells: &mut [Planned], out: &mut Outcome) -> Result<(), Error> {
    if cells.iter().any(|c| c.cell.slot(now, c.cost).is_none()) {
        return Err(Error::ReservationUnsupported);
    }
    let (mut wait, mut refused) = (0, None);
    if cells.first().is_some_and(|c| c.cost > 0) {
        let (mut at, mut converged) = (now, false);
        for _ in 0..MAX_ROUNDS {
            let next = cells.iter().map(|c| landing(c, at)).fold(at, u64::max);
            if next == at {
                converged = true;
                break;
            }
            at = next;
        }
        let slots = cells
            .iter()
            .map(|c| c.slot(at).ok_or(Error::ReservationUnsupported))
            .collect::<Result<Vec<_>, _>>()?;
        let shaping = slots.iter().map(|s| s.wait).max().unwrap_or(0);
        wait = (at - now).saturating_add(shaping);
        let limit = match extra {
            b"" => u64::MAX,
            word => parse_u64(word).ok_or(Error::Bad("max wait"))?,
        };
        if !converged || wait > limit {
            refused = Some(wait.saturating_sub(limit).max(1));
        } else {
            for (i, (c, slot)) in cells.iter_mut().zip(slots).enumerate() {
                // Converged: `at` is past every ban, where the slot is the
                // limit's own.
                c.cell.book(at, slot, c.cost);
                out.changed.push((i, false));
            }
        }
    }
    out.reply.extend([
        Word::Number(u64::from(refused.is_none())),
        Word::Number(wait),
        Word::Number(refused.unwrap_or(0)),
    ]);
    for c in cells.iter() {
        let mut d = c.evaluate(now, 0);
        d.allowed = true;
        d.retry_after = Duration::ZERO;
        d.delay = Duration::ZERO;
        if let Some(refused) = refused {
            d.allowed = false;
            d.retry_after = Duration::from_nanos(refused);
        }
        push_decision(&mut out.reply, &d);
    }
    Ok(())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A decision's seven words: allowed, limit, remaining, retry after,
/// reset after, delay (ns), lease (or a ban's mark: `s` started, `b` in
/// force).
fn push_decision(reply: &mut Words, d: &Decision) {
    reply.extend([
        Word::Number(u64::from(d.allowed)),
        Word::Number(d.limit),
        Word::Number(d.remaining),
        Word::Number(nanos(d.retry_after)),
        Word::Number(nanos(d.reset_after)),
        Word::Number(nanos(d.delay)),
        match (d.lease, d.ban) {
            (Some(lease), _) => Word::Number(lease),
            (None, Some(BanRefusal::Started)) => Word::Ban(b's'),
            (None, Some(BanRefusal::InForce)) => Word::Ban(b'b'),
            (None, None) => Word::Empty,
        },
    ]);
}
