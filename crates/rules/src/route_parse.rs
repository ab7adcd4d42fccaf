//! The schema of `routes:`: YAML into [`Route`]s, every error with its
//! place, unknown fields refused, every text bounded.
//!
//! This module owns which fields a route, its `match` and its actions take
//! and the checks made on them at load; the types are `route`, the rest of
//! the file's schema is `parse`.

use crate::error::{ErrorKind, Location};
use crate::glob::{GlobError, PathGlob};
use crate::networks::NetworkSet;
use crate::parse::{FileParser, Result};
use crate::route::{
    Action, HostMatch, OnMissing, PathMatch, Route, RouteMatch, DEFAULT_MISSING_STATUS,
    MAX_ROUTE_TEXT,
};
use crate::route_cost::{ResponseCost, StatusFilter, StatusPattern};
use crate::yaml::{Node, Value};

const ROUTE_FIELDS: &[&str] = &[
    "name",
    "match",
    "enabled",
    "shadow",
    "nodelay",
    "delay",
    "descriptors",
    "on_missing",
    "on_missing_status",
    "cost",
    "count_if",
];
const COST_FIELDS: &[&str] = &["estimate", "from_response_header", "from_response_trailer"];
const COUNT_IF_FIELDS: &[&str] = &["status"];
const MATCH_FIELDS: &[&str] = &[
    "path",
    "path_prefix",
    "path_glob",
    "methods",
    "host",
    "client_cidr",
    "not_client_cidr",
];
const REQUEST_HEADERS_FIELDS: &[&str] = &["header_name", "descriptor_key", "skip_if_absent"];
const GENERIC_KEY_FIELDS: &[&str] = &["descriptor_value", "descriptor_key"];
const API_KEY_FIELDS: &[&str] = &["header_name"];
const NO_FIELDS: &[&str] = &[];

/// The expected-fields text of the lists above, for unknown-field errors.
pub(crate) fn expected_route_fields(allowed: &'static [&'static str]) -> &'static str {
    match allowed {
        a if a == ROUTE_FIELDS => {
            "name, match, enabled, shadow, nodelay, delay, descriptors, on_missing, on_missing_status, cost, count_if"
        }
        a if a == COST_FIELDS => "estimate, from_response_header, from_response_trailer",
        a if a == COUNT_IF_FIELDS => "status",
        a if a == MATCH_FIELDS => {
            "path, path_prefix, path_glob, methods, host, client_cidr, not_client_cidr"
        }
        a if a == REQUEST_HEADERS_FIELDS => "header_name, descriptor_key, skip_if_absent",
        a if a == GENERIC_KEY_FIELDS => "descriptor_value, descriptor_key",
        a if a == API_KEY_FIELDS => "header_name",
        _ => "none; the action takes no fields",
    }
}

