//! tollgate's gateway: a reverse proxy that forwards requests to one
//! upstream and streams the answers back, served by `tollgate gateway`.
//!
//! This crate owns the proxying only — rewriting targets, hop-by-hop and
//! forwarding headers, upgrades, upstream errors and the accept loop.
//! Deciding which requests go through is the rate-limiting layer's job
//! (`tollgate-tower`, which it shares with the decision service through
//! `tollgate_rules::check` and the header writer), put around [`Proxy`] as
//! a `tower::Layer` by the binary's wiring; the admin port
//! (`tollgate_server::admin_router`) and the decisions' metrics
//! (`tollgate_server::MetricsObserver`) belong to the decision service,
//! which answers them the same way:
//!
//! ```text
//! listener::run ── per connection ──▶ [rate-limiting layer] ──▶ Proxy ──▶ upstream
//! ```
//!
//! # Layout
//!
//! - `upstream`: [`Upstream`], the parsed `--upstream` URL and target
//!   rewriting.
//! - `proxy`: [`Proxy`], the `tower::Service` that forwards.
//! - `hop_by_hop`: the fields that describe one connection, removed both
//!   ways.
//! - `forwarded`: `X-Forwarded-For`, `-Proto`, `-Host` and `Host`.
//! - `upgrade`: `101 Switching Protocols` and the joined connections.
//! - `tls`: the CA certificates trusted for an `https://` upstream.
//! - `body`: [`ProxyBody`], the answers' body.
//! - `error`: [`ProxyError`], the one place failures become statuses and
//!   problem details.
//! - `listener`: [`run`], the accept loop (`tollgate_listener`'s, with the
//!   connection cap and timeouts), [`PerConnection`] (the service made for
//!   each client connection, told its address and given its upstream
//!   pair) and [`RequestBody`].
//! - `paired`: [`PairedUpstream`], a client connection's own upstream
//!   connection, driven in its task.

mod body;
mod error;
mod forwarded;
mod hop_by_hop;
mod listener;
mod paired;
mod proxy;
mod tls;
mod upgrade;
mod upstream;

pub use body::ProxyBody;
pub use error::ProxyError;
pub use listener::{run, PerConnection, RequestBody};
pub use paired::PairedUpstream;
pub use proxy::{Proxy, ProxyFuture, ProxySettings};
pub use tls::UpstreamTlsError;
pub use upstream::{InvalidTarget, Upstream, UpstreamError};
