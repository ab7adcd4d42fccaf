//! [`StateCodec`]: a compact, versioned byte form of every algorithm's
//! per-key state, so a store can save its states (a snapshot) and load them
//! back in another process.
//!
//! The form is little-endian integers, in each state's field order; lists
//! are length-prefixed. Decoding never panics: it rejects truncated input,
//! and states whose invariants do not hold (out-of-order marks, counts
//! beyond what the algorithm can hold), so a damaged snapshot cannot put an
//! algorithm in a state it could never reach by itself.

use super::Algorithm;

/// An algorithm whose states can be written and read back.
pub trait StateCodec: Algorithm {
    /// Appends `state`'s bytes to `out`.
    fn encode_state(&self, state: &Self::State, out: &mut Vec<u8>);
    /// Reads a state written by [`encode_state`](Self::encode_state) from
    /// the front of `input`; `None` (and `input` in an unspecified place)
    /// when the bytes are not a valid state for this algorithm.
    fn decode_state(&self, input: &mut Reader<'_>) -> Option<Self::State>;
}

/// Reads little-endian integers from the front of a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// What is left unread.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    /// The next `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// The next `u128`.
    pub fn u128(&mut self) -> Option<u128> {
        Some(u128::from_le_bytes(self.take(16)?.try_into().ok()?))
    }

    /// The next `i128`.
    pub fn i128(&mut self) -> Option<i128> {
        Some(i128::from_le_bytes(self.take(16)?.try_into().ok()?))
    }

    /// A length written by [`put_len`], at most `max`.
    pub fn len(&mut self, max: usize) -> Option<usize> {
        usize::try_from(self.u64()?).ok().filter(|&n| n <= max)
    }
}

/// Appends a `u64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a `u128`.
pub fn put_u128(out: &mut Vec<u8>, v: u128) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends an `i128`.
pub fn put_i128(out: &mut Vec<u8>, v: i128) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a length.
pub fn put_len(out: &mut Vec<u8>, n: usize) {
    put_u64(out, n as u64);
}

/// The most list entries a decoded state may declare. Decoders never
/// allocate by a declared length: they read entries one at a time, so a
/// damaged length fails at the end of the input instead of allocating.
pub const MAX_ENTRIES: usize = u32::MAX as usize;
