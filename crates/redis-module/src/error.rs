//! What a call can get wrong, as the error replies Redis sends back. Every
//! message starts with `tollgate:` (the store tells these from outages by
//! it) and never echoes argument bytes, which may be anything.

use std::fmt;

/// Why a call answers an error. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// The arguments do not have the command's shape.
    Usage(&'static str),
    /// An argument is not what its place needs (named).
    Bad(&'static str),
    /// A spec names no algorithm the module knows.
    UnknownAlgorithm,
    /// The operation is not one the module knows.
    UnknownOperation,
    /// A stored value starts with another format version's tag.
    NotVersion1,
    /// A stored value of version 1 that is not a valid state.
    BadState,
    /// A key holds something else than a hash.
    WrongType,
    /// A cost the limit can never admit.
    CostTooLarge {
        /// The cost asked for.
        cost: u64,
        /// The limit's capacity.
        capacity: u64,
    },
    /// A reservation of a limit without time slots (`concurrency`).
    ReservationUnsupported,
    /// `record` of a `concurrency` limit: leases cannot be merged.
    RecordUnsupported,
    /// `settle` of a `concurrency` limit: a lease is released, not settled.
    SettleUnsupported,
    /// A bug: the call panicked (caught before it reached Redis).
    Internal,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(usage) => write!(f, "ERR tollgate: wrong arguments: {usage}"),
            Error::Bad(what) => write!(f, "ERR tollgate: bad {what}"),
            Error::UnknownAlgorithm => write!(f, "ERR tollgate: unknown algorithm"),
            Error::UnknownOperation => write!(f, "ERR tollgate: unknown operation"),
            Error::NotVersion1 => write!(f, "ERR tollgate: a state is not format version 1"),
            Error::BadState => write!(f, "ERR tollgate: bad state (not a valid version 1 value)"),
            Error::WrongType => write!(f, "WRONGTYPE tollgate: a key holds something else than a hash"),
            Error::CostTooLarge { cost, capacity } => write!(
                f,
                "ERR tollgate: cost {cost} can never be admitted: the limit's capacity is {capacity}"
            ),
            Error::ReservationUnsupported => write!(f, "ERR tollgate: reservation_unsupported"),
            Error::RecordUnsupported => write!(f, "ERR tollgate: record_unsupported"),
            Error::SettleUnsupported => write!(f, "ERR tollgate: settle_unsupported"),
            Error::Internal => write!(f, "ERR tollgate: internal error (the call panicked)"),
        }
    }
}
