//! [`MemoryConfig`]: how much memory the store may use and how finely it is
//! sharded. Plain data; the store normalises it once, at construction.

/// The default memory cap: 256 MiB.
pub const DEFAULT_MAX_BYTES: usize = 256 << 20;

/// The fewest shards a table gets by default.
pub const MIN_DEFAULT_SHARDS: usize = 16;

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
    /// 256 MiB, and `4 × available_parallelism` shards rounded up to a power
    /// of two, at least 16.
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        MemoryConfig {
            max_bytes: DEFAULT_MAX_BYTES,
            shards: normalise_shards(threads.saturating_mul(4)).max(MIN_DEFAULT_SHARDS),
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
    fn default_shards_are_a_power_of_two_of_at_least_16() {
        let config = MemoryConfig::default();
        assert!(config.shards.is_power_of_two());
        assert!(config.shards >= MIN_DEFAULT_SHARDS);
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
