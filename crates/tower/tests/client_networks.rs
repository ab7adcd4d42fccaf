//! Routes that match on the client's network (`client_cidr`,
//! `not_client_cidr`) in the middleware: an exempt network never limited, a
//! denied one sent to a limit of 0, the client address as trusted proxies
//! tell it (and never as an untrusted peer's header claims), IPv4-mapped
//! peers as IPv4, the address matched before grouping, and an unknown
//! client address taken by no route that names networks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::*;
use tollgate_tower::{AddressGrouping, RateLimitBody, RateLimitLayer, Settings};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, ServiceExt};

const EDGE: &str = r#"
domain: edge
routes:
  - name: monitoring
    match: {client_cidr: [198.51.100.0/24, "2001:db8:42::/48", 192.0.2.7]}
    enabled: false
  - name: blocked
    match: {client_cidr: [203.0.113.0/24]}
    descriptors: [[{generic_key: {descriptor_value: blocked}}]]
  - name: admin
    match: {path_prefix: /admin/, not_client_cidr: [192.0.2.0/24]}
    descriptors: [[{generic_key: {descriptor_value: blocked}}]]
  - name: everyone
    descriptors: [[remote_address]]
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
"#;

type Edge = BoxCloneService<Request<Full<Bytes>>, Response<RateLimitBody<Full<Bytes>>>, Infallible>;

fn edge(recorder: &Recorder, settings: Settings, trusted: &str) -> Edge {
    let service = RateLimitLayer::from_rules(store(), rules(EDGE), "edge")
        .with_settings(settings)
        .with_trusted_proxies(trusted.parse().unwrap())
        .with_observer(recorder.clone())
        .layer(service_fn(ok));
    BoxCloneService::new(service)
}

/// `GET uri` from `peer`, with `X-Forwarded-For: xff` when given: the
/// status and the route the observer heard (`None`: no check).
async fn send(
    service: &Edge,
    recorder: &Recorder,
    peer: &str,
    uri: &str,
    xff: Option<&str>,
) -> (u16, Option<String>) {
    let mut r = request(peer, uri);
    if let Some(xff) = xff {
        r.headers_mut()
            .insert("x-forwarded-for", xff.parse().unwrap());
    }
    let status = service.clone().oneshot(r).await.unwrap().status().as_u16();
    let mut heard = recorder.take();
    assert!(heard.len() <= 1);
    (status, heard.pop().and_then(|h| h.route))
}

fn checked(status: u16, route: &str) -> (u16, Option<String>) {
    (status, Some(route.to_owned()))
}

#[tokio::test(start_paused = true)]
async fn an_exempt_network_is_never_limited_and_a_denied_one_always() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default(), "");
    for peer in ["198.51.100.7:1", "[2001:db8:42:ab::1]:1", "192.0.2.7:1"] {
        for _ in 0..20 {
            assert_eq!(
                send(&s, &recorder, peer, "/", None).await,
                (200, None),
                "{peer}"
            );
        }
    }
    for peer in ["203.0.113.1:1", "203.0.113.255:1"] {
        assert_eq!(
            send(&s, &recorder, peer, "/", None).await,
            checked(429, "blocked")
        );
    }
    // The next address out of each list is limited as everyone is.
    for peer in [
        "198.51.101.0:1",
        "[2001:db8:43::1]:1",
        "192.0.2.8:1",
        "203.0.114.0:1",
    ] {
        assert_eq!(
            send(&s, &recorder, peer, "/", None).await,
            checked(200, "everyone")
        );
        assert_eq!(
            send(&s, &recorder, peer, "/", None).await,
            checked(200, "everyone")
        );
        assert_eq!(
            send(&s, &recorder, peer, "/", None).await,
            checked(429, "everyone")
        );
    }
}

#[tokio::test(start_paused = true)]
async fn not_client_cidr_takes_everyone_outside_the_list() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default(), "");
    // The office passes the admin route and is limited per client.
    assert_eq!(
        send(&s, &recorder, "192.0.2.9:1", "/admin/x", None).await,
        checked(200, "everyone")
    );
    for peer in ["192.0.3.9:1", "[2001:db8::1]:1", "10.0.0.1:1"] {
        assert_eq!(
            send(&s, &recorder, peer, "/admin/x", None).await,
            checked(429, "admin"),
            "{peer}"
        );
    }
    // The monitoring host of the office network is exempt everywhere.
    assert_eq!(
        send(&s, &recorder, "192.0.2.7:1", "/admin/x", None).await,
        (200, None)
    );
}

