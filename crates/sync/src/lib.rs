//! tollgate's async sync mode for a shared store (issue 22): [`SyncStore`]
//! decides from a local copy of each key's state and shares usage through
//! the shared store in the background.
//!
//! - A key a request touches is read from the shared store on its first
//!   use (one round trip; [`Transport::exchange`] with no usage), so a new
//!   or restarted instance starts from the global state, not a full quota.
//! - Every decision after that is local: the core decides on the copy, and
//!   an admitted cost is counted in the copy and kept as pending usage.
//! - Every interval ([`SyncStore::sync`], run by [`SyncStore::spawn`]), one
//!   batch carries the pending usage of every key asked about in the last
//!   few batches ([`SyncConfig::refresh_idle`]; used or not) to the shared
//!   store, which records it at its instants (even over the limit: nothing
//!   admitted is lost), and brings back each key's global state, which
//!   replaces the copy, with the usage admitted here since the batch left
//!   counted on it again. So a copy in use is never older than one batch.
//!   A key nobody asked about for longer is not sent: its copy goes stale,
//!   is read again before its next use, and is dropped once its state is
//!   as good as fresh and it has nothing to send.
//! - While the shared store is unreachable, decisions stay local (marked
//!   degraded), unsent usage stays within a bound per key (coalesced at
//!   the later instant past it: held longer, never less) and goes with the
//!   first batch that gets through.
//!
//! Which limits are decided locally: those whose own mode
//! ([`Limit::sync`](tollgate_core::Limit::sync)) says `async`, and those
//! that say nothing when the process's ([`SyncConfig::mode`]) is `async`.
//! Limits in exact mode, limits whose usage cannot be merged (`concurrency`
//! leases) and limits with a ban (whose strikes are per refusal, not
//! usage) stay exact: a request that names one is decided by the shared
//! store, all of it, as are reservations, releases and resets. docs/semantics.md ("Async sync
//! mode") states the bound on over-admission per algorithm.
//!
//! # Layout
//!
//! - `transport`: [`Transport`], the one call the mode needs of the shared
//!   store, and its [`Exchange`]s.
//! - `table`: one limit's local copies and their unsent usage.
//! - `store`: [`SyncStore`], the core's `Store` over the copies.

mod store;
mod table;
mod transport;

pub use store::{SyncConfig, SyncStats, SyncStore};
pub use table::Usage;
pub use transport::{Exchange, Transport, Value};
