//! A double-ended queue that keeps up to `K` items inside itself and moves
//! them to a [`VecDeque`] only when more arrive.
//!
//! The per-key states of `sliding_window_log`, `stepped_window` and
//! `concurrency` usually hold zero to two entries. Kept in a `VecDeque`, those
//! entries sit behind a pointer: every check of a key pays a second cache
//! miss, and a state that grows or shrinks its buffer moves the store's shared
//! byte budget. Kept inline, a check touches only the state itself.
//!
//! Why not a crate: `smallvec` and `tinyvec` spill to a `Vec`, whose
//! `remove(0)` is linear, and the states drop expired entries from the front
//! on every commit; `arraydeque` never spills; the inline deques that do spill
//! require a power-of-two `K`, use `unsafe` (this workspace forbids it) and
//! never come back from the heap. This one is small, safe (`T: Copy + Default`
//! fills the unused inline slots) and returns inline once a deque has shrunk
//! to half its inline capacity, so one burst does not leave a key holding
//! heap memory for the rest of its life.
//!
//! Inline items are kept contiguous from index 0: popping the front shifts
//! the at most `K − 1` others down, a constant cost for the small `K` used
//! here, and every search is over one slice. This module owns storage only;
//! what the items mean belongs to the algorithms.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Index;

/// Up to `K` items inline, more on the heap, in insertion order.
#[derive(Clone)]
pub(crate) enum SmallDeque<T, const K: usize> {
    /// `items[..len]` are the items; the rest are filler.
    Inline { items: [T; K], len: u8 },
    /// More than `K` items (or, after shrinking, more than `K / 2`). Boxed,
    /// so that the deque's own size is the inline items' and a keyed
    /// table's entries stay small (the common state is inline). The extra
    /// allocation is paid only by the rare key that spills.
    #[allow(clippy::box_collection)]
    Heap(Box<VecDeque<T>>),
}

impl<T: Copy + Default, const K: usize> SmallDeque<T, K> {
    /// Checked once per `K` at compile time: `len` is a `u8`.
    const VALID_K: () = assert!(K > 0 && K <= u8::MAX as usize, "K must be in 1..=255");

