//! The plain decision request read straight from its bytes: what nearly
//! every client sends to `/v1/check` (`{"key":"user:1","limit":{"algorithm":
//! "gcra","rate":"100/s"}}`), decoded without serde's generic machinery.
//!
//! This module owns only the fast path; the JSON contract is
//! [`DecisionRequest`]'s `Deserialize` (`wire`). The scanner takes a body
//! only when it is an object of known, unrepeated fields whose strings
//! hold no escape and no control character and whose numbers are plain
//! digits; anything else (an escape, `null`, a fraction or an exponent, a
//! sign, descriptors, an unknown or repeated field, malformed JSON, bytes
//! that are not UTF-8 or that follow the object) makes it give up, and the
//! caller decodes the body with serde. So what it accepts decodes to exactly what serde makes of
//! the same bytes (a property test holds the two together), and every
//! refusal, with its message, is still serde's.
//!
//! Why by hand: serde_json's derived visitor took about 2,870 instructions
//! per `/v1/check` body of 70 bytes (callgrind, docs/benchmarks.md), the
//! largest part of what a decision adds to a bare server: each field name
//! and value goes through `deserialize_identifier`, the option and string
//! visitors and the nested `LimitSpec` visitor, with every byte of every
//! string checked twice (escapes, then UTF-8). A `Deserialize` of our own
//! would still go through serde_json's `Deserializer` for every token.
//! Reading the few shapes a decision request has, once (the body's UTF-8
//! checked in one pass, strings eight bytes at a time), takes about 1,330;
//! the compact inline check, matched by its fixed parts before that, about
//! 580.

use std::borrow::Cow;

use crate::wire::{DecisionRequest, LimitSpec};

/// `bytes` as a decision request, when it is a plain one (see the module
/// docs); `None` when serde must read it.
pub(crate) fn decision_request(bytes: &[u8]) -> Option<DecisionRequest<'_>> {
    // Once for the whole body: every string is then a slice of it between
    // two ASCII quotes, so on character boundaries. A body that is not
    // UTF-8 is serde's to refuse.
    let text = std::str::from_utf8(bytes).ok()?;
    compact_inline(text).or_else(|| any_plain(text))
}

