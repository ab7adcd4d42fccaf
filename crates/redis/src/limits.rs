//! What the engines are told about a limit, worked out once per distinct
//! limit and kept: its hash field, its spec, its lean words and its
//! validated algorithm ([`Prepared`]). A decision then formats nothing
//! about its limits; it only looks them up ([`Limits`]).
//!
//! Inline limits come with requests, so the table is bounded: when it holds
//! [`CAPACITY`] limits it is emptied and fills again with the limits in use
//! (a flood of distinct limits costs their preparation, never memory).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tollgate_core::limit::AnyAlgorithm;
use tollgate_core::{AlgorithmName, Limit, StoreError};

use crate::cells::{self, Lean};

/// Distinct limits kept at most.
const CAPACITY: usize = 4_096;

/// A limit as the store's calls use it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// The hash field: the limit's identity (see [`cells::field`]).
    pub(crate) field: Box<str>,
    /// The limit's parameters as the engines parse them (see
    /// [`cells::spec`]).
    pub(crate) spec: Box<str>,
    /// The validated algorithm, for costs.
    pub(crate) algorithm: AnyAlgorithm,
    /// The limit's algorithm, for the errors the engines report.
    pub(crate) name: AlgorithmName,
    /// The words the lean script takes for it, when it can decide it.
    pub(crate) lean: Option<Lean>,
    /// Whether the limit has a ban (whose strikes a cached answer would
    /// not count).
    pub(crate) banned: bool,
    /// Whether the algorithm books time slots.
    pub(crate) reservable: bool,
}

impl Prepared {
    /// `limit` prepared, or the error that building it gives.
    pub(crate) fn new(limit: &Limit) -> Result<Prepared, StoreError> {
        let algorithm = limit.build()?;
        Ok(Prepared {
            field: cells::field(limit).into_boxed_str(),
            spec: cells::spec(limit)?.into_boxed_str(),
            algorithm,
            name: limit.algorithm,
            lean: cells::lean(limit),
            banned: limit.ban.is_some(),
            reservable: algorithm.takes_reservations(),
        })
    }
}

/// The limits prepared so far.
#[derive(Default)]
pub(crate) struct Limits {
    table: RwLock<HashMap<Limit, Arc<Prepared>>>,
}

impl Limits {
    /// `limit` prepared: from the table, or prepared now and kept.
    pub(crate) fn get(&self, limit: &Limit) -> Result<Arc<Prepared>, StoreError> {
        if let Some(prepared) = self.table.read().get(limit) {
            return Ok(Arc::clone(prepared));
        }
        let prepared = Arc::new(Prepared::new(limit)?);
        let mut table = self.table.write();
        if table.len() >= CAPACITY {
            table.clear();
        }
        table.insert(*limit, Arc::clone(&prepared));
        Ok(prepared)
    }

    /// How many limits are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{LimitError, Rate};

    #[test]
    fn a_limit_is_prepared_once_and_the_table_stays_bounded() {
        let limits = Limits::default();
        let gcra = Limit::new(AlgorithmName::Gcra, Rate::per_second(10).unwrap());
        let first = limits.get(&gcra).unwrap();
        assert!(Arc::ptr_eq(&first, &limits.get(&gcra).unwrap()));
        assert_eq!(*first, Prepared::new(&gcra).unwrap());
        assert_eq!(&*first.spec, "gcra 1 100000000 10");
        assert!(first.reservable && !first.banned && first.lean.is_some());
        let lease = Limit::new(AlgorithmName::Concurrency, Rate::per_second(10).unwrap());
        assert!(!limits.get(&lease).unwrap().reservable);
        // A limit that does not build is an error every time, never kept.
        let bad =
            Limit::new(AlgorithmName::FixedWindow, Rate::per_second(10).unwrap()).with_burst(3);
        for _ in 0..2 {
            assert!(matches!(
                limits.get(&bad),
                Err(StoreError::Limit(LimitError::Option {
                    option: "burst",
                    ..
                }))
            ));
        }
        assert_eq!(limits.len(), 2);
        for n in 1..=CAPACITY as u64 + 1 {
            let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(n).unwrap());
            assert_eq!(&*limits.get(&limit).unwrap().field, cells::field(&limit));
            assert!(limits.len() <= CAPACITY);
        }
    }
}
