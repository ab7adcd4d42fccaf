//! Keys hashed once to a 64-bit [`Fingerprint`] with SipHash-1-3 under a
//! secret per-store [`Seed`].
//!
//! Tables store fingerprints, never keys: a key of any length costs 8 bytes,
//! so the state of a `gcra`, `token_bucket` or `fixed_window` key and its
//! fingerprint fill 24 bytes. Two keys share a state only if their
//! fingerprints collide: among `n` keys of one limit that happens with a
//! probability of about `n² / 2^65` (one in 37,000 for ten million keys, one
//! in 37 million for a million), and because the seed is random and secret,
//! callers cannot craft collisions (or pile keys into one shard) on purpose.
//! The fingerprint is the first half of SipHash-1-3's 128-bit output, the
//! whole fingerprint of earlier versions, so their snapshots still load. This
//! module owns the hashing and the split of a fingerprint into shard index
//! and table hash; it does not own the tables.

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use siphasher::sip128::{Hash128, Hasher128, SipHasher13};

/// The secret keys of a store's fingerprint hash.
///
/// Snapshots record it so that a restored store finds its keys again. Its
/// `Debug` output is redacted.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seed {
    /// The first SipHash key.
    pub k0: u64,
    /// The second SipHash key.
    pub k1: u64,
}

impl Seed {
    /// Fresh random keys, from the operating system's randomness (through
    /// [`RandomState`]).
    pub fn random() -> Seed {
        Seed {
            k0: RandomState::new().hash_one(0x746f_6c6c_u64),
            k1: RandomState::new().hash_one(0x6761_7465_u64),
        }
    }

    /// The fingerprint of `key` under this seed.
    #[inline]
    pub(crate) fn fingerprint(&self, key: &[u8]) -> Fingerprint {
        let mut hasher = SipHasher13::new_with_keys(self.k0, self.k1);
        hasher.write(key);
        let Hash128 { h1, .. } = hasher.finish128();
        Fingerprint(h1)
    }
}

/// Keys up to this long are remembered by [`Seed::fingerprint_recent`]:
/// a rules key (its prefix, `tg1|`, the domain and each descriptor key,
/// then the values) is over 32 bytes for most rules.
const RECENT_KEY_BYTES: usize = 64;

/// How many keys each thread remembers: a request with several
/// descriptors (a per-client key and a global one, say) looks up each of
/// its keys in turn, and one remembered key would be the other's every
/// time.
const RECENT_KEYS: usize = 4;

/// A key a thread fingerprinted, its fingerprint, and when it was last
/// asked for.
#[derive(Clone, Copy)]
struct RecentKey {
    seed: Seed,
    len: usize,
    key: [u8; RECENT_KEY_BYTES],
    fp: Fingerprint,
    used: u64,
}

/// The keys a thread fingerprinted last, and the count of lookups that
/// stamps each key when it is asked for.
struct Recent {
    keys: [RecentKey; RECENT_KEYS],
    clock: u64,
}

thread_local! {
    static RECENT: RefCell<Recent> = const {
        RefCell::new(Recent {
            keys: [RecentKey {
                seed: Seed { k0: 0, k1: 0 },
                // No key has this length: the first lookups miss.
                len: usize::MAX,
                key: [0; RECENT_KEY_BYTES],
                fp: Fingerprint(0),
                used: 0,
            }; RECENT_KEYS],
            clock: 0,
        })
    };
}

impl Seed {
    /// [`fingerprint`](Self::fingerprint), remembering the last few short
    /// keys each thread asked for: traffic is skewed, the same keys often
    /// come back-to-back (and a request's several descriptors come
    /// together), and comparing a few bytes costs a fraction of the
    /// 128-bit SipHash. A miss costs the comparisons (the keys' last words
    /// first: keys of one rule share their start) and a copy of the key,
    /// which takes the place of the key asked for least recently, so that
    /// a key asked for on every request (a global descriptor's) stays
    /// among keys that change on every request (the clients').
    #[inline(always)]
    pub(crate) fn fingerprint_recent(&self, key: &[u8]) -> Fingerprint {
        if key.len() > RECENT_KEY_BYTES {
            return self.fingerprint(key);
        }
        RECENT.with(|recent| {
            let Ok(mut recent) = recent.try_borrow_mut() else {
                return self.fingerprint(key);
            };
            let recent = &mut *recent;
            recent.clock += 1;
            for known in &mut recent.keys {
                if known.len == key.len()
                    && same_short_bytes(&known.key[..key.len()], key)
                    && known.seed == *self
                {
                    known.used = recent.clock;
                    return known.fp;
                }
            }
            self.remember(recent, key)
        })
    }

