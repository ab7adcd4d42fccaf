//! Snapshots: the whole store as bytes, and back, so a restarted process
//! does not hand every client a fresh quota.
//!
//! The form (all integers little-endian):
//!
//! ```text
//! "TOLLGATE-SNAPSHOT" version:u64 seed.k0:u64 seed.k1:u64 tables:u64
//! per table: limit, entries:u64, per entry: fingerprint:8 bytes, state
//! checksum:u64   (SipHash-1-3 of everything before it)
//! ```
//!
//! That is version 4. Version 3 had no calendar windows in its limits,
//! version 2 no bans, and version 1 stored 16-byte fingerprints besides, of
//! which today's are the first 8; their snapshots still load.
//!
//! A limit is its algorithm's name (length-prefixed), the rate's count and
//! period in ns, then burst, step (ns) and lease TTL (ns), each a presence
//! byte and a `u64`, then the ban: a presence byte and three `u64`s
//! (`after`, `within` in ns, `for` in ns; zeros when absent), then the
//! calendar window: a presence byte, and when present the unit's name and
//! the time zone's IANA name (each length-prefixed) and the anchor (a
//! `u64`). A banned
//! limit's states are its algorithm's followed by the ban's
//! ([`BanState::encode`](tollgate_core::ban::BanState::encode)). States are each algorithm's
//! [`StateCodec`](tollgate_core::algorithm::StateCodec) form. Keys are stored
//! only as fingerprints, which is why the seed travels with them: a snapshot
//! is as secret as the seed. States already expired when the snapshot is
//! taken, or when it is loaded, are left out. A snapshot larger than the
//! cap is put back most indebted state first, so that the cap leaves out
//! what forgetting costs least.
//!
//! This module owns the byte form; writing it to disk (atomically) is the
//! caller's job.

use std::collections::BinaryHeap;
use std::hash::Hasher;
use std::time::Duration;

use siphasher::sip::SipHasher13;
use tollgate_core::algorithm::codec::{put_len, put_u64, Reader};
use tollgate_core::ban::Ban;
use tollgate_core::calendar::{Calendar, CalendarUnit};
use tollgate_core::rate::Rate;
use tollgate_core::time::duration_to_nanos;
use tollgate_core::{AlgorithmName, Limit};

use crate::config::MemoryConfig;
use crate::fingerprint::Seed;
use crate::store::MemoryStore;

const MAGIC: &[u8] = b"TOLLGATE-SNAPSHOT";
const VERSION: u64 = 4;
/// The version before calendar windows, still read.
const VERSION_3: u64 = 3;
/// The version before bans, still read.
const VERSION_2: u64 = 2;
/// The oldest version this build reads, and its fingerprints' width.
const VERSION_1: u64 = 1;
const VERSION_1_FINGERPRINT_BYTES: usize = 16;
/// The longest algorithm, unit or time zone name a snapshot may carry.
const MAX_NAME: usize = 64;

/// Why a snapshot could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Not a tollgate snapshot at all.
    #[error("not a tollgate snapshot (bad magic bytes)")]
    NotASnapshot,
    /// Written by another version of the format.
    #[error(
        "snapshot format version {0} is not supported (this build reads versions 1 to {VERSION})"
    )]
    Version(u64),
    /// The checksum does not match: the file is damaged or truncated.
    #[error("snapshot checksum mismatch: the file is damaged or truncated")]
    Checksum,
    /// The bytes parse badly, at the given table.
    #[error("snapshot is malformed at table {table}: {reason}")]
    Malformed {
        /// Which table (0-based).
        table: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0x746f_6c6c_6761_7465, 0x736e_6170_7368_6f74);
    hasher.write(bytes);
    hasher.finish()
}

fn put_option(out: &mut Vec<u8>, value: Option<u64>) {
    out.push(u8::from(value.is_some()));
    put_u64(out, value.unwrap_or(0));
}

fn encode_limit(limit: &Limit, out: &mut Vec<u8>) {
    let name = limit.algorithm.as_str().as_bytes();
    put_len(out, name.len());
    out.extend_from_slice(name);
    put_u64(out, limit.rate.limit());
    put_u64(out, limit.rate.period_nanos());
    put_option(out, limit.burst);
    put_option(out, limit.step.map(duration_to_nanos));
    put_option(out, limit.lease_ttl.map(duration_to_nanos));
    put_option(out, limit.ban.map(|b| b.after()));
    let ban = limit.ban.map_or((0, 0), |b| {
        (
            duration_to_nanos(b.within()),
            duration_to_nanos(b.duration()),
        )
    });
    put_u64(out, ban.0);
    put_u64(out, ban.1);
    match limit.calendar {
        None => out.push(0),
        Some(calendar) => {
            out.push(1);
            for name in [calendar.unit().as_str(), calendar.zone_name()] {
                put_len(out, name.len());
                out.extend_from_slice(name.as_bytes());
            }
            put_u64(out, u64::from(calendar.anchor()));
        }
    }
}

