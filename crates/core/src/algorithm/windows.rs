//! Where the windows of `fixed_window` and `sliding_window_counter` lie:
//! periods of `P` aligned to the Unix epoch (window `floor(t / P)`), or the
//! windows of a [`Calendar`] (a day, week, month or year in a time zone),
//! whose lengths vary. The algorithms ask only for a window's number and
//! bounds, so both kinds decide by the same code.

use super::divisor::Divisor;
use crate::calendar::{Calendar, Window};

/// The windows of a window algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Windows {
    /// `[k·P, (k+1)·P)` for window `k`.
    Epoch {
        /// `P` in ns.
        p: u64,
        /// Dividing by `P`: the window of an instant.
        per_p: Divisor,
    },
    /// A calendar's windows.
    Calendar(Calendar),
}

impl Windows {
    /// Windows of `p` ns aligned to the epoch.
    pub(crate) fn epoch(p: u64) -> Windows {
        Windows::Epoch {
            p,
            per_p: Divisor::new(p),
        }
    }

    /// Windows of `calendar` when there is one, of `p` ns otherwise.
    pub(crate) fn new(p: u64, calendar: Option<Calendar>) -> Windows {
        calendar.map_or_else(|| Windows::epoch(p), Windows::Calendar)
    }

    /// The number of the window holding `t`.
    #[inline(always)]
    pub(crate) fn index_at(&self, t: u64) -> u64 {
        match self {
            Windows::Epoch { per_p, .. } => per_p.floor(t),
            Windows::Calendar(calendar) => calendar.window_at(t).index,
        }
    }

    /// The window holding `t`.
    #[inline(always)]
    pub(crate) fn at(&self, t: u64) -> Window {
        match self {
            Windows::Epoch { p, per_p } => {
                let index = per_p.floor(t);
                Window {
                    index,
                    start: index * p,
                    end: index.saturating_add(1).saturating_mul(*p),
                }
            }
            Windows::Calendar(calendar) => calendar.window_at(t),
        }
    }

    /// The window numbered `index`; bounds saturate at `u64::MAX`.
    #[inline]
    pub(crate) fn get(&self, index: u64) -> Window {
        match self {
            Windows::Epoch { p, .. } => Window {
                index,
                start: index.saturating_mul(*p),
                end: index.saturating_add(1).saturating_mul(*p),
            },
            Windows::Calendar(calendar) => calendar.window(index),
        }
    }

    /// The length of `window` in ns (at least 1): `P` for epoch windows.
    #[inline(always)]
    pub(crate) fn len(&self, window: &Window) -> u64 {
        match self {
            Windows::Epoch { p, .. } => *p,
            Windows::Calendar(_) => (window.end - window.start).max(1),
        }
    }

    /// `floor(a / len)` for a window of length `len`: by `P`'s reduced
    /// divisor for epoch windows.
    #[inline(always)]
    pub(crate) fn divide(&self, a: u128, len: u64) -> u64 {
        match (self, u64::try_from(a)) {
            (Windows::Epoch { per_p, .. }, Ok(a)) => per_p.floor(a),
            _ => super::bucket::div_floor(a, len),
        }
    }
}
