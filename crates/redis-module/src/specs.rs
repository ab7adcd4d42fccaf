//! The specs of recent calls, parsed, by their bytes: a limit's spec
//! repeats on every call of that limit, and parsing it again (its words,
//! its numbers, the core's checks, the divisions by the limit's fixed
//! divisors that the core prepares when a limit is built) cost 1,100
//! instructions of a fixed window's decision inside Redis and 1,500 of a
//! gcra's, 7–9 % of the whole (scripts/profile-redis). Errors are not kept:
//! a malformed spec is parsed, and refused, on every call.

use std::cell::RefCell;

use hashbrown::HashMap;
use rustc_hash::FxBuildHasher;

use crate::error::Error;
use crate::spec::{self, Spec};

/// The most specs kept; past it the table starts afresh (a deployment has
/// a few dozen limits, each one spec).
const CAPACITY: usize = 1024;

/// The longest spec kept (the store's are a few dozen bytes).
const LONGEST: usize = 256;

thread_local! {
    /// Commands run one at a time on Redis's main thread: one table.
    static TABLE: RefCell<HashMap<Box<[u8]>, Spec, FxBuildHasher>> =
        const { RefCell::new(HashMap::with_hasher(FxBuildHasher)) };
}

/// The spec of `bytes`, parsed once and then found again.
pub(crate) fn lookup(bytes: &[u8]) -> Result<Spec, Error> {
    TABLE.with_borrow_mut(|table| {
        if let Some(spec) = table.get(bytes) {
            return Ok(*spec);
        }
        let spec = spec::parse(bytes)?;
        if bytes.len() <= LONGEST {
            if table.len() >= CAPACITY {
                table.clear();
            }
            table.insert(bytes.into(), spec);
        }
        Ok(spec)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tollgate_state::AnyFormat;

    #[test]
    fn a_spec_is_parsed_once_and_found_again_and_errors_are_not_kept() {
        let a = lookup(b"fixed_window 10 1000000000").unwrap();
        assert!(matches!(a.format, AnyFormat::Fixed(_)) && a.ban.is_none());
        let b = lookup(b"ban 3 1000000000 5000000000 gcra 1 1000000 10").unwrap();
        assert!(matches!(b.format, AnyFormat::Gcra(_)) && b.ban.is_some());
        let kept = TABLE.with_borrow(|t| t.len());
        assert!(matches!(
            lookup(b"fixed_window 10 1000000000").unwrap().format,
            AnyFormat::Fixed(_)
        ));
        assert_eq!(
            lookup(b"gcra 2 4 10").err(),
            Some(Error::Bad("spec (n and p must be coprime)"))
        );
        assert_eq!(lookup(b"nope 1 1").err(), Some(Error::UnknownAlgorithm));
        assert_eq!(
            TABLE.with_borrow(|t| t.len()),
            kept,
            "found, not added; errors not kept"
        );
    }

    #[test]
    fn a_full_table_starts_afresh() {
        for i in 0..CAPACITY + 10 {
            let spec = format!("fixed_window {} 1000000000", i + 1);
            lookup(spec.as_bytes()).unwrap();
        }
        assert!(TABLE.with_borrow(|t| t.len()) <= CAPACITY);
    }
}
