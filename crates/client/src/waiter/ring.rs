//! Exactly `N` per interval: a ring of the last `N` permits' times.
//!
//! The ring holds, for each of the last `N` permits, the instant its slot
//! frees: the time the permit went plus the interval `P`. A call for `n`
//! permits may go once the `n` oldest slots are free, so permit `k + N` never
//! goes before permit `k` plus `P`: no span `(t − P, t]` ever holds more than
//! `N` permits, and each call goes at the earliest instant that keeps it so.
//! This is the limiter of Shopify's `limiter` gem (a `RateQueue`), extended to
//! several permits per call.
//!
//! Balanced start: an unbalanced ring starts with every slot free, so the
//! first `N` permits may go at once. A balanced ring spreads them instead:
//! counting from the instant `s` the first call arrives, the `i`-th of the
//! first `N` permits (from 0) may go at `s + ⌊i·P/N⌋`, so the first interval
//! sees one permit every `P/N` (a first call for `n` permits goes with its
//! last, at `s + ⌊(n−1)·P/N⌋`). After that the ring rule alone applies: a
//! waiter kept busy stays evenly spaced, and one left idle for a whole
//! interval may burst `N` again. (The gem anchors the spread at the limiter's
//! construction; this ring anchors it at the first call, so a waiter built
//! early and used later still starts evenly.)
//!
//! Any free slot will do. A permit may take a slot once the slot has been
//! free for the interval since its last permit; whichever slot it takes,
//! the slots busy at `t` are exactly those whose last permit fell in
//! `(t − P, t]`, one permit each (two permits in one slot are `P` apart).
//! So at `t` a free slot exists exactly when that span holds fewer than `N`
//! permits, and the order slots are handed out in changes no decision. The
//! ring uses that to keep threads apart (below).
//!
//! Concurrency: the slots are split into lanes (one per core, up to
//! [`MAX_LANES`], for rings of at least [`MIN_LANE`] slots a lane; one lane
//! otherwise), each a ring of its own with its own head word on its own
//! cache line: the lap and index of its next slot, and the "calls are
//! waiting" flag. The fast path takes the next slot of the calling thread's
//! home lane with one compare-and-swap on that lane's head, then writes the
//! slot. A thread whose home lane has no free slot tries the others and
//! moves home to the one that had; a thread that lost a swap moves home to
//! the next lane. Threads thus settle on lanes of their own, and their
//! permits touch no cache line another thread writes: with one shared head,
//! every permit moved the head's line and the slot's line between the
//! cores, twice governor's one line. The slow path sees all lanes at once:
//! raising the flag raises it in every lane, and the call at the front takes
//! the `n` earliest-free slots across the lanes.
//!
//! Each slot carries the lap it was written in (two bits), so a call that
//! reaches a slot whose write from the previous lap is still pending sees it
//! as not free rather than reading a stale time. Permits claimed
//! concurrently may be recorded out of clock order by a few nanoseconds; the
//! rule still holds, because it binds every permit to the slot's previous
//! one: among any `N + 1` permits two share a slot, so they are at least
//! `P` apart.

use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed,
    Ordering::Release,
};

use crossbeam_utils::{Backoff, CachePadded};
use tollgate_core::Rate;

use super::error::WaiterError;
use super::line::Line;
use super::schedule::{Attempt, Schedule};

/// The largest `N` a ring holds: eight bytes a slot make this 8 MiB. For
/// larger limits, use a [`GcraWaiter`](super::GcraWaiter), whose state is one
/// integer.
pub const MAX_RING: u64 = 1 << INDEX_BITS;

/// The most lanes a ring is split into (a power of two).
pub(crate) const MAX_LANES: usize = 8;

/// The fewest slots a lane holds: smaller rings keep one lane. A ring that
/// small is waited on far more often than it is contended.
pub(crate) const MIN_LANE: u64 = 64;

