//! SPEC §2 `stepped_window`, brute force: step `j` covers `[jk, (j+1)k)` and
//! counts at `t` when any part of it lies in `(t − P, t]`.

use super::{earliest, Model};

#[derive(Debug, Clone)]
pub(crate) struct SteppedWindowModel {
    n: u64,
    p: u64,
    k: u64,
    /// Every admitted request: (instant, cost).
    admitted: Vec<(u64, u64)>,
}

impl SteppedWindowModel {
    pub(crate) fn new(n: u64, p: u64, k: u64) -> Self {
        SteppedWindowModel {
            n,
            p,
            k,
            admitted: Vec::new(),
        }
    }

    /// Whether step `j` overlaps `(t − P, t]`: it ends after `t − P` and
    /// starts no later than `t`.
    fn touches(&self, j: u64, t: u64) -> bool {
        let (start, end) = (i128::from(j * self.k), i128::from((j + 1) * self.k));
        end > i128::from(t) - i128::from(self.p) && start <= i128::from(t)
    }

    pub(crate) fn count(&self, t: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(a, _)| self.touches(a / self.k, t))
            .map(|&(_, c)| c)
            .sum()
    }

    /// The instants at which a step stops touching the window.
    fn candidates(&self) -> Vec<u64> {
        self.admitted
            .iter()
            .map(|&(a, _)| (a / self.k + 1) * self.k + self.p)
            .collect()
    }
}

impl Model for SteppedWindowModel {
    fn capacity(&self) -> u64 {
        self.n
    }

    fn admits(&self, t: u64, cost: u64) -> bool {
        self.count(t) + cost <= self.n
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
        self.count(t)
    }

    fn first_admit(&self, t: u64, cost: u64) -> u64 {
        earliest(t, self.candidates(), |at| self.admits(at, cost))
    }

    fn first_quiet(&self, t: u64) -> u64 {
        // Untouched: no step with a request touches the window, now or later.
        earliest(t, self.candidates(), |at| {
            self.admitted
                .iter()
                .all(|&(a, _)| (a / self.k + 1) * self.k + self.p <= at)
        })
    }
}
