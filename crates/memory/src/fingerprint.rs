//! Keys hashed once to a 128-bit [`Fingerprint`] with SipHash-1-3 under a
//! secret per-store [`Seed`].
//!
//! Tables store fingerprints, never keys: a key of any length costs 16 bytes.
//! Two keys share a state only if their fingerprints collide, which takes
//! about 2^64 keys by chance; because the seed is random and secret, callers
//! cannot craft collisions (or pile keys into one shard) on purpose. This
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
        let Hash128 { h1, h2 } = hasher.finish128();
        Fingerprint { hi: h1, lo: h2 }
    }
}

/// Keys up to this long are remembered by [`Seed::fingerprint_recent`].
const RECENT_KEY_BYTES: usize = 32;

/// The last key a thread fingerprinted, and its fingerprint.
struct Recent {
    seed: Seed,
    len: usize,
    key: [u8; RECENT_KEY_BYTES],
    fp: Fingerprint,
}

thread_local! {
    static RECENT: RefCell<Recent> = const {
        RefCell::new(Recent {
            seed: Seed { k0: 0, k1: 0 },
            // No key has this length: the first lookup misses.
            len: usize::MAX,
            key: [0; RECENT_KEY_BYTES],
            fp: Fingerprint { hi: 0, lo: 0 },
        })
    };
}

impl Seed {
    /// [`fingerprint`](Self::fingerprint), remembering the last short key
    /// each thread asked for: traffic is skewed, the same key often comes
    /// back-to-back, and comparing a few bytes costs a fraction of the
    /// 128-bit SipHash. A miss costs the comparison and a copy of the key.
    #[inline]
    pub(crate) fn fingerprint_recent(&self, key: &[u8]) -> Fingerprint {
        if key.len() > RECENT_KEY_BYTES {
            return self.fingerprint(key);
        }
        RECENT.with(|recent| {
            let Ok(mut recent) = recent.try_borrow_mut() else {
                return self.fingerprint(key);
            };
            if recent.len == key.len() && recent.seed == *self && recent.key[..key.len()] == *key {
                return recent.fp;
            }
            let fp = self.fingerprint(key);
            recent.seed = *self;
            recent.len = key.len();
            recent.key[..key.len()].copy_from_slice(key);
            recent.fp = fp;
            fp
        })
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(..)")
    }
}

/// A key's 128-bit hash, kept as two `u64` so entries stay 8-byte aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Fingerprint {
    hi: u64,
    lo: u64,
}

impl Fingerprint {
    /// The hash the shard's table is probed with (independent of the shard
    /// index).
    pub(crate) fn table_hash(&self) -> u64 {
        self.hi
    }

    /// The 16 bytes a snapshot stores.
    pub(crate) fn to_bytes(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.hi.to_le_bytes());
        out[8..].copy_from_slice(&self.lo.to_le_bytes());
        out
    }

    /// The fingerprint [`to_bytes`](Self::to_bytes) wrote.
    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Fingerprint {
        let half = |b: &[u8]| {
            b.iter()
                .rev()
                .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
        };
        Fingerprint {
            hi: half(&bytes[..8]),
            lo: half(&bytes[8..]),
        }
    }

    /// The shard among `mask + 1` (a power of two) that holds this key.
    pub(crate) fn shard(&self, mask: usize) -> usize {
        // Truncation on 32-bit targets keeps the low bits, which is all we use.
        (self.lo as usize) & mask
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
    fn a_fingerprint_is_two_aligned_words() {
        assert_eq!(std::mem::size_of::<Fingerprint>(), 16);
        assert_eq!(std::mem::align_of::<Fingerprint>(), 8);
    }
}