/// Head word: calls are waiting in line.
const WAITING: u64 = 1 << 63;
/// Head word: the index of the next slot in the low bits, its lap above.
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const LAP_MASK: u64 = (1 << (63 - INDEX_BITS)) - 1;
/// Slot word: the lap it was written in (mod 4) in the top two bits, and
/// when it frees, in nanoseconds since the ring's origin, below.
const TAG_SHIFT: u32 = 62;
const TIME_MASK: u64 = (1 << TAG_SHIFT) - 1;
/// A slot that never frees: before a ring is laid out.
const NEVER: u64 = TIME_MASK;

thread_local! {
    /// The lane this thread takes slots from first (reduced modulo a
    /// ring's lane count, a power of two). Every thread starts on lane 0
    /// and moves on when it loses a swap there, so a lone thread stays on
    /// lane 0, whose fast path does not wait for this read (see
    /// `try_take_one`).
    static HOME_LANE: Cell<usize> = const { Cell::new(0) };
}

#[inline(always)]
fn home_lane() -> usize {
    HOME_LANE.with(Cell::get)
}

fn set_home_lane(lane: usize) {
    HOME_LANE.with(|home| home.set(lane & (MAX_LANES - 1)));
}

/// The number of lanes for a ring of `limit` slots on `cores` cores.
fn lane_count(limit: u64, cores: usize) -> usize {
    let mut lanes = 1;
    while lanes * 2 <= cores.min(MAX_LANES) && limit / (lanes as u64 * 2) >= MIN_LANE {
        lanes *= 2;
    }
    lanes
}

/// At most `N` permits in any span of one interval (see the module docs).
#[derive(Debug)]
pub(crate) struct RingSchedule {
    /// The lanes, `lane_mask + 1` of them in use, the rest empty; held in
    /// place rather than boxed, so the fast path reaches a lane's head
    /// without following a pointer.
    lane_array: [CachePadded<Lane>; MAX_LANES],
    /// The number of lanes in use, less one (they are a power of two).
    lane_mask: usize,
    /// `N`, the lanes' slots together.
    limit: u64,
    /// The instant slot times count from: the first call's arrival.
    origin: AtomicU64,
    period: u64,
    balanced: bool,
    /// Read and written only with the line locked.
    unstarted: AtomicBool,
}

/// A lane: a ring of its own, with its head.
#[derive(Debug)]
struct Lane {
    head: AtomicU64,
    slots: Box<[AtomicU64]>,
}

impl Lane {
    /// The number of slots.
    #[inline]
    fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    #[inline]
    fn slot(&self, at: Head) -> &AtomicU64 {
        // `at.index` is below the lane's length by construction; indexing
        // checks.
        &self.slots[at.index as usize]
    }
}

/// The next slot to claim in a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    lap: u64,
    index: u64,
}

impl Head {
    fn decode(word: u64) -> Head {
        Head {
            lap: (word >> INDEX_BITS) & LAP_MASK,
            index: word & INDEX_MASK,
        }
    }

    fn encode(self) -> u64 {
        (self.lap & LAP_MASK) << INDEX_BITS | self.index
    }

    /// The slot `offset` places on, and its lap, in a lane of `len` slots
    /// (`offset` at most `len`).
    #[inline]
    fn plus(self, offset: u64, len: u64) -> Head {
        let index = self.index + offset;
        if index >= len {
            Head {
                lap: self.lap.wrapping_add(1),
                index: index - len,
            }
        } else {
            Head {
                lap: self.lap,
                index,
            }
        }
    }

    /// The tag of this slot's write in the previous lap, which must be in
    /// place before the slot can be claimed.
    #[inline]
    fn previous_tag(self) -> u64 {
        self.lap.wrapping_sub(1) & 3
    }

    #[inline]
    fn slot_word(self, free_at: u64) -> u64 {
        (self.lap & 3) << TAG_SHIFT | free_at
    }
}

