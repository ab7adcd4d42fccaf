//! Ordered counts with running totals: the state shared by the sliding log
//! (one mark per instant) and the stepped window (one mark per step).
//!
//! Each mark is a position (an instant, or a step index) and the running
//! total of costs up to and including it. Counting what lies at or after a
//! position, dropping what lies before one, and finding the mark whose
//! leaving lets a cost fit are then a short scan from the front or a binary
//! search. The first two marks live inside the value; more move to the heap.

use super::codec::{put_len, put_u64, Reader, MAX_ENTRIES};
use super::small_deque::SmallDeque;

/// Marks kept inside the value before they move to the heap: a key checked
/// at a steady pace usually holds one or two.
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

    /// Index of the first mark at or after `position`.
    fn first_from(&self, position: u64) -> usize {
        let before = |m: &Mark| m.at < position;
        match self.marks.iter().take(FRONT_SCAN).position(|m| !before(m)) {
            Some(index) => index,
            None => self.marks.partition_point(before),
        }
    }

    /// The costs at or after `position`.
    pub(crate) fn count_from(&self, position: u64) -> u64 {
        self.total() - self.total_before(self.first_from(position))
    }

    /// Forgets the marks before `position`.
    pub(crate) fn drop_before(&mut self, position: u64) {
        while let Some(front) = self.marks.front() {
            if front.at >= position {
                break;
            }
            self.dropped_total = front.total;
            self.marks.pop_front();
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
        let index = match self.newest() {
            Some(newest) if newest.at < position => self.marks.len(),
            _ => self.marks.partition_point(|m| m.at < position),
        };
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
            mark.total += cost;
        }
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
    fn spills_to_the_heap_only_past_two_marks() {
        let mut marks = RunningTotals::default();
        marks.add(1, 1);
        marks.add(2, 1);
        assert_eq!(marks.heap_bytes(), 0);
        marks.add(3, 1);
        assert!(marks.heap_bytes() > 0);
    }
}