/// The inline check as serde_json, `JSON.stringify` and the like write it
/// (`{"key":"…","limit":{"algorithm":"…","rate":"…"}}`, the algorithm
/// optional), read by matching its fixed parts: no whitespace to skip, no
/// field names to look up. It reads what [`any_plain`] reads from the same
/// bytes (a test holds the two together), in about half the instructions.
fn compact_inline(text: &str) -> Option<DecisionRequest<'_>> {
    let mut scan = Scanner { text, at: 0 };
    scan.literal(br#"{"key":""#)?;
    let key = scan.rest_of_string()?;
    scan.literal(br#","limit":{""#)?;
    let algorithm = if scan.literal(br#"algorithm":""#).is_some() {
        let algorithm = scan.rest_of_string()?;
        scan.literal(br#","rate":""#)?;
        Some(Cow::Borrowed(algorithm))
    } else {
        scan.literal(br#"rate":""#)?;
        None
    };
    let rate = scan.rest_of_string()?;
    scan.literal(b"}}")?;
    scan.end()?;
    Some(DecisionRequest {
        key: Some(Cow::Borrowed(key)),
        limit: Some(LimitSpec::plain(algorithm, Cow::Borrowed(rate))),
        ..DecisionRequest::default()
    })
}

/// Any plain decision request (see the module docs), read member by
/// member.
fn any_plain(text: &str) -> Option<DecisionRequest<'_>> {
    let mut scan = Scanner { text, at: 0 };
    let mut request = DecisionRequest::default();
    let mut seen = Seen::default();
    scan.object(|scan, name| {
        match name {
            "key" => {
                seen.first(0)?;
                request.key = Some(Cow::Borrowed(scan.string()?));
            }
            "limit" => {
                seen.first(1)?;
                request.limit = Some(limit(scan)?);
            }
            "domain" => {
                seen.first(2)?;
                request.domain = Some(Cow::Borrowed(scan.string()?));
            }
            "cost" => {
                seen.first(3)?;
                request.cost = Some(scan.number()?);
            }
            "at_ms" => {
                seen.first(4)?;
                request.at_ms = Some(scan.number()?);
            }
            "max_wait_ms" => {
                seen.first(5)?;
                request.max_wait_ms = Some(scan.number()?);
            }
            "lease" => {
                seen.first(6)?;
                request.lease = Some(scan.number()?);
            }
            // `descriptors`, and any field serde refuses.
            _ => return None,
        }
        Some(())
    })?;
    scan.end()?;
    Some(request)
}

/// An inline `limit` object.
fn limit<'a>(scan: &mut Scanner<'a>) -> Option<LimitSpec<'a>> {
    let mut algorithm = None;
    let mut rate = None;
    let mut burst = None;
    let mut step = None;
    let mut lease_ttl = None;
    let mut window = None;
    let mut timezone = None;
    let mut anchor = None;
    let mut sync = None;
    let mut seen = Seen::default();
    scan.object(|scan, name| {
        match name {
            "algorithm" => {
                seen.first(0)?;
                algorithm = Some(Cow::Borrowed(scan.string()?));
            }
            "rate" => {
                seen.first(1)?;
                rate = Some(Cow::Borrowed(scan.string()?));
            }
            "burst" => {
                seen.first(2)?;
                burst = Some(scan.number()?);
            }
            "step" => {
                seen.first(3)?;
                step = Some(Cow::Borrowed(scan.string()?));
            }
            "lease_ttl" => {
                seen.first(4)?;
                lease_ttl = Some(Cow::Borrowed(scan.string()?));
            }
            "window" => {
                seen.first(5)?;
                window = Some(Cow::Borrowed(scan.string()?));
            }
            "timezone" => {
                seen.first(6)?;
                timezone = Some(Cow::Borrowed(scan.string()?));
            }
            "anchor" => {
                seen.first(7)?;
                anchor = Some(scan.number()?);
            }
            "sync" => {
                seen.first(8)?;
                sync = Some(Cow::Borrowed(scan.string()?));
            }
            _ => return None,
        }
        Some(())
    })?;
    Some(LimitSpec {
        algorithm,
        // Required: serde names it when it is missing.
        rate: rate?,
        burst,
        step,
        lease_ttl,
        window,
        timezone,
        anchor,
        sync,
    })
}

/// The fields of an object read so far; a repeated one is serde's to
/// refuse.
#[derive(Default)]
struct Seen(u16);

impl Seen {
    /// `Some` the first time `field` is met.
    fn first(&mut self, field: u8) -> Option<()> {
        let bit = 1 << field;
        if self.0 & bit != 0 {
            return None;
        }
        self.0 |= bit;
        Some(())
    }
}

/// A position in the body. Every method returns `None` on anything the
/// fast path does not take, and the whole scan stops there.
struct Scanner<'a> {
    /// The body, valid UTF-8 (a body that is not is serde's to refuse).
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    /// Skips JSON whitespace and returns the next byte.
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        let mut at = self.at;
        while let Some(&byte) = bytes.get(at) {
            if !matches!(byte, b' ' | b'\n' | b'\t' | b'\r') {
                self.at = at;
                return Some(byte);
            }
            at += 1;
        }
        self.at = at;
        None
    }

    /// Takes `byte`, after any whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek()? != byte {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// Nothing but whitespace left.
    fn end(&mut self) -> Option<()> {
        match self.peek() {
            None => Some(()),
            Some(_) => None,
        }
    }

    /// Takes `bytes` as they are, with no whitespace before them.
    fn literal(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.at + bytes.len();
        if self.text.as_bytes().get(self.at..end)? != bytes {
            return None;
        }
        self.at = end;
        Some(())
    }

    /// A string with no escape and no control character, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        self.rest_of_string()
    }

    /// What is left of a string whose opening quote was taken, as
    /// [`string`](Self::string) reads it, and its closing quote.
    fn rest_of_string(&mut self) -> Option<&'a str> {
        let len = plain_len(self.text.as_bytes().get(self.at..)?)?;
        let text = self.text.get(self.at..self.at + len)?;
        self.at += len + 1;
        Some(text)
    }

    /// An unsigned integer written as digits alone (no sign, fraction,
    /// exponent or leading zero), that fits a `u64`.
    fn number(&mut self) -> Option<u64> {
        let first = self.peek()?;
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut end = start;
        let mut n: u64 = 0;
        while let Some(&digit) = bytes.get(end) {
            if !digit.is_ascii_digit() {
                // `1.5`, `2e1` and the like are serde's (crate::numbers).
                if matches!(digit, b'.' | b'e' | b'E') {
                    return None;
                }
                break;
            }
            n = n.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
            end += 1;
        }
        if end == start || (first == b'0' && end > start + 1) {
            return None;
        }
        self.at = end;
        Some(n)
    }

    /// An object, `member` reading the value of each member it names.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let name = self.string()?;
            self.eat(b':')?;
            member(self, name)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

