//! What the middleware's tests share: a memory store on tokio's clock (so
//! the paused clock drives decisions and shaping alike), requests from a
//! given peer, inner services, an observer that records, and reading
//! bodies; and a store whose calls the test watches ([`WatchedStore`]).

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tollgate_core::time::{duration_to_nanos, Clock};
use tollgate_core::Decision;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::check::Outcome;
use tollgate_rules::RuleSet;
use tollgate_testkit::sf_list_members;
use tollgate_tower::{Observer, PeerAddr};

mod watched_store;
// Used by some of the test binaries that include this module.
#[allow(unused_imports)]
pub use watched_store::WatchedStore;

/// 2023-11-14T22:13:20Z: a whole second, so epoch-aligned windows and
/// whole-second waits line up with the test's instants.
pub const EPOCH_START: u64 = 1_700_000_000_000_000_000;

/// Tokio's clock (paused in tests) as nanoseconds since the epoch.
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        EPOCH_START + duration_to_nanos(self.start.elapsed())
    }
}

/// A memory store reading tokio's clock.
pub fn store() -> LocalStore {
    LocalStore::new(
        MemoryStore::new(MemoryConfig::default()),
        Arc::new(TokioClock {
            start: tokio::time::Instant::now(),
        }),
    )
}

pub fn rules(yaml: &str) -> RuleSet {
    RuleSet::from_yaml(yaml, "edge.yaml").unwrap_or_else(|e| panic!("{e}"))
}

/// A request for `uri` from `peer` (`ip:port`).
pub fn request(peer: &str, uri: &str) -> Request<Full<Bytes>> {
    let mut request = Request::builder().uri(uri).body(Full::default()).unwrap();
    let addr: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(PeerAddr(addr));
    request
}

/// The status `service` answers `request` with, sent through a clone so
/// the caller keeps the service (and whatever state it shares).
pub async fn status_of<S, B>(service: &S, request: Request<Full<Bytes>>) -> http::StatusCode
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    service.clone().oneshot(request).await.unwrap().status()
}

/// An inner service answering `200 ok`.
pub async fn ok<B>(_request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// The whole body as text.
pub async fn text<B>(body: B) -> String
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = body.collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// One decision as the observer heard it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    pub route: Option<String>,
    /// Each generated descriptor's rule id (`None`: no rule matched).
    pub rules: Vec<Option<String>>,
    /// Each generated descriptor's store key, lossily as text.
    pub keys: Vec<String>,
    pub allowed: bool,
    pub shadow_rejected: bool,
}

/// An observer that records what it hears.
#[derive(Clone, Default)]
pub struct Recorder {
    pub heard: Arc<Mutex<Vec<Heard>>>,
    pub inline: Arc<Mutex<Vec<(String, Decision, bool)>>>,
    pub failures: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    pub fn take(&self) -> Vec<Heard> {
        std::mem::take(&mut *self.heard.lock().unwrap())
    }
}

impl Observer for Recorder {
    fn rules_decided(
        &self,
        _domain: &str,
        route: Option<&str>,
        outcome: &Outcome<'_>,
        _took: Duration,
    ) {
        self.heard.lock().unwrap().push(Heard {
            route: route.map(str::to_owned),
            rules: outcome
                .descriptors
                .iter()
                .map(|d| d.as_ref().map(|d| d.rule.id().to_owned()))
                .collect(),
            keys: outcome
                .descriptors
                .iter()
                .map(|d| {
                    d.as_ref()
                        .map(|d| String::from_utf8_lossy(&d.key).into_owned())
                        .unwrap_or_default()
                })
                .collect(),
            allowed: outcome.allowed,
            shadow_rejected: outcome.shadow_rejected,
        });
    }

    fn inline_decided(&self, name: &str, decision: &Decision, shadow: bool, _took: Duration) {
        self.inline
            .lock()
            .unwrap()
            .push((name.to_owned(), *decision, shadow));
    }

    fn store_failed(&self, error: &tollgate_core::StoreError) {
        self.failures.lock().unwrap().push(error.to_string());
    }
}

/// The members of a Structured Field list header: name and integer
/// parameters, parsed by a real Structured Fields parser.
pub fn sf_list(headers: &http::HeaderMap, name: &str) -> Vec<(String, Vec<(String, i64)>)> {
    sf_list_members(headers[name].to_str().unwrap())
}

/// Every header as text, sorted: two answers' headers compared whole.
pub fn sorted_headers(headers: &http::HeaderMap) -> Vec<(String, String)> {
    let mut sorted: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    sorted.sort();
    sorted
}

/// A header's value as text.
pub fn header(headers: &http::HeaderMap, name: &str) -> String {
    headers[name].to_str().unwrap().to_owned()
}
