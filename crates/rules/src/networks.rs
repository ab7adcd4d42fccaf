//! [`NetworkSet`]: the client networks a route's `client_cidr` or
//! `not_client_cidr` names, as a table built once at load and asked
//! "is this address in one of them?" per request.
//!
//! This module owns parsing a CIDR entry (`10.0.0.0/8`, `2001:db8::/32`, a
//! bare address for one host) and the lookup. It does not know where the
//! client address comes from (the middleware's trusted-proxies walk).
//!
//! IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`, what a dual-stack socket
//! reports for an IPv4 client) count as the IPv4 address they carry, on
//! both sides: an entry written in that form is the IPv4 network it
//! carries, and a mapped client address is looked up as IPv4 — as address
//! grouping and trusted proxies treat them.
//!
//! Why a table of ranges and not a crate: the lookup needs membership only,
//! never the longest matching prefix or a value stored with it, which is
//! what the maintained prefix-trie crates (`prefix-trie`,
//! `ip_network_table`) are built for. Every CIDR is one range of addresses,
//! so the networks are kept per family as sorted, merged, disjoint ranges,
//! and a lookup is one binary search — `O(log n)` whatever the number of
//! entries or their prefix lengths, with no allocation, in a few dozen
//! lines instead of a new dependency.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The client networks of a `client_cidr` (or `not_client_cidr`) list.
///
/// ```
/// use tollgate_rules::NetworkSet;
///
/// let set = NetworkSet::parse(["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]).unwrap();
/// assert!(set.contains("10.200.3.4".parse().unwrap()));
/// assert!(set.contains("::ffff:10.0.0.1".parse().unwrap()));
/// assert!(set.contains("2001:db8:ffff::1".parse().unwrap()));
/// assert!(set.contains("192.0.2.7".parse().unwrap()));
/// assert!(!set.contains("192.0.2.8".parse().unwrap()));
/// assert!(!set.contains("2001:db9::1".parse().unwrap()));
/// assert!(NetworkSet::parse(["10.0.0.1/8"]).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSet {
    /// Disjoint, non-adjacent, sorted inclusive ranges of IPv4 addresses.
    v4: Vec<(u32, u32)>,
    /// The same for IPv6 (IPv4-mapped ones excluded: they are in `v4`).
    v6: Vec<(u128, u128)>,
}

/// A CIDR entry that does not parse, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidNetwork {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: InvalidNetworkReason,
}

/// What is wrong with a CIDR entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidNetworkReason {
    /// The part before `/` is not an IP address.
    NotAnAddress,
    /// The part after `/` is not a number from 0 to the family's width.
    BadPrefixLength {
        /// 32 or 128.
        max: u8,
    },
    /// Bits are set past the prefix: `10.0.0.1/8` — probably a typo for a
    /// longer prefix, or meant `10.0.0.0/8`.
    HostBitsSet {
        /// The network the prefix length gives.
        network: String,
    },
}

impl fmt::Display for InvalidNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entry = &self.entry;
        match &self.reason {
            InvalidNetworkReason::NotAnAddress => write!(
                f,
                "{entry:?} is not a network: expected an IP address or a CIDR such as 10.0.0.0/8"
            ),
            InvalidNetworkReason::BadPrefixLength { max } => write!(
                f,
                "{entry:?} has a bad prefix length: expected a number from 0 to {max}"
            ),
            InvalidNetworkReason::HostBitsSet { network } => write!(
                f,
                "{entry:?} has bits set past its prefix length; the network is {network}"
            ),
        }
    }
}

impl std::error::Error for InvalidNetwork {}

/// One parsed entry: a family and its inclusive range.
enum Range {
    V4(u32, u32),
    V6(u128, u128),
}

