//! What a shard's hash table allocates, computed from its bucket count, and
//! how hashbrown sizes a table when it grows or shrinks.
//!
//! hashbrown allocates one block per table: `buckets` entries (padded to the
//! control bytes' alignment), then one control byte per bucket plus one
//! trailing SIMD group. The accounting uses this formula rather than asking
//! the allocator, so the budget can be checked *before* a table grows. The
//! behaviour tests compare it with a counting global allocator.

use std::mem::{align_of, size_of};

/// Control bytes are read in groups of this many (16 with SSE2; 8 on other
/// targets, where the estimate is then a few bytes high — never low).
pub(crate) const GROUP_WIDTH: usize = 16;

/// The smallest table every shard may always have, whatever the budget says:
/// 16 buckets hold 14 entries, so a new limit works under a full budget.
pub(crate) const MIN_BUCKETS: usize = 16;

/// Bytes allocated by a hashbrown table of `buckets` entries of type `T`
/// (`0` for the unallocated empty table, which reports one bucket).
pub(crate) fn table_bytes<T>(buckets: usize) -> usize {
    if buckets < 2 {
        return 0;
    }
    let ctrl_align = align_of::<T>().max(GROUP_WIDTH);
    let data = size_of::<T>()
        .saturating_mul(buckets)
        .next_multiple_of(ctrl_align);
    data.saturating_add(buckets).saturating_add(GROUP_WIDTH)
}

/// Entries a table of `buckets` holds before it must grow (7/8 load; one
/// empty bucket for the smallest tables).
pub(crate) fn full_capacity(buckets: usize) -> usize {
    if buckets < 8 {
        buckets.saturating_sub(1)
    } else {
        buckets / 8 * 7
    }
}

/// Buckets hashbrown picks to hold `capacity` entries of at least 4 bytes.
pub(crate) fn buckets_for(capacity: usize) -> usize {
    match capacity {
        0..=3 => 4,
        4..=7 => 8,
        8..=14 => 16,
        _ => (capacity.saturating_mul(8) / 7)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX),
    }
}

/// Buckets after a full table of `buckets` grows by one entry.
pub(crate) fn grown_buckets(buckets: usize) -> usize {
    buckets_for(full_capacity(buckets).saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hashbrown::HashTable;

    type Entry = [u64; 4];

    fn table_with(len: u64) -> HashTable<Entry> {
        let mut table = HashTable::new();
        for i in 0..len {
            let hash = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            table.insert_unique(hash, [hash, 0, 0, 0], |e| e[0]);
        }
        table
    }

    #[test]
    fn matches_hashbrowns_own_report() {
        for len in [0, 1, 3, 4, 7, 8, 14, 15, 100, 1000, 5000] {
            let table = table_with(len);
            let estimate = table_bytes::<Entry>(table.num_buckets());
            if cfg!(target_feature = "sse2") {
                assert_eq!(estimate, table.allocation_size(), "len {len}");
            } else {
                assert!(estimate >= table.allocation_size(), "len {len}");
            }
        }
    }

    #[test]
    fn growth_is_predicted() {
        for len in [0, 3, 7, 14, 28, 56, 112, 896] {
            let mut table = table_with(len);
            assert_eq!(table.len(), table.capacity(), "len {len} is not full");
            let before = table.num_buckets();
            table.insert_unique(u64::MAX, [u64::MAX; 4], |e| e[0]);
            assert_eq!(table.num_buckets(), grown_buckets(before), "len {len}");
            assert_eq!(full_capacity(before), len as usize);
        }
    }

    #[test]
    fn shrinking_is_predicted() {
        for (len, target) in [(1000, 10), (1000, 100), (5000, 2000)] {
            let mut table = table_with(len);
            table.retain(|e| e[0] % 10 == 0);
            table.shrink_to(target, |e| e[0]);
            let expect = buckets_for(target.max(table.len()));
            assert_eq!(table.num_buckets(), expect, "{len} -> {target}");
        }
    }
}
