//! The shared state format, version 1 (docs/redis-state.md): each
//! algorithm's hash value as the Lua scripts write it, read into the core's
//! state and written back from it.
//!
//! A [`Format`] is a limit as an engine runs it: the core algorithm and
//! whatever its value's encoding needs beyond it (a bucket's capacity in
//! units, the room of packed rows, a log's widths). Values are read through
//! the core's [`StateCodec`], whose decoders check every invariant, so no
//! bytes in Redis can put an algorithm in a state it could not reach.
//! This module owns the byte format; the decisions are the core's.

mod log;
mod packed;

use std::cell::RefCell;

use tollgate_core::algorithm::codec::{put_i128, put_u128, put_u64, Reader};
use tollgate_core::algorithm::{
    Algorithm, FixedWindow, Gcra, GcraState, LeakyBucket, SlidingWindowCounter, StateCodec,
    TokenBucket, TokenStorage,
};

pub use log::Log;
pub use packed::{Leases, Steps};

use crate::text::{exactly, parse_u128, parse_u64, push_u128, push_u64};

/// A limit with its state's version-1 encoding.
pub trait Format {
    /// The core algorithm that decides.
    type Algorithm: Algorithm;

    /// The algorithm.
    fn algorithm(&self) -> &Self::Algorithm;

    /// The state a version-1 value holds; `None` when the bytes are not
    /// one (the caller has checked the version).
    fn decode(&self, value: &[u8]) -> Option<<Self::Algorithm as Algorithm>::State>;

    /// Appends the version-1 value of `state`.
    fn encode(&self, state: &<Self::Algorithm as Algorithm>::State, out: &mut Vec<u8>);

    /// The instant from which the state may be forgotten (the key's TTL
    /// and deletion rule).
    fn forgotten_at(&self, state: &<Self::Algorithm as Algorithm>::State) -> u64 {
        self.algorithm().expires_at(state)
    }

    /// Counts `cost` at `at` whatever the limit says and returns the usage
    /// held, as the core records
    /// ([`Algorithm::record`](tollgate_core::Algorithm::record)); `None`
    /// for `concurrency`, whose leases cannot be merged.
    fn record(
        &self,
        state: &mut <Self::Algorithm as Algorithm>::State,
        at: u64,
        cost: u64,
    ) -> Option<u64> {
        self.algorithm().record(state, at, cost)
    }
}

thread_local! {
    /// Codec bytes on their way between a value and a state, reused by
    /// every call (commands run one at a time; each allocation goes
    /// through Redis's allocator).
    static CODEC: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The state whose codec bytes `write` produces, checked by the core.
fn from_codec<A: StateCodec>(
    algorithm: &A,
    write: impl FnOnce(&mut Vec<u8>) -> Option<()>,
) -> Option<A::State> {
    CODEC.with_borrow_mut(|bytes| {
        bytes.clear();
        let state = write(bytes).and_then(|()| {
            let mut reader = Reader::new(bytes);
            let state = algorithm.decode_state(&mut reader)?;
            reader.rest().is_empty().then_some(state)
        });
        // A long log's or lease list's bytes are not kept.
        if bytes.capacity() > 1 << 16 {
            *bytes = Vec::new();
        }
        state
    })
}

/// The core's codec bytes of `state`, in a vector of their own (the
/// variable-size states: logs, lease lists, steps).
fn to_codec<A: StateCodec>(algorithm: &A, state: &A::State) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(48);
    algorithm.encode_state(state, &mut bytes);
    bytes
}

/// `read` on the core's codec bytes of a fixed-size `state`.
fn with_codec<A: StateCodec, T>(
    algorithm: &A,
    state: &A::State,
    read: impl FnOnce(&[u8]) -> T,
) -> T {
    CODEC.with_borrow_mut(|bytes| {
        bytes.clear();
        algorithm.encode_state(state, bytes);
        read(bytes)
    })
}

/// Reads the `u64`s of codec bytes from `at` on.
fn codec_u64(bytes: &[u8], at: usize) -> u64 {
    let mut reader = Reader::new(bytes.get(at..).unwrap_or_default());
    reader.u64().unwrap_or_default()
}

/// `gcra`: `tat`.
#[derive(Debug, Clone, Copy)]
pub struct GcraFormat(pub Gcra);

impl Format for GcraFormat {
    type Algorithm = Gcra;

    fn algorithm(&self) -> &Gcra {
        &self.0
    }

    fn decode(&self, value: &[u8]) -> Option<GcraState> {
        let [tat] = exactly::<1>(value)?;
        Some(GcraState::from_tat(parse_u128(tat)?))
    }

    fn encode(&self, state: &GcraState, out: &mut Vec<u8>) {
        push_u128(out, state.tat());
    }
}

