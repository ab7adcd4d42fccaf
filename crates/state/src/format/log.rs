//! The sliding log's value (the script's sliding_log.lua): `<dropped>|`
//! when empty, otherwise `<dropped> <newest at> <newest total> <wa><wt>|`
//! and fixed-width marks, each mark's instant and running total as their
//! residues modulo 10^(7·wa) and 10^(7·wt), in base-10^7 limbs of 3
//! big-endian bytes, most significant first.

use tollgate_core::algorithm::codec::{put_len, put_u64, Reader};
use tollgate_core::algorithm::{Algorithm, SlidingWindowLog};

use super::{from_codec, to_codec, Format};
use crate::text::{parse_u64, push_u64};

/// One base-10^7 limb.
const LIMB: u128 = 10_000_000;

/// `sliding_window_log` with its widths.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    /// The algorithm.
    pub log: SlidingWindowLog,
    /// Limbs of a mark's instant: the fewest (up to 3) with 10^(7·wa) ≥ P.
    pub wa: usize,
    /// Limbs of a mark's total: the fewest (up to 3) with 10^(7·wt) > N.
    pub wt: usize,
}

impl Log {
    /// The log of `n` per `p` ns, with the script's widths.
    pub fn new(log: SlidingWindowLog, n: u64, p: u64) -> Log {
        let limbs = |fits: &dyn Fn(u128) -> bool| (1..=2).find(|&k| fits(modulus(k))).unwrap_or(3);
        Log {
            log,
            wa: limbs(&|m| m >= u128::from(p)),
            wt: limbs(&|m| m > u128::from(n)),
        }
    }
}

/// 10^(7k).
fn modulus(k: usize) -> u128 {
    (0..k).fold(1, |m, _| m * LIMB)
}

/// The residue in `k` limbs (3k bytes) at the front of `bytes`.
fn residue(bytes: &[u8], k: usize) -> Option<u128> {
    let mut value = 0u128;
    for limb in bytes.get(..3 * k)?.chunks_exact(3) {
        let limb = u128::from(limb[0]) << 16 | u128::from(limb[1]) << 8 | u128::from(limb[2]);
        if limb >= LIMB {
            return None;
        }
        value = value * LIMB + limb;
    }
    Some(value)
}

/// Appends the `k` low limbs of `v`, most significant first.
fn push_residue(out: &mut Vec<u8>, v: u64, k: usize) {
    let v = u128::from(v);
    for i in (0..k).rev() {
        let limb = (v / modulus(i)) % LIMB;
        out.extend_from_slice(&[(limb >> 16) as u8, (limb >> 8) as u8, limb as u8]);
    }
}

/// The value at most `newest` and less than the modulus below it whose
/// residue is `r`.
fn from_residue(newest: u64, r: u128, k: usize) -> u64 {
    let m = modulus(k);
    let top = u128::from(newest) % m;
    let distance = if r <= top { top - r } else { top + m - r };
    u64::try_from(u128::from(newest).saturating_sub(distance)).unwrap_or_default()
}

impl Format for Log {
    type Algorithm = SlidingWindowLog;

    fn algorithm(&self) -> &SlidingWindowLog {
        &self.log
    }

    fn decode(&self, value: &[u8]) -> Option<<SlidingWindowLog as Algorithm>::State> {
        let bar = value.iter().position(|&b| b == b'|')?;
        let (header, marks) = (&value[..bar], &value[bar + 1..]);
        let words: Vec<&[u8]> = header.split(|&b| b == b' ').collect();
        let rows = match words.as_slice() {
            [dropped] if marks.is_empty() => {
                return from_codec(&self.log, |out| {
                    put_u64(out, parse_u64(dropped)?);
                    put_len(out, 0);
                    Some(())
                });
            }
            [dropped, at, total, &[wa, wt]] => {
                let (wa, wt) = (
                    usize::from(wa.wrapping_sub(b'0')),
                    usize::from(wt.wrapping_sub(b'0')),
                );
                if !(1..=3).contains(&wa) || !(1..=3).contains(&wt) {
                    return None;
                }
                let size = 3 * (wa + wt);
                if marks.is_empty() || !marks.len().is_multiple_of(size) {
                    return None;
                }
                let (at, total) = (parse_u64(at)?, parse_u64(total)?);
                let rows = marks
                    .chunks_exact(size)
                    .map(|mark| {
                        let a = residue(mark, wa)?;
                        let t = residue(&mark[3 * wa..], wt)?;
                        Some((from_residue(at, a, wa), from_residue(total, t, wt)))
                    })
                    .collect::<Option<Vec<_>>>()?;
                if rows.last() != Some(&(at, total)) {
                    return None;
                }
                (parse_u64(dropped)?, rows)
            }
            _ => return None,
        };
        from_codec(&self.log, |out| {
            put_u64(out, rows.0);
            put_len(out, rows.1.len());
            for &(at, total) in &rows.1 {
                put_u64(out, at);
                put_u64(out, total);
            }
            Some(())
        })
    }

    fn encode(&self, state: &<SlidingWindowLog as Algorithm>::State, out: &mut Vec<u8>) {
        let bytes = to_codec(&self.log, state);
        let mut reader = Reader::new(&bytes);
        let dropped = reader.u64().unwrap_or_default();
        let len = reader.len(usize::MAX).unwrap_or_default();
        let mut marks = Vec::with_capacity(len.min(1024));
        for _ in 0..len {
            let at = reader.u64().unwrap_or_default();
            let total = reader.u64().unwrap_or_default();
            marks.push((at, total));
        }
        push_u64(out, dropped);
        let (Some(&(oldest, _)), Some(&(at, total))) = (marks.first(), marks.last()) else {
            out.push(b'|');
            return;
        };
        let (mut wa, mut wt) = (self.wa, self.wt);
        if u128::from(at.saturating_sub(oldest)) >= modulus(wa)
            || u128::from(total.saturating_sub(dropped)) >= modulus(wt)
        {
            (wa, wt) = (3, 3);
        }
        out.push(b' ');
        push_u64(out, at);
        out.push(b' ');
        push_u64(out, total);
        out.extend_from_slice(&[b' ', b'0' + wa as u8, b'0' + wt as u8, b'|']);
        for (at, total) in marks {
            push_residue(out, at, wa);
            push_residue(out, total, wt);
        }
    }
}