impl RingSchedule {
    /// `rate.limit()` permits in any span of `rate.period()`; `balanced`
    /// spreads the first `N` over the first interval. Lanes as the
    /// machine's cores allow (see the module docs).
    pub(crate) fn new(rate: Rate, balanced: bool) -> Result<Self, WaiterError> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self::with_lanes(rate, balanced, lane_count(rate.limit(), cores))
    }

    /// [`new`](Self::new) with `lanes` lanes (a power of two, at most
    /// [`MAX_LANES`] and at most the limit).
    fn with_lanes(rate: Rate, balanced: bool, lanes: usize) -> Result<Self, WaiterError> {
        let limit = rate.limit();
        if limit > MAX_RING {
            return Err(WaiterError::RingTooLarge {
                limit,
                max: MAX_RING,
            });
        }
        debug_assert!(lanes.is_power_of_two() && lanes <= MAX_LANES && lanes as u64 <= limit);
        // Lap 0 claims slots last written "in lap -1", tag 3; none is free
        // until the first call lays the ring out.
        let unlaid = Head { lap: 3, index: 0 }.slot_word(NEVER);
        // The first `limit % lanes` lanes hold one slot more.
        let (share, extra) = (limit / lanes as u64, (limit % lanes as u64) as usize);
        let lane_array = std::array::from_fn(|lane| {
            let len = if lane < lanes {
                share + u64::from(lane < extra)
            } else {
                0
            };
            CachePadded::new(Lane {
                head: AtomicU64::new(0),
                slots: (0..len).map(|_| AtomicU64::new(unlaid)).collect(),
            })
        });
        Ok(RingSchedule {
            lane_array,
            lane_mask: lanes - 1,
            limit,
            origin: AtomicU64::new(0),
            period: rate.period_nanos(),
            balanced,
            unstarted: AtomicBool::new(true),
        })
    }

    /// The lanes in use.
    fn lanes(&self) -> &[CachePadded<Lane>] {
        &self.lane_array[..=self.lane_mask]
    }

    /// Lane `lane` modulo the lanes in use.
    #[inline(always)]
    fn lane(&self, lane: usize) -> &Lane {
        // Masked twice: by the lanes in use, and provably below the
        // array's length, so no bounds check is left.
        &self.lane_array[lane & self.lane_mask & (MAX_LANES - 1)]
    }

    /// Whether the first `N` permits are spread over the first interval.
    pub(crate) fn is_balanced(&self) -> bool {
        self.balanced
    }

    /// Nanoseconds since the origin (zero before it), and the instant a
    /// slot time stands for.
    #[inline]
    fn since_origin(&self, now: u64) -> u64 {
        now.saturating_sub(self.origin.load(Relaxed)).min(NEVER - 1)
    }

    fn instant(&self, since_origin: u64) -> u64 {
        if since_origin >= NEVER {
            return u64::MAX;
        }
        self.origin.load(Relaxed).saturating_add(since_origin)
    }

    /// Writes the slots of `lane` from `head` on, `n` of them: taken at
    /// `at` (nanoseconds since the origin).
    #[inline]
    fn fill(&self, lane: &Lane, head: Head, n: u64, at: u64) {
        let free = at.saturating_add(self.period).min(NEVER - 1);
        for offset in 0..n {
            let slot = head.plus(offset, lane.len());
            lane.slot(slot).store(slot.slot_word(free), Release);
        }
    }

    /// [`try_take`](Schedule::try_take) for one permit, the common case:
    /// the home lane first, then the others.
    #[inline(always)]
    fn try_take_one(&self, now: u64) -> Attempt {
        let home = if self.lane_mask == 0 {
            0
        } else {
            home_lane() & self.lane_mask
        };
        // Lane 0 by a branch rather than by address arithmetic: the branch
        // is predicted, so on a thread at home there the head's load need
        // not wait for the thread-local read (measured: 1.2 ns a permit).
        let attempt = if home == 0 {
            self.take_one_in(0, now)
        } else {
            self.take_one_in(home, now)
        };
        if attempt == Attempt::Busy && self.lane_mask != 0 {
            return self.try_other_lanes(now, home);
        }
        attempt
    }

    /// One permit from a lane other than `home`, which had none free; the
    /// lane that had one becomes home.
    #[inline(never)]
    fn try_other_lanes(&self, now: u64, home: usize) -> Attempt {
        for step in 1..=self.lane_mask {
            let lane = (home + step) & self.lane_mask;
            match self.take_one_in(lane, now) {
                Attempt::Taken => {
                    set_home_lane(lane);
                    return Attempt::Taken;
                }
                Attempt::Closed => return Attempt::Closed,
                Attempt::Busy => {}
            }
        }
        Attempt::Busy
    }

    /// One permit from lane `index`'s next slot, when it is free and
    /// nobody waits. A thread that loses a swap here moves home to the next
    /// lane.
    #[inline(always)]
    fn take_one_in(&self, index: usize, now: u64) -> Attempt {
        let lane = self.lane(index);
        let mut word = lane.head.load(Acquire);
        loop {
            if word & WAITING != 0 {
                return Attempt::Closed;
            }
            let head = Head::decode(word);
            let slot = lane.slot(head);
            let slot_word = slot.load(Acquire);
            if slot_word >> TAG_SHIFT != head.previous_tag() {
                match Self::moved_on(lane, word, head, slot_word) {
                    Some(current) => {
                        word = current;
                        continue;
                    }
                    None => return Attempt::Busy,
                }
            }
            let at = self.since_origin(now);
            if slot_word & TIME_MASK > at {
                return Attempt::Busy;
            }
            // The next slot's word: the index plus one, or the next lap's
            // first slot (no flag is set in `word` here).
            let next = if head.index + 1 < lane.len() {
                word + 1
            } else {
                Head {
                    lap: head.lap.wrapping_add(1),
                    index: 0,
                }
                .encode()
            };
            match lane.head.compare_exchange_weak(word, next, AcqRel, Acquire) {
                Ok(_) => {
                    // `at` is below `NEVER - 1` and the period below 2^62:
                    // the sum cannot overflow.
                    let free = (at + self.period).min(NEVER - 1);
                    slot.store(head.slot_word(free), Release);
                    return Attempt::Taken;
                }
                Err(current) => {
                    if self.lane_mask != 0 {
                        set_home_lane(index + 1);
                    }
                    word = current;
                }
            }
        }
    }

    /// A slot at `at` (reached from `lane`'s head word `word`) carries
    /// another tag than its previous lap's: either a write of the previous
    /// lap is still pending (the permits are not free yet), or the slot was
    /// claimed in its own lap already and `word` is stale. In the second
    /// case the head has moved on since `word` was read: the head word to
    /// try again with. (Without this, a call that read the head just before
    /// another thread claimed and wrote the slot left the fast path for the
    /// line.)
    #[inline]
    fn moved_on(lane: &Lane, word: u64, at: Head, slot_word: u64) -> Option<u64> {
        if slot_word >> TAG_SHIFT != at.lap & 3 {
            return None;
        }
        let current = lane.head.load(Acquire);
        (current != word).then_some(current)
    }

    /// Waits until the previous lap's write to `lane`'s slot at `at` is in
    /// place (a call that claimed it on the fast path is between its claim
    /// and its write), and returns the slot's time.
    fn settled_time(&self, lane: &Lane, at: Head) -> u64 {
        let backoff = Backoff::new();
        loop {
            let word = lane.slot(at).load(Acquire);
            if word >> TAG_SHIFT == at.previous_tag() {
                return word & TIME_MASK;
            }
            backoff.snooze();
        }
    }

    /// The `n` earliest-free slots across the lanes, with the flag raised
    /// (no head moves): how many to take from each lane (in lane order, from
    /// its head), and the time the last of them frees. A lane's slots free
    /// in the order of its ring, so this merges the lanes' rings.
    fn earliest_slots(&self, n: u64) -> ([u64; MAX_LANES], u64) {
        let mut taken = [0; MAX_LANES];
        let heads: Vec<Head> = self
            .lanes()
            .iter()
            .map(|lane| Head::decode(lane.head.load(Acquire)))
            .collect();
        let next_time = |lane: usize, taken: u64| {
            let l = self.lane(lane);
            (taken < l.len()).then(|| self.settled_time(l, heads[lane].plus(taken, l.len())))
        };
        let mut candidates: Vec<Option<u64>> = (0..=self.lane_mask)
            .map(|lane| next_time(lane, 0))
            .collect();
        let mut free_at = 0;
        for _ in 0..n {
            // `n` is at most the ring's length: some lane has a slot left.
            let Some((lane, time)) = candidates
                .iter()
                .enumerate()
                .filter_map(|(lane, time)| Some((lane, (*time)?)))
                .min_by_key(|&(_, time)| time)
            else {
                break;
            };
            free_at = free_at.max(time);
            taken[lane] += 1;
            candidates[lane] = next_time(lane, taken[lane]);
        }
        (taken, free_at)
    }
}

