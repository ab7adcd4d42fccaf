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
//! Concurrency: the fast path is one compare-and-swap on the head word (the
//! lap and index of the next slot, and the "calls are waiting" flag), after
//! which the winner writes the slots it claimed. Each slot carries the lap
//! it was written in (two bits), so a call that reaches a slot whose write
//! from the previous lap is still pending sees it as not free rather than
//! reading a stale time. Permits claimed concurrently may be recorded out of
//! clock order by a few nanoseconds; the rule still holds, because it binds
//! every permit to the one `N` claims before it: among any `N + 1` permits
//! two share a slot, so they are at least `P` apart.

use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed,
    Ordering::Release,
};

use crossbeam_utils::Backoff;
use tollgate_core::Rate;

use super::error::WaiterError;
use super::line::Line;
use super::schedule::{Attempt, Schedule};

/// The largest `N` a ring holds: eight bytes a slot make this 8 MiB. For
/// larger limits, use a [`GcraWaiter`](super::GcraWaiter), whose state is one
/// integer.
pub const MAX_RING: u64 = 1 << INDEX_BITS;

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

/// At most `N` permits in any span of one interval (see the module docs).
#[derive(Debug)]
pub(crate) struct RingSchedule {
    slots: Box<[AtomicU64]>,
    head: AtomicU64,
    /// The instant slot times count from: the first call's arrival.
    origin: AtomicU64,
    period: u64,
    balanced: bool,
    /// Read and written only with the line locked.
    unstarted: AtomicBool,
}

