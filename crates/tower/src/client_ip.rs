//! The client IP of a request: the connection's peer, or — only when that
//! peer is a trusted proxy — the first untrusted hop of the forwarding
//! header, read right to left.
//!
//! This module owns [`TrustedProxies`] and that walk. A client that
//! connects directly cannot choose its key by sending `X-Forwarded-For` or
//! `Forwarded`: the header is not even read unless the peer is trusted, and
//! behind trusted proxies only the entries they appended count. A header
//! the walk cannot read (an entry that is not an address, too many hops)
//! makes the peer the client. The header syntax is `forwarded`.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use http::header::{HeaderName, FORWARDED};
use http::request::Parts;
use ipnet::IpNet;

use crate::forwarded::{forwarded_for, xff_address, HopsFromRight};
use crate::PeerAddr;

/// The most hops read from a forwarding header: a chain of more trusted
/// proxies than this is treated as malformed.
pub const MAX_HOPS: usize = 32;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Which forwarding header trusted proxies write.
///
/// Only one is read: when a trusted proxy maintains one header and passes
/// the other through from the client untouched, reading both would let the
/// client pick its own address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy, cloud load
    /// balancers, and `tollgate gateway` itself).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// The networks whose connections may tell the client's address through a
/// forwarding header. Empty by default: every client is its peer.
///
/// ```
/// use tollgate_tower::TrustedProxies;
///
/// let trusted: TrustedProxies = "10.0.0.0/8, 127.0.0.1, ::1".parse().unwrap();
/// assert!(trusted.contains("10.1.2.3".parse().unwrap()));
/// assert!(trusted.contains("::ffff:127.0.0.1".parse().unwrap()));
/// assert!(!trusted.contains("192.0.2.1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
    header: ForwardedHeader,
}

/// A trusted-proxies list that does not parse; names the bad entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCidr {
    entry: String,
}

impl fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid trusted proxy {:?}: expected an IP address or a CIDR such as 10.0.0.0/8",
            self.entry
        )
    }
}

impl std::error::Error for InvalidCidr {}

impl TrustedProxies {
    /// No trusted proxies: forwarding headers are never read.
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// These networks, reading `X-Forwarded-For`.
    pub fn new(networks: impl IntoIterator<Item = IpNet>) -> TrustedProxies {
        TrustedProxies {
            networks: networks.into_iter().collect(),
            header: ForwardedHeader::default(),
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    pub fn with_header(mut self, header: ForwardedHeader) -> TrustedProxies {
        self.header = header;
        self
    }

    /// Whether `ip` is in a trusted network (IPv4-mapped IPv6 addresses
    /// count as their IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.networks.iter().any(|n| n.contains(&ip))
    }

    /// Whether no network is trusted.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// The client IP of a request from `peer` with these `headers`.
    ///
    /// ```
    /// use tollgate_tower::TrustedProxies;
    ///
    /// let trusted: TrustedProxies = "10.0.0.0/8".parse().unwrap();
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.0.0.2".parse().unwrap());
    /// // From a trusted proxy: the first untrusted hop from the right.
    /// assert_eq!(trusted.client_ip("10.0.0.1".parse().unwrap(), &headers), "198.51.100.7".parse::<std::net::IpAddr>().unwrap());
    /// // From anyone else: the peer, whatever the header says.
    /// assert_eq!(trusted.client_ip("192.0.2.1".parse().unwrap(), &headers), "192.0.2.1".parse::<std::net::IpAddr>().unwrap());
    /// ```
    pub fn client_ip(&self, peer: IpAddr, headers: &http::HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.contains(peer) {
            return peer;
        }
        self.walk(headers).unwrap_or(peer)
    }

    /// The first untrusted hop from the right; `None` when the header is
    /// absent, unreadable where it has to be read, or too long.
    fn walk(&self, headers: &http::HeaderMap) -> Option<IpAddr> {
        let name = match self.header {
            ForwardedHeader::XForwardedFor => X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => FORWARDED,
        };
        let mut hops = 0;
        let mut leftmost = None;
        for value in headers.get_all(name).iter().rev() {
            let value = value.to_str().ok()?;
            for entry in HopsFromRight::new(value) {
                hops += 1;
                if hops > MAX_HOPS {
                    return None;
                }
                let ip = match self.header {
                    ForwardedHeader::XForwardedFor => xff_address(entry),
                    ForwardedHeader::Forwarded => forwarded_for(entry),
                }?
                .to_canonical();
                if !self.contains(ip) {
                    return Some(ip);
                }
                leftmost = Some(ip);
            }
        }
        // Every hop is trusted: the request started at the leftmost one.
        leftmost
    }
}

impl FromStr for TrustedProxies {
    type Err = InvalidCidr;

    /// A comma-separated list of CIDRs and single addresses; empty entries
    /// are skipped.
    fn from_str(text: &str) -> Result<TrustedProxies, InvalidCidr> {
        let networks: Vec<IpNet> = text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| InvalidCidr {
                        entry: entry.to_owned(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies::new(networks))
    }
}

/// The address of the connection `parts` arrived on: [`PeerAddr`], or with
/// the `axum` feature, axum's `ConnectInfo<SocketAddr>`.
pub fn peer_addr(parts: &Parts) -> Option<SocketAddr> {
    if let Some(PeerAddr(addr)) = parts.extensions.get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(info) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0);
    }
    None
}

/// The client IP of a request, or `None` when the connection's address is
/// not known (see [`peer_addr`]).
pub fn client_ip(parts: &Parts, trusted: &TrustedProxies) -> Option<IpAddr> {
    client_ip_or(parts, None, trusted)
}

/// [`client_ip`], with `peer` as the connection's address when the request
/// carries none.
pub(crate) fn client_ip_or(
    parts: &Parts,
    peer: Option<SocketAddr>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let peer = peer_addr(parts).or(peer)?;
    Some(trusted.client_ip(peer.ip(), &parts.headers))
}
