//! [`TopKeys`]: the keys counted most over the last five minutes (for a
//! rule: the keys it rejected most, the dashboard's top offenders), in
//! memory that does not grow with the number of keys.
//!
//! Each time slot holds a Space-Saving summary ([`SpaceSaving`]) of a fixed
//! number of counters. A key that holds a counter is counted exactly from
//! then on; a new key, when every counter is taken, takes over the counter
//! of the least counted key and starts from its count, which it records as
//! its possible overestimate. So no count is ever below the true one, each
//! is above it by at most its `error`, every error is at most N / capacity
//! after N counted events, and every key counted more often than that holds
//! a counter: with a few hundred counters the keys that matter are found
//! whatever the number of keys behind them, and a flood of unique keys
//! only churns the least counted counters.
//!
//! This module owns the summaries and their merge over the window; it owns
//! no clock (callers pass the instant) and no lock (callers hold one per
//! rule), and it does not decide which events are counted.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;

/// How far back [`TopKeys`] looks: five minutes, in milliseconds.
pub const WINDOW_MS: u64 = 300_000;

/// Time slots in the window; the window ends with the current slot, so it
/// covers between `WINDOW_MS - WINDOW_MS / SLOTS` and `WINDOW_MS`.
const SLOTS: usize = 10;

/// The length of one slot, in milliseconds.
const SLOT_MS: u64 = WINDOW_MS / SLOTS as u64;

/// One counter of a [`SpaceSaving`] summary.
#[derive(Debug, Clone)]
struct Counter {
    key: Box<[u8]>,
    /// The key's hash under the summary's hasher, kept so that the index
    /// entry can be found again without hashing the key.
    hash: u64,
    /// An upper bound of the key's true count.
    count: u64,
    /// How much of `count` may have been another key's.
    error: u64,
}

/// A Space-Saving summary of at most `capacity` counters (see the module
/// documentation).
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    counters: Vec<Counter>,
    /// Each key's position in `counters`. Positions never move: a counter
    /// taken over keeps its place.
    index: HashTable<usize>,
    /// Keyed SipHash with random keys: the keys come from clients, who must
    /// not be able to pick keys that collide.
    hasher: RandomState,
    /// Everything counted.
    total: u64,
}

/// A key and its estimated count, as [`SpaceSaving::entries`] and
/// [`TopKeys::top`] report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// The key.
    pub key: Vec<u8>,
    /// An upper bound of the key's true count.
    pub count: u64,
    /// How far above the true count `count` may be: the true count is at
    /// least `count - error`.
    pub error: u64,
}

impl SpaceSaving {
    /// An empty summary of `capacity` counters (at least one).
    pub fn new(capacity: usize) -> SpaceSaving {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            counters: Vec::with_capacity(capacity),
            // Twice the room it needs: a counter that changes hands leaves
            // a tombstone, and with the table at most half full hashbrown
            // clears them in place instead of growing.
            index: HashTable::with_capacity(2 * capacity),
            hasher: RandomState::new(),
            total: 0,
        }
    }

    /// Counts `by` more for `key`.
    pub fn count(&mut self, key: &[u8], by: u64) {
        self.total = self.total.saturating_add(by);
        let hash = self.hasher.hash_one(key);
        let counters = &mut self.counters;
        if let Some(&at) = self
            .index
            .find(hash, |&at| counters.get(at).is_some_and(|c| &*c.key == key))
        {
            if let Some(counter) = counters.get_mut(at) {
                counter.count = counter.count.saturating_add(by);
            }
            return;
        }
        if counters.len() < self.capacity {
            let at = counters.len();
            counters.push(Counter {
                key: key.into(),
                hash,
                count: by,
                error: 0,
            });
            self.index
                .insert_unique(hash, at, |&at| counters.get(at).map_or(0, |c| c.hash));
            return;
        }
        // Every counter is taken: the least counted one changes hands.
        let Some((at, least)) = counters
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.count)
            .map(|(at, c)| (at, c.count))
        else {
            return;
        };
        let old_hash = counters[at].hash;
        if let Ok(entry) = self.index.find_entry(old_hash, |&i| i == at) {
            entry.remove();
        }
        counters[at] = Counter {
            key: key.into(),
            hash,
            count: least.saturating_add(by),
            error: least,
        };
        self.index
            .insert_unique(hash, at, |&at| counters.get(at).map_or(0, |c| c.hash));
    }

    /// The count a key that holds no counter may have had: 0 while some
    /// counter is free (every key counted holds one), otherwise the least
    /// count (a key that lost its counter had at most that many).
    pub fn floor(&self) -> u64 {
        if self.counters.len() < self.capacity {
            return 0;
        }
        self.counters.iter().map(|c| c.count).min().unwrap_or(0)
    }

    /// Everything counted since the summary was made or cleared.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many counters are taken (never more than the capacity).
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// The estimate for `key`, if it holds a counter.
    pub fn get(&self, key: &[u8]) -> Option<Estimate> {
        self.get_counter(key).map(|c| Estimate {
            key: c.key.to_vec(),
            count: c.count,
            error: c.error,
        })
    }

    /// Every counter, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = Estimate> + '_ {
        self.counters.iter().map(|c| Estimate {
            key: c.key.to_vec(),
            count: c.count,
            error: c.error,
        })
    }

    /// Forgets everything, keeping the memory for what comes next.
    pub fn clear(&mut self) {
        self.counters.clear();
        self.index.clear();
        self.total = 0;
    }

    /// Bytes the summary holds on the heap: bounded by the capacity and
    /// the longest key, whatever was counted.
    pub fn heap_bytes(&self) -> usize {
        self.counters.capacity() * std::mem::size_of::<Counter>()
            + self.counters.iter().map(|c| c.key.len()).sum::<usize>()
            + self.index.allocation_size()
    }
}

