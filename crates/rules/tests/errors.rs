//! Every kind of load error names the file, the line (and column) and the
//! reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_rules::{ErrorKind, RuleSet, MAX_DEPTH};

/// Loads `yaml` and returns the error message.
fn error(yaml: &str) -> String {
    match RuleSet::from_yaml(yaml, "rules/api.yaml") {
        Ok(_) => panic!("loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts the message starts with `rules/api.yaml:<place>: ` and contains `reason`.
#[track_caller]
fn check(yaml: &str, place: &str, reason: &str) {
    let message = error(yaml);
    let prefix = format!("rules/api.yaml:{place}: ");
    assert!(
        message.starts_with(&prefix) && message.contains(reason),
        "expected {prefix}…{reason}…, got: {message}"
    );
}

const HEAD: &str = "domain: api\ndescriptors:\n";

#[test]
fn unknown_fields() {
    check(
        "domain: api\ndomains: []\n",
        "2:1",
        "unknown field `domains` in the file",
    );
    check(
        &format!("{HEAD}  - key: user\n    limit: 5\n"),
        "4:5",
        "unknown field `limit` in a descriptor",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      shadow_mode: true\n"),
        "7:7",
        "unknown field `shadow_mode` in a rate_limit",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limits:\n      - unit: second\n        requests_per_unit: 5\n        unlimited: true\n"),
        "7:9",
        "unknown field `unlimited` in a rate_limits entry",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - id: x\n"),
        "8:11",
        "unknown field `id` in a replaces entry",
    );
}

#[test]
fn wrong_types() {
    check(
        "- domain: api\n",
        "1:1",
        "`the file` must be a mapping, found a list",
    );
    check(
        "domain: api\ndescriptors:\n  key: user\n",
        "3:3",
        "`descriptors` must be a list of descriptors, found a mapping",
    );
    check(
        &format!("{HEAD}  - user\n"),
        "3:5",
        "`descriptors` must be a mapping, found \"user\"",
    );
    check(
        &format!("{HEAD}  - key: [a, b]\n"),
        "3:10",
        "`key` must be a string, found a list",
    );
    check(
        &format!("{HEAD}  - key: user\n    shadow_mode: \"true\"\n"),
        "4:18",
        "`shadow_mode` must be true or false",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: ten\n"),
        "6:26",
        "`requests_per_unit` must be a whole number from 0 to 4294967295, found \"ten\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n"),
        "6:26",
        "found \"-1\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967296\n"),
        "6:26",
        "found \"4294967296\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit: 5\n"),
        "4:17",
        "`rate_limit` must be a mapping",
    );
}

#[test]
fn duplicates() {
    check(
        "domain: api\ndomain: web\n",
        "2:1",
        "field `domain` is given twice (first at line 1)",
    );
    check(
        &format!("{HEAD}  - key: user\n    value: a\n  - key: user\n    value: a\n"),
        "5:5",
        "duplicate descriptor api.user_a (first at line 3)",
    );
    check(
        &format!("{HEAD}  - key: user\n  - key: other\n  - key: user\n"),
        "5:5",
        "duplicate descriptor api.user (first at line 3)",
    );
    check(
        &format!("{HEAD}  - key: path\n    value: /a*\n  - key: path\n    value: /a*\n"),
        "5:5",
        "duplicate descriptor api.path_/a* (first at line 3)",
    );
    check(
        &format!("{HEAD}  - key: t\n    descriptors:\n      - key: u\n        value: x\n      - key: u\n        value: x\n"),
        "7:9",
        "duplicate descriptor api.t.u_x (first at line 5)",
    );
    // The same key and value at different levels, or with different values, is fine.
    RuleSet::from_yaml(
        &format!("{HEAD}  - key: u\n    descriptors:\n      - key: u\n  - key: u\n    value: x\n  - key: u\n    value: x*\n"),
        "ok.yaml",
    )
    .unwrap();
    check(
        &format!("{HEAD}  - key: user\n    rate_limits:\n      - {{unit: second, requests_per_unit: 5}}\n      - {{unit: second, requests_per_unit: 5}}\n"),
        "6:9",
        "limit fixed_window_5_per_s appears twice",
    );
}

