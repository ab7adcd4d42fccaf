//! Routes: how an HTTP request becomes descriptors, for the gateway and the
//! tower middleware — the `routes:` list of a rules file, a tollgate
//! extension beside `domain` and `descriptors`.
//!
//! This module owns the plain data a route is made of and the matching of
//! its parts against the request (method, host, path, client address; the
//! networks' table is `networks`); `parse` builds routes
//! from YAML and the middleware reads requests (`tollgate-tower`). Routes
//! are tried in file order and the first match wins.

use std::net::IpAddr;

use crate::glob::PathGlob;
use crate::networks::NetworkSet;
use crate::route_cost::{ResponseCost, StatusFilter};

/// The longest header name, host or path a route may name, in bytes.
pub const MAX_ROUTE_TEXT: usize = 1024;

/// One entry of `routes:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `name`: for logs and metrics.
    pub name: Option<String>,
    /// `match`: which requests the route takes.
    pub matcher: RouteMatch,
    /// `enabled` (default true): when false, requests are forwarded with no
    /// check at all.
    pub enabled: bool,
    /// `shadow`: decided and reported, never rejected or delayed.
    pub shadow: bool,
    /// `nodelay` (nginx `nodelay`): `leaky_bucket` admissions are not held.
    pub nodelay: bool,
    /// `delay` (nginx `delay=N`): the first N queued `leaky_bucket`
    /// requests go at once; those after them are held.
    pub delay: u64,
    /// `descriptors`: each a list of actions, making one descriptor.
    pub descriptors: Vec<Vec<Action>>,
    /// `on_missing` (and `on_missing_status`): what happens to a request
    /// that leaves one of the descriptors unbuilt.
    pub on_missing: OnMissing,
    /// `cost`: the estimate a request is counted with, and where its
    /// actual cost comes from.
    pub cost: ResponseCost,
    /// `count_if`: the answers a request counts for; the others are
    /// refunded. `None`: every answer counts.
    pub count_if: Option<StatusFilter>,
    /// The line of the route in its file.
    pub line: usize,
}

impl Route {
    /// The route used when a rules file has no `routes:`: every request,
    /// one descriptor `[remote_address]`.
    pub fn default_route() -> Route {
        Route {
            name: None,
            matcher: RouteMatch::default(),
            enabled: true,
            shadow: false,
            nodelay: false,
            delay: 0,
            descriptors: vec![vec![Action::RemoteAddress]],
            on_missing: OnMissing::Allow,
            cost: ResponseCost::default(),
            count_if: None,
            line: 0,
        }
    }
}

/// `on_missing:` — what a route does with a request from which one of its
/// descriptors cannot be built (an absent header, an unknown client
/// address), `skip_if_absent` entries aside.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OnMissing {
    /// `allow`, the default (envoyproxy/ratelimit's behaviour): the
    /// descriptors that could be built are checked, and a request left with
    /// none is forwarded unchecked.
    #[default]
    Allow,
    /// `deny`: the request is answered with `status` (`on_missing_status`,
    /// 429 by default) and a problem JSON body, neither forwarded nor
    /// counted, so that leaving a key out does not escape its limit.
    Deny {
        /// The status of the answer, 400 to 599.
        status: u16,
    },
}

/// The status `on_missing: deny` answers with unless `on_missing_status`
/// says otherwise.
pub const DEFAULT_MISSING_STATUS: u16 = 429;

/// `match:` — every given field must match; an empty match takes every
/// request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteMatch {
    /// `path`, `path_prefix` or `path_glob`.
    pub path: Option<PathMatch>,
    /// `methods`: upper-case method names; empty means any.
    pub methods: Vec<String>,
    /// `host`: the request's host, without port.
    pub host: Option<HostMatch>,
    /// `client_cidr`: the client address must be in one of these networks.
    pub client_cidr: Option<NetworkSet>,
    /// `not_client_cidr`: the client address must be in none of these
    /// networks.
    pub not_client_cidr: Option<NetworkSet>,
}

