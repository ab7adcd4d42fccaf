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

use tollgate_core::Rate;

use super::error::WaiterError;
use super::schedule::Schedule;

/// The largest `N` a ring holds: eight bytes a slot make this 8 MiB. For
/// larger limits, use [`GcraSchedule`](super::GcraSchedule), whose state is
/// one integer.
pub const MAX_RING: u64 = 1 << 20;

/// At most `N` permits in any span of one interval: the ring of Shopify's
/// `limiter` gem. See the [module docs](self) for the exact rule and what
/// "balanced" does.
#[derive(Debug, Clone)]
pub struct RingSchedule {
    /// When each of the last `N` permits' slots frees, oldest at `head`.
    free_at: Box<[u64]>,
    head: usize,
    period: u64,
    /// The instant of the latest permit, so recorded instants never go
    /// backwards even when callers read the clock just before each other.
    latest: u64,
    balanced: bool,
    /// No call has arrived yet; a balanced ring lays out its slots at the
    /// first.
    unstarted: bool,
}

impl RingSchedule {
    /// `rate.limit()` permits in any span of `rate.period()`, the first `N`
    /// at once.
    pub fn new(rate: Rate) -> Result<Self, WaiterError> {
        Self::build(rate, false)
    }

    /// Like [`new`](Self::new), but the first `N` permits are spread evenly
    /// over the first interval.
    pub fn balanced(rate: Rate) -> Result<Self, WaiterError> {
        Self::build(rate, true)
    }

    fn build(rate: Rate, balanced: bool) -> Result<Self, WaiterError> {
        let limit = rate.limit();
        if limit > MAX_RING {
            return Err(WaiterError::RingTooLarge {
                limit,
                max: MAX_RING,
            });
        }
        let slots = usize::try_from(limit).map_err(|_| WaiterError::RingTooLarge {
            limit,
            max: MAX_RING,
        })?;
        Ok(RingSchedule {
            free_at: vec![0; slots].into_boxed_slice(),
            head: 0,
            period: rate.period_nanos(),
            latest: 0,
            balanced,
            unstarted: true,
        })
    }

    /// Whether the first `N` permits are spread over the first interval.
    pub fn is_balanced(&self) -> bool {
        self.balanced
    }

    /// Lays out a balanced ring's slots from the first call's arrival.
    #[cold]
    fn start(&mut self, arrival: u64) {
        self.unstarted = false;
        if self.balanced {
            let (slots, period) = (self.free_at.len() as u128, u128::from(self.period));
            for (i, free) in self.free_at.iter_mut().enumerate() {
                let offset = u64::try_from(i as u128 * period / slots).unwrap_or(u64::MAX);
                *free = arrival.saturating_add(offset);
            }
        }
    }

    /// The slot `offset` places after the oldest.
    #[inline]
    fn slot(&self, offset: usize) -> usize {
        let i = self.head + offset;
        if i >= self.free_at.len() {
            i - self.free_at.len()
        } else {
            i
        }
    }
}

impl Schedule for RingSchedule {
    #[inline]
    fn capacity(&self) -> u64 {
        self.free_at.len() as u64
    }

    #[inline]
    fn earliest(&self, now: u64, n: u64) -> u64 {
        // Slots free in ring order, so the `n`-th oldest frees last of the
        // `n`. `n` is at most the ring's length, which fits a `usize`.
        let offset = usize::try_from(n.saturating_sub(1)).unwrap_or(usize::MAX);
        now.max(self.free_at[self.slot(offset.min(self.free_at.len() - 1))])
    }

    #[inline]
    fn record(&mut self, at: u64, n: u64) {
        if self.unstarted {
            self.start(at);
        }
        let at = at.max(self.latest);
        self.latest = at;
        let free = at.saturating_add(self.period);
        for _ in 0..n.min(self.capacity()) {
            self.free_at[self.head] = free;
            self.head = self.slot(1);
        }
    }