/// One time slot of a [`TopKeys`].
#[derive(Debug, Clone)]
struct Slot {
    /// The slot's number (its start is `number * SLOT_MS`); `None` before
    /// its first use.
    number: Option<u64>,
    summary: SpaceSaving,
}

/// The keys counted most over the last [`WINDOW_MS`]: a [`SpaceSaving`]
/// summary per time slot, merged when read.
#[derive(Debug, Clone)]
pub struct TopKeys {
    slots: Vec<Slot>,
}

impl TopKeys {
    /// Empty, with `capacity` counters per time slot.
    pub fn new(capacity: usize) -> TopKeys {
        TopKeys {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    number: None,
                    summary: SpaceSaving::new(capacity),
                })
                .collect(),
        }
    }

    /// Counts `by` for `key` at `now_ms` (milliseconds since the epoch).
    /// An instant earlier than the slots already in use counts in the slot
    /// it falls in only if that slot still holds its own time.
    pub fn count(&mut self, key: &[u8], by: u64, now_ms: u64) {
        let number = now_ms / SLOT_MS;
        let Some(slot) = self.slots.get_mut(slot_index(number)) else {
            return;
        };
        match slot.number {
            Some(held) if held == number => {}
            Some(held) if held > number => return,
            _ => {
                slot.summary.clear();
                slot.number = Some(number);
            }
        }
        slot.summary.count(key, by);
    }

    /// The `n` keys with the highest estimated counts over the window that
    /// ends at `now_ms`, highest first (ties by key), with their bounds: a
    /// key's `count` is the sum of its counts in the slots that hold it
    /// plus, for each full slot that does not, what it may have had there
    /// and lost; its `error` is how much of that may be other keys'.
    pub fn top(&self, n: usize, now_ms: u64) -> Vec<Estimate> {
        let current = now_ms / SLOT_MS;
        let live: Vec<&SpaceSaving> = self
            .slots
            .iter()
            .filter(|slot| {
                slot.number
                    .is_some_and(|s| s <= current && current - s < SLOTS as u64)
            })
            .map(|slot| &slot.summary)
            .collect();
        let mut merged: std::collections::HashMap<&[u8], (u64, u64)> =
            std::collections::HashMap::new();
        for summary in &live {
            for counter in &summary.counters {
                let sum = merged.entry(&counter.key).or_insert((0, 0));
                sum.0 = sum.0.saturating_add(counter.count);
                sum.1 = sum.1.saturating_add(counter.error);
            }
        }
        let mut estimates: Vec<Estimate> = merged
            .into_iter()
            .map(|(key, (mut count, mut error))| {
                for summary in &live {
                    if summary.get_counter(key).is_none() {
                        let floor = summary.floor();
                        count = count.saturating_add(floor);
                        error = error.saturating_add(floor);
                    }
                }
                Estimate {
                    key: key.to_vec(),
                    count,
                    error,
                }
            })
            .collect();
        estimates.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        estimates.truncate(n);
        estimates
    }

    /// Everything counted over the window that ends at `now_ms`.
    pub fn total(&self, now_ms: u64) -> u64 {
        let current = now_ms / SLOT_MS;
        self.slots
            .iter()
            .filter(|slot| {
                slot.number
                    .is_some_and(|s| s <= current && current - s < SLOTS as u64)
            })
            .map(|slot| slot.summary.total())
            .sum()
    }

    /// Bytes held on the heap (see [`SpaceSaving::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self
                .slots
                .iter()
                .map(|slot| slot.summary.heap_bytes())
                .sum::<usize>()
    }
}

