//! Which route of a domain takes a request: the first in file order whose
//! `match` fits the request's method, host, path and client address; every
//! request goes to the default route (`[remote_address]`) when the file has
//! no `routes:`.
//!
//! This module owns reading those things off an `http` request; the
//! matching itself is the rules crate's (`RouteMatch::matches` and
//! `RouteMatch::client_matches`). The client address is the caller's (the
//! trusted-proxies walk, ungrouped), asked for only when a route names
//! client networks.

use std::cell::OnceCell;
use std::net::IpAddr;
use std::sync::LazyLock;

use http::request::Parts;
use tollgate_rules::{Domain, Route};

/// The route of a rules file without `routes:`.
static DEFAULT_ROUTE: LazyLock<Route> = LazyLock::new(Route::default_route);

/// The route that takes the request, if any; `client` gives the request's
/// client address (`None`: not known).
pub(crate) fn select<'r>(
    domain: &'r Domain,
    parts: &Parts,
    client: impl Fn() -> Option<IpAddr>,
) -> Option<&'r Route> {
    let Some(routes) = domain.routes() else {
        return Some(&DEFAULT_ROUTE);
    };
    // The host only when a route asks for it: reading it takes a header
    // lookup and a UTF-8 check, on every request, for routes that mostly
    // match by path.
    let host = OnceCell::new();
    let method = parts.method.as_str();
    let path = parts.uri.path();
    routes.iter().find(|r| {
        let host = match r.matcher.host {
            Some(_) => *host.get_or_init(|| request_host(parts)),
            None => None,
        };
        r.matcher.matches(method, host, path)
            && (!r.matcher.names_client_networks() || r.matcher.client_matches(client()))
    })
}

/// The host a request names, without port: the URI's authority (HTTP/2,
/// absolute-form requests), else the `Host` header. IPv6 literals keep
/// their brackets.
pub(crate) fn request_host(parts: &Parts) -> Option<&str> {
    if let Some(host) = parts.uri.host() {
        return Some(host);
    }
    let value = parts.headers.get(http::header::HOST)?.to_str().ok()?;
    let host = if value.starts_with('[') {
        value.find(']').map_or(value, |end| &value[..=end])
    } else {
        value.rsplit_once(':').map_or(value, |(host, _)| host)
    };
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, host: Option<&str>) -> Parts {
        let mut builder = http::Request::builder().uri(uri);
        if let Some(h) = host {
            builder = builder.header("host", h);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn hosts_come_from_the_authority_or_the_host_header_without_port() {
        assert_eq!(
            request_host(&parts("http://a.example:81/x", Some("b"))),
            Some("a.example")
        );
        assert_eq!(
            request_host(&parts("/x", Some("b.example:8080"))),
            Some("b.example")
        );
        assert_eq!(
            request_host(&parts("/x", Some("[::1]:8080"))),
            Some("[::1]")
        );
        assert_eq!(
            request_host(&parts("/x", Some("c.example"))),
            Some("c.example")
        );
        assert_eq!(request_host(&parts("/x", Some(":80"))), None);
        assert_eq!(request_host(&parts("/x", None)), None);
    }
}
