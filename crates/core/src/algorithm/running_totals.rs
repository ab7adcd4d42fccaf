//! Ordered counts with running totals: the state shared by the sliding log
//! (one mark per instant) and the stepped window (one mark per step).
//!
//! Each mark is a position (an instant, or a step index) and the running
//! total of costs up to and including it. Counting what lies at or after a
//! position, dropping what lies before one, and finding the mark whose
//! leaving lets a cost fit are then a short scan from the front or a binary
//! search. The first mark lives inside the value (32 bytes in all); more
//! move to the heap.

use super::codec::{put_len, put_u64, Reader, MAX_ENTRIES};
use super::small_deque::SmallDeque;

/// Marks kept inside the value before they move to the heap. Two: a key
/// checked about once per window holds one mark or two, and with one inline
/// the second spilled to the heap and came back on every other check (an
/// allocation and a free each time; over 131,072 keys from two threads the
/// sliding log then took 2.2x a `gcra` check, against 1.4x with two inline;
/// docs/benchmarks.md). The state is 48 bytes and a keyed entry 56.
const INLINE: usize = 2;

/// Marks looked at one by one from the front before a binary search: what
/// has left the window is dropped on every count, so usually few are there.
const FRONT_SCAN: usize = 8;

/// A position and the running total of costs up to and including it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) at: u64,
    pub(crate) total: u64,
}

/// Marks in increasing position order, and the running total before the
/// oldest one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunningTotals {
    marks: SmallDeque<Mark, INLINE>,
    dropped_total: u64,
}

impl RunningTotals {
    pub(crate) fn newest(&self) -> Option<Mark> {
        self.marks.back().copied()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.marks.len()
    }

    /// Everything ever added (and not forgotten with the whole value).
    pub(crate) fn total(&self) -> u64 {
        self.newest().map_or(self.dropped_total, |m| m.total)
    }

    fn total_before(&self, index: usize) -> u64 {
        match index.checked_sub(1).and_then(|i| self.marks.get(i)) {
            Some(mark) => mark.total,
            None => self.dropped_total,
        }
    }

    /// Index of the first mark at or after `position`, and the running total
    /// before it.
    #[inline]
    pub(crate) fn first_from(&self, position: u64) -> (usize, u64) {
        // What has left the window is dropped on every count, so the answer
        // is usually among the first few marks: look at those one by one
        // before a binary search.
        let (front, _) = self.marks.as_slices();
        let mut before = self.dropped_total;
        for (index, mark) in front.iter().take(FRONT_SCAN).enumerate() {
            if mark.at >= position {
                return (index, before);
            }
            before = mark.total;
        }
        let index = self.marks.partition_point(|m| m.at < position);
        (index, self.total_before(index))
    }

    /// The costs at or after `position`.
    #[inline]
    pub(crate) fn count_from(&self, position: u64) -> u64 {
        self.total() - self.first_from(position).1
    }

    /// Forgets the marks before `position`.
    #[inline]
    pub(crate) fn drop_before(&mut self, position: u64) {
        let (count, before) = self.first_from(position);
        self.drop_first(count, before);
    }

    /// [`drop_first`](Self::drop_first) then [`add`](Self::add) at a
    /// `position` after every mark: when every mark goes (a key idle for a
    /// whole window, the common case over many keys), the value restarts
    /// with the one new mark.
    #[inline]
    pub(crate) fn drop_first_and_add(
        &mut self,
        count: usize,
        before: u64,
        position: u64,
        cost: u64,
    ) {
        if count > 0 && count == self.marks.len() {
            self.dropped_total = before;
            self.marks.restart(Mark {
                at: position,
                total: before + cost,
            });
            return;
        }
        self.drop_first(count, before);
        self.add(position, cost);
    }

    /// Forgets the first `count` marks, whose running total is `before`
    /// (what [`first_from`](Self::first_from) answered).
    #[inline]
    pub(crate) fn drop_first(&mut self, count: usize, before: u64) {
        if count > 0 {
            self.marks.drop_front(count);
            self.dropped_total = before;
        }
    }

    /// Rebases the running totals on the oldest mark (only differences
    /// count) and returns how much more they can take before reaching
    /// `u64::MAX / 2`, half-way to overflow: a forced record takes at most
    /// that, so that the totals and every sum of a total and a cost stay
    /// exact however large the recorded costs are.
    pub(crate) fn make_room(&mut self) -> u64 {
        let base = self.dropped_total;
        if base > 0 {
            for mark in self.marks.iter_mut_from(0) {
                mark.total -= base;
            }
            self.dropped_total = 0;
        }
        (u64::MAX / 2).saturating_sub(self.total())
    }

    /// Keeps only the newest marks that hold more than `limit` together:
    /// the older ones are folded into the oldest kept mark, whose running
    /// total already includes them, so the total is unchanged and those
    /// costs now leave with it. Whenever a folded mark would still have
    /// counted, the kept marks alone hold more than `limit`, so no question
    /// "does this cost fit within `limit`" is answered differently, nor is
    /// the mark whose leaving lets a cost fit; and since every mark holds a
    /// cost of at least 1, at most `limit + 1` marks remain.
    pub(crate) fn fold_beyond(&mut self, limit: u64) {
        let total = self.total();
        let Some(keep_from) = total.checked_sub(limit).filter(|&t| t > 0) else {
            return;
        };
        // The newest mark whose suffix (itself and everything after) holds
        // more than `limit`: the last one whose running total before it is
        // below `total − limit`, i.e. the first whose predecessor's is not.
        let first = self.marks.partition_point(|m| m.total < keep_from);
        if first > 0 {
            self.marks.drop_front(first);
        }
    }