    /// An empty deque; allocates nothing.
    pub(crate) fn new() -> Self {
        let () = Self::VALID_K;
        SmallDeque::Inline {
            items: [T::default(); K],
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            SmallDeque::Inline { len, .. } => usize::from(*len),
            SmallDeque::Heap(deque) => deque.len(),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the items have moved to the heap.
    #[cfg(test)]
    pub(crate) fn is_spilled(&self) -> bool {
        matches!(self, SmallDeque::Heap(_))
    }

    /// The items in order, as one or two slices (the second may be empty).
    #[inline]
    pub(crate) fn as_slices(&self) -> (&[T], &[T]) {
        match self {
            SmallDeque::Inline { items, len } => (&items[..usize::from(*len)], &[]),
            SmallDeque::Heap(deque) => deque.as_slices(),
        }
    }

    #[inline]
    fn as_mut_slices(&mut self) -> (&mut [T], &mut [T]) {
        match self {
            SmallDeque::Inline { items, len } => (&mut items[..usize::from(*len)], &mut []),
            SmallDeque::Heap(deque) => deque.as_mut_slices(),
        }
    }

    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        let (a, b) = self.as_slices();
        match index.checked_sub(a.len()) {
            None => a.get(index),
            Some(i) => b.get(i),
        }
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    pub(crate) fn back(&self) -> Option<&T> {
        let (a, b) = self.as_slices();
        b.last().or(a.last())
    }

    /// The newest item, mutably.
    #[inline]
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        let (a, b) = self.as_mut_slices();
        match b.last_mut() {
            Some(last) => Some(last),
            None => a.last_mut(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    /// The items from `index` on, mutably.
    pub(crate) fn iter_mut_from(&mut self, index: usize) -> impl Iterator<Item = &mut T> {
        let (a, b) = self.as_mut_slices();
        let skip_b = index.saturating_sub(a.len()).min(b.len());
        let skip_a = index.min(a.len());
        a[skip_a..].iter_mut().chain(&mut b[skip_b..])
    }

    /// Amortized O(1): moves to the heap when the inline slots are full.
    pub(crate) fn push_back(&mut self, item: T) {
        match self {
            SmallDeque::Inline { items, len } if usize::from(*len) < K => {
                items[usize::from(*len)] = item;
                *len += 1;
            }
            SmallDeque::Inline { items, .. } => {
                let mut deque = VecDeque::with_capacity(2 * K);
                deque.extend(items.iter().copied());
                deque.push_back(item);
                *self = SmallDeque::Heap(Box::new(deque));
            }
            SmallDeque::Heap(deque) => deque.push_back(item),
        }
    }

    /// O(1) for the constant `K`; may move the items back inline.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        match self {
            SmallDeque::Inline { items, len } => {
                let n = usize::from(*len);
                let first = *items[..n].first()?;
                items.copy_within(1..n, 0);
                items[n - 1] = T::default();
                *len -= 1;
                Some(first)
            }
            SmallDeque::Heap(deque) => {
                let first = deque.pop_front();
                self.unspill_if_small();
                first
            }
        }
    }

    /// Replaces every item with `item`, inline (a heap buffer is freed).
    #[inline]
    pub(crate) fn restart(&mut self, item: T) {
        let mut items = [T::default(); K];
        items[0] = item;
        *self = SmallDeque::Inline { items, len: 1 };
    }

    /// Drops the first `count` items, then appends `item`: the two without
    /// moving back inline in between, which would only move out again (a
    /// key whose leases all expire at once and that takes a new one).
    pub(crate) fn drop_front_push_back(&mut self, count: usize, item: T) {
        match self {
            SmallDeque::Heap(deque) => {
                Self::pop_heap_front(deque, count);
                deque.push_back(item);
                self.unspill_if_small();
            }
            SmallDeque::Inline { len, .. } if count > 0 && count == usize::from(*len) => {
                self.restart(item);
            }
            SmallDeque::Inline { .. } => {
                self.drop_front(count);
                self.push_back(item);
            }
        }
    }

    fn pop_heap_front(deque: &mut VecDeque<T>, count: usize) {
        // Usually one or two items leave at a time, for which a pop is
        // cheaper than setting up a drain.
        if count <= 4 {
            for _ in 0..count {
                deque.pop_front();
            }
        } else {
            deque.drain(..count.min(deque.len()));
        }
    }

    /// Drops the first `count` items (at most [`len`](Self::len)); may move
    /// the rest back inline.
    pub(crate) fn drop_front(&mut self, count: usize) {
        match self {
            SmallDeque::Inline { items, len } => {
                let n = usize::from(*len);
                let count = count.min(n);
                items.copy_within(count..n, 0);
                items[n - count..n].fill(T::default());
                // `n - count <= n`, which fits the `u8` it came from.
                *len = u8::try_from(n - count).unwrap_or(0);
            }
            SmallDeque::Heap(deque) => {
                Self::pop_heap_front(deque, count);
                self.unspill_if_small();
            }
        }
    }

    /// Inserts at `index` (at most [`len`](Self::len)), shifting later items
    /// back. Linear, like [`VecDeque::insert`].
    pub(crate) fn insert(&mut self, index: usize, item: T) {
        match self {
            SmallDeque::Inline { items, len } if usize::from(*len) < K => {
                let n = usize::from(*len);
                items.copy_within(index..n, index + 1);
                items[index] = item;
                *len += 1;
            }
            SmallDeque::Inline { items, .. } => {
                let mut deque = VecDeque::with_capacity(2 * K);
                deque.extend(items.iter().copied());
                deque.insert(index, item);
                *self = SmallDeque::Heap(Box::new(deque));
            }
            SmallDeque::Heap(deque) => deque.insert(index, item),
        }
    }

    /// Removes the item at `index`, shifting later items forward. Linear,
    /// like [`VecDeque::remove`]; may move the items back inline.
    pub(crate) fn remove(&mut self, index: usize) -> Option<T> {
        match self {
            SmallDeque::Inline { items, len } => {
                let n = usize::from(*len);
                let removed = *items[..n].get(index)?;
                items.copy_within(index + 1..n, index);
                items[n - 1] = T::default();
                *len -= 1;
                Some(removed)
            }
            SmallDeque::Heap(deque) => {
                let removed = deque.remove(index);
                self.unspill_if_small();
                removed
            }
        }
    }

    /// Back inline at half the inline capacity, not at `K`: a deque that
    /// hovers around `K` items would otherwise allocate on every other push.
    fn unspill_if_small(&mut self) {
        let SmallDeque::Heap(deque) = self else {
            return;
        };
        let n = deque.len();
        if n > K / 2 {
            return;
        }
        let mut items = [T::default(); K];
        for (slot, item) in items.iter_mut().zip(deque.iter()) {
            *slot = *item;
        }
        // `n <= K / 2 < 256`, checked by `VALID_K`.
        let len = u8::try_from(n).unwrap_or(u8::MAX);
        *self = SmallDeque::Inline { items, len };
    }

    /// The index of the first item for which `pred` is false, given that it
    /// is true for a prefix of the items (binary search).
    #[inline]
    pub(crate) fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let (a, b) = self.as_slices();
        match a.last() {
            Some(last) if pred(last) => a.len() + b.partition_point(pred),
            _ => a.partition_point(pred),
        }
    }

    /// Binary search by a key the items are sorted by, as
    /// [`slice::binary_search_by_key`].
    pub(crate) fn binary_search_by_key<B: Ord>(
        &self,
        key: &B,
        mut f: impl FnMut(&T) -> B,
    ) -> Result<usize, usize> {
        let index = self.partition_point(|item| f(item) < *key);
        match self.get(index) {
            Some(item) if f(item) == *key => Ok(index),
            _ => Err(index),
        }
    }

    /// The bytes of heap this deque owns: 0 while inline.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            SmallDeque::Inline { .. } => 0,
            SmallDeque::Heap(deque) => {
                std::mem::size_of::<VecDeque<T>>() + deque.capacity() * std::mem::size_of::<T>()
            }
        }
    }
}

