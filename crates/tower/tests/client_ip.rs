//! The client IP a key is made of: an untrusted peer keeps its own key
//! whatever it sends; trusted proxies' `X-Forwarded-For` / `Forwarded`
//! entries are walked right to left; malformed headers fall back to the
//! peer; no input panics or grows without bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::IpAddr;

use http::HeaderMap;
use proptest::prelude::*;
use support::*;
use tollgate_tower::{
    AddressGrouping, ForwardedHeader, RateLimitLayer, Settings, TrustedProxies, MAX_HOPS,
};
use tower::{service_fn, Layer, ServiceExt};

const ONE_PER_MINUTE: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    map
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_client_cannot_pick_its_key() {
    let recorder = Recorder::default();
    let service = RateLimitLayer::from_rules(store(), rules(ONE_PER_MINUTE), "edge")
        .with_trusted_proxies("10.0.0.0/8".parse().unwrap())
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    let spoofed = |fake: &str| {
        let mut r = request("198.51.100.7:4000", "/");
        r.headers_mut()
            .insert("x-forwarded-for", fake.parse().unwrap());
        r.headers_mut()
            .insert("forwarded", format!("for={fake}").parse().unwrap());
        r
    };
    let first = service
        .clone()
        .oneshot(spoofed("203.0.113.1"))
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    // A new address in the header every time: still the same key, so the
    // second request is over the limit.
    let second = service
        .clone()
        .oneshot(spoofed("203.0.113.2"))
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    let heard = recorder.take();
    assert!(
        heard.iter().all(|h| h.keys[0].ends_with("12:198.51.100.7")),
        "{heard:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_trusted_proxy_tells_the_client_address() {
    let recorder = Recorder::default();
    let service = RateLimitLayer::from_rules(store(), rules(ONE_PER_MINUTE), "edge")
        .with_trusted_proxies("10.0.0.0/8".parse().unwrap())
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    let via_proxy = |client: &str| {
        let mut r = request("10.0.0.5:4000", "/");
        r.headers_mut()
            .insert("x-forwarded-for", client.parse().unwrap());
        r
    };
    // Two clients behind the same proxy have their own counters.
    assert_eq!(status_of(&service, via_proxy("203.0.113.1")).await, 200);
    assert_eq!(status_of(&service, via_proxy("203.0.113.2")).await, 200);
    assert_eq!(status_of(&service, via_proxy("203.0.113.1")).await, 429);
    let keys: Vec<String> = recorder
        .take()
        .into_iter()
        .map(|h| h.keys[0].clone())
        .collect();
    assert!(
        keys[0].ends_with("11:203.0.113.1") && keys[1].ends_with("11:203.0.113.2"),
        "{keys:?}"
    );
}

#[test]
fn multi_hop_chains_skip_trusted_hops_right_to_left() {
    let trusted: TrustedProxies = "10.0.0.0/8, 2001:db8::/32".parse().unwrap();
    let peer = ip("10.0.0.1");
    let cases: &[(&[(&str, &str)], &str)] = &[
        // The client's own claim (1.1.1.1) is left of the first untrusted hop.
        (
            &[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.2")],
            "203.0.113.9",
        ),
        (
            &[("x-forwarded-for", "203.0.113.9, 10.0.0.3, 10.0.0.2")],
            "203.0.113.9",
        ),
        // Several header lines are one list, in order.
        (
            &[
                ("x-forwarded-for", "1.1.1.1, 203.0.113.9"),
                ("x-forwarded-for", "10.0.0.2"),
            ],
            "203.0.113.9",
        ),
        // Every hop trusted: the leftmost is where the request started.
        (&[("x-forwarded-for", "10.9.9.9, 10.0.0.2")], "10.9.9.9"),
        // Ports and IPv6.
        (
            &[("x-forwarded-for", "[2001:db9::7]:443, 2001:db8::1")],
            "2001:db9::7",
        ),
        (&[("x-forwarded-for", "203.0.113.9:5555")], "203.0.113.9"),
        // IPv4-mapped addresses are their IPv4 address.
        (&[("x-forwarded-for", "::ffff:203.0.113.9")], "203.0.113.9"),
        // Garbage left of the first untrusted hop is never read.
        (
            &[("x-forwarded-for", "\"garbage, 203.0.113.9")],
            "203.0.113.9",
        ),
        // Malformed where it must be read: the peer.
        (&[("x-forwarded-for", "203.0.113.9, unknown")], "10.0.0.1"),
        (&[("x-forwarded-for", "203.0.113.9, 10.0.0.2,")], "10.0.0.1"),
        (&[("x-forwarded-for", "")], "10.0.0.1"),
        // Absent: the peer. `Forwarded` is not read in X-Forwarded-For mode.
        (&[], "10.0.0.1"),
        (&[("forwarded", "for=203.0.113.9")], "10.0.0.1"),
    ];
    for (pairs, want) in cases {
        assert_eq!(
            trusted.client_ip(peer, &headers(pairs)),
            ip(want),
            "{pairs:?}"
        );
    }
    // Untrusted peers keep their address whatever the headers say.
    let outsider = ip("192.0.2.1");
    assert_eq!(
        trusted.client_ip(outsider, &headers(&[("x-forwarded-for", "10.0.0.2")])),
        outsider
    );
    // No trusted proxies: headers are never read.
    assert_eq!(
        TrustedProxies::none().client_ip(peer, &headers(&[("x-forwarded-for", "203.0.113.9")])),
        peer
    );
}

#[test]
fn forwarded_is_read_when_chosen() {
    let trusted = "10.0.0.0/8"
        .parse::<TrustedProxies>()
        .unwrap()
        .with_header(ForwardedHeader::Forwarded);
    let peer = ip("10.0.0.1");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[(
                "forwarded",
                "for=1.1.1.1, for=203.0.113.9;proto=https, for=10.0.0.2",
            )],
            "203.0.113.9",
        ),
        (
            &[("forwarded", r#"for="[2001:db8:cafe::17]:4711""#)],
            "2001:db8:cafe::17",
        ),
        (
            &[("forwarded", r#"for="_x,y", for=203.0.113.9"#)],
            "203.0.113.9",
        ),
        (&[("forwarded", "for=203.0.113.9, for=unknown")], "10.0.0.1"),
        (&[("forwarded", "for=203.0.113.9, proto=http")], "10.0.0.1"),
        // X-Forwarded-For is not read in Forwarded mode.
        (&[("x-forwarded-for", "203.0.113.9")], "10.0.0.1"),
    ];
    for (pairs, want) in cases {
        assert_eq!(
            trusted.client_ip(peer, &headers(pairs)),
            ip(want),
            "{pairs:?}"
        );
    }
}

#[test]
fn chains_longer_than_the_bound_fall_back_to_the_peer() {
    let trusted: TrustedProxies = "10.0.0.0/8".parse().unwrap();
    let peer = ip("10.0.0.1");
    let hops = |n: usize| {
        (0..n)
            .map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let within = format!("203.0.113.9, {}", hops(MAX_HOPS - 1));
    assert_eq!(
        trusted.client_ip(peer, &headers(&[("x-forwarded-for", &within)])),
        ip("203.0.113.9")
    );
    let beyond = format!("203.0.113.9, {}", hops(MAX_HOPS));
    assert_eq!(
        trusted.client_ip(peer, &headers(&[("x-forwarded-for", &beyond)])),
        peer
    );
}

#[test]
fn trusted_lists_name_their_bad_entry() {
    let e = "10.0.0.0/8, 10.0.0.0/40"
        .parse::<TrustedProxies>()
        .unwrap_err();
    assert!(e.to_string().contains("\"10.0.0.0/40\""), "{e}");
    assert!("not-an-ip".parse::<TrustedProxies>().is_err());
    assert!("".parse::<TrustedProxies>().unwrap().is_empty());
    // Host bits are ignored: 10.1.2.3/8 is 10.0.0.0/8.
    assert!("10.1.2.3/8"
        .parse::<TrustedProxies>()
        .unwrap()
        .contains(ip("10.200.0.1")));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any header text from a trusted peer: no panic; without the chosen
    /// header, the peer.
    #[test]
    fn malformed_headers_never_panic(
        xff in "[0-9a-f:., \\[\\]\"\\\\;=_unkow]{0,200}",
        forwarded in "[0-9a-zA-Z:., \\[\\]\"\\\\;=_]{0,200}",
        lines in 0usize..4,
    ) {
        let peer = ip("10.0.0.1");
        for (header, name) in [(ForwardedHeader::XForwardedFor, "x-forwarded-for"), (ForwardedHeader::Forwarded, "forwarded")] {
            let trusted = "10.0.0.0/8, ::/0".parse::<TrustedProxies>().unwrap().with_header(header);
            let mut map = HeaderMap::new();
            for _ in 0..lines {
                if let Ok(v) = xff.parse() { map.append("x-forwarded-for", v); }
                if let Ok(v) = forwarded.parse() { map.append("forwarded", v); }
            }
            let got = trusted.client_ip(peer, &map);
            if map.get(name).is_none() {
                prop_assert_eq!(got, peer);
            }
        }
    }

    /// Huge headers are walked at most MAX_HOPS entries deep.
    #[test]
    fn long_headers_are_bounded(n in 0usize..5000) {
        let trusted: TrustedProxies = "10.0.0.0/8".parse().unwrap();
        let value = vec!["10.0.0.2"; n].join(",");
        let got = trusted.client_ip(ip("10.0.0.1"), &headers(&[("x-forwarded-for", &value)]));
        let want = if n == 0 || n > MAX_HOPS { "10.0.0.1" } else { "10.0.0.2" };
        prop_assert_eq!(got, ip(want));
    }
}

const FIVE_PER_MINUTE: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
"#;

/// How many of `peers`' requests (one each, `x-forwarded-for` when given)
/// are admitted by `service`.
async fn admitted<S>(service: &S, peers: impl Iterator<Item = (String, Option<String>)>) -> usize
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<
                tollgate_tower::RateLimitBody<http_body_util::Full<bytes::Bytes>>,
            >,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    let mut count = 0;
    for (peer, forwarded) in peers {
        let mut r = request(&peer, "/");
        if let Some(client) = forwarded {
            r.headers_mut()
                .insert("x-forwarded-for", client.parse().unwrap());
        }
        if service.clone().oneshot(r).await.unwrap().status() == 200 {
            count += 1;
        }
    }
    count
}

/// `n` peers, `[prefix:i]:1000` for i in 1..=n, each address its own.
fn in_network(prefix: &str, n: u32) -> impl Iterator<Item = (String, Option<String>)> + '_ {
    (1..=n).map(move |i| (format!("[{prefix}:{i:x}]:1000"), None))
}

#[tokio::test(start_paused = true)]
async fn a_thousand_addresses_of_one_ipv6_network_share_one_limit() {
    let service =
        RateLimitLayer::from_rules(store(), rules(FIVE_PER_MINUTE), "edge").layer(service_fn(ok));
    // 1,000 addresses of 2001:db8:1:2::/64: five admitted in all.
    assert_eq!(
        admitted(&service, in_network("2001:db8:1:2:0:0:0", 1_000)).await,
        5
    );
    assert_eq!(
        admitted(&service, in_network("2001:db8:1:2:ffff:0:0", 10)).await,
        0
    );
    // Another /64 (even the next one) has its own limit.
    assert_eq!(
        admitted(&service, in_network("2001:db8:1:3:0:0:0", 10)).await,
        5
    );
    // IPv4 addresses each have their own by default.
    let v4 = (1..=3).map(|i| (format!("192.0.2.{i}:1000"), None));
    assert_eq!(admitted(&service, v4).await, 3);
}

#[tokio::test(start_paused = true)]
async fn an_ipv4_mapped_address_counts_as_its_ipv4_address() {
    let service =
        RateLimitLayer::from_rules(store(), rules(ONE_PER_MINUTE), "edge").layer(service_fn(ok));
    let peers = ["[::ffff:192.0.2.44]:1000", "192.0.2.44:2000"]
        .into_iter()
        .map(|p| (p.to_string(), None));
    assert_eq!(admitted(&service, peers).await, 1);
}

#[tokio::test(start_paused = true)]
async fn grouping_is_a_setting_and_applies_behind_trusted_proxies() {
    let settings = Settings {
        address_grouping: AddressGrouping::new(24, 48).unwrap(),
        ..Settings::default()
    };
    let service = RateLimitLayer::from_rules(store(), rules(FIVE_PER_MINUTE), "edge")
        .with_trusted_proxies("10.0.0.0/8".parse().unwrap())
        .with_settings(settings)
        .layer(service_fn(ok));
    // Clients behind a trusted proxy, rotating inside 2001:db8:7::/48
    // (two different /64s): one limit.
    let rotating = (1..=200u32).map(|i| {
        (
            "10.1.2.3:443".to_string(),
            Some(format!("2001:db8:7:{:x}::{:x}", i % 2, i)),
        )
    });
    assert_eq!(admitted(&service, rotating).await, 5);
    // IPv4 grouped by /24 here.
    let v4 = (1..=20).map(|i| ("10.1.2.3:443".to_string(), Some(format!("198.51.100.{i}"))));
    assert_eq!(admitted(&service, v4).await, 5);
    let other = (1..=20).map(|i| ("10.1.2.3:443".to_string(), Some(format!("198.51.101.{i}"))));
    assert_eq!(admitted(&service, other).await, 5);
}