/// How far `rest` goes before its first `"`, when no escape and no control
/// character comes before it.
///
/// Eight bytes at a time (SWAR): a byte-by-byte loop that looks for three
/// things cost more than the rest of the scan together. For each word,
/// `zero_bytes` marks the bytes equal to a quote or a backslash and
/// `bytes_below` those under 0x20; the lowest mark is the first such byte
/// (a mark above a marked byte may be spurious, never one below it).
fn plain_len(rest: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let mut at = 0;
    while let Some(chunk) = rest.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let marks = zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')))
            | bytes_below(word, 0x20);
        if marks != 0 {
            // Little-endian: the lowest bits are the first byte.
            let first = at + (marks.trailing_zeros() / 8) as usize;
            return (*rest.get(first)? == b'"').then_some(first);
        }
        at += 8;
    }
    // The last few bytes of the body.
    for (i, &byte) in rest.iter().enumerate().skip(at) {
        match byte {
            b'"' => return Some(i),
            b'\\' | 0..=0x1f => return None,
            _ => {}
        }
    }
    None
}

const HIGH_BITS: u64 = u64::from_le_bytes([0x80; 8]);

/// The high bit of each zero byte of `word` (and maybe of bytes above one).
fn zero_bytes(word: u64) -> u64 {
    bytes_below(word, 1)
}