impl<T: Copy + Default, const K: usize> Default for SmallDeque<T, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default, const K: usize> Index<usize> for SmallDeque<T, K> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        let (a, b) = self.as_slices();
        match index.checked_sub(a.len()) {
            None => &a[index],
            Some(i) => &b[i],
        }
    }
}

/// Equal when the items are, wherever they are stored.
impl<T: Copy + Default + PartialEq, const K: usize> PartialEq for SmallDeque<T, K> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: Copy + Default + Eq, const K: usize> Eq for SmallDeque<T, K> {}

impl<T: Copy + Default + fmt::Debug, const K: usize> fmt::Debug for SmallDeque<T, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Deque = SmallDeque<u64, 2>;

    fn items<const K: usize>(deque: &SmallDeque<u64, K>) -> Vec<u64> {
        deque.iter().copied().collect()
    }

    #[test]
    fn stays_inline_up_to_k_and_spills_past_it() {
        let mut deque = Deque::new();
        assert!(deque.is_empty());
        deque.push_back(1);
        deque.push_back(2);
        assert!(!deque.is_spilled());
        assert_eq!(deque.heap_bytes(), 0);
        deque.push_back(3);
        assert!(deque.is_spilled());
        assert_eq!(items(&deque), [1, 2, 3]);
        assert_eq!((deque.front(), deque.back()), (Some(&1), Some(&3)));
        // The boxed deque and its buffer.
        assert_eq!(deque.heap_bytes(), 32 + 4 * 8);
    }

    #[test]
    fn pops_in_order_and_comes_back_inline_at_half_capacity() {
        let mut deque = SmallDeque::<u64, 4>::new();
        for i in 0..6 {
            deque.push_back(i);
        }
        assert!(deque.is_spilled());
        for i in 0..3 {
            assert_eq!(deque.pop_front(), Some(i));
            assert!(deque.is_spilled(), "after popping {i}");
        }
        assert_eq!(deque.pop_front(), Some(3));
        assert!(!deque.is_spilled(), "two items are at most K / 2");
        assert_eq!(deque.heap_bytes(), 0);
        assert_eq!(items(&deque), [4, 5]);
        assert_eq!(deque.pop_front(), Some(4));
        assert_eq!(deque.pop_front(), Some(5));
        assert_eq!(deque.pop_front(), None);
        assert!(deque.is_empty());
    }

    #[test]
    fn dropping_from_the_front_keeps_the_rest_in_order() {
        for spilled in [false, true] {
            for count in 0..=6 {
                let mut deque = SmallDeque::<u64, 4>::new();
                let n = if spilled { 6 } else { 3 };
                for i in 0..n {
                    deque.push_back(i);
                }
                deque.drop_front(count);
                let rest: Vec<u64> = (count.min(n as usize) as u64..n).collect();
                assert_eq!(items(&deque), rest, "spilled {spilled}, count {count}");
                assert_eq!(deque.len(), rest.len());
                // Back inline once at most K / 2 remain.
                assert_eq!(deque.is_spilled(), rest.len() > 2 && spilled);
                deque.push_back(99);
                assert_eq!(deque.back(), Some(&99));
            }
        }
    }

    #[test]
    fn dropping_all_then_pushing_stays_on_the_heap() {
        // One inline slot, as the concurrency state has: dropping every item
        // would go inline, and the push right after would move out again.
        let mut deque = SmallDeque::<u64, 1>::new();
        for i in 0..6 {
            deque.push_back(i);
        }
        let capacity = deque.heap_bytes();
        deque.drop_front_push_back(6, 7);
        assert!(
            deque.is_spilled(),
            "not moved inline only to move out again"
        );
        assert_eq!(deque.heap_bytes(), capacity);
        assert_eq!(items(&deque), [7]);
        // The same as dropping then pushing, item for item.
        let mut small = SmallDeque::<u64, 4>::new();
        for i in 0..3 {
            small.push_back(i);
        }
        small.drop_front_push_back(1, 3);
        assert!(!small.is_spilled());
        assert_eq!(items(&small), [1, 2, 3]);
    }

    #[test]
    fn inline_pops_shift_and_pushes_reuse_the_slots() {
        let mut deque = Deque::new();
        for i in 0..10 {
            deque.push_back(i);
            if i > 0 {
                assert_eq!(deque.pop_front(), Some(i - 1));
            }
            assert!(!deque.is_spilled());
            assert_eq!(items(&deque), [i]);
        }
    }

    #[test]
    fn heap_bytes_follow_the_capacity() {
        let mut deque = Deque::new();
        for i in 0..5 {
            deque.push_back(i);
        }
        let SmallDeque::Heap(heap) = &deque else {
            panic!("not spilled");
        };
        assert_eq!(deque.heap_bytes(), 32 + heap.capacity() * 8);
        assert!(heap.capacity() >= 5);
    }

    #[test]
    fn searches_over_wrapped_storage() {
        let mut deque = SmallDeque::<u64, 2>::new();
        // Pop and push until the heap ring wraps, so that both slices are used.
        for i in 0..6 {
            deque.push_back(i * 10);
        }
        for i in 6..9 {
            assert!(deque.pop_front().is_some());
            deque.push_back(i * 10);
        }
        let (a, b) = deque.as_slices();
        assert!(!a.is_empty() && !b.is_empty(), "{a:?} {b:?}");
        assert_eq!(items(&deque), [30, 40, 50, 60, 70, 80]);
        for (index, value) in items(&deque).into_iter().enumerate() {
            assert_eq!(deque.partition_point(|&x| x < value), index);
            assert_eq!(deque.partition_point(|&x| x <= value), index + 1);
            assert_eq!(deque.binary_search_by_key(&value, |&x| x), Ok(index));
            assert_eq!(
                deque.binary_search_by_key(&(value + 1), |&x| x),
                Err(index + 1)
            );
            assert_eq!(deque[index], value);
            assert_eq!(deque.get(index), Some(&value));
        }
        assert_eq!(deque.binary_search_by_key(&0, |&x| x), Err(0));
        assert_eq!(deque.get(6), None);
    }

    #[test]
    fn searches_inline() {
        let mut deque = Deque::new();
        assert_eq!(deque.partition_point(|_| true), 0);
        assert_eq!(deque.binary_search_by_key(&1, |&x| x), Err(0));
        deque.push_back(5);
        deque.push_back(7);
        assert_eq!(deque.binary_search_by_key(&7, |&x| x), Ok(1));
        assert_eq!(deque.binary_search_by_key(&6, |&x| x), Err(1));
        assert_eq!(deque.partition_point(|&x| x < 100), 2);
    }

    #[test]
    fn removes_anywhere_inline_and_on_the_heap() {
        let mut deque = Deque::new();
        deque.push_back(1);
        deque.push_back(2);
        assert_eq!(deque.remove(2), None);
        assert_eq!(deque.remove(0), Some(1));
        assert_eq!(items(&deque), [2]);

        let mut deque = SmallDeque::<u64, 3>::new();
        for i in 0..5 {
            deque.push_back(i);
        }
        assert_eq!(deque.remove(2), Some(2));
        assert_eq!(deque.remove(3), Some(4));
        assert!(deque.is_spilled());
        assert_eq!(deque.remove(1), Some(1));
        assert!(deque.is_spilled());
        assert_eq!(deque.remove(0), Some(0));
        assert!(!deque.is_spilled(), "one item is at most K / 2");
        assert_eq!(items(&deque), [3]);
        assert_eq!(deque.remove(5), None);
    }

    #[test]
    fn inserts_anywhere_and_spills_when_full() {
        let mut deque = Deque::new();
        deque.insert(0, 3);
        deque.insert(0, 1);
        assert!(!deque.is_spilled());
        deque.insert(1, 2);
        assert!(deque.is_spilled());
        deque.insert(3, 4);
        assert_eq!(items(&deque), [1, 2, 3, 4]);
    }

    #[test]
    fn mutates_a_suffix() {
        for count in [2, 5] {
            let mut deque = Deque::new();
            for i in 0..count {
                deque.push_back(i);
            }
            for item in deque.iter_mut_from(1) {
                *item += 100;
            }
            let expected: Vec<u64> = (0..count)
                .map(|i| if i >= 1 { i + 100 } else { i })
                .collect();
            assert_eq!(items(&deque), expected);
            assert_eq!(deque.iter_mut_from(count as usize).count(), 0);
        }
    }

    #[test]
    fn equality_ignores_where_items_live() {
        let mut spilled = Deque::new();
        for i in 0..3 {
            spilled.push_back(i);
        }
        spilled.pop_front();
        spilled.pop_front();
        let mut inline = Deque::new();
        inline.push_back(2);
        assert_eq!(spilled, inline);
        assert_eq!(format!("{spilled:?}"), "[2]");
        inline.push_back(3);
        assert_ne!(spilled, inline);
    }

    /// Against `VecDeque` as the model, over a scripted mix of operations.
    #[test]
    fn matches_vec_deque() {
        let mut deque = SmallDeque::<u64, 3>::new();
        let mut model = VecDeque::new();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for step in 0..5_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            match seed % 8 {
                0..=3 => {
                    deque.push_back(step);
                    model.push_back(step);
                }
                4 | 5 => assert_eq!(deque.pop_front(), model.pop_front()),
                6 if !model.is_empty() => {
                    let index = (seed >> 8) as usize % model.len();
                    assert_eq!(deque.remove(index), model.remove(index));
                }
                _ => {
                    let index = (seed >> 8) as usize % (model.len() + 1);
                    deque.insert(index, step);
                    model.insert(index, step);
                }
            }
            assert!(deque.iter().eq(model.iter()), "step {step}");
            assert_eq!(deque.front(), model.front());
            assert_eq!(deque.back(), model.back());
            assert_eq!(deque.is_spilled(), deque.heap_bytes() > 0);
        }
    }
}
