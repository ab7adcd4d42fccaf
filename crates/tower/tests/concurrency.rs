//! `concurrency` limits with slow responses: the N+1-th request in flight
//! is rejected; a lease is released when the body ends, when the client
//! goes away (the response future or the body is dropped), and when the
//! inner service fails. Each test runs twice: with a store that answers
//! at once (the request decided in `call`) and with one that answers
//! later (the layer's boxed path). And a request waits for an inner
//! service that is not ready yet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use support::*;
use tokio::sync::{mpsc, oneshot};
use tollgate_core::{LimitKey, Moment, Store};
use tollgate_rules::check::Plan;
use tollgate_tower::{RateLimitBody, RateLimitLayer};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, Service, ServiceExt};

const TWO_IN_FLIGHT: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: concurrency, lease_ttl: 1h, name: in_flight}
"#;

/// A slow service: each request hands the test a sender and answers when
/// the test sends on it.
type Gates = mpsc::UnboundedReceiver<oneshot::Sender<()>>;

/// The slow service behind the layer.
type Slow = BoxCloneService<Request<Full<Bytes>>, Response<RateLimitBody<Full<Bytes>>>, Infallible>;

struct Setup<S> {
    service: S,
    gates: Gates,
    released: mpsc::UnboundedReceiver<u64>,
    layer: RateLimitLayer<WatchedStore>,
}

impl<S> Setup<S> {
    /// Leases 192.0.2.1 could still take, asked of the store without
    /// yielding to other tasks (the memory store answers at once), so a
    /// release spawned elsewhere cannot have run in between.
    async fn remaining(&self) -> u64 {
        let rules = rules(TWO_IN_FLIGHT);
        let plan = Plan::resolve(
            &rules,
            "edge",
            &[vec![("remote_address", "192.0.2.1")]],
            false,
        )
        .unwrap();
        let planned = plan.descriptors()[0].as_ref().unwrap();
        let request = [LimitKey {
            limit: &planned.rule().limits()[0],
            key: planned.key(),
        }];
        self.layer
            .store()
            .check(&request, Moment::Now, 0)
            .await
            .unwrap()[0]
            .remaining
    }
}

fn setup(at_once: bool) -> Setup<Slow> {
    let (gate_tx, gates) = mpsc::unbounded_channel();
    let (released_tx, released) = mpsc::unbounded_channel();
    let inner = service_fn(move |_: Request<Full<Bytes>>| {
        let gate_tx = gate_tx.clone();
        async move {
            let (open, wait) = oneshot::channel();
            gate_tx.send(open).unwrap();
            let _ = wait.await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    });
    let store = WatchedStore::new(store())
        .answering_at_once(at_once)
        .sending_releases(released_tx);
    let layer = RateLimitLayer::from_rules(store, rules(TWO_IN_FLIGHT), "edge");
    Setup {
        service: BoxCloneService::new(layer.layer(inner)),
        gates,
        released,
        layer,
    }
}

/// Waits for the store to see a release; a release that never comes fails
/// the test instead of hanging it.
async fn release_of(released: &mut mpsc::UnboundedReceiver<u64>) -> u64 {
    tokio::time::timeout(Duration::from_secs(30), released.recv())
        .await
        .expect("no lease was released")
        .unwrap()
}

/// Waits until the request of `task` reaches the slow service (it was
/// admitted) and returns its gate; a request answered before that (a 429)
/// fails the test.
async fn admitted<R: Send + 'static>(
    task: tokio::task::JoinHandle<Response<R>>,
    gates: &mut Gates,
) -> oneshot::Sender<()> {
    tokio::select! {
        gate = gates.recv() => gate.unwrap(),
        answered = task => panic!("answered {} without reaching the service", answered.unwrap().status()),
    }
}

/// Runs the test `$name(at_once: bool)` with a store that answers at once
/// and with one that answers later.
macro_rules! on_both_paths {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn answered_at_once() {
                super::$name(true).await
            }
            #[tokio::test]
            async fn answered_later() {
                super::$name(false).await
            }
        }
    };
}

macro_rules! spawn_request {
    ($service:expr) => {{
        let s = $service.clone();
        tokio::spawn(async move { s.oneshot(request("192.0.2.1:1000", "/")).await.unwrap() })
    }};
}

on_both_paths!(the_request_over_the_limit_is_rejected_and_a_finished_body_releases);
async fn the_request_over_the_limit_is_rejected_and_a_finished_body_releases(at_once: bool) {
    let mut setup = setup(at_once);
    let service = setup.service.clone();
    let first = spawn_request!(service);
    let second = spawn_request!(service);
    let gate_one = setup.gates.recv().await.unwrap();
    let _gate_two = setup.gates.recv().await.unwrap();

    // Two in flight: the third is rejected without reaching the service.
    let third = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(third.status(), 429);
    let policy = sf_list(third.headers(), "ratelimit-policy");
    assert_eq!(policy[0].0, "in_flight");
    assert!(setup.gates.try_recv().is_err());

    // The first answers; its lease is held until its body has been read.
    gate_one.send(()).unwrap();
    let response = first.await.unwrap();
    assert_eq!(response.status(), 200);
    let while_reading = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(while_reading.status(), 429);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"done");
    // Released when the end was read, not later.
    assert_eq!(setup.remaining().await, 1);

    // A new request gets in.
    admitted(spawn_request!(service), &mut setup.gates).await;
    drop(second);
}