#[test]
fn missing_and_empty_fields() {
    check(
        "descriptors: []\n",
        "1:1",
        "missing field `domain` in the file",
    );
    check("", "1:1", "missing field `domain`");
    check("domain: \"\"\n", "1:9", "`domain` must not be empty");
    check("domain:\n", "1:1", "`domain` must not be empty");
    check(
        &format!("{HEAD}  - value: x\n"),
        "3:5",
        "missing field `key` in a descriptor",
    );
    check(
        &format!("{HEAD}  - key: ''\n"),
        "3:10",
        "descriptor `key` must not be empty",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      requests_per_unit: 5\n"),
        "5:7",
        "missing field `unit` in a rate_limit",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n"),
        "5:7",
        "missing field `requests_per_unit` in a rate_limit",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limits: []\n"),
        "4:18",
        "`rate_limits` must list at least one limit",
    );
}

#[test]
fn units_and_unlimited() {
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n"),
        "5:13",
        "invalid rate limit unit \"fortnight\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: seconds\n      requests_per_unit: 5\n"),
        "5:13",
        "invalid rate limit unit \"seconds\"",
    );
    check(
        &format!(
            "{HEAD}  - key: user\n    rate_limit:\n      unlimited: true\n      unit: second\n"
        ),
        "6:7",
        "`unit` must not be given when `unlimited` is true",
    );
    check(
        &format!(
            "{HEAD}  - key: user\n    rate_limit:\n      unlimited: true\n      algorithm: gcra\n"
        ),
        "6:7",
        "`algorithm` must not be given when `unlimited` is true",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      window: 5s\n      requests_per_unit: 5\n"),
        "6:15",
        "give `unit` or `window`, not both",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n      algorithm: gcra\n"),
        "7:7",
        "`requests_per_unit: 0` denies every request and takes no `algorithm`",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limits:\n      - {{unit: second, requests_per_unit: 0}}\n"),
        "5:43",
        "`requests_per_unit` must be a whole number from 1 to 4294967295, found \"0\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n    rate_limits:\n      - {{unit: second, requests_per_unit: 1}}\n"),
        "5:5",
        "a descriptor has `rate_limit` or `rate_limits`, not both",
    );
}

#[test]
fn extension_errors() {
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: leaky\n"),
        "7:18",
        "unknown algorithm \"leaky\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      burst: 10\n"),
        "7:14",
        "option \"burst\" does not apply to algorithm fixed_window",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: gcra\n      burst: 0\n"),
        "8:14",
        "burst 0 is out of range",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: stepped_window\n      step: 2s\n"),
        "8:13",
        "step 2s must be between 1ms and the limit's period",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: stepped_window\n      step: soon\n"),
        "8:13",
        "`step`: rate \"soon\"",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      window: 5 fortnights\n      requests_per_unit: 5\n"),
        "5:15",
        "unknown time unit \"fortnights\"",
    );
    check(
        &format!(
            "{HEAD}  - key: user\n    rate_limit:\n      window: 0s\n      requests_per_unit: 5\n"
        ),
        "5:15",
        "period of 0 ns is out of range",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: concurrency\n      lease_ttl: 0ms\n"),
        "8:18",
        "lease_ttl 0ns must be at least 1ms",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      lease_ttl: 5s\n"),
        "7:18",
        "option \"lease_ttl\" does not apply to algorithm fixed_window",
    );
}

#[test]
fn names_and_replaces() {
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name: a\n"),
        "9:11",
        "`replaces` must not name the limit itself (\"a\")",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name: \"\"\n"),
        "8:11",
        "`replaces` entries must have a non-empty `name`",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limits:\n      - {{unit: second, requests_per_unit: 5, name: a}}\n      - {{unit: day, requests_per_unit: 5, name: b}}\n"),
        "6:49",
        "name the rule differently (\"a\" and \"b\")",
    );
}