impl SpaceSaving {
    /// The counter `key` holds, if any.
    fn get_counter(&self, key: &[u8]) -> Option<&Counter> {
        let hash = self.hasher.hash_one(key);
        let at = *self.index.find(hash, |&at| {
            self.counters.get(at).is_some_and(|c| &*c.key == key)
        })?;
        self.counters.get(at)
    }
}

/// Where slot `number` lives in the ring.
fn slot_index(number: u64) -> usize {
    // The remainder is below SLOTS, so it fits.
    (number % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A deterministic stream of numbers (splitmix64), so that every run
    /// counts the same keys.
    struct Stream(u64);

    impl Stream {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// A number below `n`, uniformly.
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// A key number below `n` with probability proportional to
        /// 1 / (rank + 1) (Zipf's law), from the cumulative weights.
        fn zipf(&mut self, cumulative: &[f64]) -> usize {
            let total = cumulative.last().copied().unwrap_or(1.0);
            // 53 random bits as a fraction in [0, 1).
            let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
            cumulative.partition_point(|&c| c <= u)
        }
    }

    fn key(i: u64) -> Vec<u8> {
        format!("user:{i:08}").into_bytes()
    }

    /// Counts `events` in a summary of `capacity` and exactly; checks the
    /// summary's guarantees against the exact counts.
    fn holds_its_guarantees(events: &[u64], capacity: usize) -> (SpaceSaving, HashMap<u64, u64>) {
        let mut summary = SpaceSaving::new(capacity);
        let mut exact: HashMap<u64, u64> = HashMap::new();
        for &e in events {
            summary.count(&key(e), 1);
            *exact.entry(e).or_default() += 1;
        }
        let n = events.len() as u64;
        assert_eq!(summary.total(), n);
        assert!(summary.len() <= capacity);
        let bound = n / capacity as u64;
        for estimate in summary.entries() {
            let number: u64 = std::str::from_utf8(&estimate.key[5..])
                .unwrap()
                .parse()
                .unwrap();
            let truth = exact[&number];
            assert!(estimate.count >= truth, "{estimate:?} under {truth}");
            assert!(estimate.count - estimate.error <= truth, "{estimate:?}");
            assert!(estimate.error <= bound, "{estimate:?} over N/k = {bound}");
        }
        // Every key counted more than N / capacity times holds a counter.
        for (&number, &truth) in &exact {
            if truth > bound {
                assert!(
                    summary.get(&key(number)).is_some(),
                    "lost {number} ({truth})"
                );
            }
        }
        (summary, exact)
    }

    /// The `n` most counted keys, by exact count (ties by key).
    fn exact_top(exact: &HashMap<u64, u64>, n: usize) -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = exact.iter().map(|(&k, &c)| (k, c)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    #[test]
    fn a_skewed_stream_yields_its_true_top_keys_in_order() {
        let keys = 10_000;
        let mut cumulative = Vec::with_capacity(keys);
        let mut sum = 0.0;
        for rank in 0..keys {
            sum += 1.0 / (rank as f64 + 1.0);
            cumulative.push(sum);
        }
        let mut stream = Stream(7);
        let events: Vec<u64> = (0..200_000)
            .map(|_| stream.zipf(&cumulative) as u64)
            .collect();
        let (summary, exact) = holds_its_guarantees(&events, 128);
        let mut found: Vec<Estimate> = summary.entries().collect();
        found.sort_by(|a, b| b.count.cmp(&a.count).then(a.key.cmp(&b.key)));
        let expected: Vec<Vec<u8>> = exact_top(&exact, 10).iter().map(|&(k, _)| key(k)).collect();
        let top: Vec<Vec<u8>> = found.iter().take(10).map(|e| e.key.clone()).collect();
        assert_eq!(top, expected);
    }

    #[test]
    fn a_uniform_stream_with_a_few_heavy_keys_finds_them() {
        let mut stream = Stream(11);
        let mut events = Vec::new();
        for i in 0..300_000u64 {
            // Every tenth event is one of three heavy keys; the rest are
            // spread over 100,000 keys (about 3 each).
            events.push(if i % 10 == 0 {
                1_000_000 + stream.below(3)
            } else {
                stream.below(100_000)
            });
        }
        let (summary, exact) = holds_its_guarantees(&events, 64);
        let mut found: Vec<Estimate> = summary.entries().collect();
        found.sort_by(|a, b| b.count.cmp(&a.count).then(a.key.cmp(&b.key)));
        let mut heavy: Vec<Vec<u8>> = found.iter().take(3).map(|e| e.key.clone()).collect();
        heavy.sort();
        assert_eq!(heavy, vec![key(1_000_000), key(1_000_001), key(1_000_002)]);
        assert!(exact.len() > 60_000);
    }

    #[test]
    fn memory_stays_the_same_whatever_the_number_of_keys() {
        let mut summary = SpaceSaving::new(64);
        for i in 0..1_000u64 {
            summary.count(&key(i), 1);
        }
        let after_a_thousand = summary.heap_bytes();
        for i in 1_000..200_000u64 {
            summary.count(&key(i), 1);
        }
        assert_eq!(summary.len(), 64);
        assert_eq!(summary.heap_bytes(), after_a_thousand);

        let mut top = TopKeys::new(64);
        for i in 0..10_000u64 {
            top.count(&key(i), 1, i * 100);
        }
        let before = top.heap_bytes();
        for i in 10_000..400_000u64 {
            top.count(&key(i), 1, i * 100);
        }
        assert_eq!(top.heap_bytes(), before);
    }

    #[test]
    fn a_new_key_takes_the_least_counted_counter_and_its_count_as_error() {
        let mut summary = SpaceSaving::new(2);
        summary.count(b"a", 5);
        summary.count(b"b", 2);
        summary.count(b"c", 1);
        assert!(summary.get(b"b").is_none());
        assert_eq!(
            summary.get(b"c"),
            Some(Estimate {
                key: b"c".to_vec(),
                count: 3,
                error: 2
            })
        );
        assert_eq!(summary.get(b"a").map(|e| (e.count, e.error)), Some((5, 0)));
        assert_eq!(summary.floor(), 3);
        summary.clear();
        assert!(summary.is_empty());
        assert_eq!((summary.total(), summary.floor()), (0, 0));
    }

    #[test]
    fn the_window_forgets_what_is_older_than_five_minutes() {
        let mut top = TopKeys::new(8);
        let start = 1_700_000_000_000 - 1_700_000_000_000 % SLOT_MS;
        top.count(b"early", 10, start);
        top.count(b"late", 4, start + 200_000);
        assert_eq!(top.total(start + 200_000), 14);
        let names = |top: &TopKeys, at: u64| -> Vec<(Vec<u8>, u64)> {
            top.top(10, at)
                .into_iter()
                .map(|e| (e.key, e.count))
                .collect()
        };
        assert_eq!(
            names(&top, start + WINDOW_MS - 1),
            vec![(b"early".to_vec(), 10), (b"late".to_vec(), 4)]
        );
        // The slot of `early` has left the window.
        assert_eq!(names(&top, start + WINDOW_MS), vec![(b"late".to_vec(), 4)]);
        // A slot reused for a later time starts empty.
        top.count(b"again", 1, start + WINDOW_MS);
        assert_eq!(
            names(&top, start + WINDOW_MS),
            vec![(b"late".to_vec(), 4), (b"again".to_vec(), 1)]
        );
        assert_eq!(top.total(start + 2 * WINDOW_MS), 0);
        // An instant older than a reused slot is not counted in it.
        top.count(b"stale", 1, start);
        assert_eq!(top.total(start + WINDOW_MS), 5);
    }

    #[test]
    fn merged_slots_keep_the_bounds() {
        // Three slots, each full with capacity 4; one key heavy in all of
        // them, others that come and go.
        let mut top = TopKeys::new(4);
        let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut stream = Stream(3);
        for slot in 0..3u64 {
            for i in 0..400u64 {
                let k = if i % 4 == 0 {
                    b"heavy".to_vec()
                } else {
                    key(stream.below(50))
                };
                top.count(&k, 1, slot * SLOT_MS + i);
                *exact.entry(k).or_default() += 1;
            }
        }
        let now = 2 * SLOT_MS + 400;
        assert_eq!(top.total(now), 1_200);
        let estimates = top.top(100, now);
        assert_eq!(estimates[0].key, b"heavy".to_vec());
        for e in &estimates {
            let truth = exact[&e.key];
            assert!(e.count >= truth, "{e:?} under {truth}");
            assert!(e.count - e.error <= truth, "{e:?} over {truth}");
        }
    }
}
