//! Costs read from the response: a route's `cost:` checks a request with
//! its estimate and settles the actual cost from a response header (when
//! the head arrives) or a trailer (when the body ends, for streamed
//! bodies too); `count_if:` refunds answers whose status does not count;
//! absent or bad values, bodies cut short and stores that do not settle
//! leave the estimate standing, and the observer hears each outcome. Each
//! check reads the limit's `remaining` from the next answer's `RateLimit`
//! header, on a memory store driven by tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use support::*;
use tokio::sync::mpsc;
use tollgate_core::{AlgorithmName, Limit};
use tollgate_rules::{ResponseCost, StatusFilter};
use tollgate_tower::{CostOutcome, Observer, RateLimitLayer, TrailersWanted};
use tower::{service_fn, Layer, ServiceExt};

/// 1000 tokens an hour per API key; `/llm` reads the cost from
/// `x-tokens-used` (estimate 10), `/stream` from the trailer (estimate 10,
/// falling back on the header), `/counted` counts 5xx, 429 and 200 only.
const RULES: &str = r#"
domain: edge
routes:
  - name: llm
    match: {path_prefix: /llm}
    cost: {estimate: 10, from_response_header: x-tokens-used}
    descriptors: [[api_key]]
  - name: stream
    match: {path_prefix: /stream}
    cost: {estimate: 10, from_response_trailer: x-tokens-used, from_response_header: x-tokens-guess}
    descriptors: [[api_key]]
  - name: counted
    match: {path_prefix: /counted}
    count_if: {status: ["5xx", 429, 200]}
    descriptors: [[api_key]]
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1000, name: tokens}
"#;

/// Hears the cost outcomes.
#[derive(Clone)]
struct Costs(mpsc::UnboundedSender<CostOutcome>);

impl Observer for Costs {
    fn cost_settled(&self, outcome: CostOutcome) {
        let _ = self.0.send(outcome);
    }
}

fn costs() -> (Costs, mpsc::UnboundedReceiver<CostOutcome>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Costs(tx), rx)
}

/// A request for `uri` with the API key `k1`.
fn keyed(uri: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .uri(uri)
        .header("x-api-key", "k1")
        .body(Full::default())
        .unwrap()
}

/// The `r` of the `tokens` limit in an answer's `RateLimit` header.
fn remaining(headers: &HeaderMap) -> i64 {
    let members = sf_list(headers, "ratelimit");
    let (_, params) = members.iter().find(|(n, _)| n == "tokens").unwrap();
    params.iter().find(|(k, _)| k == "r").unwrap().1
}

/// An inner service answering with the status of `?status=` and the
/// header `x-tokens-used` of `?used=` (absent without it).
async fn tokens(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let query = request.uri().query().unwrap_or("").to_owned();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let mut response = Response::new(Full::new(Bytes::from_static(b"answer")));
    if let Some(used) = param("used") {
        response
            .headers_mut()
            .insert("x-tokens-used", used.parse().unwrap());
    }
    if let Some(status) = param("status") {
        *response.status_mut() = StatusCode::from_u16(status.parse().unwrap()).unwrap();
    }
    Ok(response)
}