impl NetworkSet {
    /// The set of these entries: CIDRs (`10.0.0.0/8`, `2001:db8::/32`) or
    /// single addresses. An entry with bits set past its prefix length is
    /// refused rather than widened silently.
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = &'a str>,
    ) -> Result<NetworkSet, InvalidNetwork> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for entry in entries {
            match parse_entry(entry)? {
                Range::V4(first, last) => v4.push((first, last)),
                Range::V6(first, last) => v6.push((first, last)),
            }
        }
        Ok(NetworkSet {
            v4: merged(v4, |x| x.checked_add(1)),
            v6: merged(v6, |x| x.checked_add(1)),
        })
    }

    /// Whether `ip` is in one of the networks (an IPv4-mapped IPv6
    /// address as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(v4) => in_ranges(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => in_ranges(&self.v6, u128::from(v6)),
        }
    }

    /// Whether the set holds no network (never, once parsed from a
    /// non-empty list).
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

fn parse_entry(entry: &str) -> Result<Range, InvalidNetwork> {
    let invalid = |reason| InvalidNetwork {
        entry: entry.to_owned(),
        reason,
    };
    let (address, length) = match entry.split_once('/') {
        Some((address, length)) => (address, Some(length)),
        None => (entry, None),
    };
    let address: IpAddr = address
        .parse()
        .map_err(|_| invalid(InvalidNetworkReason::NotAnAddress))?;
    let max: u8 = if address.is_ipv4() { 32 } else { 128 };
    let length = match length {
        None => max,
        // `u8::from_str` takes a leading `+`; a prefix length does not.
        Some(text) if text.bytes().all(|b| b.is_ascii_digit()) => text
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| invalid(InvalidNetworkReason::BadPrefixLength { max }))?,
        Some(_) => return Err(invalid(InvalidNetworkReason::BadPrefixLength { max })),
    };
    let host_bits_set = |network: String| invalid(InvalidNetworkReason::HostBitsSet { network });
    match address {
        IpAddr::V4(v4) => {
            let (first, last) = span_v4(u32::from(v4), length);
            if first != u32::from(v4) {
                return Err(host_bits_set(format!("{}/{length}", Ipv4Addr::from(first))));
            }
            Ok(Range::V4(first, last))
        }
        IpAddr::V6(v6) => {
            let (first, last) = span_v6(u128::from(v6), length);
            if first != u128::from(v6) {
                return Err(host_bits_set(format!("{}/{length}", Ipv6Addr::from(first))));
            }
            // An IPv4-mapped network (`::ffff:10.0.0.0/104`) is the IPv4
            // network it carries; a shorter prefix reaching past
            // `::ffff:0:0/96` stays IPv6 and matches IPv6 clients only.
            match (v6.to_ipv4_mapped(), length.checked_sub(96)) {
                (Some(v4), Some(v4_length)) => {
                    let (first, last) = span_v4(u32::from(v4), v4_length);
                    Ok(Range::V4(first, last))
                }
                _ => Ok(Range::V6(first, last)),
            }
        }
    }
}

/// The first and last address of `address/length` (IPv4).
fn span_v4(address: u32, length: u8) -> (u32, u32) {
    let host = u32::MAX.checked_shr(u32::from(length)).unwrap_or(0);
    (address & !host, address | host)
}

/// The first and last address of `address/length` (IPv6).
fn span_v6(address: u128, length: u8) -> (u128, u128) {
    let host = u128::MAX.checked_shr(u32::from(length)).unwrap_or(0);
    (address & !host, address | host)
}

/// Inclusive ranges sorted by start, overlapping and adjacent ones joined,
/// so that at most one range can hold an address.
/// `next` is the address after one, if any.
fn merged<T: Copy + Ord>(mut ranges: Vec<(T, T)>, next: fn(T) -> Option<T>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match out.last_mut() {
            Some((_, end)) if next(*end).is_none_or(|after| first <= after) => {
                *end = (*end).max(last);
            }
            _ => out.push((first, last)),
        }
    }
    out.shrink_to_fit();
    out
}

