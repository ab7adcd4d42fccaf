//! Pacing for programs that call other people's rate-limited APIs.
//!
//! Where the rest of tollgate decides whether to admit requests (a server
//! protecting itself), this crate is for the caller: a program that must stay
//! under a provider's quota makes each call wait until the limit allows it.
//! It owns the caller's side of rate limiting: when a call may go, how it
//! waits, and in what order waiting calls go. It decides nothing for servers;
//! the algorithms it paces by come from `tollgate-core`.
//!
//! # Layout
//!
//! - [`waiter`]: in-process waiters, a ring of timestamps (exactly `N` per
//!   interval, as Shopify's `limiter` gem) and a GCRA waiter, with
//!   `until_ready().await`, `until_n_ready(n)`, blocking `wait()`, optional
//!   jitter, first-come-first-served order and cancellation safety.
//! - [`clock`]: the time waiters read and sleep on: tokio's clock, or a
//!   manual clock for exact tests without real sleeping.
//! - [`remote`] (feature `remote`, on by default): pacing through the
//!   tollgate service, so that many processes share one limit: a pacer that
//!   books slots with `POST /v1/reserve`, and the Databox pair
//!   (`/delay`, `/increment`).
//! - [`reactive`] (feature `reactive`, on by default): pacing by a
//!   provider's own answers, its `429`s, `Retry-After` and rate-limit
//!   headers, adapting a rate when it publishes nothing.
//!
//! # Example
//!
//! ```
//! use tollgate_client::waiter::RingWaiter;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // At most 5 calls in any second.
//! let waiter = RingWaiter::new("5/s".parse()?)?;
//! for _ in 0..5 {
//!     waiter.until_ready().await;
//!     // call the API
//! }
//! # Ok(())
//! # }
//! ```

pub mod clock;
#[cfg(feature = "reactive")]
pub mod reactive;
#[cfg(feature = "remote")]
pub mod remote;
pub mod waiter;
/// The guide in `docs/client.md`, whose examples run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/client.md")]
pub struct ClientGuide;