#[tokio::test(start_paused = true)]
async fn the_header_charges_or_refunds_the_difference_before_the_answer_goes_on() {
    let (observer, mut heard) = costs();
    let layer = RateLimitLayer::from_rules(store(), rules(RULES), "edge").with_observer(observer);
    let service = layer.layer(service_fn(tokens));
    let answer = |uri: &'static str| {
        let service = service.clone();
        async move { service.oneshot(keyed(uri)).await.unwrap() }
    };

    // Checked with the estimate: 1000 − 10.
    let first = answer("/llm?used=250").await;
    assert_eq!(remaining(first.headers()), 990);
    assert_eq!(heard.recv().await, Some(CostOutcome::Settled));
    // The next request sees the charge: 1000 − 250 − 10.
    let second = answer("/llm?used=0").await;
    assert_eq!(remaining(second.headers()), 740);
    // That one cost nothing: refunded to 750, then − 10.
    let third = answer("/llm?used=10").await;
    assert_eq!(remaining(third.headers()), 740);

    // Absent and bad values: the estimate stands.
    let missing = answer("/llm").await;
    assert_eq!(remaining(missing.headers()), 730);
    let bad = answer("/llm?used=12tokens").await;
    assert_eq!(remaining(bad.headers()), 720);
    let after = answer("/llm?used=10").await;
    assert_eq!(remaining(after.headers()), 710);
    let outcomes: Vec<_> = std::iter::from_fn(|| heard.try_recv().ok()).collect();
    assert_eq!(
        outcomes,
        [
            CostOutcome::Settled,
            CostOutcome::Settled,
            CostOutcome::Missing,
            CostOutcome::Invalid,
            CostOutcome::Settled
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_charge_into_debt_refuses_until_paid_back() {
    let layer = RateLimitLayer::from_rules(store(), rules(RULES), "edge");
    let service = layer.layer(service_fn(tokens));
    let first = service
        .clone()
        .oneshot(keyed("/llm?used=1500"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let refused = service.clone().oneshot(keyed("/llm")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(start_paused = true)]
async fn count_if_refunds_answers_whose_status_does_not_count() {
    let layer = RateLimitLayer::from_rules(store(), rules(RULES), "edge");
    let service = layer.layer(service_fn(tokens));
    let mut last = 1000;
    for (status, counted) in [
        (200, true),
        (404, false),
        (201, false),
        (503, true),
        (429, true),
        (302, false),
    ] {
        let uri = format!("/counted?status={status}");
        let answer = service
            .clone()
            .oneshot(keyed(Box::leak(uri.into_boxed_str())))
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), status);
        // What this answer shows is after its own check; what it left is
        // seen by the next one.
        assert_eq!(remaining(answer.headers()), last - 1, "{status}");
        last -= i64::from(counted);
    }
    let peek = service.oneshot(keyed("/counted")).await.unwrap();
    assert_eq!(remaining(peek.headers()), last - 1);
    assert_eq!(last, 997);
}

/// A body whose frames (data and trailers) the test sends.
struct Frames(mpsc::Receiver<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|f| f.map(Ok))
    }
}

fn trailers(used: &str) -> Frame<Bytes> {
    let mut map = HeaderMap::new();
    map.insert("x-tokens-used", used.parse().unwrap());
    Frame::trailers(map)
}

/// A streaming service: each request hands the test the sender of its
/// body's frames, and says whether it asked for trailers.
fn streaming(
    bodies: mpsc::UnboundedSender<(mpsc::Sender<Frame<Bytes>>, bool)>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<Frames>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(move |request: Request<Full<Bytes>>| {
        let bodies = bodies.clone();
        async move {
            let (tx, rx) = mpsc::channel(4);
            let wanted = request.extensions().get::<TrailersWanted>().is_some();
            bodies.send((tx, wanted)).unwrap();
            let mut response = Response::new(Frames(rx));
            if request.uri().query() == Some("guess=40") {
                response
                    .headers_mut()
                    .insert("x-tokens-guess", "40".parse().unwrap());
            }
            Ok::<_, Infallible>(response)
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_is_settled_from_its_trailer_when_it_ends() {
    let (observer, mut heard) = costs();
    let layer = RateLimitLayer::from_rules(store(), rules(RULES), "edge").with_observer(observer);
    let (bodies, mut sent) = mpsc::unbounded_channel();
    let service = layer.layer(streaming(bodies));

    let response = service.clone().oneshot(keyed("/stream")).await.unwrap();
    let (frames, wanted) = sent.recv().await.unwrap();
    assert!(wanted, "the inner service was asked for trailers");
    assert_eq!(remaining(response.headers()), 990);
    let mut body = response.into_body();
    frames
        .send(Frame::data(Bytes::from_static(b"tok")))
        .await
        .unwrap();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "tok");

    // Mid-stream, only the estimate is counted.
    let during = service
        .clone()
        .oneshot(keyed("/llm?used=10"))
        .await
        .unwrap();
    assert_eq!(remaining(during.headers()), 980);
    // (The streaming service sends no header: that one keeps its estimate.)
    assert_eq!(heard.recv().await, Some(CostOutcome::Missing));
    assert!(heard.try_recv().is_err(), "nothing settled before the end");

    frames
        .send(Frame::data(Bytes::from_static(b"ens")))
        .await
        .unwrap();
    frames.send(trailers("300")).await.unwrap();
    drop(frames);
    let rest = body.collect().await.unwrap();
    assert_eq!(rest.trailers().unwrap()["x-tokens-used"], "300");
    assert_eq!(rest.to_bytes(), "ens");
    assert_eq!(heard.recv().await, Some(CostOutcome::Settled));
    // 1000 − 300 − 10 (the /llm request), then − 10 for this one.
    let after = service
        .clone()
        .oneshot(keyed("/llm?used=10"))
        .await
        .unwrap();
    assert_eq!(remaining(after.headers()), 680);
}

/// An answer of `answer`, its length given in the head.
async fn with_length(_: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"answer")));
    response
        .headers_mut()
        .insert(http::header::CONTENT_LENGTH, "6".parse().unwrap());
    Ok(response)
}

#[tokio::test(start_paused = true)]
async fn a_body_settled_at_its_end_gives_no_length_so_its_end_follows_the_settle() {
    let layer = RateLimitLayer::from_rules(store(), rules(RULES), "edge");
    let service = layer.layer(service_fn(with_length));

    // With a length, an HTTP/1.1 client has the whole answer at its last
    // byte, before the server polls the end that settles: its next request
    // could be decided before the settle.
    let settled_at_end = service.clone().oneshot(keyed("/stream")).await.unwrap();
    assert!(settled_at_end.headers().get("content-length").is_none());
    assert_eq!(settled_at_end.body().size_hint().exact(), None);
    assert_eq!(
        settled_at_end
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes(),
        "answer"
    );

    // Settled at the head: the length stays.
    let settled_at_head = service.clone().oneshot(keyed("/llm")).await.unwrap();
    assert_eq!(settled_at_head.headers()["content-length"], "6");
    assert_eq!(settled_at_head.body().size_hint().exact(), Some(6));
}

#[tokio::test(start_paused = true)]
async fn a_body_without_its_trailer_or_cut_short_keeps_the_estimate_or_the_header() {
    let (observer, mut heard) = costs();
    let layer = RateLimitLayer::from_rules(store(), rules(RULES), "edge").with_observer(observer);
    let (bodies, mut sent) = mpsc::unbounded_channel();
    let service = layer.layer(streaming(bodies));
    // A request that keeps its estimate of 10 (the streaming service sends
    // no header), showing what the others left.
    let next_remaining = || {
        let service = service.clone();
        async move {
            let r = service.oneshot(keyed("/llm")).await.unwrap();
            remaining(r.headers())
        }
    };

    // Ends without the trailer: the estimate stands.
    let response = service.clone().oneshot(keyed("/stream")).await.unwrap();
    let (frames, _) = sent.recv().await.unwrap();
    frames
        .send(Frame::data(Bytes::from_static(b"x")))
        .await
        .unwrap();
    drop(frames);
    response.into_body().collect().await.unwrap();
    assert_eq!(heard.recv().await, Some(CostOutcome::Missing));
    assert_eq!(next_remaining().await, 980);
    assert_eq!(heard.recv().await, Some(CostOutcome::Missing));

    // Dropped mid-stream (the client went away): the estimate stands.
    let response = service.clone().oneshot(keyed("/stream")).await.unwrap();
    let (frames, _) = sent.recv().await.unwrap();
    drop(response);
    drop(frames);
    assert_eq!(heard.recv().await, Some(CostOutcome::Aborted));
    assert_eq!(next_remaining().await, 960);
    assert_eq!(heard.recv().await, Some(CostOutcome::Missing));

    // Dropped mid-stream with the header's value known: settled with it.
    let response = service
        .clone()
        .oneshot(keyed("/stream?guess=40"))
        .await
        .unwrap();
    let (frames, _) = sent.recv().await.unwrap();
    drop(response);
    drop(frames);
    assert_eq!(heard.recv().await, Some(CostOutcome::Settled));
    // 950, less the 30 beyond the estimate, then this request's 10.
    assert_eq!(next_remaining().await, 910);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_does_not_settle_is_asked_once_and_the_estimate_stands() {
    let (observer, mut heard) = costs();
    let store = WatchedStore::new(store());
    let settles = Arc::clone(&store.settles);
    let clock_reads = Arc::clone(&store.clock_reads);
    let layer = RateLimitLayer::from_rules(store, rules(RULES), "edge").with_observer(observer);
    let service = layer.layer(service_fn(tokens));
    for expected in [990, 980, 970] {
        let answer = service
            .clone()
            .oneshot(keyed("/llm?used=500"))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(remaining(answer.headers()), expected);
        assert_eq!(heard.recv().await, Some(CostOutcome::Unsupported));
    }
    assert_eq!(settles.load(Ordering::SeqCst), 1);
    assert_eq!(clock_reads.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_inline_limit_settles_from_the_response_of_an_axum_app() {
    let (observer, mut heard) = costs();
    let limit = Limit::new(AlgorithmName::FixedWindow, "100/hour".parse().unwrap());
    let key = |parts: &http::request::Parts, _ip: Option<std::net::IpAddr>| {
        parts
            .headers
            .get("x-api-key")?
            .to_str()
            .ok()
            .map(str::to_owned)
    };
    let layer = RateLimitLayer::inline(store(), limit, key)
        .with_response_cost(ResponseCost::from_header("x-rows-scanned").with_estimate(5))
        .with_count_if(StatusFilter::parse(["2xx"]).unwrap())
        .with_observer(observer);
    let app = Router::new()
        .route(
            "/search",
            get(|| async { ([("x-rows-scanned", "30")], "rows") }),
        )
        .route(
            "/broken",
            get(|| async {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    [("x-rows-scanned", "30")],
                    "",
                )
            }),
        )
        .layer(layer);
    let remaining_of = |response: &Response<_>| -> i64 {
        header(response.headers(), "x-ratelimit-remaining")
            .parse()
            .unwrap()
    };
    let send = |uri: &'static str| {
        let app = app.clone();
        async move {
            let request = Request::get(uri)
                .header("x-api-key", "k1")
                .body(axum::body::Body::empty())
                .unwrap();
            app.oneshot(request).await.unwrap()
        }
    };

    let first = send("/search").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(remaining_of(&first), 95);
    assert_eq!(text(first.into_body()).await, "rows");
    assert_eq!(heard.recv().await, Some(CostOutcome::Settled));
    // 100 − 30, then − 5 for this one, which fails and is refunded.
    let broken = send("/broken").await;
    assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(remaining_of(&broken), 65);
    assert_eq!(heard.recv().await, Some(CostOutcome::Uncounted));
    let last = send("/search").await;
    assert_eq!(remaining_of(&last), 65);
}