impl FileParser<'_> {
    /// The `routes:` list.
    pub(crate) fn routes(&self, list: &Node) -> Result<Vec<Route>> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type("routes", "a list of routes", list));
        };
        items.iter().map(|item| self.route(item)).collect()
    }

    fn route(&self, node: &Node) -> Result<Route> {
        let f = self.fields(node, "routes", "a route", ROUTE_FIELDS)?;
        let name = match f.get("name") {
            Some(n) => Some(self.bounded_string("name", n)?).filter(|s| !s.is_empty()),
            None => None,
        };
        let matcher = match f.get("match") {
            Some(m) => self.route_match(m)?,
            None => RouteMatch::default(),
        };
        let enabled = match f.get("enabled") {
            Some(_) => self.flag(&f, "enabled")?,
            None => true,
        };
        let shadow = self.flag(&f, "shadow")?;
        let nodelay = self.flag(&f, "nodelay")?;
        let delay = match f.get("delay") {
            Some(d) => self.number("delay", d, 0, u64::from(u32::MAX))?,
            None => 0,
        };
        if nodelay && f.get("delay").is_some() {
            let at = f.key_at("delay").unwrap_or(f.at);
            return Err(self.err(at, ErrorKind::NodelayAndDelay));
        }
        let descriptors = match f.get("descriptors") {
            Some(list) => self.route_descriptors(list)?,
            None if !enabled => Vec::new(),
            None => {
                return Err(self.err(
                    f.at,
                    ErrorKind::MissingField {
                        field: "descriptors",
                        context: "an enabled route",
                    },
                ))
            }
        };
        let on_missing = self.on_missing(&f)?;
        let cost = match f.get("cost") {
            Some(node) => self.cost(node)?,
            None => ResponseCost::default(),
        };
        let count_if = match f.get("count_if") {
            Some(node) => Some(self.count_if(node)?),
            None => None,
        };
        Ok(Route {
            name,
            matcher,
            enabled,
            shadow,
            nodelay,
            delay,
            descriptors,
            on_missing,
            cost,
            count_if,
            line: f.at.line,
        })
    }

    /// `cost: {estimate, from_response_header, from_response_trailer}`.
    fn cost(&self, node: &Node) -> Result<ResponseCost> {
        let f = self.fields(node, "cost", "a route's cost", COST_FIELDS)?;
        let estimate = match f.get("estimate") {
            Some(n) => self.number("estimate", n, 1, u64::MAX)?,
            None => 1,
        };
        let name = |field| match f.get(field) {
            Some(n) => self.header_name_of(field, n).map(Some),
            None => Ok(None),
        };
        Ok(ResponseCost {
            estimate,
            header: name("from_response_header")?,
            trailer: name("from_response_trailer")?,
        })
    }

    /// `count_if: {status: [...]}`: codes (`429`) and classes (`5xx`).
    fn count_if(&self, node: &Node) -> Result<StatusFilter> {
        let f = self.fields(node, "count_if", "a route's count_if", COUNT_IF_FIELDS)?;
        let Some(list) = f.get("status") else {
            return Err(self.err(
                f.at,
                ErrorKind::MissingField {
                    field: "status",
                    context: "a route's count_if",
                },
            ));
        };
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type("status", "a list of statuses such as [5xx, 429]", list));
        };
        let mut texts = Vec::with_capacity(items.len());
        for item in items {
            let text = self.bounded_string("status", item)?;
            if StatusPattern::parse(&text).is_none() {
                return Err(self.invalid(
                    item.at,
                    "status",
                    crate::route_cost::InvalidStatus::Pattern(text).to_string(),
                ));
            }
            texts.push(text);
        }
        StatusFilter::parse(texts.iter().map(String::as_str))
            .map_err(|e| self.invalid(list.at, "status", e.to_string()))
    }

    /// `on_missing` (`allow` or `deny`) and `on_missing_status` (only with
    /// `deny`, 400 to 599).
    fn on_missing(&self, f: &crate::parse::Fields<'_>) -> Result<OnMissing> {
        let deny = match f.get("on_missing") {
            None => false,
            Some(node) => match self.string("on_missing", node)?.as_str() {
                "allow" => false,
                "deny" => true,
                other => {
                    return Err(self.err(
                        node.at,
                        ErrorKind::InvalidRouteValue {
                            field: "on_missing",
                            reason: format!("{other:?} is neither `allow` nor `deny`"),
                        },
                    ))
                }
            },
        };
        let status = match f.get("on_missing_status") {
            Some(node) if !deny => {
                return Err(self.err(
                    node.at,
                    ErrorKind::InvalidRouteValue {
                        field: "on_missing_status",
                        reason: "is only taken with `on_missing: deny`".to_string(),
                    },
                ))
            }
            Some(node) => self.number("on_missing_status", node, 400, 599)?,
            None => u64::from(DEFAULT_MISSING_STATUS),
        };
        Ok(if deny {
            OnMissing::Deny {
                // 400 to 599 fits.
                status: u16::try_from(status).unwrap_or(DEFAULT_MISSING_STATUS),
            }
        } else {
            OnMissing::Allow
        })
    }

    fn route_match(&self, node: &Node) -> Result<RouteMatch> {
        let f = self.fields(node, "match", "a route's match", MATCH_FIELDS)?;
        let mut path = None;
        for field in ["path", "path_prefix", "path_glob"] {
            let Some(n) = f.get(field) else { continue };
            if path.is_some() {
                let at = f.key_at(field).unwrap_or(f.at);
                return Err(self.err(at, ErrorKind::SeveralPathMatches));
            }
            let text = self.bounded_string(field, n)?;
            let invalid = |reason: &str| {
                self.err(
                    n.at,
                    ErrorKind::InvalidRouteValue {
                        field,
                        reason: format!("{text:?} {reason}"),
                    },
                )
            };
            path = Some(match field {
                "path_glob" => PathMatch::Glob(PathGlob::parse(&text).map_err(|e| match e {
                    GlobError::NotAbsolute => invalid("does not start with `/`"),
                    GlobError::MixedDoubleStar => {
                        invalid("puts `**` beside other characters; `**` must be a whole segment")
                    }
                })?),
                _ if !text.starts_with('/') => return Err(invalid("does not start with `/`")),
                "path" => PathMatch::Exact(text),
                _ => PathMatch::Prefix(text),
            });
        }
        let methods = match f.get("methods") {
            Some(list) => self.methods(list)?,
            None => Vec::new(),
        };
        let host = match f.get("host") {
            Some(n) => Some(self.host(n)?),
            None => None,
        };
        let networks = |field| match f.get(field) {
            Some(list) => self.networks(field, list).map(Some),
            None => Ok(None),
        };
        Ok(RouteMatch {
            path,
            methods,
            host,
            client_cidr: networks("client_cidr")?,
            not_client_cidr: networks("not_client_cidr")?,
        })
    }

    /// A `client_cidr` or `not_client_cidr` list: CIDRs or addresses, at
    /// least one; an error points at the bad entry.
    fn networks(&self, field: &'static str, list: &Node) -> Result<NetworkSet> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type(field, "a list of networks such as 10.0.0.0/8", list));
        };
        if items.is_empty() {
            return Err(self.invalid(list.at, field, "must list at least one network".into()));
        }
        let mut entries = Vec::with_capacity(items.len());
        for item in items {
            let text = self.bounded_string(field, item)?;
            // Each entry on its own first, so an error names its place.
            NetworkSet::parse([text.as_str()])
                .map_err(|e| self.invalid(item.at, field, e.to_string()))?;
            entries.push(text);
        }
        NetworkSet::parse(entries.iter().map(String::as_str))
            .map_err(|e| self.invalid(list.at, field, e.to_string()))
    }

    fn methods(&self, list: &Node) -> Result<Vec<String>> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type("methods", "a list of methods", list));
        };
        if items.is_empty() {
            return Err(self.invalid(list.at, "methods", "must list at least one method".into()));
        }
        items
            .iter()
            .map(|item| {
                let method = self.bounded_string("methods", item)?;
                if method.is_empty() || !method.bytes().all(is_token_byte) {
                    return Err(self.invalid(
                        item.at,
                        "methods",
                        format!("{method:?} is not an HTTP method"),
                    ));
                }
                if method.bytes().any(|b| b.is_ascii_lowercase()) {
                    return Err(self.invalid(
                        item.at,
                        "methods",
                        format!(
                            "{method:?}: methods are case-sensitive; write {:?}",
                            method.to_ascii_uppercase()
                        ),
                    ));
                }
                Ok(method)
            })
            .collect()
    }

    fn host(&self, node: &Node) -> Result<HostMatch> {
        let text = self.bounded_string("host", node)?;
        let invalid = |reason: &str| self.invalid(node.at, "host", format!("{text:?} {reason}"));
        let (subdomain, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        if name.is_empty() {
            return Err(invalid("names no host"));
        }
        if name.contains('*') {
            return Err(invalid("may only start with `*.`"));
        }
        if name.contains('/') || (name.contains(':') && !name.starts_with('[')) {
            return Err(invalid(
                "is matched without port or path; give the host name only",
            ));
        }
        let name = name.to_ascii_lowercase();
        Ok(if subdomain {
            HostMatch::Subdomain(name)
        } else {
            HostMatch::Exact(name)
        })
    }

    fn route_descriptors(&self, list: &Node) -> Result<Vec<Vec<Action>>> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type(
                "descriptors",
                "a list of descriptors, each a list of actions",
                list,
            ));
        };
        if items.is_empty() {
            return Err(self.invalid(
                list.at,
                "descriptors",
                "must list at least one descriptor".into(),
            ));
        }
        items
            .iter()
            .map(|item| {
                let Value::Sequence(actions) = &item.value else {
                    return Err(self.wrong_type("descriptors", "a list of actions", item));
                };
                if actions.is_empty() {
                    return Err(self.invalid(
                        item.at,
                        "descriptors",
                        "a descriptor needs at least one action".into(),
                    ));
                }
                actions.iter().map(|a| self.action(a)).collect()
            })
            .collect()
    }

    /// One action: a bare name (`remote_address`) or a mapping with one
    /// key, the action's name, whose value holds its fields.
    fn action(&self, node: &Node) -> Result<Action> {
        let (name, name_at, body) = match &node.value {
            Value::Scalar { text, .. } => (text.as_str(), node.at, None),
            Value::Mapping(pairs) if pairs.len() == 1 => {
                let (key, value) = &pairs[0];
                let Value::Scalar { text, .. } = &key.value else {
                    return Err(self.err(key.at, ErrorKind::NonStringKey));
                };
                (text.as_str(), key.at, Some(value).filter(|v| !v.is_null()))
            }
            _ => {
                return Err(self.wrong_type(
                    "descriptors",
                    "an action name or a mapping with one action",
                    node,
                ))
            }
        };
        let context = match name {
            "remote_address" | "method" | "path" | "host" => "an action without fields",
            "request_headers" => "a request_headers action",
            "generic_key" => "a generic_key action",
            "api_key" => "an api_key action",
            _ => {
                return Err(self.err(
                    name_at,
                    ErrorKind::UnknownAction {
                        action: name.to_owned(),
                    },
                ))
            }
        };
        let allowed = match name {
            "request_headers" => REQUEST_HEADERS_FIELDS,
            "generic_key" => GENERIC_KEY_FIELDS,
            "api_key" => API_KEY_FIELDS,
            _ => NO_FIELDS,
        };
        let f = match body {
            Some(body) => Some(self.fields(body, name, context, allowed)?),
            None => None,
        };
        let field = |n: &str| f.as_ref().and_then(|f| f.get(n));
        let missing = |field: &'static str| {
            self.err(
                f.as_ref().map_or(name_at, |f| f.at),
                ErrorKind::MissingField { field, context },
            )
        };
        Ok(match name {
            "remote_address" => Action::RemoteAddress,
            "method" => Action::Method,
            "path" => Action::Path,
            "host" => Action::Host,
            "request_headers" => {
                let header = field("header_name").ok_or_else(|| missing("header_name"))?;
                let key = field("descriptor_key").ok_or_else(|| missing("descriptor_key"))?;
                let descriptor_key = self.nonempty("descriptor_key", key)?;
                Action::RequestHeader {
                    header_name: self.header_name(header)?,
                    descriptor_key,
                    skip_if_absent: match &f {
                        Some(f) => self.flag(f, "skip_if_absent")?,
                        None => false,
                    },
                }
            }
            "generic_key" => {
                let value = field("descriptor_value").ok_or_else(|| missing("descriptor_value"))?;
                Action::GenericKey {
                    descriptor_value: self.nonempty("descriptor_value", value)?,
                    descriptor_key: match field("descriptor_key") {
                        Some(k) => self.nonempty("descriptor_key", k)?,
                        None => "generic_key".to_owned(),
                    },
                }
            }
            _ => Action::ApiKey {
                header_name: match field("header_name") {
                    Some(h) => self.header_name(h)?,
                    None => "x-api-key".to_owned(),
                },
            },
        })
    }

    /// A header name: an HTTP token, stored lower-case.
    fn header_name(&self, node: &Node) -> Result<String> {
        self.header_name_of("header_name", node)
    }

    /// The header name of `field`: an HTTP token, stored lower-case.
    fn header_name_of(&self, field: &'static str, node: &Node) -> Result<String> {
        let name = self.bounded_string(field, node)?;
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(self.invalid(
                node.at,
                field,
                format!("{name:?} is not an HTTP header name"),
            ));
        }
        Ok(name.to_ascii_lowercase())
    }

    fn nonempty(&self, field: &'static str, node: &Node) -> Result<String> {
        let text = self.bounded_string(field, node)?;
        if text.is_empty() {
            return Err(self.invalid(node.at, field, "must not be empty".into()));
        }
        Ok(text)
    }

    /// A string of at most [`MAX_ROUTE_TEXT`] bytes.
    fn bounded_string(&self, field: &'static str, node: &Node) -> Result<String> {
        let text = self.string(field, node)?;
        if text.len() > MAX_ROUTE_TEXT {
            return Err(self.invalid(
                node.at,
                field,
                format!(
                    "is {} bytes long; at most {MAX_ROUTE_TEXT} are allowed",
                    text.len()
                ),
            ));
        }
        Ok(text)
    }

    fn invalid(
        &self,
        at: Location,
        field: &'static str,
        reason: String,
    ) -> crate::error::RulesError {
        self.err(at, ErrorKind::InvalidRouteValue { field, reason })
    }
}

/// An RFC 9110 token character (method and header names).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