    /// The miss of [`fingerprint_recent`](Self::fingerprint_recent), out of
    /// line so that the hit stays small: hashes `key` (at most
    /// [`RECENT_KEY_BYTES`] long) and remembers it in place of the key
    /// asked for least recently.
    #[inline(never)]
    fn remember(&self, recent: &mut Recent, key: &[u8]) -> Fingerprint {
        let fp = self.fingerprint(key);
        let clock = recent.clock;
        let mut oldest = 0;
        for (at, known) in recent.keys.iter().enumerate() {
            if known.used < recent.keys[oldest].used {
                oldest = at;
            }
        }
        let slot = &mut recent.keys[oldest];
        slot.seed = *self;
        slot.len = key.len();
        copy_short_bytes(&mut slot.key, key);
        slot.fp = fp;
        slot.used = clock;
        fp
    }
}

/// Copies `key` (at most 64 bytes) to the front of `to`: whole words, as
/// [`same_short_bytes`] compares them, rather than a call to `memcpy`.
#[inline(always)]
fn copy_short_bytes(to: &mut [u8; RECENT_KEY_BYTES], key: &[u8]) {
    let len = key.len();
    let mut word = |at: usize| to[at..at + 8].copy_from_slice(&key[at..at + 8]);
    match len {
        33..=RECENT_KEY_BYTES => {
            for at in [0, 8, 16, 24, len - 32, len - 24, len - 16, len - 8] {
                word(at);
            }
        }
        16..=32 => {
            word(0);
            word(8);
            word(len - 16);
            word(len - 8);
        }
        8..16 => {
            word(0);
            word(len - 8);
        }
        _ => to[..len].copy_from_slice(key),
    }
}

/// Whether `a` and `b`, of one length of at most 64 bytes, hold the same
/// bytes: two, four or eight word comparisons (overlapping when the length
/// is not a multiple of eight) instead of a call to `memcmp`, which on a
/// hot key cost as much as the rest of the remembered-key lookup.
#[inline(always)]
fn same_short_bytes(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    match len {
        // The last word first: keys that differ, differ there most often.
        33..=RECENT_KEY_BYTES => [len - 8, 0, 8, 16, 24, len - 32, len - 24, len - 16]
            .into_iter()
            .all(|at| word(a, at) == word(b, at)),
        16..=32 => {
            word(a, len - 8) == word(b, len - 8)
                && word(a, 0) == word(b, 0)
                && word(a, 8) == word(b, 8)
                && word(a, len - 16) == word(b, len - 16)
        }
        8..16 => word(a, len - 8) == word(b, len - 8) && word(a, 0) == word(b, 0),
        _ => a == b,
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(..)")
    }
}

/// A key's 64-bit hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Fingerprint(u64);

impl Fingerprint {
    /// The hash the shard's table is probed with: all of it (hashbrown
    /// places by its low bits and tags with its top seven, neither of which
    /// the shard index uses while a shard holds fewer than 2^32 buckets).
    pub(crate) fn table_hash(&self) -> u64 {
        self.0
    }

    /// The 8 bytes a snapshot stores.
    pub(crate) fn to_bytes(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }

    /// The fingerprint [`to_bytes`](Self::to_bytes) wrote, or the first 8
    /// of the 16 bytes of a version 1 snapshot.
    pub(crate) fn from_bytes(bytes: [u8; 8]) -> Fingerprint {
        Fingerprint(u64::from_le_bytes(bytes))
    }

