//! Reading the hops of `X-Forwarded-For` and RFC 7239 `Forwarded` from the
//! right: the nearest proxy's entry first.
//!
//! This module owns the syntax only — splitting a header value into hop
//! entries without allocating, and reading one entry's address. Which hops
//! to believe is `client_ip`'s job. Entries are read right to left because
//! only the right end of the header was written by proxies the operator
//! trusts; the left end is whatever the client sent, so it is never parsed
//! before a trusted hop vouches for the entry (a client's broken quoting
//! cannot reach the entries written after it).

use std::net::{IpAddr, Ipv6Addr};

/// The hop entries of one header value, right to left: comma-separated,
/// commas inside quoted strings (`Forwarded`) not counted.
pub(crate) struct HopsFromRight<'a> {
    rest: &'a str,
    done: bool,
}

impl<'a> HopsFromRight<'a> {
    pub(crate) fn new(value: &'a str) -> HopsFromRight<'a> {
        HopsFromRight {
            rest: value,
            done: false,
        }
    }
}

impl<'a> Iterator for HopsFromRight<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.done {
            return None;
        }
        let bytes = self.rest.as_bytes();
        let mut quoted = false;
        let mut i = bytes.len();
        while i > 0 {
            i -= 1;
            match bytes[i] {
                b'"' if !escaped(bytes, i) => quoted = !quoted,
                b',' if !quoted => {
                    let entry = &self.rest[i + 1..];
                    self.rest = &self.rest[..i];
                    return Some(entry.trim());
                }
                _ => {}
            }
        }
        self.done = true;
        Some(self.rest.trim())
    }
}

/// Whether the byte at `i` is preceded by an odd number of backslashes.
fn escaped(bytes: &[u8], i: usize) -> bool {
    bytes[..i].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// The address of an `X-Forwarded-For` entry: an IP, optionally with a
/// port (`192.0.2.1:4711`, `[2001:db8::1]:4711`, `[2001:db8::1]`), as some
/// proxies write it. `None` for anything else (`unknown`, a name, garbage).
pub(crate) fn xff_address(entry: &str) -> Option<IpAddr> {
    node_address(entry)
}

/// The `for=` address of a `Forwarded` element (`for=192.0.2.60;proto=http`,
/// `For="[2001:db8:cafe::17]:4711"`). `None` when the element has no
/// `for`, names `unknown` or an obfuscated identifier, or is malformed.
pub(crate) fn forwarded_for(element: &str) -> Option<IpAddr> {
    let mut found = None;
    for pair in element.split(';') {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        let value = value.trim();
        let value = match value.strip_prefix('"') {
            Some(inner) => inner.strip_suffix('"')?,
            None => value,
        };
        found = Some(node_address(value)?);
    }
    found
}

/// An IP address, with or without a port, IPv6 in brackets when a port
/// follows (RFC 7239 §6 node syntax; X-Forwarded-For's usual forms).
fn node_address(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if !(after.is_empty() || port(after.strip_prefix(':')?)) {
            return None;
        }
        return v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (v4, p) = text.rsplit_once(':')?;
    if !port(p) {
        return None;
    }
    v4.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A port: 1 to 5 digits (RFC 7239 also allows an obfuscated `_port`).
fn port(text: &str) -> bool {
    let digits = !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
    let obfuscated = text.starts_with('_')
        && text.len() > 1
        && text[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    digits || obfuscated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hops(value: &str) -> Vec<&str> {
        HopsFromRight::new(value).collect()
    }

    #[test]
    fn hops_come_right_to_left_and_quotes_keep_their_commas() {
        assert_eq!(hops("a, b,c"), ["c", "b", "a"]);
        assert_eq!(hops(""), [""]);
        assert_eq!(
            hops(r#"for="x,y";proto=http, for=1.2.3.4"#),
            ["for=1.2.3.4", r#"for="x,y";proto=http"#]
        );
        // An escaped quote does not close the string.
        assert_eq!(hops(r#"for="a\",b", for=c"#), ["for=c", r#"for="a\",b""#]);
        // A client's unbalanced quote swallows only what is left of it.
        assert_eq!(hops(r#"for="oops, for=1.2.3.4"#)[0], "for=1.2.3.4");
    }

    #[test]
    fn xff_entries() {
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        assert_eq!(xff_address("192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(xff_address(" 192.0.2.1:4711 "), ip("192.0.2.1"));
        assert_eq!(xff_address("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(xff_address("[2001:db8::1]:80"), ip("2001:db8::1"));
        assert_eq!(xff_address("[2001:db8::1]"), ip("2001:db8::1"));
        for bad in [
            "unknown",
            "",
            "example.com",
            "1.2.3",
            "[::1",
            "[::1]x",
            "1.2.3.4:",
            "1.2.3.4:123456",
            "::1:80x",
        ] {
            assert_eq!(xff_address(bad), None, "{bad}");
        }
    }

    #[test]
    fn forwarded_elements() {
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        assert_eq!(
            forwarded_for("for=192.0.2.60;proto=http;by=203.0.113.43"),
            ip("192.0.2.60")
        );
        assert_eq!(
            forwarded_for(r#"For="[2001:db8:cafe::17]:4711""#),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            forwarded_for(r#"proto=https; for="192.0.2.1:_abc""#),
            ip("192.0.2.1")
        );
        for bad in [
            "for=unknown",
            "for=_hidden",
            "proto=http",
            "for",
            r#"for="1.2.3.4"#,
            "for=1.2.3.4;for=5.6.7.8",
            "",
        ] {
            assert_eq!(forwarded_for(bad), None, "{bad}");
        }
    }
}
