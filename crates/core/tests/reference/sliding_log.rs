//! SPEC §2 `sliding_window_log`: admitted requests with timestamps in
//! `(t − P, t]`, plus `c`, must stay within `N`.

use super::{earliest, Model};

#[derive(Debug, Clone)]
pub(crate) struct SlidingLogModel {
    n: u64,
    p: u64,
    /// Every admitted request: (instant, cost).
    admitted: Vec<(u64, u64)>,
}

impl SlidingLogModel {
    pub(crate) fn new(n: u64, p: u64) -> Self {
        SlidingLogModel {
            n,
            p,
            admitted: Vec::new(),
        }
    }

    /// Whether a request at `a` lies in `(t − P, t]`.
    fn inside(&self, a: u64, t: u64) -> bool {
        a <= t && a + self.p > t
    }

    fn count(&self, t: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(a, _)| self.inside(a, t))
            .map(|&(_, c)| c)
            .sum()
    }

    /// The instants at which a logged request leaves the window.
    fn candidates(&self) -> Vec<u64> {
        self.admitted.iter().map(|&(a, _)| a + self.p).collect()
    }
}

impl Model for SlidingLogModel {
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
        // Empty window: every logged request has left it.
        earliest(t, self.candidates(), |at| {
            self.admitted.iter().all(|&(a, _)| a + self.p <= at)
        })
    }
}
