//! [`AddressGrouping`]: which client addresses share one key.
//!
//! A client that holds a whole IPv6 network (an ISP hands out a /64, often
//! a /56 or a /48) can take a new address for every request and escape any
//! per-address limit. Keys made of the client address therefore hold the
//! address's network: IPv6 addresses are cut to a prefix (/64 by default),
//! IPv4 addresses to another (/32 by default: each its own), and an
//! IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, what a dual-stack socket
//! reports for an IPv4 client) counts as the IPv4 address it carries. The
//! key holds the network's first address (`2001:db8:1:2::` for every
//! address of `2001:db8:1:2::/64`). Only keys are grouped: matching a
//! route's `client_cidr` and believing trusted proxies use the address
//! itself.

use std::fmt;
use std::net::IpAddr;

use ipnet::{Ipv4Net, Ipv6Net};

/// The IPv6 prefix length client addresses are grouped by unless told.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;
/// The IPv4 prefix length client addresses are grouped by unless told.
pub const DEFAULT_IPV4_PREFIX: u8 = 32;

/// How client addresses are grouped into keys: a prefix length for each
/// family. `Default`: IPv4 /32, IPv6 /64.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_tower::AddressGrouping;
///
/// let grouping = AddressGrouping::default();
/// let ip = |s: &str| s.parse::<IpAddr>().unwrap();
/// assert_eq!(grouping.group(ip("2001:db8:1:2:aaaa::7")), ip("2001:db8:1:2::"));
/// assert_eq!(grouping.group(ip("::ffff:192.0.2.9")), ip("192.0.2.9"));
/// let by_24 = AddressGrouping::new(24, 48).unwrap();
/// assert_eq!(by_24.group(ip("192.0.2.9")), ip("192.0.2.0"));
/// assert!(AddressGrouping::new(33, 64).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressGrouping {
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

/// A prefix length a family cannot have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupingError {
    family: &'static str,
    max: u8,
    given: u8,
}

impl fmt::Display for GroupingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an {} prefix length is 1 to {}, not {}",
            self.family, self.max, self.given
        )
    }
}

impl std::error::Error for GroupingError {}

impl Default for AddressGrouping {
    fn default() -> Self {
        AddressGrouping {
            ipv4_prefix: DEFAULT_IPV4_PREFIX,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }
}

impl AddressGrouping {
    /// IPv4 addresses grouped by `/ipv4_prefix` (1 to 32), IPv6 ones by
    /// `/ipv6_prefix` (1 to 128).
    pub fn new(ipv4_prefix: u8, ipv6_prefix: u8) -> Result<AddressGrouping, GroupingError> {
        let check = |family, max, given| {
            if (1..=max).contains(&given) {
                Ok(())
            } else {
                Err(GroupingError { family, max, given })
            }
        };
        check("IPv4", 32, ipv4_prefix)?;
        check("IPv6", 128, ipv6_prefix)?;
        Ok(AddressGrouping {
            ipv4_prefix,
            ipv6_prefix,
        })
    }

    /// The IPv4 prefix length.
    pub fn ipv4_prefix(&self) -> u8 {
        self.ipv4_prefix
    }

    /// The IPv6 prefix length.
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// The first address of `ip`'s group; an IPv4-mapped IPv6 address is
    /// grouped as IPv4.
    pub fn group(&self, ip: IpAddr) -> IpAddr {
        // The lengths were checked in `new`, so the networks exist; the
        // address itself is the fallback all the same.
        match ip.to_canonical() {
            IpAddr::V4(v4) => Ipv4Net::new(v4, self.ipv4_prefix)
                .map_or(IpAddr::V4(v4), |net| IpAddr::V4(net.network())),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.ipv6_prefix)
                .map_or(IpAddr::V6(v6), |net| IpAddr::V6(net.network())),
        }
    }
}

impl fmt::Display for AddressGrouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IPv4 /{}, IPv6 /{}", self.ipv4_prefix, self.ipv6_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn addresses_of_one_network_share_its_first_address() {
        let g = AddressGrouping::default();
        assert_eq!(g.group(ip("192.0.2.9")), ip("192.0.2.9"));
        assert_eq!(g.group(ip("2001:db8::1")), ip("2001:db8::"));
        assert_eq!(g.group(ip("2001:db8::ffff:1")), ip("2001:db8::"));
        assert_ne!(g.group(ip("2001:db8:0:1::1")), ip("2001:db8::"));
        assert_eq!(g.group(ip("::ffff:198.51.100.3")), ip("198.51.100.3"));
        let whole = AddressGrouping::new(32, 128).unwrap_or_default();
        assert_eq!(whole.group(ip("2001:db8::1")), ip("2001:db8::1"));
        let by_56 = AddressGrouping::new(16, 56).unwrap_or_default();
        assert_eq!(by_56.group(ip("2001:db8:0:ab::1")), ip("2001:db8::"));
        assert_eq!(by_56.group(ip("10.20.30.40")), ip("10.20.0.0"));
    }

    #[test]
    fn prefix_lengths_are_checked() {
        assert!(AddressGrouping::new(0, 64).is_err());
        assert!(AddressGrouping::new(32, 0).is_err());
        assert!(AddressGrouping::new(32, 129).is_err());
        let error = AddressGrouping::new(40, 64).unwrap_err().to_string();
        assert_eq!(error, "an IPv4 prefix length is 1 to 32, not 40");
    }
}