fn short_text<'a>(input: &mut Reader<'a>) -> Option<&'a str> {
    let len = input.len(MAX_NAME)?;
    std::str::from_utf8(input.take(len)?).ok()
}

fn option(input: &mut Reader<'_>) -> Option<Option<u64>> {
    let present = input.take(1)?[0];
    let value = input.u64()?;
    match present {
        0 => Some(None),
        1 => Some(Some(value)),
        _ => None,
    }
}

fn decode_limit(input: &mut Reader<'_>, version: u64) -> Option<Limit> {
    let len = input.len(MAX_NAME)?;
    let name = std::str::from_utf8(input.take(len)?).ok()?;
    let algorithm: AlgorithmName = name.parse().ok()?;
    let rate = Rate::from_nanos(input.u64()?, input.u64()?).ok()?;
    let mut limit = Limit::new(algorithm, rate);
    limit.burst = option(input)?;
    limit.step = option(input)?.map(Duration::from_nanos);
    limit.lease_ttl = option(input)?.map(Duration::from_nanos);
    if version >= VERSION_3 {
        let after = option(input)?;
        let (within, duration) = (input.u64()?, input.u64()?);
        if let Some(after) = after {
            let (within, duration) = (Duration::from_nanos(within), Duration::from_nanos(duration));
            limit.ban = Some(Ban::new(after, within, duration).ok()?);
        }
    }
    if version >= VERSION {
        match input.take(1)?[0] {
            0 => {}
            1 => {
                let unit: CalendarUnit = short_text(input)?.parse().ok()?;
                let zone = short_text(input)?;
                let anchor = input.u64()?;
                limit.calendar = Some(Calendar::new(unit, zone, Some(anchor)).ok()?);
            }
            _ => return None,
        }
    }
    Some(limit)
}

impl MemoryStore {
    /// Every state not expired at `now`, with the seed and the limits, as
    /// bytes. Locks one shard at a time: requests go on while it runs, and
    /// each key is saved as it was when its shard was read.
    ///
    /// ```
    /// use tollgate_core::{AlgorithmName, Limit, Rate};
    /// use tollgate_memory::{MemoryConfig, MemoryStore};
    ///
    /// let store = MemoryStore::new(MemoryConfig::default());
    /// let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap());
    /// for _ in 0..7 {
    ///     store.limiter(&limit).unwrap().check(b"alice", 0, 1).unwrap();
    /// }
    /// let bytes = store.snapshot(0);
    /// let restored = MemoryStore::from_snapshot(MemoryConfig::default(), &bytes, 0).unwrap();
    /// let again = restored.limiter(&limit).unwrap().check(b"alice", 0, 1).unwrap();
    /// assert_eq!(again.remaining, 2);
    /// ```
    pub fn snapshot(&self, now: u64) -> Vec<u8> {
        let limiters = self.limiters();
        let seed = self.seed();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        put_u64(&mut out, VERSION);
        put_u64(&mut out, seed.k0);
        put_u64(&mut out, seed.k1);
        put_len(&mut out, limiters.len());
        let mut entries = Vec::new();
        for limiter in &limiters {
            encode_limit(limiter.limit(), &mut out);
            entries.clear();
            let count = limiter.table().dump(now, &mut entries);
            put_u64(&mut out, count);
            out.extend_from_slice(&entries);
        }
        let sum = checksum(&out);
        put_u64(&mut out, sum);
        out
    }

