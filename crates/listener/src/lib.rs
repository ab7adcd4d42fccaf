//! tollgate's accept loop, shared by the decision service's HTTP and gRPC
//! ports and by the gateway: what a client may hold, and for how long.
//!
//! [`serve`] accepts connections on a listener and serves each with hyper
//! (HTTP/1.1 and HTTP/2, or HTTP/2 only for gRPC) under
//! [`ConnectionSettings`]:
//!
//! - **a cap on open connections**: at the cap, a new connection is
//!   accepted and closed at once (counted by the
//!   [`ConnectionObserver`]), so that a flood of connections cannot take
//!   every file descriptor the process may have, and the connections
//!   already open go on being served;
//! - **a bounded request head** (HTTP/1): a connection that has waited
//!   the header read timeout for a request head — from its start, or from
//!   the end of its last answer — is closed, whether nothing came or a
//!   head a byte at a time; the clock runs on the connection's idle timer,
//!   not a timer per request (an HTTP/2 connection is not timed so once
//!   its first request shows the protocol);
//! - **a bounded body read**: every request body is a [`TimedBody`], which
//!   fails with [`BodyTimeout`] when the client sends nothing more for the
//!   body read timeout; the service decides what to answer (`408`);
//! - **an idle timeout**: a connection on which no byte has moved either
//!   way for the idle timeout is shut down gracefully (an idle HTTP/1
//!   connection closes, an HTTP/2 one gets a `GOAWAY`; a request in
//!   flight is finished first);
//! - **graceful shutdown**: when the shutdown signal completes, accepting
//!   stops and every connection finishes the requests it has started.
//!
//! # Layout
//!
//! - `settings`: [`ConnectionSettings`] and the defaults.
//! - `body`: [`TimedBody`] and [`BodyTimeout`].
//! - `activity`: the clocks of a connection: bytes moving (the idle
//!   timeout) and waiting for a head (the header read timeout).
//! - `observer`: [`ConnectionObserver`], where connections are counted.
//! - `serve`: [`serve`], the loop.

mod activity;
mod body;
mod observer;
mod serve;
mod service;
mod settings;

pub use body::{BodyTimeout, TimedBody};
pub use observer::{ConnectionObserver, Unobserved};
pub use serve::{serve, Protocols};
pub use settings::{
    default_max_connections, open_files_limit, ConnectionSettings, DEFAULT_BODY_READ_TIMEOUT,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};

/// The errors a service or a body may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
