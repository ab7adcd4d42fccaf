//! The store's registry: one [`Limiter`] per distinct [`Limit`], and every
//! table in creation order (the order sweeps walk).
//!
//! The registry is small — a map entry and an `Arc` per limit — and is not
//! counted against the memory cap; each table's shard array and everything
//! its shards allocate are.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_core::Limit;

use crate::limiter::Limiter;
use crate::table::ErasedTable;

/// Limits to their limiters.
#[derive(Default)]
pub(crate) struct Registry {
    by_limit: HashMap<Limit, Limiter>,
    tables: Vec<Arc<dyn ErasedTable>>,
}

impl Registry {
    /// The limiter of `limit`, if registered.
    pub(crate) fn get(&self, limit: &Limit) -> Option<&Limiter> {
        self.by_limit.get(limit)
    }

    /// Registers `limiter` under its limit.
    pub(crate) fn insert(&mut self, limiter: Limiter) {
        self.tables.push(limiter.shared_table());
        self.by_limit.insert(*limiter.limit(), limiter);
    }

    /// Every table, in creation order.
    pub(crate) fn tables(&self) -> &[Arc<dyn ErasedTable>] {
        &self.tables
    }

    /// Every registered limiter, in no particular order.
    pub(crate) fn limiters(&self) -> Vec<Limiter> {
        self.by_limit.values().cloned().collect()
    }
}