    #[inline]
    fn try_record(&mut self, now: u64, n: u64) -> bool {
        if self.unstarted {
            self.start(now);
        }
        let now = now.max(self.latest);
        if n == 1 {
            // The common case in one comparison and one store.
            if self.free_at[self.head] > now {
                return false;
            }
            self.latest = now;
            self.free_at[self.head] = now.saturating_add(self.period);
            self.head = self.slot(1);
            return true;
        }
        if self.earliest(now, n) <= now {
            self.record(now, n);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ring(limit: u64, period_ms: u64, balanced: bool) -> RingSchedule {
        let rate = Rate::from_nanos(limit, period_ms * MS).unwrap();
        RingSchedule::build(rate, balanced).unwrap()
    }

    /// Takes `n` permits as early as allowed from `now` on, as a waiter
    /// does; the instant they are recorded at.
    fn take(ring: &mut RingSchedule, now: u64, n: u64) -> u64 {
        if !ring.try_record(now, n) {
            let at = ring.earliest(now, n);
            ring.record(at, n);
        }
        ring.latest
    }

    #[test]
    fn unbalanced_bursts_n_then_waits_for_the_oldest() {
        let mut r = ring(3, 1_000, false);
        let times: Vec<u64> = (0..7).map(|_| take(&mut r, 10 * MS, 1)).collect();
        assert_eq!(
            times,
            [10, 10, 10, 1_010, 1_010, 1_010, 2_010].map(|ms| ms * MS)
        );
    }

    #[test]
    fn balanced_spreads_the_first_n_over_the_interval() {
        let mut r = ring(3, 1_000, true);
        let start = 5 * MS;
        let times: Vec<u64> = (0..6).map(|_| take(&mut r, start, 1) - start).collect();
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
        let mut r = ring(4, 1_000, true);
        assert_eq!(take(&mut r, 7 * MS, 3), 507 * MS);
        assert_eq!(take(&mut r, 7 * MS, 1), 757 * MS);
        assert_eq!(take(&mut r, 7 * MS, 1), 1_507 * MS);
    }

    #[test]
    fn several_permits_wait_for_the_nth_oldest_slot() {
        let mut r = ring(4, 1_000, false);
        assert_eq!(take(&mut r, 0, 1), 0);
        assert_eq!(take(&mut r, 100 * MS, 1), 100 * MS);
        assert_eq!(take(&mut r, 200 * MS, 2), 200 * MS);
        // The ring is full; three permits wait for the third oldest (200 ms).
        assert_eq!(take(&mut r, 300 * MS, 3), 1_200 * MS);
        assert_eq!(take(&mut r, 1_200 * MS, 1), 1_200 * MS);
    }

    #[test]
    fn the_fast_path_agrees_with_earliest_and_record() {
        let mut fast = ring(3, 10, false);
        let mut slow = fast.clone();
        for now in (0..100).map(|i| i * 2 * MS) {
            let expected = slow.earliest(now, 1) <= now;
            if expected {
                slow.record(now, 1);
            }
            assert_eq!(fast.try_record(now, 1), expected, "at {now}");
        }
        assert_eq!(fast.free_at, slow.free_at);
    }

    #[test]
    fn instants_never_go_backwards() {
        let mut r = ring(2, 1_000, false);
        r.record(50 * MS, 1);
        r.record(40 * MS, 1);
        assert_eq!(r.earliest(0, 2), 1_050 * MS);
    }

    #[test]
    fn oversized_rings_are_an_error() {
        let rate = Rate::per_second(MAX_RING + 1).unwrap();
        assert!(matches!(
            RingSchedule::new(rate),
            Err(WaiterError::RingTooLarge { .. })
        ));
        assert_eq!(
            RingSchedule::new(Rate::per_second(MAX_RING).unwrap())
                .unwrap()
                .capacity(),
            MAX_RING
        );
    }
}