impl Schedule for RingSchedule {
    #[inline]
    fn capacity(&self) -> u64 {
        self.limit
    }

    #[inline(always)]
    fn try_take(&self, now: u64, n: u64) -> Attempt {
        if n == 1 {
            return self.try_take_one(now);
        }
        // Several permits on the fast path come from the home lane alone;
        // anything else is the line's (which takes them across the lanes).
        let lane = self.lane(home_lane());
        if n > lane.len() {
            return Attempt::Busy;
        }
        let mut word = lane.head.load(Acquire);
        loop {
            if word & WAITING != 0 {
                return Attempt::Closed;
            }
            let head = Head::decode(word);
            let mut free_at = 0;
            let mut stale = None;
            for offset in 0..n {
                let slot = head.plus(offset, lane.len());
                let slot_word = lane.slot(slot).load(Acquire);
                if slot_word >> TAG_SHIFT != slot.previous_tag() {
                    stale = Self::moved_on(lane, word, slot, slot_word);
                    if stale.is_none() {
                        return Attempt::Busy;
                    }
                    break;
                }
                free_at = free_at.max(slot_word & TIME_MASK);
            }
            if let Some(current) = stale {
                word = current;
                continue;
            }
            // Read after the slots: a laid-out slot's write orders the
            // origin before it.
            let at = self.since_origin(now);
            if free_at > at {
                return Attempt::Busy;
            }
            // `n` is at most the lane's length: one lap at most.
            let next = head.plus(n, lane.len());
            match lane
                .head
                .compare_exchange_weak(word, next.encode(), AcqRel, Acquire)
            {
                Ok(_) => {
                    self.fill(lane, head, n, at);
                    return Attempt::Taken;
                }
                Err(current) => word = current,
            }
        }
    }

