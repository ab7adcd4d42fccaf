//! The fields that tell the upstream where a request came from:
//! `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Forwarded-Host`, and the
//! client's own `Host`.
//!
//! - `X-Forwarded-For`: the peer's IP address is appended to what the
//!   client sent (several fields are joined into one list), as nginx's
//!   `$proxy_add_x_forwarded_for` does. The addresses the client sent are
//!   passed on, not trusted: an upstream that reads this list must trust
//!   only the entries its own proxies added (the rightmost ones).
//! - `X-Forwarded-Proto`: the scheme of the gateway's listener (`http`),
//!   replacing whatever the client sent.
//! - `X-Forwarded-Host` and `Host`: the host the client asked for (its
//!   `Host` field, or an HTTP/2 request's `:authority`). `Host` is kept
//!   rather than replaced by the upstream's address, so that virtual hosts,
//!   redirects and cookies on the upstream see the name clients use.

use std::io::Write;
use std::net::IpAddr;

use http::header::{Entry, HeaderMap, HeaderName, HeaderValue, HOST};
use http::Uri;

/// `X-Forwarded-For`.
pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub(crate) static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The host the client asked for, and whether `Host` already says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientHost {
    /// The request's one `Host` field, which stays as it is.
    Field(HeaderValue),
    /// The first of several `Host` fields, or the request target's
    /// authority (HTTP/2 sends `:authority`, not `Host`): `Host` is set
    /// to it.
    Set(HeaderValue),
}

impl ClientHost {
    fn value(&self) -> &HeaderValue {
        match self {
            ClientHost::Field(value) | ClientHost::Set(value) => value,
        }
    }
}

/// The host the client asked for: its `Host` field, else the authority of
/// the request target.
pub(crate) fn client_host(headers: &HeaderMap, target: &Uri) -> Option<ClientHost> {
    let mut fields = headers.get_all(HOST).iter();
    if let Some(first) = fields.next() {
        return Some(match fields.next() {
            None => ClientHost::Field(first.clone()),
            Some(_) => ClientHost::Set(first.clone()),
        });
    }
    let authority = target.authority()?;
    HeaderValue::from_str(authority.as_str())
        .ok()
        .map(ClientHost::Set)
}

/// A client's address as `X-Forwarded-For` carries it: the address, and
/// the field's value when the client sent no list of its own, written once
/// per client connection rather than on each of its requests.
#[derive(Debug, Clone)]
pub(crate) struct ForwardedPeer {
    ip: IpAddr,
    alone: Option<HeaderValue>,
}

impl ForwardedPeer {
    pub(crate) fn new(ip: IpAddr) -> ForwardedPeer {
        let mut text = Vec::with_capacity(16);
        push_ip(&mut text, ip);
        ForwardedPeer {
            ip,
            // An address is plain text: this does not fail.
            alone: HeaderValue::from_maybe_shared(bytes::Bytes::from(text)).ok(),
        }
    }
}

/// Sets `Host` (unless the client's one field says it already),
/// `X-Forwarded-Host`, `X-Forwarded-Proto` and appends `peer` to
/// `X-Forwarded-For`.
pub(crate) fn add(headers: &mut HeaderMap, peer: Option<&ForwardedPeer>, host: Option<ClientHost>) {
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST.clone(), host.value().clone());
        if let ClientHost::Set(value) = host {
            headers.insert(HOST, value);
        }
    }
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static("http"));
    let Some(peer) = peer else {
        return;
    };
    match headers.entry(&X_FORWARDED_FOR) {
        Entry::Vacant(vacant) => {
            if let Some(alone) = &peer.alone {
                vacant.insert(alone.clone());
            }
        }
        Entry::Occupied(mut occupied) => {
            if let Some(list) = forwarded_for(occupied.iter(), peer.ip) {
                occupied.insert(list);
            }
        }
    }
}

/// The client's `X-Forwarded-For` list (every field, in order) with `peer`
/// appended.
fn forwarded_for<'a>(
    fields: impl Iterator<Item = &'a HeaderValue>,
    peer: IpAddr,
) -> Option<HeaderValue> {
    let mut list = Vec::with_capacity(48);
    for value in fields {
        let value = trim(value.as_bytes());
        if value.is_empty() {
            continue;
        }
        list.extend_from_slice(value);
        list.extend_from_slice(b", ");
    }
    push_ip(&mut list, peer);
    // The parts were valid field values and an address is plain text, so
    // this only fails on bytes hyper would not have accepted.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(list)).ok()
}

