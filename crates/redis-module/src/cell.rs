//! [`Cell`]: one limit on one key during a call — its algorithm and the
//! state read from Redis — behind one object-safe interface, so that a
//! call over several limits of different algorithms decides them in turn;
//! [`AnyCell`] holds any of them in place (no allocation per limit).

use std::ops::{Deref, DerefMut};

use tollgate_core::algorithm::{Algorithm, Narrow, Settled, Slot, Wide};
use tollgate_core::Decision;

use tollgate_state::{
    CounterFormat, FixedFormat, Format, GcraFormat, LeakyFormat, Leases, Log, Steps, TokenFormat,
};

/// A limit and its state, decided by the core.
pub(crate) trait Cell {
    /// The largest cost the limit admits.
    fn capacity(&self) -> u64;
    /// [`Algorithm::evaluate`].
    fn evaluate(&self, now: u64, cost: u64) -> Decision;
    /// [`Algorithm::commit`].
    fn commit(&mut self, now: u64, cost: u64) -> Option<u64>;
    /// [`Algorithm::next_available`].
    fn next_available(&self, now: u64, cost: u64) -> u64;
    /// [`Algorithm::slot`].
    fn slot(&self, now: u64, cost: u64) -> Option<Slot>;
    /// [`Algorithm::book`].
    fn book(&mut self, now: u64, slot: Slot, cost: u64);
    /// [`Format::record`].
    fn record(&mut self, at: u64, cost: u64) -> Option<u64>;
    /// [`Algorithm::settle`].
    fn settle(&mut self, admitted_at: u64, now: u64, estimate: u64, actual: u64)
        -> Option<Settled>;
    /// [`Algorithm::release`].
    fn release(&mut self, lease: u64) -> bool;
    /// [`Format::forgotten_at`].
    fn forgotten_at(&self) -> u64;
    /// Appends the state's version-1 value.
    fn encode(&self, out: &mut Vec<u8>);
}

/// A [`Format`] with its state.
pub(crate) struct Held<F: Format> {
    pub(crate) format: F,
    pub(crate) state: <F::Algorithm as Algorithm>::State,
}

impl<F: Format> Cell for Held<F> {
    fn capacity(&self) -> u64 {
        self.format.algorithm().capacity()
    }

    fn evaluate(&self, now: u64, cost: u64) -> Decision {
        self.format.algorithm().evaluate(&self.state, now, cost)
    }

    fn commit(&mut self, now: u64, cost: u64) -> Option<u64> {
        self.format.algorithm().commit(&mut self.state, now, cost)
    }

    fn next_available(&self, now: u64, cost: u64) -> u64 {
        self.format
            .algorithm()
            .next_available(&self.state, now, cost)
    }

    fn slot(&self, now: u64, cost: u64) -> Option<Slot> {
        self.format.algorithm().slot(&self.state, now, cost)
    }

    fn book(&mut self, now: u64, slot: Slot, cost: u64) {
        self.format
            .algorithm()
            .book(&mut self.state, now, slot, cost);
    }

    fn record(&mut self, at: u64, cost: u64) -> Option<u64> {
        self.format.record(&mut self.state, at, cost)
    }

    fn settle(
        &mut self,
        admitted_at: u64,
        now: u64,
        estimate: u64,
        actual: u64,
    ) -> Option<Settled> {
        self.format
            .algorithm()
            .settle(&mut self.state, admitted_at, now, estimate, actual)
    }

    fn release(&mut self, lease: u64) -> bool {
        self.format.algorithm().release(&mut self.state, lease)
    }

    fn forgotten_at(&self) -> u64 {
        self.format.forgotten_at(&self.state)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        self.format.encode(&self.state, out);
    }
}

/// A cell of any algorithm, held by value.
pub(crate) enum AnyCell {
    Gcra(Held<GcraFormat>),
    TokenNarrow(Held<TokenFormat<Narrow>>),
    TokenWide(Held<TokenFormat<Wide>>),
    Leaky(Held<LeakyFormat>),
    Fixed(Held<FixedFormat>),
    Counter(Held<CounterFormat>),
    Log(Held<Log>),
    Steps(Held<Steps>),
    Leases(Held<Leases>),
}

/// `$body` with `$cell` bound to the held cell, whatever its algorithm.
macro_rules! each {
    ($any:expr, $cell:ident => $body:expr) => {
        match $any {
            AnyCell::Gcra($cell) => $body,
            AnyCell::TokenNarrow($cell) => $body,
            AnyCell::TokenWide($cell) => $body,
            AnyCell::Leaky($cell) => $body,
            AnyCell::Fixed($cell) => $body,
            AnyCell::Counter($cell) => $body,
            AnyCell::Log($cell) => $body,
            AnyCell::Steps($cell) => $body,
            AnyCell::Leases($cell) => $body,
        }
    };
}

impl Deref for AnyCell {
    type Target = dyn Cell;

    fn deref(&self) -> &(dyn Cell + 'static) {
        each!(self, cell => cell)
    }
}

impl DerefMut for AnyCell {
    fn deref_mut(&mut self) -> &mut (dyn Cell + 'static) {
        each!(self, cell => cell)
    }
}
