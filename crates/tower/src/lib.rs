//! tollgate as tower middleware for HTTP services: axum and hyper apps, and
//! the `tollgate gateway` reverse proxy, which is this layer around a proxy.
//!
//! [`RateLimitLayer`] decides every request through a tollgate
//! [`Store`](tollgate_core::Store) (the memory store, Redis, or the
//! server's guarded store) before the wrapped service sees it:
//!
//! - **keys**: a rules file's `routes:` turn a request into descriptors
//!   (client IP, headers, method, path, host, an API key — see
//!   `docs/rules.md`), checked by the same rules decision as the decision
//!   service (`tollgate_rules::check`); or one inline limit with a
//!   [`KeyExtractor`]. The client IP honours `X-Forwarded-For` (or
//!   `Forwarded`) only from [`TrustedProxies`];
//! - **answers**: an over-limit request gets `429` with the rate-limit
//!   [`headers`] and an RFC 9457 [`problem`] body naming the policy and the
//!   wait, and never reaches the service; admitted responses carry the
//!   headers too (see [`Settings`]); a store that cannot be asked gives
//!   `503`;
//! - **shaping**: `leaky_bucket` limits hold admitted requests (nginx
//!   `limit_req`, with `nodelay` and `delay=N`: [`Shaping`]);
//! - **concurrency**: `concurrency` limits hold a lease until the response
//!   body ends, the service fails, or the client goes away;
//! - **costs from the response**: a route's `cost:` checks a request with
//!   an estimate and settles its actual cost from a response header or
//!   trailer, and `count_if:` refunds answers whose status does not count
//!   ([`CostOutcome`], [`TrailersWanted`]);
//! - **shadow** mode (global or per route) decides and reports through an
//!   [`Observer`], and never rejects;
//! - **runtime overrides**: with a shared table
//!   ([`RateLimitLayer::with_overrides`]), a limit set at runtime for one
//!   exact descriptor takes precedence over the rules for it.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use tower::{service_fn, Layer, ServiceExt};
//! use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
//! use tollgate_rules::RuleSet;
//! use tollgate_tower::{PeerAddr, RateLimitLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rules = RuleSet::from_yaml(
//!     "domain: web\n\
//!      descriptors:\n\
//!      \x20 - key: remote_address\n\
//!      \x20   rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra, name: per_ip}\n",
//!     "web.yaml",
//! )
//! .unwrap();
//! let store = LocalStore::system(MemoryStore::new(MemoryConfig::default()));
//! let app = service_fn(|_request: http::Request<String>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//! });
//! let service = RateLimitLayer::from_rules(store, rules, "web").layer(app);
//!
//! let request = || {
//!     let mut r = http::Request::new(String::new());
//!     r.extensions_mut().insert(PeerAddr("192.0.2.7:5000".parse().unwrap()));
//!     r
//! };
//! let first = service.clone().oneshot(request()).await.unwrap();
//! assert_eq!(first.status(), 200);
//! assert_eq!(first.headers()["ratelimit"], "\"per_ip\";r=0;t=60");
//! let second = service.oneshot(request()).await.unwrap();
//! assert_eq!(second.status(), 429);
//! assert_eq!(second.headers()["content-type"], "application/problem+json");
//! # }
//! ```
//!
//! `examples/axum.rs` runs an axum app with the layer on the memory store
//! (`cargo run -p tollgate-tower --example axum --features axum`);
//! `docs/middleware.md` describes the middleware.
//!
//! # Layout
//!
//! - `layer`: [`RateLimitLayer`], its configuration.
//! - `service`: [`RateLimitService`] and the state its requests share.
//! - `future`: [`ResponseFuture`], one request from decision to response.
//! - `decide`: route, descriptors, store: the decision on one request.
//! - `ruling`: what a decision means for the request (reject, hold,
//!   headers, leases).
//! - `body`: [`RateLimitBody`], which holds leases until the body ends.
//! - `lease`: releasing `concurrency` leases, also from `Drop`.
//! - `cost`: settling a request's actual cost from its response.
//! - `route`, `descriptors`: a request's route and descriptors.
//! - `client_ip`, `forwarded`: the client IP and the forwarding headers.
//! - `shaping`: [`Shaping`] (nodelay, delay=N).
//! - `inline`: inline limits and [`KeyExtractor`].
//! - [`headers`], [`problem`]: what a decision looks like over HTTP.
//! - `observer`: [`Observer`], the hook for metrics.
//! - `settings`: [`Settings`].

mod body;
mod client_ip;
mod cost;
mod decide;
mod descriptors;
mod forwarded;
mod future;
mod grouping;
pub mod headers;
mod inline;
mod layer;
mod lease;
mod observer;
pub mod problem;
mod route;
mod ruling;
mod service;
mod settings;
mod shaping;

use std::net::SocketAddr;

pub use body::RateLimitBody;
pub use client_ip::{client_ip, peer_addr, ForwardedHeader, InvalidCidr, TrustedProxies, MAX_HOPS};
pub use cost::{CostOutcome, TrailersWanted};
pub use descriptors::DEFAULT_MAX_VALUE_BYTES;
pub use future::ResponseFuture;
pub use grouping::{AddressGrouping, GroupingError, DEFAULT_IPV4_PREFIX, DEFAULT_IPV6_PREFIX};
pub use inline::{ClientIp, KeyExtractor, INLINE_KEY_PREFIX};
pub use layer::RateLimitLayer;
pub use observer::{NoObserver, Observer};
pub use service::RateLimitService;
pub use settings::Settings;
pub use shaping::Shaping;

/// The remote address of the connection a request arrived on, put into
/// the request's extensions by the server that accepted it (the gateway's
/// listener does). Key extraction reads the client IP from it, and from
/// forwarding headers only when this address is a trusted proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);
