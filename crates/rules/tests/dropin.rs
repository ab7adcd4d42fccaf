//! envoyproxy/ratelimit's newer descriptor features, as a migrating user
//! writes them: wildcards anywhere in a value and `share_threshold`. Each
//! feature has a fixture under `tests/fixtures/dropin/` that must load (or
//! be refused with its place and reason).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tollgate_rules::{RuleSet, ValueMatch};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dropin")
        .join(name)
}

fn load(name: &str) -> RuleSet {
    RuleSet::load(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The id of the rule for one descriptor of `entries`, if any.
fn id_of(rules: &RuleSet, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    let request = [entries.to_vec()];
    rules.resolve(domain, &request).unwrap()[0].map(|r| r.rule().id().to_string())
}

/// The counter key of one descriptor of `entries`.
fn key_of(rules: &RuleSet, domain: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let request = [entries.to_vec()];
    rules.resolve(domain, &request).unwrap()[0]
        .expect("a rule applies")
        .counter_key()
}

#[test]
fn wildcards_match_in_every_position() {
    let rules = load("wildcards.yaml");
    let path = |v: &str| id_of(&rules, "wildcards", &[("path", v)]);
    for v in ["barab", "bar123b", "barb"] {
        assert_eq!(path(v).as_deref(), Some("wildcards.path_bar*b"), "{v}");
    }
    for v in ["foo123bar456baz", "foobarbaz"] {
        assert_eq!(
            path(v).as_deref(),
            Some("wildcards.path_foo*bar*baz"),
            "{v}"
        );
    }
    assert_eq!(path("a/b.json").as_deref(), Some("wildcards.path_*.json"));
    assert_eq!(path(".json").as_deref(), Some("wildcards.path_*.json"));
    assert_eq!(path("/api/users").as_deref(), Some("wildcards.path_/api/*"));
    // An exact value beats every wildcard, wherever it is written.
    assert_eq!(
        path("/api/health").as_deref(),
        Some("wildcards.path_/api/health")
    );
    // The first matching wildcard in file order: `*.json` before `/api/*`.
    assert_eq!(
        path("/api/x.json").as_deref(),
        Some("wildcards.path_*.json")
    );
    // `*` catches what no earlier wildcard did, the empty value included.
    for v in ["bar", "foobaz", "", "/ap"] {
        assert_eq!(path(v).as_deref(), Some("wildcards.path_*"), "{v:?}");
    }
}

#[test]
fn nested_wildcards_and_key_only_precedence() {
    let rules = load("wildcards.yaml");
    let user = |t: &str, u: &str| id_of(&rules, "wildcards", &[("tenant", t), ("user", u)]);
    assert_eq!(
        user("t-1", "x-admin-y").as_deref(),
        Some("wildcards.tenant_t-*.user_*-admin-*")
    );
    assert_eq!(
        user("t-", "-admin-").as_deref(),
        Some("wildcards.tenant_t-*.user_*-admin-*")
    );
    assert_eq!(
        user("t-1", "admin").as_deref(),
        Some("wildcards.tenant_t-*.user")
    );
    assert_eq!(user("u-1", "x-admin-y"), None);
    // A wildcard beats the key without a value, even written after it.
    let method = |m: &str| id_of(&rules, "wildcards", &[("method", m)]);
    assert_eq!(method("GET").as_deref(), Some("wildcards.method_G*T"));
    assert_eq!(method("GT").as_deref(), Some("wildcards.method_G*T"));
    assert_eq!(method("POST").as_deref(), Some("wildcards.method"));
}

#[test]
fn wildcard_values_keep_a_counter_per_value_without_share_threshold() {
    let rules = load("wildcards.yaml");
    assert_ne!(
        key_of(&rules, "wildcards", &[("path", "barab")]),
        key_of(&rules, "wildcards", &[("path", "barb")])
    );
    let shared = load("share-threshold.yaml");
    assert_ne!(
        key_of(&shared, "shared", &[("files", "/own/a")]),
        key_of(&shared, "shared", &[("files", "/own/b")])
    );
}

#[test]
fn share_threshold_gives_every_matching_value_one_counter() {
    let rules = load("share-threshold.yaml");
    let files = |v: &str| key_of(&rules, "shared", &[("files", v)]);
    assert_eq!(files("/foo/bar"), files("/foo/bar/baz"));
    assert_eq!(files("/foo/bar"), files("/foo/barometer"));
    // An explicit value beats the shared wildcard and counts on its own.
    assert_eq!(
        id_of(&rules, "shared", &[("files", "/foo/bar/special")]).as_deref(),
        Some("shared.files_/foo/bar/special")
    );
    assert_ne!(files("/foo/bar/special"), files("/foo/bar"));

    // Nested: both levels shared, one counter for every combination.
    let object = |t: &str, o: &str| key_of(&rules, "shared", &[("tenant", t), ("object", o)]);
    assert_eq!(object("t1", "ox"), object("t2", "o-1-x-2"));
    // Under a shared parent, a key-only child still counts per value.
    let user = |t: &str, u: &str| key_of(&rules, "shared", &[("tenant", t), ("user", u)]);
    assert_eq!(user("t1", "bob"), user("t2", "bob"));
    assert_ne!(user("t1", "bob"), user("t1", "eve"));

    let rule = rules
        .domain("shared")
        .unwrap()
        .rule("shared.files_/foo/bar*")
        .unwrap();
    assert!(rule.path()[0].share_threshold);
    assert_eq!(
        rule.path()[0].value,
        ValueMatch::Wildcard("/foo/bar*".into())
    );
}

#[test]
fn share_threshold_needs_a_wildcard_value() {
    for (name, place, value) in [
        ("refused-share-threshold-exact.yaml", "5:5", "\"/foo/bar\""),
        ("refused-share-threshold-key-only.yaml", "5:5", "\"\""),
    ] {
        let error = RuleSet::load(fixture(name)).unwrap_err().to_string();
        let file = fixture(name).display().to_string();
        assert_eq!(
            error,
            format!(
                "{file}:{place}: `share_threshold` applies to wildcard values only (a `value` with `*`); {value} has none"
            ),
        );
    }
}

#[test]
fn plain_prefix_wildcards_keep_their_counter_keys() {
    // A reload onto this version must not reset the counters of `foo*`
    // rules: their keys are the ones earlier versions wrote.
    let rules = RuleSet::from_yaml(
        "domain: d\ndescriptors:\n  - key: k\n    value: foo*\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
        "d.yaml",
    )
    .unwrap();
    let key = key_of(&rules, "d", &[("k", "foobar")]);
    assert_eq!(key, b"tg1|1:d1:k*3:foo|6:foobar".to_vec());
}

#[test]
fn metadata_is_any_mapping_kept_with_its_types() {
    use tollgate_rules::MetadataValue as V;
    let rules = load("metadata.yaml");
    let domain = rules.domain("routing").unwrap();
    let small = domain.rule("routing.model_small").unwrap();
    assert!(small.quota_mode());
    let metadata = small.metadata().unwrap();
    assert_eq!(metadata["name"], V::String("service_1".into()));
    assert_eq!(metadata["weight"], V::Number(3.0));
    assert_eq!(
        metadata["tags"],
        V::List(vec![V::String("a".into()), V::String("b".into())])
    );
    let V::Map(nested) = &metadata["nested"] else {
        panic!("nested is a mapping: {metadata:?}")
    };
    assert_eq!(nested["enabled"], V::Bool(true));
    assert_eq!(nested["ratio"], V::Number(0.5));
    assert_eq!(nested["nothing"], V::Null);
    assert_eq!(nested["quoted"], V::String("42".into()));
    assert!(domain.rule("routing.tenant").unwrap().metadata().is_some());

    let name = "refused-metadata-list.yaml";
    let error = RuleSet::load(fixture(name)).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "{}:4:15: `metadata` must be a mapping, found a list",
            fixture(name).display()
        )
    );
}