    /// A store holding what `bytes` (from [`snapshot`](Self::snapshot))
    /// saved, under the saved seed, leaving out states expired at `now`.
    /// When the states do not all fit in `config.max_bytes`, the most
    /// indebted of all tables are put back first and the rest is evicted
    /// as usual: states that are not refusing go first, the least indebted
    /// first, and a refusing state is left out only when no other can go.
    pub fn from_snapshot(
        config: MemoryConfig,
        bytes: &[u8],
        now: u64,
    ) -> Result<MemoryStore, SnapshotError> {
        let body = bytes
            .strip_prefix(MAGIC)
            .ok_or(SnapshotError::NotASnapshot)?;
        let mut header = Reader::new(body);
        let version = header.u64().ok_or(SnapshotError::NotASnapshot)?;
        let fp_bytes = match version {
            VERSION | VERSION_3 | VERSION_2 => 8,
            VERSION_1 => VERSION_1_FINGERPRINT_BYTES,
            _ => return Err(SnapshotError::Version(version)),
        };
        let (content, sum) = bytes.split_at(bytes.len().saturating_sub(8));
        let sum = Reader::new(sum).u64().ok_or(SnapshotError::Checksum)?;
        if checksum(content) != sum {
            return Err(SnapshotError::Checksum);
        }
        let mut input = Reader::new(&content[MAGIC.len()..]);
        let malformed = |table, reason| SnapshotError::Malformed { table, reason };
        let _version = input.u64();
        let (k0, k1) = match (input.u64(), input.u64()) {
            (Some(k0), Some(k1)) => (k0, k1),
            _ => return Err(malformed(0, "truncated header")),
        };
        let store = MemoryStore::with_seed(config, Seed { k0, k1 });
        let tables = input
            .len(usize::MAX)
            .ok_or(malformed(0, "truncated header"))?;
        // First every table's header and entries are read (the entries
        // staged and dropped, so that bad bytes change nothing), then the
        // states of all tables are put back, the most indebted first.
        let mut tables_read = Vec::new();
        for table in 0..tables {
            let limit =
                decode_limit(&mut input, version).ok_or(malformed(table, "invalid limit"))?;
            let limiter = store
                .limiter(&limit)
                .map_err(|_| malformed(table, "invalid limit options"))?;
            let count = input
                .u64()
                .ok_or(malformed(table, "truncated entry count"))?;
            let entries = input.clone();
            limiter
                .table()
                .stage(&mut input, count, fp_bytes, now)
                .ok_or(malformed(table, "invalid entry"))?;
            tables_read.push((limiter, entries, count));
        }
        if !input.rest().is_empty() {
            return Err(malformed(tables, "trailing bytes"));
        }
        let mut staged = Vec::with_capacity(tables_read.len());
        for (table, (limiter, entries, count)) in tables_read.iter().enumerate() {
            let states = limiter
                .table()
                .stage(&mut entries.clone(), *count, fp_bytes, now)
                .ok_or(malformed(table, "invalid entry"))?;
            staged.push(states);
        }
        let mut next: BinaryHeap<(u64, usize)> = staged
            .iter()
            .enumerate()
            .filter_map(|(i, states)| Some((states.next_rank()?, i)))
            .collect();
        while let Some((_, i)) = next.pop() {
            let Some(states) = staged.get_mut(i) else {
                continue;
            };
            states.restore_next();
            if let Some(rank) = states.next_rank() {
                next.push((rank, i));
            }
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_is_detected() {
        let store = MemoryStore::new(MemoryConfig::default());
        let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(5).unwrap());
        store.limiter(&limit).unwrap().check(b"k", 0, 1).unwrap();
        let bytes = store.snapshot(0);
        let config = MemoryConfig::default();
        assert!(MemoryStore::from_snapshot(config, &bytes, 0).is_ok());
        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        assert_eq!(
            MemoryStore::from_snapshot(config, &flipped, 0).unwrap_err(),
            SnapshotError::Checksum
        );
        assert_eq!(
            MemoryStore::from_snapshot(config, &bytes[..bytes.len() - 3], 0).unwrap_err(),
            SnapshotError::Checksum
        );
        assert_eq!(
            MemoryStore::from_snapshot(config, b"hello", 0).unwrap_err(),
            SnapshotError::NotASnapshot
        );
        assert_eq!(
            MemoryStore::from_snapshot(config, b"", 0).unwrap_err(),
            SnapshotError::NotASnapshot
        );
    }

    #[test]
    fn version_1_snapshots_with_16_byte_fingerprints_still_load() {
        use tollgate_core::algorithm::{Gcra, StateCodec};
        use tollgate_core::Algorithm;

        let seed = Seed { k0: 11, k1: 12 };
        let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(5).unwrap());
        let gcra = Gcra::new(limit.rate, 5).unwrap();
        let mut state = gcra.new_state();
        gcra.commit(&mut state, 0, 3);
        // A version 1 snapshot, written out by hand: one gcra key that has
        // taken 3 of 5, its fingerprint in 16 bytes.
        let mut v1 = MAGIC.to_vec();
        put_u64(&mut v1, VERSION_1);
        put_u64(&mut v1, seed.k0);
        put_u64(&mut v1, seed.k1);
        put_len(&mut v1, 1);
        encode_limit(&limit, &mut v1);
        // Version 1 limits end before the ban and the calendar.
        v1.truncate(v1.len() - 26);
        put_u64(&mut v1, 1);
        v1.extend_from_slice(&seed.fingerprint(b"alice").to_bytes());
        v1.extend_from_slice(&[0x5a; 8]);
        gcra.encode_state(&state, &mut v1);
        let sum = checksum(&v1);
        put_u64(&mut v1, sum);

        let store = MemoryStore::from_snapshot(MemoryConfig::default(), &v1, 0).unwrap();
        let limiter = store.limiter(&limit).unwrap();
        assert_eq!(limiter.check(b"alice", 0, 1).unwrap().remaining, 1);
        assert_eq!(limiter.check(b"bob", 0, 1).unwrap().remaining, 4);
        assert_eq!(
            MemoryStore::from_snapshot(
                MemoryConfig::default(),
                &{
                    let mut v5 = v1.clone();
                    v5[MAGIC.len()] = 5;
                    v5
                },
                0
            )
            .unwrap_err(),
            SnapshotError::Version(5)
        );
    }

