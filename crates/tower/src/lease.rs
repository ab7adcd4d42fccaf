//! `concurrency` leases held by admitted requests, and giving them back.
//!
//! An admitted request holds its leases until its response body ends, the
//! inner service fails, or the response (or the future before it) is
//! dropped — a client that disconnects mid-request drops them. Normal ends
//! release in line, so the lease is free when the client has read the last
//! byte; a drop cannot wait, so it spawns the release on the current tokio
//! runtime (outside one, the lease expires after its `lease_ttl`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate_core::Limit;

/// A boxed future that releases leases.
pub(crate) type Releasing = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One lease: the limit and store key it was granted under, and its id.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub(crate) limit: Limit,
    pub(crate) key: Vec<u8>,
    pub(crate) id: u64,
}

/// Something that can release leases through its store.
pub(crate) trait Releaser: Send + Sync + 'static {
    /// Releases every lease (failures are reported, not returned: the
    /// lease then expires).
    fn release(self: Arc<Self>, leases: Vec<Lease>) -> Releasing;
}

/// The leases of one request, released exactly once.
pub(crate) struct Leases {
    held: Vec<Lease>,
    releaser: Arc<dyn Releaser>,
}

impl Leases {
    /// `held` leases, or `None` when there are none.
    pub(crate) fn new(held: Vec<Lease>, releaser: Arc<dyn Releaser>) -> Option<Leases> {
        (!held.is_empty()).then_some(Leases { held, releaser })
    }

    /// Releases them now.
    pub(crate) fn release(mut self) -> Releasing {
        let held = std::mem::take(&mut self.held);
        Arc::clone(&self.releaser).release(held)
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(Arc::clone(&self.releaser).release(held));
        }
    }
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases").field("held", &self.held).finish()
    }
}
