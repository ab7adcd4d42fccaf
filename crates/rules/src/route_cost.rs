//! What a routed request costs, and which answers count: a route's `cost:`
//! ([`ResponseCost`]) and `count_if:` ([`StatusFilter`]), for the gateway
//! and the tower middleware.
//!
//! This module owns the plain data and the status patterns; reading the
//! actual cost off a response and settling it is the middleware's
//! (`tollgate-tower`), and parsing the YAML is `route_parse`'s.

use std::fmt;

/// A route's `cost:` — the estimate a request is checked and counted with
/// when it arrives, and where its actual cost comes from once the upstream
/// has answered. `Default`: an estimate of 1 and no actual cost (every
/// request costs 1, as without `cost:`).
///
/// ```
/// use tollgate_rules::ResponseCost;
///
/// let cost = ResponseCost::from_header("X-Tokens-Used").with_estimate(500);
/// assert_eq!(cost.estimate, 500);
/// assert_eq!(cost.header.as_deref(), Some("x-tokens-used"));
/// assert!(cost.settles() && !cost.at_body_end());
/// assert!(ResponseCost::from_trailer("x-tokens-used").at_body_end());
/// assert!(!ResponseCost::default().settles());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResponseCost {
    /// `estimate` (default 1, at least 1): the cost checked and counted
    /// when the request arrives, and the cost that stands when the actual
    /// one cannot be read.
    pub estimate: u64,
    /// `from_response_header`: the response header (lower-case) holding the
    /// actual cost, a whole number; read when the answer's head arrives.
    pub header: Option<String>,
    /// `from_response_trailer`: the response trailer (lower-case) holding
    /// the actual cost; read when the answer's body ends.
    pub trailer: Option<String>,
}

impl Default for ResponseCost {
    fn default() -> Self {
        ResponseCost {
            estimate: 1,
            header: None,
            trailer: None,
        }
    }
}

impl ResponseCost {
    /// The actual cost from the response header `name`; estimate 1.
    pub fn from_header(name: &str) -> ResponseCost {
        ResponseCost {
            header: Some(name.to_ascii_lowercase()),
            ..ResponseCost::default()
        }
    }

    /// The actual cost from the response trailer `name`; estimate 1.
    pub fn from_trailer(name: &str) -> ResponseCost {
        ResponseCost {
            trailer: Some(name.to_ascii_lowercase()),
            ..ResponseCost::default()
        }
    }

    /// The same with `estimate` (at least 1: an estimate of 0 would be a
    /// peek, admitting a request whatever the limit says).
    pub fn with_estimate(mut self, estimate: u64) -> ResponseCost {
        self.estimate = estimate.max(1);
        self
    }

    /// Whether the actual cost is read from the response.
    pub fn settles(&self) -> bool {
        self.header.is_some() || self.trailer.is_some()
    }

    /// Whether the actual cost is known only when the body ends (a trailer
    /// is read).
    pub fn at_body_end(&self) -> bool {
        self.trailer.is_some()
    }
}

/// `count_if: {status: [...]}` — the answers a request is counted for:
/// an answer whose status matches none of the patterns is refunded (settled
/// with cost 0).
///
/// ```
/// use tollgate_rules::StatusFilter;
///
/// let filter = StatusFilter::parse(["5xx", "429", "200"]).unwrap();
/// assert!(filter.matches(503) && filter.matches(429) && filter.matches(200));
/// assert!(!filter.matches(201) && !filter.matches(404));
/// assert!(StatusFilter::parse(["6xx"]).is_err());
/// assert!(StatusFilter::parse(Vec::<&str>::new()).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StatusFilter {
    patterns: Vec<StatusPattern>,
}

/// One pattern of a [`StatusFilter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusPattern {
    /// One status, 100 to 599 (`429`).
    Code(u16),
    /// A class, 1 to 5 (`5xx`).
    Class(u8),
}

impl StatusPattern {
    /// `429`, `5xx` (or `5XX`); `None` for anything else.
    pub fn parse(text: &str) -> Option<StatusPattern> {
        let bytes = text.as_bytes();
        if bytes.len() != 3 || !(b'1'..=b'5').contains(&bytes[0]) {
            return None;
        }
        let class = bytes[0] - b'0';
        if bytes[1..].eq_ignore_ascii_case(b"xx") {
            return Some(StatusPattern::Class(class));
        }
        if bytes[1..].iter().all(u8::is_ascii_digit) {
            let code = u16::from(class) * 100
                + u16::from(bytes[1] - b'0') * 10
                + u16::from(bytes[2] - b'0');
            return Some(StatusPattern::Code(code));
        }
        None
    }

    /// Whether `status` matches.
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusPattern::Code(code) => status == code,
            StatusPattern::Class(class) => status / 100 == u16::from(class),
        }
    }
}

impl fmt::Display for StatusPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusPattern::Code(code) => write!(f, "{code}"),
            StatusPattern::Class(class) => write!(f, "{class}xx"),
        }
    }
}

/// A status pattern that does not parse, or an empty list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidStatus {
    /// The pattern, as given.
    #[error("{0:?} is not a status: give a code from 100 to 599 (429) or a class (5xx)")]
    Pattern(String),
    /// No pattern at all.
    #[error("must list at least one status")]
    Empty,
}

impl StatusFilter {
    /// The filter of these patterns (see [`StatusPattern::parse`]).
    pub fn parse<'a>(
        patterns: impl IntoIterator<Item = &'a str>,
    ) -> Result<StatusFilter, InvalidStatus> {
        let patterns = patterns
            .into_iter()
            .map(|p| StatusPattern::parse(p).ok_or_else(|| InvalidStatus::Pattern(p.to_owned())))
            .collect::<Result<Vec<_>, _>>()?;
        if patterns.is_empty() {
            return Err(InvalidStatus::Empty);
        }
        Ok(StatusFilter { patterns })
    }

    /// Whether an answer of `status` counts.
    pub fn matches(&self, status: u16) -> bool {
        self.patterns.iter().any(|p| p.matches(status))
    }

    /// The patterns, in the order given.
    pub fn patterns(&self) -> &[StatusPattern] {
        &self.patterns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_codes_or_classes() {
        assert_eq!(StatusPattern::parse("429"), Some(StatusPattern::Code(429)));
        assert_eq!(StatusPattern::parse("5xx"), Some(StatusPattern::Class(5)));
        assert_eq!(StatusPattern::parse("2XX"), Some(StatusPattern::Class(2)));
        for bad in [
            "", "6xx", "0xx", "600", "099", "5x", "5xxx", "4x9", "abc", "+429",
        ] {
            assert_eq!(StatusPattern::parse(bad), None, "{bad}");
        }
        assert!(StatusPattern::Class(5).matches(599) && !StatusPattern::Class(5).matches(600));
        assert_eq!(StatusPattern::Class(4).to_string(), "4xx");
    }
}