/// The next slot to claim.
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

    /// The slot `offset` places on, and its lap, in a ring of `len` slots
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
    /// spreads the first `N` over the first interval.
    pub(crate) fn new(rate: Rate, balanced: bool) -> Result<Self, WaiterError> {
        let limit = rate.limit();
        if limit > MAX_RING {
            return Err(WaiterError::RingTooLarge {
                limit,
                max: MAX_RING,
            });
        }
        // Lap 0 claims slots last written "in lap -1", tag 3; none is free
        // until the first call lays the ring out.
        let unlaid = Head { lap: 3, index: 0 }.slot_word(NEVER);
        Ok(RingSchedule {
            slots: (0..limit).map(|_| AtomicU64::new(unlaid)).collect(),
            head: AtomicU64::new(0),
            origin: AtomicU64::new(0),
            period: rate.period_nanos(),
            balanced,
            unstarted: AtomicBool::new(true),
        })
    }

    /// Whether the first `N` permits are spread over the first interval.
    pub(crate) fn is_balanced(&self) -> bool {
        self.balanced
    }

    #[inline]
    fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    #[inline]
    fn slot(&self, at: Head) -> &AtomicU64 {
        // `at.index` is below the length by construction; indexing checks.
        &self.slots[at.index as usize]
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

    /// Writes the slots `head` and the `n - 1` after it: taken at `at`
    /// (nanoseconds since the origin).
    #[inline]
    fn fill(&self, head: Head, n: u64, at: u64) {
        let free = at.saturating_add(self.period).min(NEVER - 1);
        for offset in 0..n {
            let slot = head.plus(offset, self.len());
            self.slot(slot).store(slot.slot_word(free), Release);
        }
    }

    /// [`try_take`](Schedule::try_take) for one permit, the common case,
    /// with each step done once.
    #[inline(always)]
    fn try_take_one(&self, now: u64) -> Attempt {
        let mut word = self.head.load(Acquire);
        loop {
            if word & WAITING != 0 {
                return Attempt::Closed;
            }
            let head = Head::decode(word);
            let slot = self.slot(head);
            let slot_word = slot.load(Acquire);
            if slot_word >> TAG_SHIFT != head.previous_tag() {
                match self.moved_on(word, head, slot_word) {
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
            let next = if head.index + 1 < self.len() {
                word + 1
            } else {
                Head {
                    lap: head.lap.wrapping_add(1),
                    index: 0,
                }
                .encode()
            };
            match self.head.compare_exchange_weak(word, next, AcqRel, Acquire) {
                Ok(_) => {
                    // `at` is below `NEVER - 1` and the period below 2^62:
                    // the sum cannot overflow.
                    let free = (at + self.period).min(NEVER - 1);
                    slot.store(head.slot_word(free), Release);
                    return Attempt::Taken;
                }
                Err(current) => word = current,
            }
        }
    }

    /// A slot at `at` (reached from the head word `word`) carries another
    /// tag than its previous lap's: either a write of the previous lap is
    /// still pending (the permits are not free yet), or the slot was claimed
    /// in its own lap already and `word` is stale. In the second case the
    /// head has moved on since `word` was read: the head word to try again
    /// with. (Without this, a call that read the head just before another
    /// thread claimed and wrote the slot left the fast path for the line.)
    #[inline]
    fn moved_on(&self, word: u64, at: Head, slot_word: u64) -> Option<u64> {
        if slot_word >> TAG_SHIFT != at.lap & 3 {
            return None;
        }
        let current = self.head.load(Acquire);
        (current != word).then_some(current)
    }

    /// Waits until the previous lap's write to the slot at `at` is in
    /// place (a call that claimed it on the fast path is between its claim
    /// and its write), and returns the slot's time.
    fn settled_time(&self, at: Head) -> u64 {
        let backoff = Backoff::new();
        loop {
            let word = self.slot(at).load(Acquire);
            if word >> TAG_SHIFT == at.previous_tag() {
                return word & TIME_MASK;
            }
            backoff.snooze();
        }
    }
}

impl Schedule for RingSchedule {
    #[inline]
    fn capacity(&self) -> u64 {
        self.len()
    }

    #[inline(always)]
    fn try_take(&self, now: u64, n: u64) -> Attempt {
        if n == 1 {
            return self.try_take_one(now);
        }
        let len = self.len();
        let mut word = self.head.load(Acquire);
        loop {
            if word & WAITING != 0 {
                return Attempt::Closed;
            }
            let head = Head::decode(word);
            let mut free_at = 0;
            let mut stale = None;
            for offset in 0..n {
                let slot = head.plus(offset, len);
                let slot_word = self.slot(slot).load(Acquire);
                if slot_word >> TAG_SHIFT != slot.previous_tag() {
                    stale = self.moved_on(word, slot, slot_word);
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
            // `n` is at most the ring's length: one lap at most.
            let next = head.plus(n, len);
            match self
                .head
                .compare_exchange_weak(word, next.encode(), AcqRel, Acquire)
            {
                Ok(_) => {
                    self.fill(head, n, at);
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
        let (slots, period) = (self.slots.len() as u128, u128::from(self.period));
        for (i, slot) in self.slots.iter().enumerate() {
            let offset = if self.balanced {
                u64::try_from(i as u128 * period / slots).unwrap_or(NEVER - 1)
            } else {
                0
            };
            // Release: a call that sees the layout sees the origin.
            slot.store(
                Head { lap: 3, index: 0 }.slot_word(offset.min(NEVER - 1)),
                Release,
            );
        }
    }

    fn set_waiting(&self, _held: &Line, waiting: bool) {
        if waiting {
            self.head.fetch_or(WAITING, AcqRel);
        } else {
            self.head.fetch_and(!WAITING, AcqRel);
        }
    }

    fn earliest(&self, _held: &Line, now: u64, n: u64) -> u64 {
        let head = Head::decode(self.head.load(Acquire));
        let free_at = (0..n)
            .map(|offset| self.settled_time(head.plus(offset, self.len())))
            .max()
            .unwrap_or(0);
        now.max(self.instant(free_at))
    }

    fn record(&self, _held: &Line, at: u64, n: u64) {
        let word = self.head.load(Acquire);
        let head = Head::decode(word);
        let next = head.plus(n, self.len());
        // The flag is raised: nothing else moves the head meanwhile.
        self.head.store(word & WAITING | next.encode(), Release);
        self.fill(head, n, self.since_origin(at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waiter::jitter::{Jitter, JitterSource};

    const MS: u64 = 1_000_000;

    fn ring(limit: u64, period_ms: u64, balanced: bool) -> RingSchedule {
        let rate = Rate::from_nanos(limit, period_ms * MS).unwrap();
        RingSchedule::new(rate, balanced).unwrap()
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
        let claimed = Head::decode(r.head.load(Relaxed));
        r.head.store(claimed.plus(1, 1).encode(), Relaxed);
        // Its old time says "free", but the lap tag says "not written".
        assert_eq!(r.try_take(5_000 * MS, 1), Attempt::Busy);
        r.set_waiting(&line, true);
        // The front waits for the write, then reads the new time, not the
        // old one (0).
        std::thread::scope(|s| {
            let front = s.spawn(|| r.earliest(&line, 0, 1));
            r.fill(claimed, 1, 10 * MS);
            assert_eq!(front.join().unwrap(), 1_010 * MS);
        });
    }

    #[test]
    fn a_head_read_before_another_claim_is_read_again_not_busy() {
        let r = ring(4, 1_000, false);
        r.maintain(&held(), 0);
        let stale = r.head.load(Relaxed);
        let at = Head::decode(stale);
        // Another call claims and writes the slot after `stale` was read.
        assert_eq!(r.try_take(0, 1), Attempt::Taken);
        let written = r.slot(at).load(Relaxed);
        assert_eq!(r.moved_on(stale, at, written), Some(r.head.load(Relaxed)));
        // A write still pending from the previous lap is not a moved head.
        let pending = Head { lap: 2, index: 0 }.slot_word(0);
        assert_eq!(r.moved_on(stale, at, pending), None);
    }

    #[test]
    fn free_permits_are_taken_on_the_fast_path_under_contention() {
        // More slots than permits taken, all free from the start: nothing
        // ever makes a call leave the fast path, however the two threads'
        // reads of the head and the slots interleave.
        let r = ring(MAX_RING, 1_000, false);
        r.maintain(&held(), 0);
        let per_thread = MAX_RING / 2 - 1;
        let busy: u64 = std::thread::scope(|s| {
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
        });
        assert_eq!(busy, 0);
        assert_eq!(Head::decode(r.head.load(Relaxed)).index, 2 * per_thread);
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
