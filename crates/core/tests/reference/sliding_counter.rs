//! SPEC §2 `sliding_window_counter`: `floor(prev × (P − elapsed) / P) + curr
//! + c ≤ N`, with `curr` the count of the epoch-aligned window holding `t`,
//! `prev` that of the window before, and `elapsed = t − window start`.

use super::{earliest, Model};

#[derive(Debug, Clone)]
pub(crate) struct SlidingCounterModel {
    n: u64,
    p: u64,
    /// Every admitted request: (instant, cost).
    admitted: Vec<(u64, u64)>,
}

impl SlidingCounterModel {
    pub(crate) fn new(n: u64, p: u64) -> Self {
        SlidingCounterModel {
            n,
            p,
            admitted: Vec::new(),
        }
    }

    /// The count of window `w` (`None` for the window before the epoch).
    fn window_count(&self, w: Option<u64>) -> u64 {
        let Some(w) = w else { return 0 };
        self.admitted
            .iter()
            .filter(|&&(a, _)| a / self.p == w)
            .map(|&(_, c)| c)
            .sum()
    }

    /// `floor(prev × (P − elapsed) / P)`.
    fn weighted(&self, prev: u64, elapsed: u64) -> u64 {
        let w = u128::from(prev) * u128::from(self.p - elapsed) / u128::from(self.p);
        u64::try_from(w).expect("weighted count fits")
    }

    pub(crate) fn estimate(&self, t: u64) -> u64 {
        let w = t / self.p;
        let prev = self.window_count(w.checked_sub(1));
        let curr = self.window_count(Some(w));
        self.weighted(prev, t - w * self.p) + curr
    }

    /// The first elapsed time in `[0, P]` at which the weighted `prev` is at
    /// most `v`, by bisection (the weight only falls as time passes).
    fn first_elapsed_at_most(&self, prev: u64, v: u64) -> u64 {
        let (mut lo, mut hi) = (0, self.p);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.weighted(prev, mid) <= v {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Every instant at which the estimate can change: window starts, and
    /// each step down of a weighted previous count.
    fn candidates(&self, t: u64) -> Vec<u64> {
        let newest = self.admitted.iter().map(|&(a, _)| a / self.p).max();
        let last = newest.map_or(t / self.p, |w| w.max(t / self.p)) + 2;
        let mut at = Vec::new();
        for w in t / self.p..=last {
            let start = w * self.p;
            at.push(start);
            let prev = self.window_count(w.checked_sub(1));
            for v in 0..prev {
                at.push(start + self.first_elapsed_at_most(prev, v));
            }
        }
        at
    }
}

impl Model for SlidingCounterModel {
    fn capacity(&self) -> u64 {
        self.n
    }

    fn admits(&self, t: u64, cost: u64) -> bool {
        self.estimate(t) + cost <= self.n
    }

    fn admit(&mut self, t: u64, cost: u64) {
        self.admitted.push((t, cost));
    }

    fn record(&mut self, t: u64, cost: u64) {
        if cost > 0 {
            self.admitted.push((t, cost));
        }
    }

    fn usage(&self, t: u64) -> u64 {
        self.estimate(t)
    }

    fn first_admit(&self, t: u64, cost: u64) -> u64 {
        earliest(t, self.candidates(t), |at| self.admits(at, cost))
    }

    fn first_quiet(&self, t: u64) -> u64 {
        // Untouched: the estimate is zero and nothing is counted later.
        earliest(t, self.candidates(t), |at| {
            self.estimate(at) == 0 && self.admitted.iter().all(|&(a, _)| a <= at)
        })
    }
}