impl RouteMatch {
    /// Whether a request with this method, host (without port; `None` when
    /// the request names none) and path (without query) matches, leaving
    /// the client networks aside (see [`RouteMatch::client_matches`]).
    ///
    /// ```
    /// use tollgate_rules::{HostMatch, PathMatch, RouteMatch};
    ///
    /// let m = RouteMatch {
    ///     path: Some(PathMatch::Prefix("/api/".into())),
    ///     methods: vec!["GET".into()],
    ///     host: Some(HostMatch::Subdomain("example.com".into())),
    ///     ..RouteMatch::default()
    /// };
    /// assert!(m.matches("GET", Some("API.Example.com"), "/api/users"));
    /// assert!(!m.matches("POST", Some("api.example.com"), "/api/users"));
    /// assert!(!m.matches("GET", Some("example.com"), "/api/users"));
    /// assert!(!m.matches("GET", None, "/api/users"));
    /// ```
    pub fn matches(&self, method: &str, host: Option<&str>, path: &str) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == method) {
            return false;
        }
        if let Some(want) = &self.host {
            if !host.is_some_and(|h| want.matches(h)) {
                return false;
            }
        }
        self.path.as_ref().is_none_or(|p| p.matches(path))
    }

    /// Whether the route names client networks (`client_cidr` or
    /// `not_client_cidr`), so that matching it needs the client address.
    pub fn names_client_networks(&self) -> bool {
        self.client_cidr.is_some() || self.not_client_cidr.is_some()
    }

    /// Whether a request from `client` (`None`: not known) matches the
    /// route's client networks: inside one of `client_cidr`'s and none of
    /// `not_client_cidr`'s. A route that names networks never takes a
    /// request whose client address is not known.
    ///
    /// ```
    /// use tollgate_rules::{NetworkSet, RouteMatch};
    ///
    /// let m = RouteMatch {
    ///     client_cidr: Some(NetworkSet::parse(["10.0.0.0/8"]).unwrap()),
    ///     not_client_cidr: Some(NetworkSet::parse(["10.9.0.0/16"]).unwrap()),
    ///     ..RouteMatch::default()
    /// };
    /// let ip = |s: &str| Some(s.parse().unwrap());
    /// assert!(m.client_matches(ip("10.1.2.3")));
    /// assert!(!m.client_matches(ip("10.9.2.3")));
    /// assert!(!m.client_matches(ip("192.0.2.1")));
    /// assert!(!m.client_matches(None));
    /// assert!(RouteMatch::default().client_matches(None));
    /// ```
    pub fn client_matches(&self, client: Option<IpAddr>) -> bool {
        if !self.names_client_networks() {
            return true;
        }
        let Some(ip) = client else {
            return false;
        };
        self.client_cidr.as_ref().is_none_or(|n| n.contains(ip))
            && !self
                .not_client_cidr
                .as_ref()
                .is_some_and(|n| n.contains(ip))
    }
}

/// How a route matches the request's path (without the query string, as
/// sent: not percent-decoded).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathMatch {
    /// `path`: exactly this path.
    Exact(String),
    /// `path_prefix`: any path starting with this text (`/api/` takes
    /// `/api/users`, not `/api`).
    Prefix(String),
    /// `path_glob`: `*` within one segment, `**` any number of segments.
    Glob(PathGlob),
}

impl PathMatch {
    /// Whether `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == p,
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
            PathMatch::Glob(g) => g.matches(path),
        }
    }
}

/// How a route matches the request's host, ignoring ASCII case.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostMatch {
    /// `host: api.example.com` — exactly this host (stored lower-case).
    Exact(String),
    /// `host: *.example.com` — any subdomain of `example.com` (stored
    /// lower-case, without `*.`), not `example.com` itself.
    Subdomain(String),
}

impl HostMatch {
    /// Whether `host` (without port) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostMatch::Exact(h) => host.eq_ignore_ascii_case(h),
            HostMatch::Subdomain(parent) => {
                let (host, parent) = (host.as_bytes(), parent.as_bytes());
                host.len() > parent.len() + 1
                    && host[host.len() - parent.len() - 1] == b'.'
                    && host[host.len() - parent.len()..].eq_ignore_ascii_case(parent)
            }
        }
    }
}

/// One action of a route descriptor: where one (key, value) entry comes
/// from. Modelled on Envoy's rate limit actions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// `remote_address` → (`remote_address`, the client IP; forwarding
    /// headers count only from trusted proxies).
    RemoteAddress,
    /// `request_headers` → (`descriptor_key`, the header's value).
    RequestHeader {
        /// The header, lower-case.
        header_name: String,
        /// The entry's key.
        descriptor_key: String,
        /// When the header is absent, leave this entry out instead of the
        /// whole descriptor.
        skip_if_absent: bool,
    },
    /// `generic_key` → (`descriptor_key`, `descriptor_value`), constant.
    GenericKey {
        /// The entry's key (`generic_key` by default).
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
    },
    /// `method` → (`method`, the request method).
    Method,
    /// `path` → (`path`, the path without query).
    Path,
    /// `host` → (`host`, the host without port, lower-case).
    Host,
    /// `api_key` → (`api_key`, the value of `header_name`).
    ApiKey {
        /// The header, lower-case (`x-api-key` by default).
        header_name: String,
    },
}

impl Action {
    /// The key of the entry this action makes.
    pub fn descriptor_key(&self) -> &str {
        match self {
            Action::RemoteAddress => "remote_address",
            Action::RequestHeader { descriptor_key, .. }
            | Action::GenericKey { descriptor_key, .. } => descriptor_key,
            Action::Method => "method",
            Action::Path => "path",
            Action::Host => "host",
            Action::ApiKey { .. } => "api_key",
        }
    }
}