#[tokio::test(start_paused = true)]
async fn the_network_is_the_one_trusted_proxies_vouch_for() {
    let recorder = Recorder::default();
    let s = edge(&recorder, Settings::default(), "10.0.0.0/8");
    let proxy = "10.0.0.5:4000";
    // Through the proxy: the forwarded client picks the route.
    for _ in 0..5 {
        assert_eq!(
            send(&s, &recorder, proxy, "/", Some("198.51.100.7")).await,
            (200, None)
        );
    }
    assert_eq!(
        send(&s, &recorder, proxy, "/", Some("203.0.113.9")).await,
        checked(429, "blocked")
    );
    // Past trusted hops, right to left; the client's own claim on the left
    // does not count.
    assert_eq!(
        send(
            &s,
            &recorder,
            proxy,
            "/",
            Some("198.51.100.7, 203.0.113.9, 10.0.0.2")
        )
        .await,
        checked(429, "blocked")
    );
    assert_eq!(
        send(
            &s,
            &recorder,
            proxy,
            "/",
            Some("203.0.113.9, 198.51.100.7, 10.0.0.2")
        )
        .await,
        (200, None)
    );
    // A peer that is no trusted proxy claims nothing with the header: it
    // is limited as itself, and a blocked peer stays blocked.
    let outsider = "192.0.2.99:1";
    for expected in [200, 200, 429] {
        assert_eq!(
            send(&s, &recorder, outsider, "/", Some("198.51.100.7")).await,
            checked(expected, "everyone")
        );
    }
    assert_eq!(
        send(&s, &recorder, "203.0.113.4:1", "/", Some("198.51.100.7")).await,
        checked(429, "blocked")
    );
}

#[tokio::test(start_paused = true)]
async fn mapped_peers_count_as_ipv4_and_matching_precedes_grouping() {
    let recorder = Recorder::default();
    // Keys group IPv4 by /24, but 192.0.2.7 alone is exempt: the route
    // matches the address, not its group.
    let settings = Settings {
        address_grouping: AddressGrouping::new(24, 64).unwrap(),
        ..Settings::default()
    };
    let s = edge(&recorder, settings, "");
    for _ in 0..5 {
        assert_eq!(
            send(&s, &recorder, "[::ffff:192.0.2.7]:1", "/", None).await,
            (200, None)
        );
    }
    assert_eq!(
        send(&s, &recorder, "[::ffff:203.0.113.3]:1", "/", None).await,
        checked(429, "blocked")
    );
    // 192.0.2.8 and 192.0.2.9 share one /24 key: two requests in all.
    assert_eq!(
        send(&s, &recorder, "192.0.2.8:1", "/", None).await,
        checked(200, "everyone")
    );
    assert_eq!(
        send(&s, &recorder, "192.0.2.9:1", "/", None).await,
        checked(200, "everyone")
    );
    assert_eq!(
        send(&s, &recorder, "192.0.2.8:1", "/", None).await,
        checked(429, "everyone")
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_client_is_taken_by_no_route_that_names_networks() {
    let recorder = Recorder::default();
    let yaml = r#"
domain: edge
routes:
  - name: outsiders
    match: {not_client_cidr: [192.0.2.0/24]}
    descriptors: [[{generic_key: {descriptor_value: blocked}}]]
  - name: everyone
    descriptors: [[{generic_key: {descriptor_value: all}}]]
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: generic_key
    value: all
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;
    let s = BoxCloneService::new(
        RateLimitLayer::from_rules(store(), rules(yaml), "edge")
            .with_observer(recorder.clone())
            .layer(service_fn(ok)),
    );
    // No PeerAddr, no ConnectInfo: the address is not known.
    let unknown = Request::builder().uri("/").body(Full::default()).unwrap();
    let status = s.clone().oneshot(unknown).await.unwrap().status();
    assert_eq!(status, 200);
    let heard = recorder.take();
    assert_eq!(heard[0].route.as_deref(), Some("everyone"));
    let known = request("198.51.100.1:1", "/");
    assert_eq!(s.clone().oneshot(known).await.unwrap().status(), 429);
}

#[tokio::test]
async fn a_service_made_for_a_connection_takes_its_address_as_the_peer() {
    let recorder = Recorder::default();
    let layer = RateLimitLayer::from_rules(store(), rules(EDGE), "edge")
        .with_trusted_proxies("10.0.0.0/8".parse().unwrap())
        .with_observer(recorder.clone());
    let blocked = layer
        .layer(service_fn(ok))
        .with_peer("203.0.113.9:4000".parse().unwrap());
    // No PeerAddr in the request: the connection's address decides.
    let bare = || Request::builder().uri("/").body(Full::default()).unwrap();
    assert_eq!(blocked.clone().oneshot(bare()).await.unwrap().status(), 429);
    assert_eq!(recorder.take()[0].route.as_deref(), Some("blocked"));
    // A request's own PeerAddr still comes first.
    let exempt = request("198.51.100.1:1", "/");
    assert_eq!(blocked.clone().oneshot(exempt).await.unwrap().status(), 200);
    assert!(recorder.take().is_empty());
    // Behind a trusted proxy, the forwarding header tells the client, and
    // a service made around another inner service keeps the address.
    let proxied = layer
        .layer(service_fn(ok::<Full<Bytes>>))
        .with_peer("10.1.1.1:4000".parse().unwrap())
        .with_inner(service_fn(ok::<Full<Bytes>>));
    let from_blocked = Request::builder()
        .uri("/")
        .header("x-forwarded-for", "203.0.113.5")
        .body(Full::default())
        .unwrap();
    assert_eq!(
        proxied
            .clone()
            .oneshot(from_blocked)
            .await
            .unwrap()
            .status(),
        429
    );
    assert_eq!(recorder.take()[0].route.as_deref(), Some("blocked"));
}
