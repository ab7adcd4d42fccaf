//! Hop-by-hop headers (RFC 9110 §7.6.1): fields that describe one
//! connection, not the message, and so must not cross the gateway in
//! either direction.
//!
//! Removed: `Connection` and every field it names, `Keep-Alive`,
//! `Proxy-Connection`, `Proxy-Authenticate`, `Proxy-Authorization`, `TE`,
//! `Trailer`, `Transfer-Encoding` and `Upgrade`. A protocol upgrade
//! (WebSocket) is the one exception: its request, and the `101` that
//! accepts it, keep `Upgrade` and are given `Connection: upgrade` again,
//! since the upgrade is precisely what the two ends must agree on.
//! Framing is not lost: hyper frames each side's body itself.

use http::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, UPGRADE};

/// The hop-by-hop fields removed whatever `Connection` says.
const ALWAYS: [&str; 8] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What happens to a protocol upgrade's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upgrade {
    /// Removed like every other hop-by-hop field.
    Remove,
    /// `Upgrade` kept, and `Connection: upgrade` only.
    Keep,
}

/// Asks the upstream for trailers: `TE: trailers`, named in `Connection`
/// as RFC 9110 §10.1.4 wants (on headers already stripped of the client's
/// hop-by-hop fields).
pub(crate) fn ask_trailers(headers: &mut HeaderMap) {
    headers.insert(
        HeaderName::from_static("te"),
        HeaderValue::from_static("trailers"),
    );
    headers.insert(CONNECTION, HeaderValue::from_static("te"));
}

/// Whether `headers` ask for a protocol upgrade: `Connection` lists the
/// `upgrade` token and `Upgrade` names a protocol.
pub(crate) fn asks_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"))
}

/// Whether `name` is `Connection` or one of [`ALWAYS`].
fn is_hop_by_hop(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == CONNECTION.as_str() || ALWAYS.contains(&name)
}

/// Removes the hop-by-hop fields of `headers`.
pub(crate) fn strip(headers: &mut HeaderMap, upgrade: Upgrade) {
    // Most messages carry none: one pass over the names (each compared by
    // length first) settles it, where removing each field by name costs a
    // hash and a probe apiece.
    if upgrade == Upgrade::Remove && !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.contains_key(CONNECTION) {
        // Collected first because the names borrow the map. Bounded: the
        // `Connection` field is within the server's header size limit.
        let named: Vec<HeaderName> = connection_tokens(headers)
            .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
            .collect();
        for name in named {
            if upgrade == Upgrade::Keep && name == UPGRADE {
                continue;
            }
            headers.remove(name);
        }
        headers.remove(CONNECTION);
    }
    for name in ALWAYS {
        if upgrade == Upgrade::Keep && name == UPGRADE.as_str() {
            continue;
        }
        headers.remove(name);
    }
    if upgrade == Upgrade::Keep {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// The tokens of every `Connection` field, trimmed, as sent (header names
/// lowercase themselves); fields that are not text are skipped.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> + '_ {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn names(map: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn fixed_and_named_hop_by_hop_fields_are_removed() {
        let mut map = headers(&[
            ("connection", "keep-alive, X-Foo"),
            ("connection", "x-bar"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-authenticate", "Basic"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-foo", "1"),
            ("x-bar", "2"),
            ("x-kept", "3"),
            ("content-type", "text/plain"),
        ]);
        strip(&mut map, Upgrade::Remove);
        assert_eq!(names(&map), ["content-type", "x-kept"]);
    }

    #[test]
    fn an_upgrade_keeps_upgrade_and_only_connection_upgrade() {
        let mut map = headers(&[
            ("connection", "Upgrade, x-foo"),
            ("upgrade", "websocket"),
            ("x-foo", "1"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ]);
        assert!(asks_upgrade(&map));
        strip(&mut map, Upgrade::Keep);
        assert_eq!(names(&map), ["connection", "sec-websocket-key", "upgrade"]);
        assert_eq!(map[CONNECTION], "upgrade");
        assert_eq!(map[UPGRADE], "websocket");
    }

    #[test]
    fn an_upgrade_needs_both_fields() {
        assert!(!asks_upgrade(&headers(&[("upgrade", "websocket")])));
        assert!(!asks_upgrade(&headers(&[("connection", "upgrade")])));
        assert!(!asks_upgrade(&headers(&[
            ("connection", "keep-alive"),
            ("upgrade", "h2c")
        ])));
    }

    #[test]
    fn malformed_connection_tokens_are_ignored() {
        let mut map = headers(&[("connection", ",, bad name ,\t,x-ok"), ("x-ok", "1")]);
        map.append(CONNECTION, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        strip(&mut map, Upgrade::Remove);
        assert!(map.is_empty(), "{map:?}");
    }
}