on_both_paths!(a_client_that_goes_away_mid_request_releases);
async fn a_client_that_goes_away_mid_request_releases(at_once: bool) {
    let Setup {
        service,
        mut gates,
        mut released,
        ..
    } = setup(at_once);
    let first = spawn_request!(service);
    let _second = spawn_request!(service);
    let _gate_one = gates.recv().await.unwrap();
    let _gate_two = gates.recv().await.unwrap();
    assert_eq!(
        status_of(&service, request("192.0.2.1:1000", "/")).await,
        429
    );

    // The client disconnects: the response future is dropped.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    release_of(&mut released).await;
    admitted(spawn_request!(service), &mut gates).await;
}

on_both_paths!(dropping_an_unread_body_releases);
async fn dropping_an_unread_body_releases(at_once: bool) {
    let Setup {
        service,
        mut gates,
        mut released,
        ..
    } = setup(at_once);
    let first = spawn_request!(service);
    let _second = spawn_request!(service);
    gates.recv().await.unwrap().send(()).unwrap();
    let _gate_two = gates.recv().await.unwrap();
    let response = first.await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        status_of(&service, request("192.0.2.1:1000", "/")).await,
        429
    );
    drop(response);
    release_of(&mut released).await;
    admitted(spawn_request!(service), &mut gates).await;
}

on_both_paths!(an_inner_error_releases);
async fn an_inner_error_releases(at_once: bool) {
    let failing = service_fn(|_: Request<Full<Bytes>>| async {
        Err::<Response<Full<Bytes>>, _>("upstream reset")
    });
    let yaml = TWO_IN_FLIGHT.replace("requests_per_unit: 2", "requests_per_unit: 1");
    let store = WatchedStore::new(store()).answering_at_once(at_once);
    let service = RateLimitLayer::from_rules(store, rules(&yaml), "edge").layer(failing);
    for _ in 0..3 {
        // Each failure gives its lease back before the error is returned;
        // otherwise the second attempt would be a 429 for an hour.
        let error = service
            .clone()
            .oneshot(request("192.0.2.1:1000", "/"))
            .await
            .unwrap_err();
        assert_eq!(error, "upstream reset");
    }
}

on_both_paths!(shadow_rule_leases_of_a_rejected_request_are_released);
async fn shadow_rule_leases_of_a_rejected_request_are_released(at_once: bool) {
    let yaml = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: generic_key
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: concurrency, lease_ttl: 1h}
routes:
  - descriptors: [[remote_address], [{generic_key: {descriptor_value: all}}]]
"#;
    let (released_tx, mut released) = mpsc::unbounded_channel();
    let store = WatchedStore::new(store())
        .answering_at_once(at_once)
        .sending_releases(released_tx);
    let service = RateLimitLayer::from_rules(store, rules(yaml), "edge").layer(service_fn(ok));
    let first = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    first.into_body().collect().await.unwrap();
    release_of(&mut released).await;
    // Over the per-minute limit: rejected, and the shadow lease it got is
    // given back at once.
    let second = service
        .clone()
        .oneshot(request("192.0.2.1:1000", "/"))
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    assert!(released.try_recv().is_ok());
}

#[tokio::test]
async fn a_request_waits_for_an_inner_service_that_is_not_ready() {
    // The inner service takes one request at a time; the layer's own limit
    // is far away.
    let yaml = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 100}
"#;
    let (gate_tx, mut gates) = mpsc::unbounded_channel();
    let slow = service_fn(move |_: Request<Full<Bytes>>| {
        let gate_tx = gate_tx.clone();
        async move {
            let (open, wait) = oneshot::channel::<()>();
            gate_tx.send(open).unwrap();
            let _ = wait.await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    });
    let inner = tower::limit::ConcurrencyLimit::new(slow, 1);
    // One service for both requests, as a connection has.
    let mut service = RateLimitLayer::from_rules(store(), rules(yaml), "edge").layer(inner);
    let first = service
        .ready()
        .await
        .unwrap()
        .call(request("192.0.2.1:1000", "/"));
    let first = tokio::spawn(first);
    let gate_one = gates.recv().await.unwrap();
    // Not ready while the first holds the inner service's one place: the
    // second must get it once the first is done.
    let second = service
        .ready()
        .await
        .unwrap()
        .call(request("192.0.2.1:1000", "/"));
    let second = tokio::spawn(second);
    gate_one.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    let gate_two = tokio::time::timeout(Duration::from_secs(30), gates.recv())
        .await
        .expect("the second request never reached the inner service")
        .unwrap();
    gate_two.send(()).unwrap();
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
}
