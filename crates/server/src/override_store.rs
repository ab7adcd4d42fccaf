//! [`OverrideBackend`]: where runtime overrides are kept beyond this
//! process, when they are shared (Redis). The route writes a change there
//! first, then puts it in the process's table; the backend's own sync
//! brings every other instance's table in step.
//!
//! On the memory store there is no backend: the table is the truth, and
//! the binary saves it beside the snapshot.

use std::future::Future;
use std::pin::Pin;

use tollgate_core::StoreError;

/// A future a backend returns.
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A shared home for runtime overrides.
pub trait OverrideBackend: Send + Sync + 'static {
    /// Sets `domain`'s override for the descriptor `key` (its entries,
    /// length-prefixed) to the limit `text`, already validated; whether it
    /// replaced an override there.
    fn put<'a>(&'a self, domain: &'a str, key: &'a [u8], text: &'a str) -> BackendFuture<'a, bool>;

    /// Removes `domain`'s override for the descriptor `key`; whether there
    /// was one.
    fn remove<'a>(&'a self, domain: &'a str, key: &'a [u8]) -> BackendFuture<'a, bool>;
}