#[test]
fn yaml_level_errors() {
    check("domain: api\ndescriptors: [\n", "3:1", "YAML syntax error");
    check(
        "domain: api\n---\ndomain: web\n",
        "2:1",
        "one YAML document",
    );
    check("domain: *nowhere\n", "1:9", "YAML syntax error");
    check("? [a]\n: b\n", "1:3", "mapping keys must be strings");
    let deep = format!(
        "domain: api\nx: {}{}\n",
        "[".repeat(MAX_DEPTH),
        "]".repeat(MAX_DEPTH)
    );
    let message = error(&deep);
    assert!(
        message.starts_with("rules/api.yaml:2:") && message.contains("nesting is deeper than 64"),
        "{message}"
    );
}

#[test]
fn error_accessors() {
    let err = RuleSet::from_yaml("domain: api\nbogus: 1\n", "f.yaml").unwrap_err();
    assert_eq!(err.file_name(), "f.yaml");
    assert_eq!(err.line(), Some(2));
    assert_eq!(err.location().map(|l| l.column), Some(1));
    assert!(matches!(err.kind(), ErrorKind::UnknownField { .. }));
}

#[test]
fn bad_bans() {
    let limit = "  - key: login\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";
    let with = |ban: &str| format!("{HEAD}{limit}      ban: {ban}\n");
    check(
        &with("{after: 0, within: 10m, for: 1h}"),
        "7:20",
        "ban `after` must be at least 1",
    );
    check(
        &with("{after: 3, within: 0s, for: 1h}"),
        "7:31",
        "ban `within` must be between 1ms and 366d",
    );
    check(
        &with("{after: 3, within: 10m, for: 400d}"),
        "7:41",
        "ban `for` must be between 1ms and 366d",
    );
    check(
        &with("{after: 3, within: 10m}"),
        "7:12",
        "missing field `for` in a ban",
    );
    check(
        &with("{after: 3, within: 10m, for: 1h, forever: true}"),
        "7:45",
        "unknown field `forever` in a ban",
    );
    check(&with("{after: x, within: 10m, for: 1h}"), "7:20", "after");
    check(&with("{after: 3, within: soon, for: 1h}"), "7:31", "within");
    check(&with("3"), "7:12", "`ban` must be a mapping");
    check(
        &format!("{HEAD}  - key: login\n    rate_limit:\n      unlimited: true\n      ban: {{after: 3, within: 10m, for: 1h}}\n"),
        "6:7",
        "ban",
    );
}

#[test]
fn bad_sync_modes() {
    let limit = "  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";
    let with = |extra: &str| format!("{HEAD}{limit}{extra}");
    check(
        &with("      sync: eventually\n"),
        "7:13",
        "unknown sync mode \"eventually\" (expected exact or async)",
    );
    check(
        &with("      sync: [async]\n"),
        "7:13",
        "`sync` must be a string",
    );
    check(
        &with("      algorithm: concurrency\n      sync: async\n"),
        "8:13",
        "sync: async does not apply to concurrency limits",
    );
    check(
        &with("      ban: {after: 3, within: 10m, for: 1h}\n      sync: async\n"),
        "8:13",
        "sync: async does not apply to a limit with a ban",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limits:\n      - {{unit: second, requests_per_unit: 5, algorithm: concurrency, sync: async}}\n"),
        "5:76",
        "concurrency",
    );
    check(
        &format!(
            "{HEAD}  - key: user\n    rate_limit:\n      unlimited: true\n      sync: async\n"
        ),
        "6:7",
        "sync",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n      sync: async\n"),
        "7:7",
        "sync",
    );
    check(
        &format!("{HEAD}  - key: user\n    rate_limits:\n      - {{unit: second, requests_per_unit: 5, sync: async}}\n      - {{unit: second, requests_per_unit: 5, sync: exact}}\n"),
        "6:9",
        "appears twice",
    );
}
