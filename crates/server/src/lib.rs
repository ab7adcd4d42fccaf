//! tollgate's decision service: the HTTP API of SPEC §5 around a
//! [`Store`](tollgate_core::Store), with rules, metrics and snapshots.
//!
//! A request travels one way: a route decodes it (`wire`, `extract`),
//! `target` validates it, `decide` (or `envoy`) resolves rules and asks the
//! store, and `answer` / `error` turn the outcome into a status, headers
//! (`headers`) and a JSON body. Nothing here reads a clock: the store
//! decides what "now" is, unless a trusted client sends `at_ms`.
//!
//! # Layout
//!
//! - `app`: [`App`], the shared state, and [`router`].
//! - `serve`: [`serve`], the HTTP port on `tollgate_listener`'s accept
//!   loop (connection cap, timeouts, graceful shutdown).
//! - `settings`: [`Settings`].
//! - `wire`: the JSON bodies.
//! - `extract`: body size limit, strict JSON decoding, the admin token
//!   (bearer or the dashboard's login cookie).
//! - `scan`: the plain decision request read without serde (serde reads
//!   the rest, and says what is wrong with a bad one).
//! - `target`: request validation into a [`Target`](target::Target).
//! - `decide`: checks, reservations, releases and settles, inline and
//!   rules-based.
//! - `envoy`: envoyproxy/ratelimit's `ShouldRateLimit`, for `/json` and
//!   gRPC.
//! - `grpc`: the Envoy rate limit gRPC service and the health service.
//! - `tickets`: the settle tickets of checks admitted with
//!   `"settle": true`, waiting for `/v1/settle`.
//! - `guarded`: a shared store under the `--on-store-error` policy.
//! - `proto`: the protobuf types and gRPC stubs generated from `proto/`.
//! - `answer`, `error`: the one place decisions and errors become HTTP.
//! - `headers`: the rate-limit headers of SPEC §7 (from `tollgate-tower`).
//! - `metrics`: the Prometheus registry.
//! - `latency`: the decision routes' latency histogram, lock-free.
//! - `history`: each rule's counters every ten seconds, for the
//!   dashboard's rates and sparklines.
//! - `dashboard`: the live dashboard page and the JSON it polls.
//! - `top`: the keys counted most over the last minutes, in constant
//!   memory (a rule's top offenders).
//! - `reload`: a rules reload put in force.
//! - `override_store`: [`override_store::OverrideBackend`], where runtime
//!   overrides are shared (Redis); the table is `tollgate_rules`'.
//! - `routes`: one module per group of routes.
//! - `admin`: [`admin_router`], `/healthz`, `/readyz`, `/metrics`,
//!   `/v1/top` and the dashboard on a port of their own, for the gateway
//!   (`tollgate-gateway`) whose main port belongs to its upstream.
//! - `observer`: [`MetricsObserver`], the rate-limiting layer's decisions
//!   (gateway, middleware) counted in the Prometheus registry.

mod admin;
pub mod answer;
pub mod app;
mod dashboard;
pub mod decide;
pub mod envoy;
pub mod error;
mod extract;
pub mod grpc;
pub mod guarded;
pub mod history;
mod latency;
pub mod metrics;
mod numbers;
mod observer;
pub mod override_store;
pub mod proto;
pub mod reload;
mod routes;
mod scan;
mod serve;
pub mod settings;
pub mod target;
pub mod tickets;
pub mod top;
pub mod wire;

pub use admin::{admin_router, AdminOptions};
pub use app::{router, App, ROUTES};
pub use latency::Percentiles;
pub use observer::MetricsObserver;
pub use serve::serve;
pub use settings::Settings;
/// The rate-limit headers of SPEC §7, shared with the gateway and the
/// tower middleware.
pub use tollgate_tower::headers;