/// `token_bucket`: `missing last`, where missing is the capacity in units
/// less the signed token count.
#[derive(Debug, Clone, Copy)]
pub struct TokenFormat<S: TokenStorage> {
    /// The algorithm.
    pub bucket: TokenBucket<S>,
    /// The capacity in units, `burst × p`.
    pub capacity: u128,
}

impl<S: TokenStorage> Format for TokenFormat<S> {
    type Algorithm = TokenBucket<S>;

    fn algorithm(&self) -> &TokenBucket<S> {
        &self.bucket
    }

    fn decode(&self, value: &[u8]) -> Option<<TokenBucket<S> as Algorithm>::State> {
        let [missing, last] = exactly::<2>(value)?;
        let missing = i128::try_from(parse_u128(missing)?).ok()?;
        let tokens = i128::try_from(self.capacity).ok()?.checked_sub(missing)?;
        let last = parse_u64(last)?;
        from_codec(&self.bucket, |out| {
            put_i128(out, tokens);
            put_u64(out, last);
            Some(())
        })
    }

    fn encode(&self, state: &<TokenBucket<S> as Algorithm>::State, out: &mut Vec<u8>) {
        let (tokens, last) = with_codec(&self.bucket, state, |bytes| {
            let mut reader = Reader::new(bytes);
            (
                reader.i128().unwrap_or_default(),
                reader.u64().unwrap_or_default(),
            )
        });
        // A count never exceeds the capacity, so `missing` is never negative.
        let missing = i128::try_from(self.capacity)
            .unwrap_or(i128::MAX)
            .saturating_sub(tokens);
        push_u128(out, u128::try_from(missing).unwrap_or_default());
        out.push(b' ');
        push_u64(out, last);
    }
}

/// `leaky_bucket`: `queue last`.
#[derive(Debug, Clone, Copy)]
pub struct LeakyFormat(pub LeakyBucket);

impl Format for LeakyFormat {
    type Algorithm = LeakyBucket;

    fn algorithm(&self) -> &LeakyBucket {
        &self.0
    }

    fn decode(&self, value: &[u8]) -> Option<<LeakyBucket as Algorithm>::State> {
        let [queue, last] = exactly::<2>(value)?;
        let (queue, last) = (parse_u128(queue)?, parse_u64(last)?);
        from_codec(&self.0, |out| {
            put_u128(out, queue);
            put_u64(out, last);
            Some(())
        })
    }

    fn encode(&self, state: &<LeakyBucket as Algorithm>::State, out: &mut Vec<u8>) {
        with_codec(&self.0, state, |bytes| {
            let mut reader = Reader::new(bytes);
            push_u128(out, reader.u128().unwrap_or_default());
            out.push(b' ');
            push_u64(out, reader.u64().unwrap_or_default());
        });
    }
}

/// Reads `N` numbers into codec bytes, and writes them back: the windows'
/// states are plain lists of `u64`s in the core's field order.
fn decode_u64s<A: StateCodec, const N: usize>(algorithm: &A, value: &[u8]) -> Option<A::State> {
    let words = exactly::<N>(value)?;
    from_codec(algorithm, |out| {
        for word in words {
            put_u64(out, parse_u64(word)?);
        }
        Some(())
    })
}

fn encode_u64s<A: StateCodec>(algorithm: &A, state: &A::State, count: usize, out: &mut Vec<u8>) {
    with_codec(algorithm, state, |bytes| {
        for i in 0..count {
            if i > 0 {
                out.push(b' ');
            }
            push_u64(out, codec_u64(bytes, 8 * i));
        }
    });
}

/// `fixed_window`: `window count`.
#[derive(Debug, Clone, Copy)]
pub struct FixedFormat(pub FixedWindow);

impl Format for FixedFormat {
    type Algorithm = FixedWindow;

    fn algorithm(&self) -> &FixedWindow {
        &self.0
    }

    fn decode(&self, value: &[u8]) -> Option<<FixedWindow as Algorithm>::State> {
        decode_u64s::<_, 2>(&self.0, value)
    }

    fn encode(&self, state: &<FixedWindow as Algorithm>::State, out: &mut Vec<u8>) {
        encode_u64s(&self.0, state, 2, out);
    }
}

/// `sliding_window_counter`: `window prev curr booked_until`.
#[derive(Debug, Clone, Copy)]
pub struct CounterFormat(pub SlidingWindowCounter);

impl Format for CounterFormat {
    type Algorithm = SlidingWindowCounter;

    fn algorithm(&self) -> &SlidingWindowCounter {
        &self.0
    }

    fn decode(&self, value: &[u8]) -> Option<<SlidingWindowCounter as Algorithm>::State> {
        decode_u64s::<_, 4>(&self.0, value)
    }

    fn encode(&self, state: &<SlidingWindowCounter as Algorithm>::State, out: &mut Vec<u8>) {
        encode_u64s(&self.0, state, 4, out);
    }
}

#[cfg(test)]
mod tests;
