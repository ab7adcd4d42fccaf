//! [`Upstream`]: where the gateway forwards to, parsed once from
//! `--upstream URL`, and how a request's target is rewritten onto it.
//!
//! This module owns the URL's rules (what is accepted, and the message
//! when it is not) and the joining of the upstream's base path with the
//! request's path; it knows nothing of headers or connections.

use std::fmt;
use std::str::FromStr;

use http::uri::{Authority, PathAndQuery, Scheme, Uri};

/// The upstream of the gateway: `http://host[:port][/base]` or
/// `https://host[:port][/base]`.
///
/// A request for `/path?query` goes to `http://host:port/base/path?query`:
/// the base path (without its trailing `/`) is put in front of the
/// request's path, and the query is kept as it is.
///
/// ```
/// use tollgate_gateway::Upstream;
///
/// let upstream: Upstream = "http://127.0.0.1:9000/api/".parse().unwrap();
/// let target = upstream.target(&"/v1/users?page=2".parse().unwrap()).unwrap();
/// assert_eq!(target.to_string(), "http://127.0.0.1:9000/api/v1/users?page=2");
///
/// assert!("ftp://example.com".parse::<Upstream>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The base path without its trailing `/`; empty for none.
    base: String,
    /// `scheme://authority/`.
    origin: Uri,
}