    #[test]
    fn calendar_limits_keep_their_windows_across_a_snapshot() {
        use tollgate_core::time::NANOS_PER_SEC as S;

        let store = MemoryStore::new(MemoryConfig::default());
        let cycles = Calendar::new(CalendarUnit::Month, "Europe/London", Some(15)).unwrap();
        let rate: Rate = "10/d".parse().unwrap();
        let monthly = Limit::new(AlgorithmName::FixedWindow, rate).with_calendar(cycles);
        let daily = Limit::new(AlgorithmName::FixedWindow, rate);
        // 2026-03-20, in the cycle from March 15 to 2026-04-15 00:00 BST.
        let now = 1_774_000_000 * S;
        store
            .limiter(&monthly)
            .unwrap()
            .check(b"k", now, 4)
            .unwrap();
        let restored =
            MemoryStore::from_snapshot(MemoryConfig::default(), &store.snapshot(now), now).unwrap();
        let d = restored
            .limiter(&monthly)
            .unwrap()
            .check(b"k", now, 1)
            .unwrap();
        assert_eq!(d.remaining, 5);
        assert_eq!(d.reset_after.as_secs(), 1_776_207_600 - 1_774_000_000);
        let d = restored
            .limiter(&daily)
            .unwrap()
            .check(b"k", now, 1)
            .unwrap();
        assert_eq!(d.remaining, 9);
    }

    #[test]
    fn version_3_snapshots_without_calendars_still_load() {
        let store = MemoryStore::new(MemoryConfig::default());
        let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap());
        store.limiter(&limit).unwrap().check(b"k", 0, 3).unwrap();
        let v4 = store.snapshot(0);
        // The same snapshot as version 3 wrote it: no calendar byte.
        let mut encoded = Vec::new();
        encode_limit(&limit, &mut encoded);
        let calendar_byte = MAGIC.len() + 32 + encoded.len() - 1;
        let mut v3 = v4[..v4.len() - 8].to_vec();
        v3.remove(calendar_byte);
        v3[MAGIC.len()] = 3;
        let sum = checksum(&v3);
        put_u64(&mut v3, sum);
        let restored = MemoryStore::from_snapshot(MemoryConfig::default(), &v3, 0).unwrap();
        let d = restored.limiter(&limit).unwrap().check(b"k", 0, 1).unwrap();
        assert_eq!(d.remaining, 6);
    }

    #[test]
    fn expired_states_are_left_out() {
        let store = MemoryStore::new(MemoryConfig::default());
        let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_second(5).unwrap());
        store.limiter(&limit).unwrap().check(b"k", 0, 1).unwrap();
        let restored =
            MemoryStore::from_snapshot(MemoryConfig::default(), &store.snapshot(0), 2_000_000_000)
                .unwrap();
        assert!(restored.is_empty());
        let later =
            MemoryStore::from_snapshot(MemoryConfig::default(), &store.snapshot(2_000_000_000), 0)
                .unwrap();
        assert!(later.is_empty());
    }
}