/// Whether one of the disjoint sorted `ranges` holds `x`: the last range
/// starting at or before `x` is the only candidate.
fn in_ranges<T: Copy + Ord>(ranges: &[(T, T)], x: T) -> bool {
    let after = ranges.partition_point(|(first, _)| *first <= x);
    after
        .checked_sub(1)
        .and_then(|i| ranges.get(i))
        .is_some_and(|(_, last)| x <= *last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(entries: &[&str]) -> NetworkSet {
        NetworkSet::parse(entries.iter().copied()).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn entries_are_cidrs_or_single_addresses() {
        let s = set(&["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"]);
        assert!(s.contains(ip("10.0.0.0")));
        assert!(s.contains(ip("10.255.255.255")));
        assert!(!s.contains(ip("11.0.0.0")));
        assert!(!s.contains(ip("9.255.255.255")));
        assert!(s.contains(ip("192.0.2.7")));
        assert!(!s.contains(ip("192.0.2.6")));
        assert!(s.contains(ip("2001:db8:abcd::")));
        assert!(!s.contains(ip("2001:db9::")));
        assert!(s.contains(ip("::1")));
        assert!(!s.contains(ip("::2")));
    }

    #[test]
    fn whole_families_and_their_edges() {
        let all_v4 = set(&["0.0.0.0/0"]);
        assert!(all_v4.contains(ip("0.0.0.0")));
        assert!(all_v4.contains(ip("255.255.255.255")));
        assert!(!all_v4.contains(ip("::1")));
        let all_v6 = set(&["::/0"]);
        assert!(all_v6.contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(all_v6.contains(ip("::")));
        // IPv4 clients are IPv4, even when a dual-stack socket maps them.
        assert!(!all_v6.contains(ip("192.0.2.1")));
        assert!(!all_v6.contains(ip("::ffff:192.0.2.1")));
        let top = set(&[
            "255.255.255.255/32",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ]);
        assert!(top.contains(ip("255.255.255.255")));
        assert!(top.contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
    }

    #[test]
    fn ipv4_mapped_addresses_and_entries_count_as_ipv4() {
        let s = set(&["::ffff:10.0.0.0/104", "192.0.2.0/24"]);
        assert!(s.contains(ip("10.1.2.3")));
        assert!(s.contains(ip("::ffff:10.1.2.3")));
        assert!(s.contains(ip("::ffff:192.0.2.200")));
        assert!(!s.contains(ip("::ffff:11.0.0.1")));
        assert_eq!(s, set(&["10.0.0.0/8", "192.0.2.0/24"]));
    }

    #[test]
    fn overlapping_and_adjacent_networks_are_joined() {
        let s = set(&["10.0.0.0/9", "10.128.0.0/9", "10.1.0.0/16", "10.0.0.0/8"]);
        assert_eq!(s.v4, [(0x0a00_0000, 0x0aff_ffff)]);
        let s = set(&["192.0.2.0/25", "192.0.2.128/25", "198.51.100.0/24"]);
        assert_eq!(s.v4.len(), 2);
        let s = set(&["0.0.0.0/1", "128.0.0.0/1"]);
        assert_eq!(s.v4, [(0, u32::MAX)]);
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        let error = |entry: &str| NetworkSet::parse([entry]).unwrap_err().to_string();
        assert_eq!(
            error("10.0.0.1/8"),
            "\"10.0.0.1/8\" has bits set past its prefix length; the network is 10.0.0.0/8"
        );
        assert_eq!(
            error("2001:db8::1/32"),
            "\"2001:db8::1/32\" has bits set past its prefix length; the network is 2001:db8::/32"
        );
        assert_eq!(
            error("10.0.0.0/33"),
            "\"10.0.0.0/33\" has a bad prefix length: expected a number from 0 to 32"
        );
        assert!(error("::/129").contains("from 0 to 128"));
        for bad in [
            "10.0.0.0/+8",
            "10.0.0.0/",
            "10.0.0.0/8/8",
            "10.0.0.0/-1",
            "/8",
        ] {
            assert!(NetworkSet::parse([bad]).is_err(), "{bad}");
        }
        for bad in [
            "example.com",
            "10.0.0",
            "10.0.0.0.0/8",
            "",
            " 10.0.0.0/8",
            "[::1]",
        ] {
            assert_eq!(
                NetworkSet::parse([bad]).unwrap_err().reason,
                InvalidNetworkReason::NotAnAddress,
                "{bad}"
            );
        }
    }
}
