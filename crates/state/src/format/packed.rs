//! Packed rows (the script's packed_rows.lua): `b1 w1 … bk wk <body>`,
//! each row's column c written as `v − bc` in exactly `wc` digits. The
//! states of `concurrency` (leases) and `stepped_window` (step marks).

use tollgate_core::algorithm::codec::{put_len, put_u64, Reader};
use tollgate_core::algorithm::{Algorithm, Concurrency, SteppedWindow};

use super::{from_codec, to_codec, Format};
use crate::text::{digits, fields, parse_u128, parse_u64, push_padded, push_u128, push_u64};

/// The widest field the script writes or reads.
const MAX_WIDTH: u64 = 64;

/// The rows of a packed table whose header words (base, width per column)
/// are `head` and whose rows are `body`.
fn read_rows<const K: usize>(head: &[&[u8]], body: &[u8]) -> Option<Vec<[u64; K]>> {
    let mut base = [0u128; K];
    let mut width = [0usize; K];
    for c in 0..K {
        base[c] = parse_u128(head.get(2 * c)?)?;
        let w = parse_u64(head.get(2 * c + 1)?)?;
        if !(1..=MAX_WIDTH).contains(&w) {
            return None;
        }
        width[c] = usize::try_from(w).ok()?;
    }
    let row: usize = width.iter().sum();
    if !body.len().is_multiple_of(row) {
        return None;
    }
    body.chunks_exact(row)
        .map(|chunk| {
            let mut values = [0u64; K];
            let mut at = 0;
            for c in 0..K {
                let field = chunk.get(at..at + width[c])?;
                at += width[c];
                values[c] = u64::try_from(base[c].checked_add(parse_u128(field)?)?).ok()?;
            }
            Some(values)
        })
        .collect()
}

/// Appends the packed form of `rows`: each column's minimum as its base,
/// and a width for its range plus `room` (what the script's writes may add
/// before a rebuild).
fn write_rows<const K: usize>(out: &mut Vec<u8>, rows: &[[u64; K]], room: [u128; K]) {
    let mut width = [0usize; K];
    for c in 0..K {
        let lo = rows.iter().map(|r| r[c]).min().unwrap_or(0);
        let hi = rows.iter().map(|r| r[c]).max().unwrap_or(0);
        width[c] = digits(u128::from(hi - lo).saturating_add(room[c]));
        if c > 0 {
            out.push(b' ');
        }
        push_u64(out, lo);
        out.push(b' ');
        push_u64(out, width[c] as u64);
    }
    out.push(b' ');
    let bases: [u64; K] = std::array::from_fn(|c| rows.iter().map(|r| r[c]).min().unwrap_or(0));
    for row in rows {
        for c in 0..K {
            push_padded(out, u128::from(row[c] - bases[c]), width[c]);
        }
    }
}

/// The rows of codec bytes from `reader` on: a length, then `K` `u64`s per
/// row.
fn codec_rows<const K: usize>(reader: &mut Reader<'_>) -> Vec<[u64; K]> {
    let len = reader.len(usize::MAX).unwrap_or_default();
    let mut rows = Vec::with_capacity(len.min(1024));
    for _ in 0..len {
        let mut row = [0u64; K];
        for value in &mut row {
            *value = reader.u64().unwrap_or_default();
        }
        rows.push(row);
    }
    rows
}

fn put_rows<const K: usize>(out: &mut Vec<u8>, rows: &[[u64; K]]) {
    put_len(out, rows.len());
    for row in rows {
        for &value in row {
            put_u64(out, value);
        }
    }
}

/// `concurrency`: `held next_id <rows of id, expiry, cost>`.
#[derive(Debug, Clone, Copy)]
pub struct Leases {
    /// The algorithm.
    pub concurrency: Concurrency,
    /// Room per column: 4 × the lease TTL for ids and expiries, `N` for
    /// costs.
    pub room: [u128; 3],
}

impl Format for Leases {
    type Algorithm = Concurrency;

    fn algorithm(&self) -> &Concurrency {
        &self.concurrency
    }

    fn decode(&self, value: &[u8]) -> Option<<Concurrency as Algorithm>::State> {
        let (head, body) = fields(value, 8)?;
        let (held, next_id) = (parse_u64(head[0])?, parse_u64(head[1])?);
        let rows = read_rows::<3>(&head[2..], body)?;
        from_codec(&self.concurrency, |out| {
            put_u64(out, held);
            put_u64(out, next_id);
            put_rows(out, &rows);
            Some(())
        })
    }

    fn encode(&self, state: &<Concurrency as Algorithm>::State, out: &mut Vec<u8>) {
        let bytes = to_codec(&self.concurrency, state);
        let mut reader = Reader::new(&bytes);
        push_u64(out, reader.u64().unwrap_or_default());
        out.push(b' ');
        push_u64(out, reader.u64().unwrap_or_default());
        out.push(b' ');
        write_rows(out, &codec_rows::<3>(&mut reader), self.room);
    }

    /// A key without leases still remembers its next lease id, until the
    /// clock passes it: an id is never handed out twice.
    fn forgotten_at(&self, state: &<Concurrency as Algorithm>::State) -> u64 {
        let bytes = to_codec(&self.concurrency, state);
        let next_id = super::codec_u64(&bytes, 8);
        self.concurrency.expires_at(state).max(next_id)
    }
}

/// `stepped_window`: `dropped <rows of step index, running total>`.
#[derive(Debug, Clone, Copy)]
pub struct Steps {
    /// The algorithm.
    pub window: SteppedWindow,
    /// Room per column: 4 × (P/step + 2) steps, 10 × `N` totals.
    pub room: [u128; 2],
}

impl Format for Steps {
    type Algorithm = SteppedWindow;

    fn algorithm(&self) -> &SteppedWindow {
        &self.window
    }

    fn decode(&self, value: &[u8]) -> Option<<SteppedWindow as Algorithm>::State> {
        let (head, body) = fields(value, 5)?;
        let dropped = parse_u64(head[0])?;
        let rows = read_rows::<2>(&head[1..], body)?;
        from_codec(&self.window, |out| {
            put_u64(out, dropped);
            put_rows(out, &rows);
            Some(())
        })
    }

    fn encode(&self, state: &<SteppedWindow as Algorithm>::State, out: &mut Vec<u8>) {
        let bytes = to_codec(&self.window, state);
        let mut reader = Reader::new(&bytes);
        push_u128(out, u128::from(reader.u64().unwrap_or_default()));
        out.push(b' ');
        write_rows(out, &codec_rows::<2>(&mut reader), self.room);
    }
}