/// The high bit of each byte of `word` under `n` (at most 0x80; and maybe
/// of bytes above one).
fn bytes_below(word: u64, n: u8) -> u64 {
    word.wrapping_sub(u64::from_le_bytes([n; 8])) & !word & HIGH_BITS
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn serde(body: &[u8]) -> Result<DecisionRequest<'_>, String> {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }

    /// What the scanner made of `body` is what serde makes of it.
    fn agrees(body: &[u8]) -> bool {
        match decision_request(body) {
            Some(fast) => {
                assert_eq!(
                    Ok(&fast),
                    serde(body).as_ref(),
                    "{}",
                    String::from_utf8_lossy(body)
                );
                true
            }
            None => false,
        }
    }

    #[test]
    fn the_bodies_clients_send_are_read_without_serde() {
        for body in [
            r#"{"key":"user:00042","limit":{"algorithm":"gcra","rate":"1000000/s"}}"#,
            r#"{ "key" : "k" , "limit" : { "rate" : "10/s" , "burst" : 20 } , "cost" : 0 }"#,
            "{\n\t\"key\": \"é ✓\",\r\n \"limit\": {\"algorithm\": \"concurrency\", \"rate\": \"5/s\", \"lease_ttl\": \"30s\"}}",
            r#"{"key":"k","limit":{"rate":"10000","window":"calendar_day","timezone":"Europe/London","anchor":3,"step":"1h"}}"#,
            r#"{"key":"k","limit":{"rate":"1/s"},"cost":18446744073709551615,"at_ms":1,"max_wait_ms":10,"lease":7}"#,
            r#"{"domain":"d"}"#,
            "{}",
        ] {
            assert!(agrees(body.as_bytes()), "{body}");
        }
        let request = decision_request(br#"{"key":"k","limit":{"rate":"1/s"}}"#).unwrap();
        assert!(matches!(request.key, Some(Cow::Borrowed("k"))));
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        for body in [
            "",
            "[]",
            r#"["k"]"#,
            r#"{"key":"a\"b"}"#,
            r#"{"key":"a\u0062"}"#,
            "{\"key\":\"a\tb\"}",
            r#"{"key":null}"#,
            r#"{"key":5}"#,
            r#"{"cost":1.0}"#,
            r#"{"cost":1e3}"#,
            r#"{"cost":-1}"#,
            r#"{"cost":01}"#,
            r#"{"cost":18446744073709551616}"#,
            r#"{"cost":"1"}"#,
            r#"{"key":"k","key":"k"}"#,
            r#"{"limit":{"rate":"1/s","rate":"1/s"}}"#,
            r#"{"limit":{"algorithm":"gcra"}}"#,
            r#"{"limit":null}"#,
            r#"{"colour":1}"#,
            r#"{"limit":{"colour":1,"rate":"1/s"}}"#,
            r#"{"domain":"d","descriptors":[]}"#,
            r#"{"key":"k",}"#,
            r#"{"key":"k"} x"#,
            r#"{"key":"k"}}"#,
            r#"{"key" "k"}"#,
            r#"{"key":"k""#,
        ] {
            assert!(decision_request(body.as_bytes()).is_none(), "{body}");
        }
        // Not UTF-8.
        assert!(decision_request(b"{\"key\":\"\xff\"}").is_none());
    }

    #[test]
    fn a_string_ends_at_its_first_quote_unless_an_escape_or_control_comes_first() {
        for len in 0..20 {
            let text = "aé~ ".repeat(8);
            let text = &text.as_bytes()[..len];
            for (stop, expected) in [
                (b'"', Some(len)),
                (b'\\', None),
                (b'\n', None),
                (0x1f, None),
                (0, None),
            ] {
                for tail in [&b""[..], b"\"", b"\\\"xxxxxxxxxxxxxxxx\""] {
                    let mut rest = text.to_vec();
                    rest.push(stop);
                    rest.extend_from_slice(tail);
                    assert_eq!(plain_len(&rest), expected, "{rest:?}");
                }
            }
            assert_eq!(plain_len(text), None, "{text:?}");
            // 0x7f and 0x20 are plain text.
            let mut rest = text.to_vec();
            rest.extend_from_slice(b"\x7f \"");
            assert_eq!(plain_len(&rest), Some(len + 2));
        }
    }

    #[test]
    fn every_prefix_and_every_one_byte_change_of_a_body_agrees_with_serde() {
        for body in [
            &br#"{"key":"user:1","limit":{"algorithm":"gcra","rate":"10/s","burst":20},"cost":2}"#
                [..],
            br#"{"key":"user:00042","limit":{"algorithm":"gcra","rate":"1000000/s"}}"#,
            br#"{"key":"k","limit":{"rate":"1/s"}}"#,
        ] {
            for end in 0..=body.len() {
                agrees(&body[..end]);
                compact_agrees(&body[..end]);
            }
            for at in 0..body.len() {
                for byte in [
                    b' ', b'"', b'\\', b',', b':', b'{', b'}', b'0', b'9', b'.', b'x', 0,
                ] {
                    let mut changed = body.to_vec();
                    changed[at] = byte;
                    agrees(&changed);
                    compact_agrees(&changed);
                }
            }
        }
    }

    /// What the compact reader made of `body` is what the member by
    /// member one makes of it.
    fn compact_agrees(body: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(body) else {
            return false;
        };
        match compact_inline(text) {
            Some(compact) => {
                assert_eq!(
                    Some(&compact),
                    any_plain(text).as_ref(),
                    "{}",
                    String::from_utf8_lossy(body)
                );
                true
            }
            None => false,
        }
    }

    #[test]
    fn the_compact_inline_check_is_read_by_its_fixed_parts() {
        let body = br#"{"key":"user:00042","limit":{"algorithm":"gcra","rate":"1000000/s"}}"#;
        let request = compact_inline(std::str::from_utf8(body).unwrap()).unwrap();
        assert!(matches!(request.key, Some(Cow::Borrowed("user:00042"))));
        assert!(compact_agrees(body));
        assert!(compact_agrees(br#"{"key":"","limit":{"rate":""}}"#));
        for other in [
            &br#"{"key":"k","limit":{"rate":"1/s"} }"#[..],
            br#"{ "key":"k","limit":{"rate":"1/s"}}"#,
            br#"{"key":"k","limit":{"rate":"1/s","burst":2}}"#,
            br#"{"key":"k","limit":{"rate":"1/s"},"cost":2}"#,
            br#"{"limit":{"rate":"1/s"},"key":"k"}"#,
            br#"{"key":"k","limit":{"rate":"1/s","algorithm":"gcra"}}"#,
            br#"{"key":"a\"b","limit":{"rate":"1/s"}}"#,
        ] {
            assert!(!compact_agrees(other), "{}", String::from_utf8_lossy(other));
            agrees(other);
        }
    }

    /// A JSON value a decision request's member might hold, of any type.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            text(),
            Just(r#""a\"b""#.to_owned()),
            Just(r#""\u00e9""#.to_owned()),
            Just("\"é\"".to_owned()),
            Just("null".to_owned()),
            Just("true".to_owned()),
            digits(),
            Just("18446744073709551616".to_owned()),
            Just("00".to_owned()),
            Just("2.0".to_owned()),
            Just("1e2".to_owned()),
            Just("-1".to_owned()),
            Just("[]".to_owned()),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        "[a-z:/0-9 ]{0,6}".prop_map(|s| format!("\"{s}\""))
    }

    fn digits() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u64..3000).prop_map(|n| n.to_string()),
            Just("18446744073709551615".to_owned()),
        ]
    }

    /// The fields of a decision request and of its limit, with whether
    /// each holds a string (or, for `limit`, an object); the rest hold
    /// numbers.
    const TOP: [(&str, bool); 9] = [
        ("key", true),
        ("limit", true),
        ("domain", true),
        ("cost", false),
        ("at_ms", false),
        ("max_wait_ms", false),
        ("lease", false),
        ("descriptors", true),
        ("colour", false),
    ];
    const LIMIT: [(&str, bool); 9] = [
        ("algorithm", true),
        ("rate", true),
        ("rate", true),
        ("burst", false),
        ("step", true),
        ("lease_ttl", true),
        ("window", true),
        ("timezone", true),
        ("anchor", false),
    ];

    /// An object of up to `members` members named from `fields`, mostly
    /// with a value of the field's type (`inner` for `limit`), sometimes
    /// with any value.
    fn object(
        fields: &'static [(&'static str, bool)],
        inner: BoxedStrategy<String>,
        members: usize,
    ) -> impl Strategy<Value = String> {
        let space = prop_oneof![Just(""), Just(" "), Just("\n\t"), Just("\r ")];
        let member = proptest::sample::select(fields).prop_flat_map(move |(name, string)| {
            let typed = if name == "limit" {
                inner.clone()
            } else if string {
                text().boxed()
            } else {
                digits().boxed()
            };
            (Just(name), prop_oneof![6 => typed, 1 => value()])
        });
        proptest::collection::vec((member, space), 0..members).prop_map(|members| {
            let members: Vec<String> = members
                .into_iter()
                .map(|((name, value), space)| format!("{space}\"{name}\"{space}:{space}{value}"))
                .collect();
            format!("{{{}}}", members.join(","))
        })
    }

    fn body() -> impl Strategy<Value = String> {
        let limit = object(&LIMIT, value().boxed(), 5).boxed();
        object(&TOP, limit, 5)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn what_the_scanner_reads_serde_reads_the_same(body in body()) {
            agrees(body.as_bytes());
        }

        #[test]
        fn the_compact_reader_agrees_with_the_member_by_member_one(
            key in value(),
            algorithm in proptest::option::of(value()),
            rate in value(),
            tail in prop_oneof![Just(""), Just(" "), Just("}"), Just(",")],
        ) {
            let algorithm = algorithm.map(|a| format!("\"algorithm\":{a},")).unwrap_or_default();
            let body = format!("{{\"key\":{key},\"limit\":{{{algorithm}\"rate\":{rate}}}}}{tail}");
            compact_agrees(body.as_bytes());
            agrees(body.as_bytes());
        }
    }

    #[test]
    fn the_generated_bodies_reach_the_fast_path() {
        // The property above means something only if the scanner accepts
        // a fair share of what it is given.
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let strategy = body();
        let accepted = (0..2000)
            .filter(|_| {
                let body = strategy.new_tree(&mut runner).unwrap().current();
                agrees(body.as_bytes())
            })
            .count();
        assert!(accepted > 100, "{accepted} of 2000");
    }
}
