//! The gateway: a reverse proxy that forwards requests to one upstream and
//! streams the answers back, served by `tollgate gateway`.
//!
//! This module owns the proxying only — rewriting targets, hop-by-hop and
//! forwarding headers, upgrades, upstream errors, the accept loop and the
//! admin port. Deciding which requests go through is the rate-limiting
//! layer's job (`tollgate-tower`), put around [`Proxy`] as a
//! `tower::Layer` by the binary's wiring:
//!
//! ```text
//! listener::run ── PeerAddr ──▶ [rate-limiting layer] ──▶ Proxy ──▶ upstream
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
//! - `listener`: [`run`], the accept loop with graceful shutdown.
//! - `paired`: [`PairedUpstream`], a client connection's own upstream
//!   connection, driven in its task.
//! - `admin`: [`admin_router`], `/healthz`, `/readyz` and `/metrics` on a
//!   port of their own.
//! - `observer`: [`MetricsObserver`], the layer's decisions counted in the
//!   Prometheus registry.

mod admin;
mod body;
mod error;
mod forwarded;
mod hop_by_hop;
mod listener;
mod observer;
mod paired;
mod proxy;
mod tls;
mod upgrade;
mod upstream;

pub use admin::admin_router;
pub use body::ProxyBody;
pub use error::ProxyError;
pub use listener::run;
pub use observer::MetricsObserver;
pub use paired::PairedUpstream;
pub use proxy::{Proxy, ProxyFuture, ProxySettings};
pub use tls::UpstreamTlsError;
pub use upstream::{InvalidTarget, Upstream, UpstreamError};