/// Appends `ip` as text; an IPv4 address without `core::fmt`, which on
/// every request cost more than the rest of this module.
fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(itoa::Buffer::new().format(octet).as_bytes());
            }
        }
        // Writing to a Vec cannot fail.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b','))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t' | b','))
        .map_or(start, |i| i + 1);
    &bytes[start..end.max(start)]
}

#[cfg(test)]
mod tests {
    use http::request::Parts;

    use super::*;

    fn request(builder: http::request::Builder) -> Parts {
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_peer_is_appended_to_the_clients_list() {
        let parts = request(
            http::Request::get("/")
                .header("x-forwarded-for", "203.0.113.7")
                .header("x-forwarded-for", " 10.0.0.1 ,"),
        );
        let mut headers = parts.headers;
        let peer = ForwardedPeer::new("192.0.2.1".parse().unwrap());
        add(&mut headers, Some(&peer), None);
        assert_eq!(
            headers[&X_FORWARDED_FOR],
            "203.0.113.7, 10.0.0.1, 192.0.2.1"
        );
        assert_eq!(headers.get_all(&X_FORWARDED_FOR).iter().count(), 1);

        // Alone, with the value written once for the peer, request after
        // request.
        let peer = ForwardedPeer::new("::1".parse().unwrap());
        for _ in 0..2 {
            let mut headers = HeaderMap::new();
            add(&mut headers, Some(&peer), None);
            assert_eq!(headers[&X_FORWARDED_FOR], "::1");
        }
        // A list sent after a request without one is still appended to.
        let mut headers = HeaderMap::new();
        headers.insert(&X_FORWARDED_FOR, HeaderValue::from_static("203.0.113.7"));
        add(&mut headers, Some(&peer), None);
        assert_eq!(headers[&X_FORWARDED_FOR], "203.0.113.7, ::1");
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let addresses = [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.100.9",
            "192.0.2.1",
            "::1",
            "2001:db8::ff00:42:8329",
            "::ffff:192.0.2.1",
        ];
        for text in addresses {
            let ip: IpAddr = text.parse().unwrap();
            let mut out = Vec::new();
            push_ip(&mut out, ip);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
    }

    fn host_of(parts: &Parts) -> Option<ClientHost> {
        client_host(&parts.headers, &parts.uri)
    }

    #[test]
    fn host_comes_from_the_host_field_or_the_authority() {
        let http1 = request(http::Request::get("/x").header("host", "api.example.com"));
        let http2 = request(http::Request::get("http://api.example.com:8443/x"));
        let bare = request(http::Request::get("/x"));
        let field = HeaderValue::from_static("api.example.com");
        assert_eq!(host_of(&http1), Some(ClientHost::Field(field)));
        let authority = HeaderValue::from_static("api.example.com:8443");
        assert_eq!(host_of(&http2), Some(ClientHost::Set(authority)));
        assert_eq!(host_of(&bare), None);

        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        add(&mut headers, None, host_of(&http2));
        assert_eq!(headers[HOST], "api.example.com:8443");
        assert_eq!(headers[&X_FORWARDED_HOST], "api.example.com:8443");
        assert_eq!(headers[&X_FORWARDED_PROTO], "http");
        assert!(!headers.contains_key(&X_FORWARDED_FOR));

        // The one Host field is kept as it is.
        let mut headers = http1.headers.clone();
        add(&mut headers, None, host_of(&http1));
        assert_eq!(headers.get_all(HOST).iter().count(), 1);
        assert_eq!(headers[HOST], "api.example.com");
        assert_eq!(headers[&X_FORWARDED_HOST], "api.example.com");
    }

    #[test]
    fn several_host_fields_become_the_first() {
        let twice = request(
            http::Request::get("/x")
                .header("host", "a.example.com")
                .header("host", "b.example.com"),
        );
        let mut headers = twice.headers.clone();
        add(&mut headers, None, host_of(&twice));
        assert_eq!(headers.get_all(HOST).iter().count(), 1);
        assert_eq!(headers[HOST], "a.example.com");
        assert_eq!(headers[&X_FORWARDED_HOST], "a.example.com");
    }
}