#[test]
fn value_to_metric_names_levels_by_the_request_value() {
    let rules = load("value-to-metric.yaml");
    let label = |entries: &[(&str, &str)]| {
        let request = [entries.to_vec()];
        let resolved = rules.resolve("metrics", &request).unwrap()[0].unwrap();
        (resolved.rule().metric_has_values(), resolved.metric_label())
    };
    assert_eq!(
        label(&[("route", "/a"), ("method", "GET")]),
        (true, "metrics.route_/a.method_GET".to_owned())
    );
    assert_eq!(
        label(&[("user", "bob")]),
        (true, "metrics.user_bob".to_owned())
    );
    assert_eq!(
        label(&[("path", "/api/users")]),
        (true, "metrics.path_/api/users".to_owned())
    );
    // detailed_metric takes precedence: the id with the values appended.
    assert_eq!(
        label(&[("tenant", "t1"), ("user", "bob")]),
        (true, "metrics.tenant.user_t1_bob".to_owned())
    );
    assert_eq!(
        label(&[("plain", "x")]),
        (false, "metrics.plain".to_owned())
    );
}

#[test]
fn domains_merge_across_files_only_when_asked() {
    use tollgate_rules::LoadOptions;
    let merge = LoadOptions {
        merge_domains: true,
    };
    let dir = fixture("merge");
    let error = RuleSet::load(&dir).unwrap_err().to_string();
    assert!(
        error.contains("domain \"merged\" is already defined in")
            && error.starts_with(&dir.join("two.yaml").display().to_string()),
        "{error}"
    );
    let rules = RuleSet::load_with(&dir, merge).unwrap();
    assert_eq!(
        rules.domains().map(|d| d.name()).collect::<Vec<_>>(),
        ["merged", "other"]
    );
    assert_eq!(
        id_of(&rules, "merged", &[("user", "u")]).as_deref(),
        Some("merged.user")
    );
    assert_eq!(
        id_of(&rules, "merged", &[("tenant", "t")]).as_deref(),
        Some("merged.tenant")
    );
    // Wildcards keep load order across the files: one.yaml's `/a*` first.
    assert_eq!(
        id_of(&rules, "merged", &[("path", "/abc")]).as_deref(),
        Some("merged.path_/a*")
    );

    let dir = fixture("merge-duplicate");
    let error = RuleSet::load_with(&dir, merge).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "{}:5:5: duplicate descriptor merged.user (first at {}:4)",
            dir.join("two.yaml").display(),
            dir.join("one.yaml").display()
        )
    );
}