/// Why an upstream URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// Not a URL at all.
    #[error("upstream {url:?} is not a URL: {reason}")]
    Syntax {
        /// The text given.
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// A scheme other than `http` and `https`.
    #[error("upstream {url:?}: only http:// and https:// upstreams are supported")]
    Scheme {
        /// The text given.
        url: String,
    },
    /// No host, user information, a query, or anything else that has no
    /// meaning for an upstream.
    #[error("upstream {url:?}: {reason} (expected http[s]://host[:port][/base-path])")]
    Shape {
        /// The text given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A request target that cannot be forwarded (the request is answered
/// `400`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("request target {0:?} cannot be forwarded")]
pub struct InvalidTarget(pub String);

impl FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(url: &str) -> Result<Upstream, UpstreamError> {
        let shape = |reason| UpstreamError::Shape {
            url: url.to_owned(),
            reason,
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| UpstreamError::Syntax {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let scheme = match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP => Scheme::HTTP,
            Some(scheme) if *scheme == Scheme::HTTPS => Scheme::HTTPS,
            Some(_) => {
                return Err(UpstreamError::Scheme {
                    url: url.to_owned(),
                })
            }
            None => return Err(shape("no scheme")),
        };
        let authority = uri.authority().cloned().ok_or_else(|| shape("no host"))?;
        if authority.host().is_empty() {
            return Err(shape("no host"));
        }
        if authority.as_str().contains('@') {
            return Err(shape("user information is not forwarded"));
        }
        if authority.as_str().ends_with(':') {
            return Err(shape("empty port"));
        }
        if uri.query().is_some() || url.contains('#') {
            return Err(shape("a query or fragment has no meaning here"));
        }
        let base = uri.path().trim_end_matches('/').to_owned();
        let origin = Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|_| shape("not an absolute URL"))?;
        Ok(Upstream {
            scheme,
            authority,
            base,
            origin,
        })
    }
}

impl Upstream {
    /// Whether the upstream is spoken to over TLS.
    pub fn is_https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }

    /// The upstream's `host:port` as given.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// `scheme://host:port/`, what a connection is made to.
    pub fn origin(&self) -> &Uri {
        &self.origin
    }

    /// The absolute URI a request for `target` goes to.
    ///
    /// Only the path and query of `target` are used (an HTTP/2 request's
    /// target also carries a scheme and authority, which name the gateway,
    /// not the upstream). An asterisk-form target (`OPTIONS *`) keeps its
    /// `*` when the upstream has no base path.
    pub fn target(&self, target: &Uri) -> Result<Uri, InvalidTarget> {
        self.absolute(&self.origin_form(target)?)
    }

    /// The origin form (`/base/path?query`, or `*`) of the target a
    /// request for `target` goes to, as [`Upstream::target`] without the
    /// scheme and authority: what is written on a connection to the
    /// upstream.
    pub fn origin_form(&self, target: &Uri) -> Result<Uri, InvalidTarget> {
        let invalid = || InvalidTarget(target.to_string());
        let path_and_query = match target.path_and_query() {
            // Without a base path the request's own path and query are
            // used as they are: no copy.
            Some(pq) if self.base.is_empty() => pq.clone(),
            Some(pq) if pq.as_str().starts_with('/') => {
                let mut joined = String::with_capacity(self.base.len() + pq.as_str().len());
                joined.push_str(&self.base);
                joined.push_str(pq.as_str());
                PathAndQuery::from_maybe_shared(joined).map_err(|_| invalid())?
            }
            Some(_) => return Err(invalid()),
            None if self.base.is_empty() => PathAndQuery::from_static("/"),
            None => {
                PathAndQuery::from_maybe_shared(format!("{}/", self.base)).map_err(|_| invalid())?
            }
        };
        Ok(Uri::from(path_and_query))
    }

    /// `origin_form` (from [`Upstream::origin_form`]) made absolute on the
    /// upstream, as the connection pool wants it.
    pub fn absolute(&self, origin_form: &Uri) -> Result<Uri, InvalidTarget> {
        let path_and_query = origin_form
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
            .map_err(|_| InvalidTarget(origin_form.to_string()))
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(url: &str) -> Upstream {
        url.parse().unwrap()
    }

    fn target(upstream: &Upstream, target: &str) -> String {
        upstream
            .target(&target.parse().unwrap())
            .unwrap()
            .to_string()
    }

    #[test]
    fn paths_join_the_base_path_and_keep_the_query() {
        let plain = upstream("http://127.0.0.1:9000");
        assert_eq!(
            target(&plain, "/a/b?x=1&y"),
            "http://127.0.0.1:9000/a/b?x=1&y"
        );
        assert_eq!(target(&plain, "/"), "http://127.0.0.1:9000/");
        let based = upstream("http://up.internal/api/");
        assert_eq!(based.to_string(), "http://up.internal/api");
        assert_eq!(target(&based, "/v1?q"), "http://up.internal/api/v1?q");
        assert_eq!(target(&based, "/"), "http://up.internal/api/");
        // An HTTP/2 request's absolute target names the gateway.
        assert_eq!(
            target(&based, "http://gateway:8000/v1"),
            "http://up.internal/api/v1"
        );
    }

    #[test]
    fn the_origin_form_is_the_target_without_scheme_and_authority() {
        for (base, target) in [
            ("http://up:1", "/a/b?x=1"),
            ("http://up:1/api/", "/v1?q"),
            ("http://up:1/api", "http://gateway:8000/v1"),
            ("http://up:1", "*"),
        ] {
            let upstream = upstream(base);
            let target: Uri = target.parse().unwrap();
            let origin = upstream.origin_form(&target).unwrap();
            assert!(origin.scheme().is_none() && origin.authority().is_none());
            assert_eq!(
                upstream.absolute(&origin).unwrap(),
                upstream.target(&target).unwrap()
            );
        }
        assert_eq!(
            upstream("http://up:1/api/")
                .origin_form(&"/v1?q".parse().unwrap())
                .unwrap(),
            "/api/v1?q"
        );
    }

    #[test]
    fn asterisk_targets_only_without_a_base_path() {
        let asterisk = upstream("http://up:1").target(&"*".parse().unwrap());
        assert_eq!(asterisk.unwrap().path(), "*");
        assert!(upstream("http://up:1/base")
            .target(&"*".parse().unwrap())
            .is_err());
    }

    #[test]
    fn urls_without_meaning_for_an_upstream_are_refused() {
        assert!(upstream("https://example.com/api").is_https());
        assert!(!upstream("http://example.com").is_https());
        for (url, part) in [
            ("ftp://example.com", "only http:// and https://"),
            ("ws://example.com", "ws://"),
            ("example.com:80", "no scheme"),
            ("/just/a/path", "no scheme"),
            ("http://user:pw@example.com", "user information"),
            ("http://example.com/?q=1", "query"),
            ("http://example.com/#top", "fragment"),
            ("http://example.com:", "empty port"),
            ("http://exa mple.com", "not a URL"),
            ("", "not a URL"),
        ] {
            let error = url.parse::<Upstream>().unwrap_err().to_string();
            assert!(error.contains(part), "{url}: {error}");
        }
    }
}