    /// The shard among `mask + 1` (a power of two) that holds this key: bits
    /// 32 and up, so that it can be found again from the fingerprint alone
    /// (a snapshot restored into a store with another shard count).
    pub(crate) fn shard(&self, mask: usize) -> usize {
        // Truncation on 32-bit targets keeps the low bits, which is all we use.
        ((self.0 >> 32) as usize) & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_fingerprint_and_different_seeds_differ() {
        let seed = Seed { k0: 1, k1: 2 };
        assert_eq!(seed.fingerprint(b"user:1"), seed.fingerprint(b"user:1"));
        assert_ne!(seed.fingerprint(b"user:1"), seed.fingerprint(b"user:2"));
        let other = Seed { k0: 1, k1: 3 };
        assert_ne!(seed.fingerprint(b"user:1"), other.fingerprint(b"user:1"));
    }

    #[test]
    fn the_remembered_fingerprint_is_the_fingerprint() {
        let (a, b) = (Seed { k0: 1, k1: 2 }, Seed { k0: 3, k1: 4 });
        let long = [7u8; RECENT_KEY_BYTES + 1];
        let keys: [&[u8]; 6] = [b"user:1", b"user:1", b"user:10", b"", &long, b"user:1"];
        for key in keys {
            for seed in [a, b, a] {
                assert_eq!(
                    seed.fingerprint_recent(key),
                    seed.fingerprint(key),
                    "{key:?}"
                );
            }
        }
        // A key that is a prefix of the remembered one is not mistaken for it.
        assert_eq!(a.fingerprint_recent(b"user:10"), a.fingerprint(b"user:10"));
        assert_eq!(a.fingerprint_recent(b"user:1"), a.fingerprint(b"user:1"));
        // More keys than are remembered, in turn and under both seeds: each
        // is its own fingerprint whichever entry it is found in or replaces.
        let many: Vec<Vec<u8>> = (0..RECENT_KEYS + 2)
            .map(|i| format!("tg1|bench|client:{i}").into_bytes())
            .collect();
        for _ in 0..3 {
            for key in &many {
                for seed in [a, b] {
                    assert_eq!(seed.fingerprint_recent(key), seed.fingerprint(key));
                }
            }
        }
    }

    /// Whether this thread remembers `key` under `seed`.
    fn remembered(seed: Seed, key: &[u8]) -> bool {
        RECENT.with(|recent| {
            recent
                .borrow()
                .keys
                .iter()
                .any(|k| k.seed == seed && k.len == key.len() && &k.key[..k.len] == key)
        })
    }

    #[test]
    fn a_key_asked_for_on_every_request_stays_among_keys_that_change() {
        let seed = Seed { k0: 5, k1: 6 };
        let global = b"tg1|api|generic_key|all";
        for client in 0..4 * RECENT_KEYS {
            assert_eq!(seed.fingerprint_recent(global), seed.fingerprint(global));
            let key = format!("tg1|api|remote_address|10.0.0.{client}");
            seed.fingerprint_recent(key.as_bytes());
            assert!(remembered(seed, global), "evicted after client {client}");
            assert!(remembered(seed, key.as_bytes()));
        }
    }

    #[test]
    fn short_keys_compare_byte_for_byte() {
        let base: Vec<u8> = (0..=RECENT_KEY_BYTES as u8).collect();
        for len in 0..=RECENT_KEY_BYTES {
            let a = &base[..len];
            assert!(same_short_bytes(a, a), "{len}");
            if len > 0 {
                assert!(!same_short_bytes(a, &base[1..=len]), "{len}: shifted");
            }
            for i in 0..len {
                let mut b = a.to_vec();
                b[i] ^= 0x40;
                assert!(!same_short_bytes(a, &b), "{len}: byte {i} differs");
            }
        }
        assert!(!same_short_bytes(b"ab", b"abc"));
    }

    #[test]
    fn short_keys_are_copied_byte_for_byte() {
        let base: Vec<u8> = (1..=RECENT_KEY_BYTES as u8).collect();
        for len in 0..=RECENT_KEY_BYTES {
            let mut to = [0u8; RECENT_KEY_BYTES];
            copy_short_bytes(&mut to, &base[..len]);
            assert_eq!(&to[..len], &base[..len], "{len}");
            assert!(
                to[len..].iter().all(|&b| b == 0),
                "{len}: nothing past the key"
            );
        }
    }

    #[test]
    fn random_seeds_differ_and_are_not_printed() {
        let (a, b) = (Seed::random(), Seed::random());
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "Seed(..)");
    }

    #[test]
    fn shards_spread_evenly() {
        let seed = Seed::random();
        let mut counts = [0usize; 16];
        for i in 0..16_000u32 {
            counts[seed.fingerprint(&i.to_le_bytes()).shard(15)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn a_fingerprint_is_one_word_and_round_trips() {
        assert_eq!(std::mem::size_of::<Fingerprint>(), 8);
        let fp = Seed { k0: 5, k1: 6 }.fingerprint(b"user:1");
        assert_eq!(Fingerprint::from_bytes(fp.to_bytes()), fp);
    }

    #[test]
    fn the_fingerprint_is_the_first_half_of_the_128_bit_hash() {
        // What version 1 snapshots stored in full; they load by it.
        let seed = Seed { k0: 5, k1: 6 };
        let mut hasher = SipHasher13::new_with_keys(5, 6);
        hasher.write(b"user:1");
        assert_eq!(seed.fingerprint(b"user:1").0, hasher.finish128().h1);
    }
}
