//! Decimal numbers and words in the bytes of arguments and stored states:
//! strict parsing (digits only, no sign, no overflow) and formatting
//! without `core::fmt`.

/// A decimal `u64`: one or more ASCII digits that fit.
pub fn parse_u64(word: &[u8]) -> Option<u64> {
    if word.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in word {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    Some(value)
}

/// A decimal `u128`: one or more ASCII digits that fit.
pub fn parse_u128(word: &[u8]) -> Option<u128> {
    if word.is_empty() {
        return None;
    }
    let mut value: u128 = 0;
    for &b in word {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u128::from(digit))?;
    }
    Some(value)
}

/// Appends `v` in decimal.
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in decimal.
pub fn push_u128(out: &mut Vec<u8>, v: u128) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in decimal, zero-padded to `width` digits (`v` has at most
/// that many).
pub fn push_padded(out: &mut Vec<u8>, v: u128, width: usize) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(v).as_bytes();
    out.resize(out.len() + width.saturating_sub(digits.len()), b'0');
    out.extend_from_slice(digits);
}

/// Two-digit pairs "00" to "99", for writing two digits per division.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `v` in decimal into `out` so that it ends just before `end`;
/// returns where it starts. `out[..end]` must have room for it (20 bytes
/// hold any `u64`). itoa writes the same digits the same way, but into a
/// buffer of its own, to be copied: a reply's words are written back to
/// front straight into place instead (`command`'s reply).
pub fn put_u64_before(out: &mut [u8], mut end: usize, mut v: u64) -> usize {
    while v >= 100 {
        let pair = usize::try_from(v % 100).unwrap_or_default() * 2;
        v /= 100;
        end -= 2;
        out[end..end + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    let v = usize::try_from(v).unwrap_or_default();
    if v >= 10 {
        end -= 2;
        out[end..end + 2].copy_from_slice(&PAIRS[v * 2..v * 2 + 2]);
    } else {
        end -= 1;
        out[end] = b'0' + v as u8;
    }
    end
}

/// The number of decimal digits of `v`.
pub fn digits(v: u128) -> usize {
    itoa::Buffer::new().format(v).len()
}

/// The words of a text separated by runs of ASCII whitespace, as the
/// script's `words` splits a spec or a state.
pub fn words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
}

/// Exactly `N` whitespace-separated words, or `None`.
pub fn exactly<const N: usize>(text: &[u8]) -> Option<[&[u8]; N]> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut all = words(text);
    for slot in &mut out {
        *slot = all.next()?;
    }
    all.next().is_none().then_some(out)
}

/// The first `count` words of `text`, each ended by one space, and what
/// follows the last one's space (or nothing when the text ends there):
/// the head of a packed-rows state, whose body may be empty.
pub fn fields(text: &[u8], count: usize) -> Option<(Vec<&[u8]>, &[u8])> {
    let mut out = Vec::with_capacity(count);
    let mut rest = text;
    for i in 0..count {
        match rest.iter().position(|&b| b == b' ') {
            Some(space) => {
                out.push(&rest[..space]);
                rest = &rest[space + 1..];
            }
            None if i + 1 == count => {
                out.push(rest);
                rest = &[];
            }
            None => return None,
        }
    }
    Some((out, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_digits_that_fit() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"007"), Some(7));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"-1",
            b"+1",
            b"1 ",
            b"1x",
        ] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
        assert_eq!(parse_u128(b"18446744073709551616"), Some(1 << 64));
        assert_eq!(parse_u128(&[b'9'; 40]), None);
        let mut out = Vec::new();
        push_padded(&mut out, 42, 5);
        push_u64(&mut out, 7);
        push_u128(&mut out, 0);
        assert_eq!(out, b"0004270");
        assert_eq!((digits(0), digits(9), digits(10)), (1, 1, 2));
    }

    #[test]
    fn numbers_are_written_back_to_front_as_itoa_writes_them() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            11,
            99,
            100,
            101,
            999,
            1000,
            u64::MAX,
            u64::MAX - 1,
        ];
        values.extend((0..20).map(|k| 10u64.pow(k)));
        values.extend((1..20).map(|k| 10u64.pow(k) - 1));
        values.extend((0..64).map(|k| 1u64 << k));
        let mut out = [0u8; 64];
        for v in values {
            let start = put_u64_before(&mut out, 40, v);
            assert_eq!(
                &out[start..40],
                itoa::Buffer::new().format(v).as_bytes(),
                "{v}"
            );
        }
    }

    #[test]
    fn words_and_fields() {
        assert_eq!(exactly::<2>(b" 1  2 "), Some([&b"1"[..], b"2"]));
        assert_eq!(exactly::<2>(b"1 2 3"), None);
        assert_eq!(exactly::<2>(b"1"), None);
        let (head, body) = fields(b"1 2 body", 2).unwrap();
        assert_eq!((head, body), (vec![&b"1"[..], b"2"], &b"body"[..]));
        let (head, body) = fields(b"1 2 ", 2).unwrap();
        assert_eq!((head, body), (vec![&b"1"[..], b"2"], &b""[..]));
        let (head, body) = fields(b"1 2", 2).unwrap();
        assert_eq!((head, body), (vec![&b"1"[..], b"2"], &b""[..]));
        assert!(fields(b"1", 2).is_none());
    }
}
