//! [`Transport`]: what the sync mode needs of the shared store — one call
//! that records each touched key's usage at its instants and reads back the
//! key's state, for many keys at once.

use std::future::Future;

use tollgate_core::{Limit, StoreError};

use crate::table::Usage;

/// One key of one limit in a batch: its usage to record, in order, before
/// its state is read back.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    /// The limit (never one with a ban, never `concurrency`).
    pub limit: &'a Limit,
    /// The key.
    pub key: &'a [u8],
    /// The usage to record, each at its instant, even over the limit
    /// ([`Store::record`](tollgate_core::Store::record)); empty for a plain
    /// read.
    pub usage: &'a [Usage],
}

/// A key's value after its exchange: the version-1 bytes of its state in
/// the shared store (docs/redis-state.md), `None` when it holds none.
pub type Value = Option<Vec<u8>>;

/// The shared store as the sync mode talks to it.
pub trait Transport: Send + Sync + 'static {
    /// Records every exchange's usage and then reads its state, all in one
    /// batch (one pipeline per server on Redis, per master on a cluster).
    /// The outer error is an outage (nothing can be said of what was
    /// recorded: the caller sends it again, which may count it twice, never
    /// zero times); an inner one is that key's alone (its state unreadable,
    /// its engine unable to record it, or its node down: on a cluster a
    /// failed master fails its own keys), and the same holds of it: the
    /// caller keeps its usage and sends it again.
    fn exchange(
        &self,
        batch: &[Exchange<'_>],
    ) -> impl Future<Output = Result<Vec<Result<Value, StoreError>>, StoreError>> + Send;
}