    fn maintain(&self, _held: &Line, now: u64) {
        if !self.unstarted.load(Relaxed) {
            return;
        }
        self.unstarted.store(false, Relaxed);
        self.origin.store(now, Relaxed);
        // Balanced: the `i`-th permit overall frees at `⌊i·P/N⌋`, dealt to
        // the lanes in turn (lane `r`'s `j`-th slot is permit `j·lanes + r`),
        // so every lane's ring is in order and the merge of all lanes is the
        // one ring's spread.
        let (slots, period) = (u128::from(self.limit), u128::from(self.period));
        let lanes = self.lanes().len() as u128;
        for (r, lane) in self.lanes().iter().enumerate() {
            for j in 0..lane.len() {
                let offset = if self.balanced {
                    let permit = u128::from(j) * lanes + r as u128;
                    u64::try_from(permit * period / slots).unwrap_or(NEVER - 1)
                } else {
                    0
                };
                // Release: a call that sees the layout sees the origin.
                lane.slot(Head { lap: 0, index: j }).store(
                    Head { lap: 3, index: 0 }.slot_word(offset.min(NEVER - 1)),
                    Release,
                );
            }
        }
    }

    fn set_waiting(&self, _held: &Line, waiting: bool) {
        for lane in self.lanes() {
            if waiting {
                lane.head.fetch_or(WAITING, AcqRel);
            } else {
                lane.head.fetch_and(!WAITING, AcqRel);
            }
        }
    }

    fn earliest(&self, _held: &Line, now: u64, n: u64) -> u64 {
        let (_, free_at) = self.earliest_slots(n);
        now.max(self.instant(free_at))
    }

