//! `NetworkSet`, the table of a route's client networks, against the
//! naive answer: a scan of every network with `ipnet`'s `contains`, for
//! random lists of networks of every prefix length and random addresses
//! near and inside them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;
use tollgate_rules::NetworkSet;

/// A network of either family, written as the rules file would.
fn network() -> impl Strategy<Value = IpNet> {
    prop_oneof![
        (any::<u32>(), 0u8..=32).prop_map(|(a, len)| {
            IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), len).unwrap().trunc())
        }),
        (any::<u128>(), 0u8..=128).prop_map(|(a, len)| {
            IpNet::V6(Ipv6Net::new(Ipv6Addr::from(a), len).unwrap().trunc())
        }),
        // IPv6 networks near the front, where IPv4-mapped ones live.
        (any::<u32>(), 96u8..=128).prop_map(|(a, len)| {
            let mapped = Ipv4Addr::from(a).to_ipv6_mapped();
            IpNet::V6(Ipv6Net::new(mapped, len).unwrap().trunc())
        }),
    ]
}

/// An address inside, at the edges of or just past `net`, or anywhere.
fn probe(nets: &[IpNet], pick: usize, how: u8, noise: u128) -> IpAddr {
    let Some(net) = nets.get(pick % nets.len().max(1)) else {
        return IpAddr::V6(Ipv6Addr::from(noise));
    };
    match (net, how % 5) {
        (IpNet::V4(n), 0) => IpAddr::V4(n.network()),
        (IpNet::V4(n), 1) => IpAddr::V4(n.broadcast()),
        (IpNet::V4(n), 2) => IpAddr::V4(Ipv4Addr::from(u32::from(n.broadcast()).wrapping_add(1))),
        (IpNet::V4(n), 3) => IpAddr::V4(Ipv4Addr::from(u32::from(n.network()).wrapping_sub(1))),
        (IpNet::V6(n), 0) => IpAddr::V6(n.network()),
        (IpNet::V6(n), 1) => IpAddr::V6(n.broadcast()),
        (IpNet::V6(n), 2) => IpAddr::V6(Ipv6Addr::from(u128::from(n.broadcast()).wrapping_add(1))),
        (IpNet::V6(n), 3) => IpAddr::V6(Ipv6Addr::from(u128::from(n.network()).wrapping_sub(1))),
        // Anywhere: as IPv4, as IPv6, or IPv4-mapped.
        (_, _) => match noise % 3 {
            0 => IpAddr::V4(Ipv4Addr::from(noise as u32)),
            1 => IpAddr::V6(Ipv6Addr::from(noise)),
            _ => IpAddr::V6(Ipv4Addr::from((noise >> 64) as u32).to_ipv6_mapped()),
        },
    }
}

/// The naive answer: IPv4-mapped addresses and networks as IPv4, then a
/// scan.
fn scan(nets: &[IpNet], ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    nets.iter().any(|net| canonical(*net).contains(&ip))
}

fn canonical(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(n) if n.prefix_len() >= 96 => match n.network().to_ipv4_mapped() {
            Some(v4) => IpNet::V4(Ipv4Net::new(v4, n.prefix_len() - 96).unwrap()),
            None => net,
        },
        _ => net,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_table_answers_as_a_scan_of_every_network(
        nets in prop::collection::vec(network(), 0..24),
        probes in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u128>()), 1..32),
    ) {
        let text: Vec<String> = nets.iter().map(IpNet::to_string).collect();
        let set = NetworkSet::parse(text.iter().map(String::as_str)).unwrap();
        for (pick, how, noise) in probes {
            let ip = probe(&nets, pick, how, noise);
            prop_assert_eq!(set.contains(ip), scan(&nets, ip), "{} in {:?}", ip, text);
        }
    }

    #[test]
    fn any_address_of_a_network_is_in_it_and_its_neighbours_are_not(
        net in network(),
        offset in any::<u128>(),
    ) {
        let text = net.to_string();
        let set = NetworkSet::parse([text.as_str()]).unwrap();
        let inside = match net {
            IpNet::V4(n) => {
                let host = u32::MAX.checked_shr(u32::from(n.prefix_len())).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(n.network()) | (offset as u32 & host)))
            }
            IpNet::V6(n) => {
                let host = u128::MAX.checked_shr(u32::from(n.prefix_len())).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) | (offset & host)))
            }
        };
        prop_assert!(set.contains(inside), "{} in {}", inside, text);
        for edge in 2..4 {
            let ip = probe(&[net], 0, edge, 0);
            prop_assert_eq!(set.contains(ip), scan(&[net], ip), "{} in {}", ip, text);
        }
    }
}