    /// The oldest mark with a running total of at least `target`: once it
    /// and everything before it have left, at most `total − target` remain.
    pub(crate) fn first_reaching(&self, target: u64) -> Option<Mark> {
        let index = self.marks.partition_point(|m| m.total < target);
        self.marks.get(index).copied()
    }

    /// Adds `cost` at `position`: to the newest mark when it is there, in
    /// order otherwise.
    pub(crate) fn add(&mut self, position: u64, cost: u64) {
        // The common cases first: a request at the newest mark's position
        // (the same instant, or the same step) or after it. Only a booking
        // behind the newest mark needs the search below.
        if let Some(newest) = self.marks.back_mut() {
            if newest.at == position {
                newest.total = newest.total.saturating_add(cost);
                return;
            }
            if newest.at < position {
                let total = newest.total.saturating_add(cost);
                self.marks.push_back(Mark {
                    at: position,
                    total,
                });
                return;
            }
        }
        let index = self.marks.partition_point(|m| m.at < position);
        if self.marks.get(index).is_none_or(|m| m.at != position) {
            let total = self.total_before(index);
            self.marks.insert(
                index,
                Mark {
                    at: position,
                    total,
                },
            );
        }
        for mark in self.marks.iter_mut_from(index) {
            mark.total = mark.total.saturating_add(cost);
        }
    }

    /// Takes up to `cost` off the mark at exactly `position` (a refund of
    /// what was counted there), removing the mark when nothing is left in
    /// it; returns whether such a mark was there. Nothing changes when
    /// there is none: its costs have left, or were folded into a later
    /// mark while the limit refused anyway.
    pub(crate) fn take_at(&mut self, position: u64, cost: u64) -> bool {
        let Ok(index) = self.marks.binary_search_by_key(&position, |m| m.at) else {
            return false;
        };
        let own = self.marks[index].total - self.total_before(index);
        let taken = cost.min(own);
        if taken == own {
            self.marks.remove(index);
        }
        if taken > 0 {
            for mark in self.marks.iter_mut_from(index) {
                mark.total -= taken;
            }
        }
        true
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.marks.heap_bytes()
    }
}

impl RunningTotals {
    /// Appends the marks: the dropped total, the count, then each mark.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.dropped_total);
        put_len(out, self.marks.len());
        for mark in self.marks.iter() {
            put_u64(out, mark.at);
            put_u64(out, mark.total);
        }
    }

    /// Reads what [`encode`](Self::encode) wrote; `None` unless positions
    /// strictly increase and totals never decrease from the dropped total.
    pub(crate) fn decode(input: &mut Reader<'_>) -> Option<RunningTotals> {
        let dropped_total = input.u64()?;
        let len = input.len(MAX_ENTRIES)?;
        let mut totals = RunningTotals {
            marks: SmallDeque::new(),
            dropped_total,
        };
        let mut previous: Option<Mark> = None;
        for _ in 0..len {
            let mark = Mark {
                at: input.u64()?,
                total: input.u64()?,
            };
            let in_order = match previous {
                Some(p) => p.at < mark.at && p.total <= mark.total,
                None => dropped_total <= mark.total,
            };
            if !in_order {
                return None;
            }
            totals.marks.push_back(mark);
            previous = Some(mark);
        }
        Some(totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_drops_and_finds_marks() {
        let mut marks = RunningTotals::default();
        for (at, cost) in [(10, 1), (20, 2), (20, 1), (30, 4), (15, 5)] {
            marks.add(at, cost);
        }
        assert_eq!(marks.len(), 4, "one mark per position");
        assert_eq!(marks.total(), 13);
        assert_eq!(marks.count_from(0), 13);
        assert_eq!(marks.count_from(16), 7);
        assert_eq!(marks.count_from(31), 0);
        assert_eq!(marks.first_reaching(7).map(|m| m.at), Some(20));
        assert_eq!(marks.first_reaching(6).map(|m| m.at), Some(15));
        assert_eq!(marks.first_reaching(14), None);
        marks.drop_before(20);
        assert_eq!(
            (marks.len(), marks.total(), marks.count_from(0)),
            (2, 13, 7)
        );
        assert_eq!(marks.first_reaching(1).map(|m| m.at), Some(20));
    }

    #[test]
    fn folding_keeps_the_newest_marks_holding_more_than_the_limit() {
        let mut marks = RunningTotals::default();
        for (at, cost) in [(10, 2), (20, 3), (30, 1), (40, 2)] {
            marks.add(at, cost);
        }
        // Nothing to fold while the total is within the limit.
        marks.fold_beyond(8);
        assert_eq!(marks.len(), 4);
        // 30 and 40 hold 3 > 2: 10 and 20 fold into 30.
        marks.fold_beyond(2);
        assert_eq!(marks.len(), 2);
        assert_eq!(marks.total(), 8);
        assert_eq!(marks.count_from(25), 8);
        assert_eq!(marks.count_from(31), 2);
        assert_eq!(marks.first_reaching(1).map(|m| m.at), Some(30));
        assert_eq!(marks.first_reaching(7).map(|m| m.at), Some(40));
    }

    #[test]
    fn spills_to_the_heap_only_past_two_marks() {
        let mut marks = RunningTotals::default();
        marks.add(1, 1);
        marks.add(2, 1);
        assert_eq!(marks.heap_bytes(), 0);
        marks.add(3, 1);
        assert!(marks.heap_bytes() > 0);
        assert_eq!(std::mem::size_of::<RunningTotals>(), 48);
    }
}
