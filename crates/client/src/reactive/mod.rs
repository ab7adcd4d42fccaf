//! Reacting to a provider's answers: slow down on its `429`s and follow the
//! numbers its headers publish, with no tollgate service involved.
//!
//! - [`Signals`]: what an answer's headers say (`Retry-After`, `RateLimit`
//!   and `RateLimit-Policy`, `RateLimit-Remaining`/`-Reset`/`-Limit`,
//!   `X-RateLimit-*`).
//! - [`ReactiveLimiter`]: per-key pacing learned from those answers, with an
//!   additive-increase, multiplicative-decrease rate when the provider
//!   publishes nothing ([`Adaptive`]).
//! - [`ReactiveClient`]: a `reqwest` client whose calls go through a
//!   limiter; [`ReactiveLayer`]: the same as a `tower` layer, for hyper
//!   clients and any `Service<http::Request<B>>`.
//!
//! This is the fallback for providers whose limits are unknown or change;
//! when the limit is known, pace by it ([`crate::waiter`] or
//! [`crate::remote`]) and keep this layer for the surprises.

mod client;
mod layer;
mod limiter;
mod signals;

pub use client::ReactiveClient;
pub use layer::{ReactiveLayer, ReactiveService};
pub use limiter::{Adaptive, Permit, ReactiveLimiter};
pub use signals::Signals;
