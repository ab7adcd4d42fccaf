//! The local over-limit cache: once Redis has rejected a request because a
//! limit is exhausted until some instant, the same request (same limits,
//! keys and cost) is rejected locally until then, with no round trip.
//!
//! This is exact for every time-based algorithm: a rejection counts
//! nothing, and what other instances do in the meantime can only push the
//! instant later, never earlier. Three things can make a key admissible
//! sooner — releasing a `concurrency` lease, an administrative reset and a
//! settled cost refunded — so requests with a `concurrency` limit are
//! never cached, and a reset or a refund clears the cache for its key here
//! (other instances keep their entries until they lapse: an
//! under-admission, never an over-admission; see docs/operations.md). Only requests decided on
//! Redis's own clock are cached, and the wait is measured on this
//! process's monotonic clock from the moment the answer arrived.

use std::collections::HashMap;
use std::hash::Hasher;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use siphasher::sip::SipHasher13;
use tollgate_core::Decision;

use crate::cells::Cell;

/// Entries kept at most; beyond it, expired ones are dropped and new ones
/// are not added, so the cache's memory is bounded whatever the traffic.
const CAPACITY: usize = 65_536;

struct Blocked {
    /// The Redis keys the request touched, for resets.
    keys: Vec<Vec<u8>>,
    since: Instant,
    until: Instant,
    decisions: Vec<Decision>,
}

/// Rejected requests and until when they stay rejected.
#[derive(Default)]
pub(crate) struct OverLimitCache {
    entries: Mutex<HashMap<u64, Blocked>>,
}

/// The identity of a request: its cells (key, limit, cost).
pub(crate) fn fingerprint(cells: &[Cell]) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0x6f76_6572_5f6c_696d, 0x6974_5f63_6163_6865);
    for cell in cells {
        hasher.write_usize(cell.key.len());
        hasher.write(&cell.key);
        hasher.write(cell.limit.field.as_bytes());
        hasher.write_u64(cell.cost);
    }
    hasher.finish()
}

impl OverLimitCache {
    /// The cached rejection of the request, with its waits shortened by the
    /// time since it was made; `None` when there is none or it has lapsed.
    pub(crate) fn get(&self, fingerprint: u64, now: Instant) -> Option<Vec<Decision>> {
        let mut entries = self.entries.lock();
        let blocked = entries.get(&fingerprint)?;
        if now >= blocked.until {
            entries.remove(&fingerprint);
            return None;
        }
        let elapsed = now.saturating_duration_since(blocked.since);
        Some(
            blocked
                .decisions
                .iter()
                .map(|d| Decision {
                    retry_after: if d.allowed {
                        Duration::ZERO
                    } else {
                        d.retry_after
                            .saturating_sub(elapsed)
                            .max(Duration::from_nanos(1))
                    },
                    reset_after: d.reset_after.saturating_sub(elapsed),
                    ..*d
                })
                .collect(),
        )
    }

    /// Remembers a rejection answered at `now`.
    pub(crate) fn insert(
        &self,
        fingerprint: u64,
        cells: &[Cell],
        decisions: &[Decision],
        now: Instant,
    ) {
        let wait = decisions
            .iter()
            .filter(|d| !d.allowed)
            .map(|d| d.retry_after)
            .max()
            .unwrap_or(Duration::ZERO);
        if wait.is_zero() {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= CAPACITY {
            entries.retain(|_, b| b.until > now);
            if entries.len() >= CAPACITY {
                return;
            }
        }
        entries.insert(
            fingerprint,
            Blocked {
                keys: cells.iter().map(|c| c.key.clone()).collect(),
                since: now,
                until: now + wait,
                decisions: decisions.to_vec(),
            },
        );
    }

    /// Forgets every rejection that involved `key` (an administrative reset).
    pub(crate) fn forget_key(&self, key: &[u8]) {
        self.entries
            .lock()
            .retain(|_, b| !b.keys.iter().any(|k| k == key));
    }

    /// How many rejections are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(key: &[u8]) -> Cell {
        let limit = tollgate_core::Limit::new(
            tollgate_core::AlgorithmName::Gcra,
            tollgate_core::Rate::per_second(10).unwrap(),
        );
        Cell {
            key: key.to_vec(),
            limit: std::sync::Arc::new(crate::limits::Prepared::new(&limit).unwrap()),
            cost: 1,
            windows: None,
        }
    }

    #[test]
    fn a_rejection_is_served_until_its_wait_is_over_with_the_wait_shortened() {
        let cache = OverLimitCache::default();
        let cells = [cell(b"a")];
        let id = fingerprint(&cells);
        let t0 = Instant::now();
        let rejected = Decision {
            allowed: false,
            retry_after: Duration::from_secs(10),
            reset_after: Duration::from_secs(20),
            ..Decision::default()
        };
        cache.insert(id, &cells, &[rejected], t0);
        let later = cache.get(id, t0 + Duration::from_secs(4)).unwrap();
        assert_eq!(later[0].retry_after, Duration::from_secs(6));
        assert_eq!(later[0].reset_after, Duration::from_secs(16));
        assert!(!later[0].allowed);
        assert!(
            cache.get(id, t0 + Duration::from_secs(10)).is_none(),
            "lapsed"
        );
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn admissions_are_not_cached_and_resets_forget() {
        let cache = OverLimitCache::default();
        let cells = [cell(b"a"), cell(b"b")];
        let id = fingerprint(&cells);
        let now = Instant::now();
        cache.insert(
            id,
            &cells,
            &[Decision {
                allowed: true,
                ..Decision::default()
            }],
            now,
        );
        assert_eq!(cache.len(), 0);
        let rejected = Decision {
            retry_after: Duration::from_secs(1),
            ..Decision::default()
        };
        cache.insert(id, &cells, &[rejected, rejected], now);
        assert!(cache.get(id, now).is_some());
        assert_ne!(fingerprint(&cells[..1]), id);
        cache.forget_key(b"b");
        assert!(cache.get(id, now).is_none());
    }
}
