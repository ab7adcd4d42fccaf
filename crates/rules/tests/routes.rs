//! The `routes:` list: what it parses into, and every mistake named with
//! FILE:LINE:COLUMN.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_rules::{
    Action, HostMatch, OnMissing, PathMatch, ResponseCost, Route, RuleSet, StatusFilter,
};

fn routes(yaml: &str) -> Vec<Route> {
    let rules = RuleSet::from_yaml(yaml, "edge.yaml").unwrap_or_else(|e| panic!("{e}"));
    rules.domain("edge").unwrap().routes().unwrap().to_vec()
}

/// Asserts the load error starts with `edge.yaml:<place>: ` and contains `reason`.
#[track_caller]
fn check(yaml: &str, place: &str, reason: &str) {
    let message = match RuleSet::from_yaml(yaml, "edge.yaml") {
        Ok(_) => panic!("loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    };
    let prefix = format!("edge.yaml:{place}: ");
    assert!(
        message.starts_with(&prefix) && message.contains(reason),
        "expected {prefix}…{reason}…, got: {message}"
    );
}

const FULL: &str = r#"domain: edge
routes:
  - name: api
    match:
      path_prefix: /api/
      methods: [GET, POST]
      host: "*.Example.com"
    shadow: true
    delay: 4
    descriptors:
      - [remote_address]
      - [{generic_key: {descriptor_value: api}}, {request_headers: {header_name: X-Tenant, descriptor_key: tenant, skip_if_absent: true}}]
      - [{api_key: {header_name: Authorization}}, method, path, host]
      - [{remote_address: {}}, api_key]
  - match: {path_glob: "/users/*/orders/**"}
    nodelay: true
    descriptors: [[path]]
  - name: health
    match: {path: /healthz}
    enabled: false
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra}
"#;

#[test]
fn routes_parse_into_plain_data() {
    let r = routes(FULL);
    assert_eq!(r.len(), 3);
    let api = &r[0];
    assert_eq!(api.name.as_deref(), Some("api"));
    assert_eq!(api.matcher.path, Some(PathMatch::Prefix("/api/".into())));
    assert_eq!(api.matcher.methods, ["GET", "POST"]);
    assert_eq!(
        api.matcher.host,
        Some(HostMatch::Subdomain("example.com".into()))
    );
    assert!(api.enabled && api.shadow && !api.nodelay);
    assert_eq!(api.delay, 4);
    assert_eq!(api.line, 3);
    assert_eq!(
        api.descriptors,
        vec![
            vec![Action::RemoteAddress],
            vec![
                Action::GenericKey {
                    descriptor_key: "generic_key".into(),
                    descriptor_value: "api".into()
                },
                Action::RequestHeader {
                    header_name: "x-tenant".into(),
                    descriptor_key: "tenant".into(),
                    skip_if_absent: true
                },
            ],
            vec![
                Action::ApiKey {
                    header_name: "authorization".into()
                },
                Action::Method,
                Action::Path,
                Action::Host
            ],
            vec![
                Action::RemoteAddress,
                Action::ApiKey {
                    header_name: "x-api-key".into()
                }
            ],
        ]
    );
    let orders = &r[1];
    assert!(
        matches!(&orders.matcher.path, Some(PathMatch::Glob(g)) if g.as_str() == "/users/*/orders/**")
    );
    assert!(orders.nodelay && !orders.shadow && orders.enabled);
    let health = &r[2];
    assert!(!health.enabled);
    assert!(health.descriptors.is_empty());
}

#[test]
fn a_file_without_routes_has_none_and_the_default_route_is_remote_address() {
    let rules = RuleSet::from_yaml("domain: edge\n", "edge.yaml").unwrap();
    assert!(rules.domain("edge").unwrap().routes().is_none());
    let default = Route::default_route();
    assert_eq!(default.descriptors, vec![vec![Action::RemoteAddress]]);
    assert!(default.matcher.matches("DELETE", None, "/anything"));
    let empty = routes("domain: edge\nroutes: []\n");
    assert!(empty.is_empty());
}

#[test]
fn route_matching_combines_every_given_field() {
    let r = routes(FULL);
    let api = &r[0].matcher;
    assert!(api.matches("GET", Some("a.example.com"), "/api/x"));
    assert!(api.matches("POST", Some("A.B.EXAMPLE.COM"), "/api/"));
    assert!(!api.matches("PUT", Some("a.example.com"), "/api/x"));
    assert!(!api.matches("GET", Some("example.com"), "/api/x"));
    assert!(!api.matches("GET", Some("a.example.com.evil"), "/api/x"));
    assert!(!api.matches("GET", Some("a.example.com"), "/api"));
    assert!(!api.matches("GET", None, "/api/x"));
    let exact = routes("domain: edge\nroutes:\n  - match: {path: /a, host: API.example.com}\n    descriptors: [[path]]\n");
    assert!(exact[0]
        .matcher
        .matches("GET", Some("api.Example.com"), "/a"));
    assert!(!exact[0]
        .matcher
        .matches("GET", Some("api.example.com"), "/a/"));
    assert!(!exact[0]
        .matcher
        .matches("GET", Some("x.api.example.com"), "/a"));
}

#[test]
fn unknown_fields_and_actions_are_errors() {
    let head = "domain: edge\nroutes:\n";
    check(
        &format!("{head}  - name: a\n    colour: red\n"),
        "4:5",
        "unknown field `colour` in a route (expected one of: name, match, enabled, shadow, nodelay, delay, descriptors, on_missing, on_missing_status, cost, count_if)",
    );
    check(
        &format!("{head}  - match: {{prefix: /a}}\n    descriptors: [[path]]\n"),
        "3:13",
        "unknown field `prefix` in a route's match",
    );
    check(
        &format!("{head}  - descriptors: [[remote_adress]]\n"),
        "3:20",
        "unknown action `remote_adress`",
    );
    check(
        &format!("{head}  - descriptors:\n      - [{{request_headers: {{header_name: a, descriptor_key: b, default: c}}}}]\n"),
        "4:64",
        "unknown field `default` in a request_headers action",
    );
    check(
        &format!("{head}  - descriptors: [[{{method: {{x: 1}}}}]]\n"),
        "3:30",
        "unknown field `x` in an action without fields (expected one of: none; the action takes no fields)",
    );
    check(
        "domain: edge\nroute: []\n",
        "2:1",
        "unknown field `route` in the file (expected one of: domain, descriptors, routes)",
    );
}

#[test]
fn bad_values_name_their_place() {
    let head = "domain: edge\nroutes:\n";
    check(
        &format!("{head}  - match: {{path_prefix: api}}\n    descriptors: [[path]]\n"),
        "3:26",
        "`path_prefix`: \"api\" does not start with `/`",
    );
    check(
        &format!("{head}  - match: {{path_glob: /a/b**}}\n    descriptors: [[path]]\n"),
        "3:24",
        "`**` must be a whole segment",
    );
    check(
        &format!("{head}  - match: {{path: /a, path_prefix: /b}}\n    descriptors: [[path]]\n"),
        "3:23",
        "one of `path`, `path_prefix` and `path_glob`",
    );
    check(
        &format!("{head}  - match: {{methods: [get]}}\n    descriptors: [[path]]\n"),
        "3:23",
        "methods are case-sensitive; write \"GET\"",
    );
    check(
        &format!("{head}  - match: {{methods: []}}\n    descriptors: [[path]]\n"),
        "3:22",
        "must list at least one method",
    );
    check(
        &format!("{head}  - match: {{host: \"api.*.com\"}}\n    descriptors: [[path]]\n"),
        "3:19",
        "may only start with `*.`",
    );
    check(
        &format!(
            "{head}  - match: {{host: \"api.example.com:8080\"}}\n    descriptors: [[path]]\n"
        ),
        "3:19",
        "without port",
    );
    check(
        &format!("{head}  - descriptors: [[{{request_headers: {{header_name: \"x y\", descriptor_key: k}}}}]]\n"),
        "3:52",
        "\"x y\" is not an HTTP header name",
    );
    check(
        &format!("{head}  - descriptors: [[{{request_headers: {{header_name: x}}}}]]\n"),
        "3:38",
        "missing field `descriptor_key` in a request_headers action",
    );
    check(
        &format!("{head}  - descriptors: [[generic_key]]\n"),
        "3:20",
        "missing field `descriptor_value` in a generic_key action",
    );
    check(
        &format!("{head}  - descriptors: [[]]\n"),
        "3:19",
        "a descriptor needs at least one action",
    );
    check(
        &format!("{head}  - name: a\n"),
        "3:5",
        "missing field `descriptors` in an enabled route",
    );
    check(
        &format!("{head}  - nodelay: true\n    delay: 2\n    descriptors: [[path]]\n"),
        "4:5",
        "`nodelay` and `delay` exclude each other",
    );
    check(
        &format!("{head}  - delay: -1\n    descriptors: [[path]]\n"),
        "3:12",
        "`delay` must be a whole number",
    );
    check(
        &format!("{head}  - shadow: maybe\n    descriptors: [[path]]\n"),
        "3:13",
        "`shadow` must be true or false",
    );
    let long = "a".repeat(1025);
    check(
        &format!("{head}  - match: {{path: /{long}}}\n    descriptors: [[path]]\n"),
        "3:19",
        "at most 1024 are allowed",
    );
    check(
        &format!("{head}  name: a\n"),
        "3:3",
        "`routes` must be a list of routes, found a mapping",
    );
}

#[test]
fn on_missing_is_allow_by_default_and_deny_answers_429_or_the_given_status() {
    let r = routes(
        "domain: edge\nroutes:\n  - descriptors: [[api_key]]\n  - on_missing: deny\n    descriptors: [[api_key]]\n  - on_missing: deny\n    on_missing_status: 401\n    descriptors: [[api_key]]\n  - on_missing: allow\n    descriptors: [[api_key]]\ndescriptors: []\n",
    );
    let kinds: Vec<OnMissing> = r.iter().map(|r| r.on_missing).collect();
    assert_eq!(
        kinds,
        [
            OnMissing::Allow,
            OnMissing::Deny { status: 429 },
            OnMissing::Deny { status: 401 },
            OnMissing::Allow,
        ]
    );
    assert_eq!(Route::default_route().on_missing, OnMissing::Allow);
}

#[test]
fn on_missing_errors_name_their_place() {
    let head = "domain: edge\nroutes:\n  - descriptors: [[api_key]]\n";
    check(
        &format!("{head}    on_missing: refuse\n"),
        "4:17",
        "`on_missing`: \"refuse\" is neither `allow` nor `deny`",
    );
    check(
        &format!("{head}    on_missing_status: 403\n"),
        "4:24",
        "`on_missing_status`: is only taken with `on_missing: deny`",
    );
    check(
        &format!("{head}    on_missing: allow\n    on_missing_status: 403\n"),
        "5:24",
        "only taken with `on_missing: deny`",
    );
    check(
        &format!("{head}    on_missing: deny\n    on_missing_status: 302\n"),
        "5:24",
        "on_missing_status",
    );
    check(
        &format!("{head}    on_missing: deny\n    on_missing_status: 600\n"),
        "5:24",
        "on_missing_status",
    );
}

#[test]
fn client_cidr_and_not_client_cidr_match_the_client_network() {
    let r = routes(
        r#"domain: edge
routes:
  - name: monitoring
    match: {client_cidr: [10.0.0.0/8, "2001:db8::/32", 192.0.2.7]}
    enabled: false
  - name: outsiders
    match:
      path_prefix: /admin/
      not_client_cidr: ["::ffff:198.51.100.0/120"]
    descriptors: [[remote_address]]
descriptors: []
"#,
    );
    let ip = |s: &str| Some(s.parse().unwrap());
    let monitoring = &r[0].matcher;
    assert!(monitoring.names_client_networks());
    assert!(monitoring.client_matches(ip("10.20.30.40")));
    assert!(monitoring.client_matches(ip("::ffff:10.20.30.40")));
    assert!(monitoring.client_matches(ip("2001:db8:1::9")));
    assert!(monitoring.client_matches(ip("192.0.2.7")));
    assert!(!monitoring.client_matches(ip("192.0.2.8")));
    assert!(!monitoring.client_matches(None));
    let outsiders = &r[1].matcher;
    assert!(outsiders.matches("GET", None, "/admin/x"));
    // The mapped entry is the IPv4 network 198.51.100.0/24.
    assert!(!outsiders.client_matches(ip("198.51.100.99")));
    assert!(outsiders.client_matches(ip("198.51.101.1")));
    assert!(outsiders.client_matches(ip("2001:db8::1")));
    // An unknown client address matches no route that names networks.
    assert!(!outsiders.client_matches(None));
    assert!(r[1].matcher.client_cidr.is_none());
    let plain = &routes("domain: edge\nroutes:\n  - descriptors: [[path]]\ndescriptors: []\n")[0];
    assert!(!plain.matcher.names_client_networks());
    assert!(plain.matcher.client_matches(None));
}

#[test]
fn client_cidr_errors_name_the_bad_entry() {
    let head = "domain: edge\nroutes:\n  - descriptors: [[path]]\n    match:\n";
    check(
        &format!("{head}      client_cidr: [10.0.0.0/8, 10.0.0.1/8]\n"),
        "5:33",
        "`client_cidr`: \"10.0.0.1/8\" has bits set past its prefix length; the network is 10.0.0.0/8",
    );
    check(
        &format!("{head}      not_client_cidr:\n        - 192.0.2.0/24\n        - 192.0.2.0/33\n"),
        "7:11",
        "`not_client_cidr`: \"192.0.2.0/33\" has a bad prefix length: expected a number from 0 to 32",
    );
    check(
        &format!("{head}      client_cidr: [office]\n"),
        "5:21",
        "`client_cidr`: \"office\" is not a network: expected an IP address or a CIDR such as 10.0.0.0/8",
    );
    check(
        &format!("{head}      client_cidr: []\n"),
        "5:20",
        "`client_cidr`: must list at least one network",
    );
    check(
        &format!("{head}      client_cidr: 10.0.0.0/8\n"),
        "5:20",
        "client_cidr",
    );
    check(
        &format!("{head}      client_cidrs: [10.0.0.0/8]\n"),
        "5:7",
        "unknown field `client_cidrs` in a route's match (expected one of: path, path_prefix, path_glob, methods, host, client_cidr, not_client_cidr)",
    );
}

#[test]
fn cost_and_count_if_parse_with_their_defaults() {
    let r = routes(
        "domain: edge\nroutes:\n  - name: llm\n    cost: {estimate: 500, from_response_header: X-Tokens-Used}\n    count_if: {status: [\"5xx\", 429, 200]}\n    descriptors: [[api_key]]\n  - name: stream\n    cost: {from_response_trailer: x-tokens-used}\n    descriptors: [[api_key]]\n  - descriptors: [[api_key]]\ndescriptors: []\n",
    );
    assert_eq!(
        r[0].cost,
        ResponseCost::from_header("x-tokens-used").with_estimate(500)
    );
    assert_eq!(
        r[0].count_if,
        Some(StatusFilter::parse(["5xx", "429", "200"]).unwrap())
    );
    assert_eq!(r[1].cost, ResponseCost::from_trailer("x-tokens-used"));
    assert_eq!(r[1].count_if, None);
    assert_eq!(r[2].cost, ResponseCost::default());
    assert_eq!(r[2].cost.estimate, 1);
}

#[test]
fn cost_and_count_if_errors_name_their_place() {
    let head = "domain: edge\nroutes:\n  - descriptors: [[api_key]]\n";
    check(
        &format!("{head}    cost: {{from_header: x-tokens-used}}\n"),
        "4:12",
        "unknown field `from_header` in a route's cost (expected one of: estimate, from_response_header, from_response_trailer)",
    );
    check(
        &format!("{head}    cost: {{estimate: 0}}\n"),
        "4:22",
        "estimate",
    );
    check(
        &format!("{head}    cost: {{from_response_header: \"x tokens\"}}\n"),
        "4:34",
        "`from_response_header`: \"x tokens\" is not an HTTP header name",
    );
    check(&format!("{head}    cost: 5\n"), "4:11", "cost");
    check(
        &format!("{head}    count_if: {{status: [5xx, 6xx]}}\n"),
        "4:30",
        "`status`: \"6xx\" is not a status: give a code from 100 to 599 (429) or a class (5xx)",
    );
    check(
        &format!("{head}    count_if: {{status: [2000]}}\n"),
        "4:25",
        "\"2000\" is not a status",
    );
    check(
        &format!("{head}    count_if: {{status: []}}\n"),
        "4:24",
        "`status`: must list at least one status",
    );
    check(
        &format!("{head}    count_if: {{codes: [500]}}\n"),
        "4:16",
        "unknown field `codes` in a route's count_if (expected one of: status)",
    );
    check(
        &format!("{head}    count_if: {{}}\n"),
        "4:15",
        "missing field `status`",
    );
}