    fn record(&self, _held: &Line, at: u64, n: u64) {
        // The flag is raised: nothing else moves the heads meanwhile, and
        // the slots chosen are those `earliest` chose.
        let (taken, _) = self.earliest_slots(n);
        let at = self.since_origin(at);
        for (lane, &count) in self.lanes().iter().zip(&taken) {
            if count == 0 {
                continue;
            }
            let word = lane.head.load(Acquire);
            let head = Head::decode(word);
            let next = head.plus(count, lane.len());
            lane.head.store(word & WAITING | next.encode(), Release);
            self.fill(lane, head, count, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waiter::jitter::{Jitter, JitterSource};

    const MS: u64 = 1_000_000;

    fn ring(limit: u64, period_ms: u64, balanced: bool) -> RingSchedule {
        laned(limit, period_ms, balanced, 1)
    }

    fn laned(limit: u64, period_ms: u64, balanced: bool, lanes: usize) -> RingSchedule {
        let rate = Rate::from_nanos(limit, period_ms * MS).unwrap();
        RingSchedule::with_lanes(rate, balanced, lanes).unwrap()
    }

    /// The only lane of a one-lane ring.
    fn lane(r: &RingSchedule) -> &Lane {
        r.lane(0)
    }

    fn held() -> Line {
        Line::new(JitterSource::new(Jitter::NONE))
    }

    /// Takes `n` permits as early as allowed from `now` on, as a lone
    /// waiter does; the instant they are recorded at.
    fn take(ring: &RingSchedule, now: u64, n: u64) -> u64 {
        let line = held();
        if ring.try_take(now, n) == Attempt::Taken {
            return now;
        }
        ring.maintain(&line, now);
        if ring.try_take(now, n) == Attempt::Taken {
            return now;
        }
        ring.set_waiting(&line, true);
        let at = ring.earliest(&line, now, n);
        ring.record(&line, at, n);
        ring.set_waiting(&line, false);
        at
    }

    #[test]
    fn unbalanced_bursts_n_then_waits_for_the_oldest() {
        let r = ring(3, 1_000, false);
        let mut now = 10 * MS;
        let times: Vec<u64> = (0..7)
            .map(|_| {
                now = take(&r, now, 1);
                now
            })
            .collect();
        assert_eq!(
            times,
            [10, 10, 10, 1_010, 1_010, 1_010, 2_010].map(|ms| ms * MS)
        );
    }

    #[test]
    fn balanced_spreads_the_first_n_over_the_interval() {
        let r = ring(3, 1_000, true);
        let start = 5 * MS;
        let mut now = start;
        let times: Vec<u64> = (0..6)
            .map(|_| {
                now = take(&r, now, 1);
                now - start
            })
            .collect();
        // ⌊i·1000/3⌋ ms for the first three, then one interval after each.
        assert_eq!(
            times,
            [
                0,
                333_333_333,
                666_666_666,
                1_000 * MS,
                1_333_333_333,
                1_666_666_666
            ]
        );
    }

    #[test]
    fn a_balanced_first_call_for_several_goes_with_its_last_permit() {
        let r = ring(4, 1_000, true);
        assert_eq!(take(&r, 7 * MS, 3), 507 * MS);
        assert_eq!(take(&r, 507 * MS, 1), 757 * MS);
        assert_eq!(take(&r, 757 * MS, 1), 1_507 * MS);
    }

    #[test]
    fn several_permits_wait_for_the_last_of_their_slots() {
        let r = ring(4, 1_000, false);
        assert_eq!(take(&r, 0, 1), 0);
        assert_eq!(take(&r, 100 * MS, 1), 100 * MS);
        assert_eq!(take(&r, 200 * MS, 2), 200 * MS);
        // The ring is full; three permits wait for the third oldest (200 ms).
        assert_eq!(take(&r, 300 * MS, 3), 1_200 * MS);
        assert_eq!(take(&r, 1_200 * MS, 1), 1_200 * MS);
        // A whole ring's worth, across the wrap.
        assert_eq!(take(&r, 1_200 * MS, 4), 2_200 * MS);
    }

    #[test]
    fn nothing_is_free_before_the_layout() {
        let r = ring(2, 1_000, false);
        assert_eq!(r.try_take(0, 1), Attempt::Busy);
        r.maintain(&held(), 0);
        assert_eq!(r.try_take(0, 1), Attempt::Taken);
    }

    #[test]
    fn the_waiting_flag_closes_the_fast_path() {
        let r = ring(2, 1_000, false);
        let line = held();
        r.maintain(&line, 0);
        r.set_waiting(&line, true);
        assert_eq!(r.try_take(0, 1), Attempt::Closed);
        r.set_waiting(&line, false);
        assert_eq!(r.try_take(0, 1), Attempt::Taken);
    }

    #[test]
    fn a_slot_claimed_but_not_yet_written_is_not_free() {
        // One slot: claim it as the fast path does, without writing it yet.
        let r = ring(1, 1_000, false);
        let line = held();
        r.maintain(&line, 0);
        let claimed = Head::decode(lane(&r).head.load(Relaxed));
        lane(&r).head.store(claimed.plus(1, 1).encode(), Relaxed);
        // Its old time says "free", but the lap tag says "not written".
        assert_eq!(r.try_take(5_000 * MS, 1), Attempt::Busy);
        r.set_waiting(&line, true);
        // The front waits for the write, then reads the new time, not the
        // old one (0).
        std::thread::scope(|s| {
            let front = s.spawn(|| r.earliest(&line, 0, 1));
            r.fill(lane(&r), claimed, 1, 10 * MS);
            assert_eq!(front.join().unwrap(), 1_010 * MS);
        });
    }

    #[test]
    fn a_head_read_before_another_claim_is_read_again_not_busy() {
        let r = ring(4, 1_000, false);
        r.maintain(&held(), 0);
        let stale = lane(&r).head.load(Relaxed);
        let at = Head::decode(stale);
        // Another call claims and writes the slot after `stale` was read.
        assert_eq!(r.try_take(0, 1), Attempt::Taken);
        let written = lane(&r).slot(at).load(Relaxed);
        assert_eq!(
            RingSchedule::moved_on(lane(&r), stale, at, written),
            Some(lane(&r).head.load(Relaxed))
        );
        // A write still pending from the previous lap is not a moved head.
        let pending = Head { lap: 2, index: 0 }.slot_word(0);
        assert_eq!(RingSchedule::moved_on(lane(&r), stale, at, pending), None);
    }

    /// Lays `r` out with every slot free, lets two threads each take
    /// `per_thread` permits one by one on the fast path, and counts the
    /// calls that did not get theirs.
    fn busy_answers_of_two_threads(r: &RingSchedule, per_thread: u64) -> u64 {
        r.maintain(&held(), 0);
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        (0..per_thread)
                            .filter(|_| r.try_take(MS, 1) != Attempt::Taken)
                            .count() as u64
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        })
    }

    #[test]
    fn free_permits_are_taken_on_the_fast_path_under_contention() {
        // More slots than permits taken, all free from the start: nothing
        // ever makes a call leave the fast path, however the two threads'
        // reads of the head and the slots interleave. One lane: both
        // threads on one head.
        let r = ring(MAX_RING, 1_000, false);
        let per_thread = MAX_RING / 2 - 1;
        assert_eq!(busy_answers_of_two_threads(&r, per_thread), 0);
        assert_eq!(
            Head::decode(lane(&r).head.load(Relaxed)).index,
            2 * per_thread
        );
    }

    #[test]
    fn free_permits_are_taken_on_the_fast_path_across_lanes() {
        // Four lanes, two threads taking all but two of the slots: each
        // thread moves on when its lane runs out or another thread shares
        // it, and none ever finds every lane busy while slots are free.
        let r = laned(MAX_RING, 1_000, false, 4);
        let per_thread = MAX_RING / 2 - 1;
        assert_eq!(busy_answers_of_two_threads(&r, per_thread), 0);
        let used: u64 = r
            .lanes()
            .iter()
            .map(|lane| {
                let head = Head::decode(lane.head.load(Relaxed));
                head.lap * lane.len() + head.index
            })
            .sum();
        assert_eq!(used, 2 * per_thread);
        // The last two slots, then nothing until the interval is over.
        assert_eq!(r.try_take(MS, 1), Attempt::Taken);
        assert_eq!(r.try_take(MS, 1), Attempt::Taken);
        assert_eq!(r.try_take(MS, 1), Attempt::Busy);
        assert_eq!(r.try_take(1_001 * MS, 1), Attempt::Taken);
    }

    #[test]
    fn one_thread_drains_every_lane_then_waits_for_the_earliest() {
        let r = laned(256, 1_000, false, 4);
        assert_eq!(take(&r, 0, 1), 0);
        for k in 1..256 {
            assert_eq!(take(&r, k * MS / 1000, 1), k * MS / 1000, "permit {k}");
        }
        // Every slot is busy; the earliest frees one interval after the
        // first permit, wherever its lane.
        assert_eq!(r.try_take(MS, 1), Attempt::Busy);
        assert_eq!(take(&r, MS, 1), 1_000 * MS);
        assert_eq!(take(&r, MS, 3), 1_000 * MS + 3 * MS / 1000);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Random calls on random rings: one lane and several, from any
        /// home lane, release every call at the same instant.
        #[test]
        fn lanes_never_change_a_decision(
            limit in 8..400u64,
            lanes in proptest::sample::select(vec![2usize, 4, 8]),
            home in 0..8usize,
            balanced in proptest::bool::ANY,
            calls in proptest::collection::vec((0..1_500 * MS, 1..=8u64, 0..3u8), 1..80),
        ) {
            let one = laned(limit, 1_000, balanced, 1);
            let many = laned(limit, 1_000, balanced, lanes.min(limit as usize));
            let (mut a, mut b) = (0, 0);
            for (step, &(gap, n, together)) in calls.iter().enumerate() {
                let arrival = if together == 0 { a } else { a + gap };
                a = take(&one, arrival, n);
                set_home_lane(home + step % 3);
                b = take(&many, b.max(arrival), n);
                proptest::prop_assert_eq!(a, b, "call {}", step);
            }
        }
    }

    #[test]
    fn lane_counts_follow_cores_and_size() {
        assert_eq!(lane_count(1_000_000, 1), 1);
        assert_eq!(lane_count(1_000_000, 2), 2);
        assert_eq!(lane_count(1_000_000, 3), 2);
        assert_eq!(lane_count(1_000_000, 64), MAX_LANES);
        assert_eq!(lane_count(2 * MIN_LANE - 1, 8), 1);
        assert_eq!(lane_count(2 * MIN_LANE, 8), 2);
        assert_eq!(lane_count(5, 8), 1);
    }

    #[test]
    fn uneven_lanes_cover_every_slot_once() {
        let r = laned(1_003, 1_000, true, 4);
        let lens: Vec<u64> = r.lanes().iter().map(|lane| lane.len()).collect();
        assert_eq!(lens, [251, 251, 251, 250]);
        // Balanced: the 1,003 permits of the first interval, one every
        // ⌊P/N⌋ or so, all from the fast path or the front of the line.
        let mut now = 0;
        for k in 0..1_003u64 {
            now = take(&r, now, 1);
            assert_eq!(now, (u128::from(k) * 1_000 * u128::from(MS) / 1_003) as u64);
        }
    }

    #[test]
    fn permits_recorded_out_of_order_still_keep_the_window() {
        // Two threads read the clock at 105 ms and 100 ms and claim in the
        // opposite order: each slot still binds the permit N claims later.
        let r = ring(2, 1_000, false);
        r.maintain(&held(), 0);
        assert_eq!(r.try_take(105 * MS, 1), Attempt::Taken);
        assert_eq!(r.try_take(100 * MS, 1), Attempt::Taken);
        assert_eq!(r.try_take(1_104 * MS, 1), Attempt::Busy);
        assert_eq!(r.try_take(1_105 * MS, 1), Attempt::Taken);
    }

    #[test]
    fn oversized_rings_are_an_error() {
        let rate = Rate::per_second(MAX_RING + 1).unwrap();
        assert!(matches!(
            RingSchedule::new(rate, false),
            Err(WaiterError::RingTooLarge { .. })
        ));
        let largest = RingSchedule::new(Rate::per_second(MAX_RING).unwrap(), true).unwrap();
        assert_eq!(largest.capacity(), MAX_RING);
    }
}
