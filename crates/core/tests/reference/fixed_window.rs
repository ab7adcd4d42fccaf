//! SPEC §2 `fixed_window`: the count of the epoch-aligned window
//! `floor(t / P)` plus `c` must stay within `N`.

use super::{earliest, Model};

#[derive(Debug, Clone)]
pub(crate) struct FixedWindowModel {
    n: u64,
    p: u64,
    /// Every admitted request: (instant, cost).
    admitted: Vec<(u64, u64)>,
}

impl FixedWindowModel {
    pub(crate) fn new(n: u64, p: u64) -> Self {
        FixedWindowModel {
            n,
            p,
            admitted: Vec::new(),
        }
    }

    fn count(&self, t: u64) -> u64 {
        let window = t / self.p;
        self.admitted
            .iter()
            .filter(|&&(a, _)| a / self.p == window)
            .map(|&(_, c)| c)
            .sum()
    }

    /// Instants at which a window begins: where any answer can change.
    fn candidates(&self, t: u64) -> Vec<u64> {
        let mut at = vec![(t / self.p + 1) * self.p];
        at.extend(
            self.admitted
                .iter()
                .map(|&(a, _)| (a / self.p + 1) * self.p),
        );
        at
    }
}

impl Model for FixedWindowModel {
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
        earliest(t, self.candidates(t), |at| self.admits(at, cost))
    }

    fn first_quiet(&self, t: u64) -> u64 {
        // Untouched: no admitted request in this window or a later one.
        earliest(t, self.candidates(t), |at| {
            self.admitted.iter().all(|&(a, _)| a / self.p < at / self.p)
        })
    }
}
