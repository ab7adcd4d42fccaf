//! [`MemoryConfig`]: how much memory the store may use and how finely it is
//! sharded. Plain data; the store normalises it once, at construction.

/// The default memory cap: 256 MiB.
pub const DEFAULT_MAX_BYTES: usize = 256 << 20;

/// The fewest shards a table gets by default.
pub const MIN_DEFAULT_SHARDS: usize = 64;

/// The most shards a table gets by default: a table's shard array is 64
/// bytes a shard whether or not it holds keys, so 16 KiB a limit here,
/// and each shard may grow to 16 buckets past the memory cap (module docs).
pub const MAX_DEFAULT_SHARDS: usize = 256;

/// Default shards per thread of the machine. A check holds its shard's lock
/// while it reads the key's state, a cache miss over many keys, so threads
/// meeting in one shard wait for each other: over 131,072 keys from two
/// threads a `gcra` check took 0.85-0.96x governor's with 16 shards, and
/// 0.75-0.80x with 64 (docs/benchmarks.md).
const DEFAULT_SHARDS_PER_THREAD: usize = 32;

/// The most shards a table may have; larger requests are clamped.
pub const MAX_SHARDS: usize = 1 << 16;

/// Settings of a [`MemoryStore`](crate::MemoryStore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryConfig {
    /// The cap on memory held for keys: every table's allocation plus the heap
    /// owned by states. When it is reached, the store evicts (see the crate
    /// docs) rather than grow.
    pub max_bytes: usize,
    /// Shards per table. Rounded up to a power of two, at least 1 and at most
    /// [`MAX_SHARDS`].
    pub shards: usize,
}

impl Default for MemoryConfig {
    /// 256 MiB, and `32 × available_parallelism` shards rounded up to a
    /// power of two, at least [`MIN_DEFAULT_SHARDS`] and at most
    /// [`MAX_DEFAULT_SHARDS`].
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        MemoryConfig {
            max_bytes: DEFAULT_MAX_BYTES,
            shards: normalise_shards(threads.saturating_mul(DEFAULT_SHARDS_PER_THREAD))
                .clamp(MIN_DEFAULT_SHARDS, MAX_DEFAULT_SHARDS),
        }
    }
}

impl MemoryConfig {
    /// The configuration as the store uses it: `shards` a power of two within
    /// `1..=MAX_SHARDS`.
    pub(crate) fn normalised(self) -> MemoryConfig {
        MemoryConfig {
            shards: normalise_shards(self.shards),
            ..self
        }
    }
}

fn normalise_shards(shards: usize) -> usize {
    shards
        .clamp(1, MAX_SHARDS)
        .checked_next_power_of_two()
        .unwrap_or(MAX_SHARDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_shards_are_a_power_of_two_within_the_default_bounds() {
        let config = MemoryConfig::default();
        assert!(config.shards.is_power_of_two());
        assert!(config.shards >= MIN_DEFAULT_SHARDS);
        assert!(config.shards <= MAX_DEFAULT_SHARDS);
        assert_eq!(config.max_bytes, 256 * 1024 * 1024);
    }

    #[test]
    fn shards_are_normalised() {
        let with = |shards| {
            MemoryConfig {
                max_bytes: 0,
                shards,
            }
            .normalised()
            .shards
        };
        assert_eq!(with(0), 1);
        assert_eq!(with(1), 1);
        assert_eq!(with(10), 16);
        assert_eq!(with(64), 64);
        assert_eq!(with(usize::MAX), MAX_SHARDS);
    }
}
