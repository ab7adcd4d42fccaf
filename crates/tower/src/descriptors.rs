//! A route's actions applied to a request: the descriptors it is checked
//! under, with values borrowed from the request where they can be.
//!
//! This module owns what each [`Action`] reads and the bounds on what a
//! request can put into a key: a value longer than the configured cap is
//! cut to it, so no header can make an unbounded key (and a too-long value
//! cannot slip out of its limit either: it still counts, under its first
//! bytes). A descriptor whose value is missing — an absent or non-text
//! header, no host, an unknown peer — is not generated, unless its action
//! says `skip_if_absent` (then only that entry is left out).

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use http::request::Parts;
use tollgate_rules::Action;

use crate::route::request_host;

/// The longest value of a descriptor entry taken from a request, by
/// default (the decision service's key limit).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1024;

/// An IP address written as text without allocating (the longest, an
/// IPv4-mapped IPv6 address, takes 45 bytes).
#[derive(Clone, Copy)]
pub(crate) struct IpText {
    buf: [u8; 48],
    len: usize,
}

impl IpText {
    pub(crate) fn new(ip: IpAddr) -> IpText {
        let mut text = IpText {
            buf: [0; 48],
            len: 0,
        };
        match ip {
            // The common case without core::fmt, which cost more than the
            // rest of a descriptor.
            IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        let _ = text.write_str(".");
                    }
                    let _ = text.write_str(itoa::Buffer::new().format(octet));
                }
            }
            // An address always fits, so the write cannot fail.
            IpAddr::V6(v6) => {
                let _ = write!(text, "{v6}");
            }
        }
        text
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let room = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// One entry's value.
pub(crate) enum Value<'a> {
    /// Borrowed from the request or the route.
    Text(&'a str),
    /// A host with upper-case letters, lower-cased.
    Owned(String),
    /// The client IP.
    Ip(IpText),
}

impl AsRef<str> for Value<'_> {
    fn as_ref(&self) -> &str {
        match self {
            Value::Text(s) => s,
            Value::Owned(s) => s,
            Value::Ip(ip) => ip.as_str(),
        }
    }
}

/// One descriptor: (key, value) entries, a `tollgate_rules::Descriptor`.
pub(crate) type Entries<'a> = Vec<(&'a str, Value<'a>)>;

/// A descriptor could not be built: an action's value is missing from the
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Missing;

/// The descriptors a route's actions made of a request.
pub(crate) struct Built<'a> {
    /// Those that could be built, in order.
    pub(crate) descriptors: Vec<Entries<'a>>,
    /// At least one could not (see [`Missing`]).
    pub(crate) missing: bool,
}

/// What a request offers to actions.
pub(crate) struct RequestView<'a> {
    pub(crate) parts: &'a Parts,
    pub(crate) client_ip: Option<IpAddr>,
    pub(crate) max_value_bytes: usize,
}

impl<'a> RequestView<'a> {
    /// The descriptors `actions` make of this request, in order; those
    /// with a missing value left out, and whether there was one.
    pub(crate) fn descriptors(&self, actions: &'a [Vec<Action>]) -> Built<'a> {
        let mut built = Built {
            descriptors: Vec::with_capacity(actions.len()),
            missing: false,
        };
        for descriptor in actions {
            match self.descriptor(descriptor) {
                Ok(Some(entries)) => built.descriptors.push(entries),
                Ok(None) => {}
                Err(Missing) => built.missing = true,
            }
        }
        built
    }

    /// One descriptor; `Err` when a value is missing. A descriptor left
    /// with no entries (every one skipped) is `None`: not generated, but
    /// not missing either.
    pub(crate) fn descriptor(&self, actions: &'a [Action]) -> Result<Option<Entries<'a>>, Missing> {
        let mut entries = Vec::with_capacity(actions.len());
        for action in actions {
            match self.value(action) {
                Some(value) => entries.push((action.descriptor_key(), value)),
                None if matches!(
                    action,
                    Action::RequestHeader {
                        skip_if_absent: true,
                        ..
                    }
                ) => {}
                None => return Err(Missing),
            }
        }
        Ok((!entries.is_empty()).then_some(entries))
    }

    /// The value `action` reads from the request; `None` when missing.
    pub(crate) fn value(&self, action: &'a Action) -> Option<Value<'a>> {
        let parts = self.parts;
        match action {
            Action::RemoteAddress => self.client_ip.map(|ip| Value::Ip(IpText::new(ip))),
            Action::RequestHeader { header_name, .. } | Action::ApiKey { header_name } => {
                let value = parts.headers.get(header_name.as_str())?.to_str().ok()?;
                Some(Value::Text(self.capped(value)))
            }
            Action::GenericKey {
                descriptor_value, ..
            } => Some(Value::Text(descriptor_value)),
            Action::Method => Some(Value::Text(parts.method.as_str())),
            Action::Path => Some(Value::Text(self.capped(parts.uri.path()))),
            Action::Host => {
                let host = self.capped(request_host(parts)?);
                Some(if host.bytes().any(|b| b.is_ascii_uppercase()) {
                    Value::Owned(host.to_ascii_lowercase())
                } else {
                    Value::Text(host)
                })
            }
        }
    }

    /// `value`, cut to the cap (at a character boundary).
    fn capped(&self, value: &'a str) -> &'a str {
        if value.len() <= self.max_value_bytes {
            return value;
        }
        let mut end = self.max_value_bytes;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        &value[..end]
    }
}

/// The entries joined as a store key: each key and value length-prefixed,
/// so no two different entry lists make the same key.
pub(crate) fn write_key(entries: &[(&str, Value<'_>)], key: &mut Vec<u8>) {
    for (k, v) in entries {
        for part in [*k, v.as_ref()] {
            // Writing into a Vec cannot fail.
            let _ = std::io::Write::write_fmt(key, format_args!("{}:", part.len()));
            key.extend_from_slice(part.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_display_writes_them() {
        for text in [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.100.9",
            "::1",
            "::ffff:192.0.2.1",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(IpText::new(ip).as_str(), ip.to_string());
        }
    }

    #[test]
    fn ip_text_fits_every_address() {
        for ip in [
            "255.255.255.255",
            "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
            "::1",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(IpText::new(parsed).as_str(), parsed.to_string());
        }
    }
}
