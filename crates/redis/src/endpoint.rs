//! Where the Redis store connects: [`Endpoint`], parsed from the URL given
//! to `tollgate serve --store`.

use std::fmt;
use std::str::FromStr;

/// A Redis deployment.
#[derive(Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// One server (or a primary behind a proxy): `redis://`, `rediss://`
    /// (TLS), `unix://` or `redis+unix://` (a socket path).
    Single(String),
    /// A Redis Cluster, from any of its nodes:
    /// `redis+cluster://[user:password@]host:port,host:port,…` (or
    /// `rediss+cluster://` for TLS). Each seed becomes a node URL.
    Cluster(Vec<String>),
}

/// An unusable store URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Redis URL {url:?}: {reason}")]
pub struct EndpointError {
    /// The URL as given, with any password masked.
    pub url: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

const SINGLE_SCHEMES: [&str; 4] = ["redis://", "rediss://", "unix://", "redis+unix://"];
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(url: &str) -> Result<Endpoint, EndpointError> {
        let fail = |reason| EndpointError {
            url: masked(url),
            reason,
        };
        if let Some((scheme, node_scheme)) = CLUSTER_SCHEMES
            .iter()
            .find(|(scheme, _)| url.starts_with(scheme))
        {
            let rest = &url[scheme.len()..];
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((auth, hosts)) => (Some(auth), hosts),
                None => (None, rest),
            };
            if hosts.contains('/') || hosts.contains('?') {
                return Err(fail("a cluster URL has no database or options"));
            }
            let nodes: Vec<String> = hosts
                .split(',')
                .map(|host| match auth {
                    Some(auth) => format!("{node_scheme}{auth}@{host}"),
                    None => format!("{node_scheme}{host}"),
                })
                .collect();
            if hosts.split(',').any(|h| h.is_empty() || !h.contains(':')) {
                return Err(fail("every cluster seed needs host:port"));
            }
            return Ok(Endpoint::Cluster(nodes));
        }
        if !SINGLE_SCHEMES.iter().any(|s| url.starts_with(s)) {
            return Err(fail(
                "the scheme must be redis://, rediss://, unix://, redis+unix://, redis+cluster:// or rediss+cluster://",
            ));
        }
        redis::Client::open(url).map_err(|_| fail("not a Redis URL"))?;
        Ok(Endpoint::Single(url.to_owned()))
    }
}

impl Endpoint {
    /// Whether connections are TLS (`rediss://`, `rediss+cluster://`).
    pub fn is_tls(&self) -> bool {
        match self {
            Endpoint::Single(url) => url.starts_with("rediss://"),
            Endpoint::Cluster(nodes) => nodes.iter().all(|n| n.starts_with("rediss://")),
        }
    }

    /// The URL as an operator wrote it, for messages: passwords masked, and
    /// a cluster's credentials left out.
    pub(crate) fn masked_url(&self) -> String {
        match self {
            Endpoint::Single(url) => masked(url),
            Endpoint::Cluster(nodes) => {
                let scheme = match self.is_tls() {
                    true => "rediss+cluster://",
                    false => "redis+cluster://",
                };
                let hosts: Vec<&str> = nodes
                    .iter()
                    .map(|node| {
                        node.split_once("://")
                            .map_or(node.as_str(), |(_, rest)| rest)
                    })
                    .map(|rest| rest.rsplit_once('@').map_or(rest, |(_, host)| host))
                    .collect();
                format!("{scheme}{}", hosts.join(","))
            }
        }
    }
}

/// `url` with the password between `:` and `@` replaced by `***`.
fn masked(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[start..];
    match (rest.rfind('@'), rest.find(':')) {
        (Some(at), Some(colon)) if colon < at => {
            format!("{}{}:***{}", &url[..start], &rest[..colon], &rest[at..])
        }
        _ => url.to_owned(),
    }
}

impl fmt::Debug for Endpoint {
    /// Passwords are masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Single(url) => write!(f, "Single({})", masked(url)),
            Endpoint::Cluster(nodes) => {
                let nodes: Vec<String> = nodes.iter().map(|n| masked(n)).collect();
                write!(f, "Cluster({})", nodes.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_node_urls() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://:secret@host:6380/2",
            "rediss://host:6380",
            "unix:///run/redis.sock",
            "redis+unix:///run/redis.sock",
        ] {
            assert_eq!(url.parse(), Ok(Endpoint::Single(url.to_owned())), "{url}");
        }
    }

    #[test]
    fn cluster_urls_become_node_urls() {
        assert_eq!(
            "redis+cluster://a:7000,b:7001/".parse(),
            Ok(Endpoint::Cluster(vec![
                "redis://a:7000".to_owned(),
                "redis://b:7001".to_owned()
            ]))
        );
        assert_eq!(
            "rediss+cluster://u:p@a:7000,b:7001".parse(),
            Ok(Endpoint::Cluster(vec![
                "rediss://u:p@a:7000".to_owned(),
                "rediss://u:p@b:7001".to_owned()
            ]))
        );
    }

    #[test]
    fn tls_endpoints_are_known_and_masked_for_messages() {
        let tls: Endpoint = "rediss+cluster://u:pw@a:7000,b:7001".parse().unwrap();
        assert!(tls.is_tls());
        assert_eq!(tls.masked_url(), "rediss+cluster://a:7000,b:7001");
        let single: Endpoint = "rediss://:pw@host:6380".parse().unwrap();
        assert!(single.is_tls());
        assert_eq!(single.masked_url(), "rediss://:***@host:6380");
        for plain in ["redis://h:1", "unix:///s.sock", "redis+cluster://a:1"] {
            assert!(!plain.parse::<Endpoint>().unwrap().is_tls(), "{plain}");
        }
    }

    #[test]
    fn bad_urls_are_errors_that_hide_passwords() {
        let err = "http://user:hunter2@host".parse::<Endpoint>().unwrap_err();
        assert!(err.to_string().contains("scheme"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!("redis+cluster://a:1,,b:2".parse::<Endpoint>().is_err());
        assert!("redis+cluster://a".parse::<Endpoint>().is_err());
        assert!("redis+cluster://a:1/0".parse::<Endpoint>().is_err());
        let debug = format!("{:?}", Endpoint::Single("redis://:pw@h:1".to_owned()));
        assert!(!debug.contains("pw@"), "{debug}");
    }
}
