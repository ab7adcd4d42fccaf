//! A limit's ban as the store sends it (`ban <after> <within ns> <for ns>`
//! before the algorithm's spec words) and its state's version-1 value
//! (`<first strike> <strikes> <until>`, in the hash field `ban <field>`,
//! docs/redis-state.md); the ban's rules are the core's
//! ([`tollgate_core::ban::Ban`]).

use std::time::Duration;

use tollgate_core::ban::{Ban, BanState};

use crate::error::Error;
use tollgate_state::text::{exactly, fields, parse_u64, push_u64};

/// A limit's ban and its state during a call.
pub(crate) struct Banned {
    pub(crate) ban: Ban,
    pub(crate) state: BanState,
}

/// The ban at the front of `spec`, if any, and the algorithm's spec after
/// it.
pub(crate) fn split(spec: &[u8]) -> Result<(Option<Ban>, &[u8]), Error> {
    let Some(rest) = spec.strip_prefix(b"ban ") else {
        return Ok((None, spec));
    };
    let (head, algorithm) = fields(rest, 3).ok_or(Error::Bad("ban"))?;
    let number = |i: usize, what| {
        head.get(i)
            .and_then(|w| parse_u64(w))
            .ok_or(Error::Bad(what))
    };
    let (after, within, duration) = (
        number(0, "ban after")?,
        number(1, "ban within")?,
        number(2, "ban for")?,
    );
    let ban = Ban::new(
        after,
        Duration::from_nanos(within),
        Duration::from_nanos(duration),
    )
    .map_err(|_| Error::Bad("ban"))?;
    if algorithm.is_empty() {
        return Err(Error::Bad("spec"));
    }
    Ok((Some(ban), algorithm))
}

/// The ban state stored as `value` (`None`: none yet).
pub(crate) fn decode(ban: &Ban, value: Option<&[u8]>) -> Result<BanState, Error> {
    let Some(value) = value else {
        return Ok(BanState::default());
    };
    if !value.first().is_some_and(u8::is_ascii_digit) {
        return Err(Error::NotVersion1);
    }
    let [first_strike, strikes, until] = exactly::<3>(value).ok_or(Error::BadState)?;
    let number = |w: &[u8]| parse_u64(w).ok_or(Error::BadState);
    let state = BanState {
        first_strike: number(first_strike)?,
        strikes: number(strikes)?,
        until: number(until)?,
    };
    if !ban.holds(&state) {
        return Err(Error::BadState);
    }
    Ok(state)
}

/// Appends the state's version-1 value.
pub(crate) fn encode(state: &BanState, out: &mut Vec<u8>) {
    push_u64(out, state.first_strike);
    out.push(b' ');
    push_u64(out, state.strikes);
    out.push(b' ');
    push_u64(out, state.until);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_ban_comes_off_the_front_of_the_spec() {
        let (ban, rest) = split(b"ban 3 600000000000 3600000000000 gcra 1 100000000 10").unwrap();
        let ban = ban.unwrap();
        assert_eq!(ban.after(), 3);
        assert_eq!(ban.duration(), Duration::from_secs(3600));
        assert_eq!(rest, b"gcra 1 100000000 10");
        assert_eq!(split(b"gcra 1 1 1").unwrap(), (None, &b"gcra 1 1 1"[..]));
        assert!(split(b"ban 0 1000000 1000000 gcra 1 1 1").is_err());
        assert!(split(b"ban 3 1000000 1000000").is_err());
        assert!(split(b"ban 3 x 1000000 gcra 1 1 1").is_err());
    }

    #[test]
    fn states_round_trip_and_impossible_ones_are_refused() {
        let ban = Ban::new(3, Duration::from_secs(1), Duration::from_secs(1)).unwrap();
        let state = BanState {
            first_strike: 5,
            strikes: 2,
            until: 9,
        };
        let mut out = Vec::new();
        encode(&state, &mut out);
        assert_eq!(out, b"5 2 9");
        assert_eq!(decode(&ban, Some(&out)), Ok(state));
        assert_eq!(decode(&ban, None), Ok(BanState::default()));
        assert_eq!(decode(&ban, Some(b"5 3 9")), Err(Error::BadState));
        assert_eq!(decode(&ban, Some(b"5 0 9")), Err(Error::BadState));
        assert_eq!(decode(&ban, Some(b"5 1")), Err(Error::BadState));
        assert_eq!(decode(&ban, Some(b"5 1 9 9")), Err(Error::BadState));
        assert_eq!(decode(&ban, Some(b"v2 1")), Err(Error::NotVersion1));
    }
}
