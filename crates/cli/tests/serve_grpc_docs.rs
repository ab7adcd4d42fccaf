//! envoyproxy/ratelimit's documented examples (its README: "Configuration >
//! Examples" 1 to 9, the `replaces` and descriptor-list sections, and the
//! rules of its demo environment), rewritten as rules files in
//! `tests/fixtures/envoy-docs/`. Every file passes `tollgate check-rules`
//! unchanged, and each is loaded into the real `tollgate serve` and driven
//! over gRPC with a tonic client, checking what the documentation says the
//! example does.
//!
//! The examples count in epoch-aligned fixed windows of a second, a minute or
//! a day, and a test cannot choose when it runs: a window may end in the
//! middle of a sequence of calls, which would reset the counters the test
//! reasons about. [`Session`] notices that — within one window, the
//! `duration_until_reset` of every limit of the same unit only shrinks, so a
//! longer one means a new window — and the attempt is abandoned and run again
//! on a fresh server. No test sleeps, and an attempt that completes was
//! entirely inside one window of each unit, so its assertions held.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use support::Server;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
// `RateLimitResponse.RateLimit.Unit`.
const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const DAY: i32 = 4;

/// How many times a test is tried when windows keep rolling over under it.
const ATTEMPTS: usize = 4;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy-docs")
}

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// The window of some unit ended between two calls of an attempt.
#[derive(Debug)]
struct Rolled;

/// A server on one fixture and a gRPC client for one domain.
struct Session {
    server: Server,
    runtime: tokio::runtime::Runtime,
    client: RateLimitServiceClient<Channel>,
    domain: &'static str,
    /// The last `duration_until_reset` seen for each unit.
    last_reset: HashMap<i32, Duration>,
}

type Entries<'a> = &'a [(&'a str, &'a str)];

fn descriptor(entries: Entries<'_>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

impl Session {
    fn start(fixture_name: &str, domain: &'static str, extra: &[&str]) -> Session {
        let path = fixture(fixture_name);
        let mut args = vec!["--rules", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let server = Server::start(&args);
        let support::GrpcClient { runtime, client } = server.grpc_client();
        Session {
            server,
            runtime,
            client,
            domain,
            last_reset: HashMap::new(),
        }
    }

    /// `ShouldRateLimit` of `descriptors`, one hit each.
    fn ask(&mut self, descriptors: &[Entries<'_>]) -> Result<RateLimitResponse, Rolled> {
        self.ask_hits(descriptors, 0)
    }

    /// `ShouldRateLimit` of `descriptors` with the request's `hits_addend`.
    fn ask_hits(
        &mut self,
        descriptors: &[Entries<'_>],
        hits_addend: u32,
    ) -> Result<RateLimitResponse, Rolled> {
        let request = RateLimitRequest {
            domain: self.domain.into(),
            descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
            hits_addend,
        };
        let answer = self
            .runtime
            .block_on(self.client.should_rate_limit(request))
            .unwrap()
            .into_inner();
        assert_eq!(answer.statuses.len(), descriptors.len());
        self.watch_windows(&answer)?;
        Ok(answer)
    }

    /// Errs when a limit's window is longer than the last seen for its unit.
    /// A limit of 0 always reports a whole unit, so it tells nothing.
    fn watch_windows(&mut self, answer: &RateLimitResponse) -> Result<(), Rolled> {
        for status in &answer.statuses {
            let (Some(limit), Some(reset)) = (&status.current_limit, &status.duration_until_reset)
            else {
                continue;
            };
            if limit.requests_per_unit == 0 {
                continue;
            }
            let reset = Duration::new(reset.seconds as u64, reset.nanos as u32);
            match self.last_reset.insert(limit.unit, reset) {
                Some(before) if reset > before => return Err(Rolled),
                _ => {}
            }
        }
        Ok(())
    }

    /// `tollgate_NAME_total{domain="DOMAIN",rule="RULE"}`.
    fn rule_metric(&self, name: &str, rule: &str) -> f64 {
        self.server.metric(&format!(
            r#"tollgate_{name}_total{{domain="{}",rule="{rule}"}}"#,
            self.domain
        ))
    }
}

/// Runs `body` against a fresh server on `fixture_name`, again (on another
/// fresh server) when a window rolled over during it.
fn run(
    fixture_name: &str,
    domain: &'static str,
    extra: &[&str],
    body: impl Fn(&mut Session) -> Result<(), Rolled>,
) {
    for _ in 0..ATTEMPTS {
        let mut session = Session::start(fixture_name, domain, extra);
        if body(&mut session).is_ok() {
            return;
        }
    }
    panic!("a limit's window ended during each of {ATTEMPTS} attempts");
}

/// The status's limit as (name, requests_per_unit, unit).
fn limit(status: &DescriptorStatus) -> Option<(&str, u32, i32)> {
    status
        .current_limit
        .as_ref()
        .map(|l| (l.name.as_str(), l.requests_per_unit, l.unit))
}

/// (code, requests_per_unit, limit_remaining) of status `i`.
fn summary(answer: &RateLimitResponse, i: usize) -> (i32, Option<u32>, u32) {
    let status = &answer.statuses[i];
    (
        status.code,
        status.current_limit.as_ref().map(|l| l.requests_per_unit),
        status.limit_remaining,
    )
}

/// Status `i` matched no limit: OK, nothing to report.
fn assert_unlimited_by_rules(answer: &RateLimitResponse, i: usize) {
    let status = &answer.statuses[i];
    assert_eq!(status.code, OK, "{answer:?}");
    assert!(status.current_limit.is_none(), "{answer:?}");
    assert!(status.duration_until_reset.is_none(), "{answer:?}");
    assert_eq!(status.limit_remaining, 0, "{answer:?}");
}

#[test]
fn every_fixture_passes_check_rules_unchanged() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 13, "{files:?}");
    let check = |path: &PathBuf| {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("check-rules")
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    for file in &files {
        assert!(check(file).contains("ok (1 domain: "), "{}", file.display());
    }
    // Each its own domain: the directory loads as a whole.
    assert!(check(&fixtures()).contains("ok (13 domains: "));
}

#[test]
fn example1_each_listed_database_has_its_own_500_per_second() {
    run("example1-two-databases.yaml", "mongo_cps", &[], |s| {
        let users = s.ask_hits(&[&[("database", "users")]], 500)?;
        assert_eq!(users.overall_code, OK);
        assert_eq!(limit(&users.statuses[0]), Some(("", 500, SECOND)));
        assert_eq!(users.statuses[0].limit_remaining, 0);
        let over = s.ask(&[&[("database", "users")]])?;
        assert_eq!(over.overall_code, OVER);
        assert_eq!(summary(&over, 0), (OVER, Some(500), 0));

        let default = s.ask(&[&[("database", "default")]])?;
        assert_eq!(default.overall_code, OK);
        assert_eq!(summary(&default, 0), (OK, Some(500), 499));

        // Neither an unlisted value nor a deeper descriptor is limited.
        let orders = s.ask_hits(&[&[("database", "orders")]], 1000)?;
        assert_eq!(orders.overall_code, OK);
        assert_unlimited_by_rules(&orders, 0);
        let deeper = s.ask(&[&[("database", "users"), ("collection", "x")]])?;
        assert_unlimited_by_rules(&deeper, 0);
        Ok(())
    });
}

#[test]
fn example2_nested_per_number_limits_and_several_descriptors_per_request() {
    run("example2-messaging.yaml", "messaging", &[], |s| {
        let marketing = |number| [("message_type", "marketing"), ("to_number", number)];
        let (a, b) = ("2061111111", "2062222222");
        for sent in 1..=5 {
            let answer = s.ask(&[&marketing(a), &[("to_number", a)]])?;
            assert_eq!(answer.overall_code, OK);
            assert_eq!(limit(&answer.statuses[0]), Some(("", 5, DAY)));
            assert_eq!(answer.statuses[0].limit_remaining, 5 - sent);
            assert_eq!(limit(&answer.statuses[1]), Some(("", 100, DAY)));
            assert_eq!(answer.statuses[1].limit_remaining, 100 - sent);
        }
        // The sixth marketing message is over; the aggregate answer is the
        // OR of both, and the per-number limit still counts it.
        let sixth = s.ask(&[&marketing(a), &[("to_number", a)]])?;
        assert_eq!(sixth.overall_code, OVER);
        assert_eq!(summary(&sixth, 0), (OVER, Some(5), 0));
        assert_eq!(summary(&sixth, 1), (OK, Some(100), 94));

        // Another number has budgets of its own.
        let other = s.ask(&[&marketing(b), &[("to_number", b)]])?;
        assert_eq!(other.overall_code, OK);
        assert_eq!(summary(&other, 0), (OK, Some(5), 4));
        assert_eq!(summary(&other, 1), (OK, Some(100), 99));

        // Other message types reach no limit under `message_type`; the
        // number alone still counts against its 100.
        let transactional = s.ask(&[
            &[("message_type", "transactional"), ("to_number", a)],
            &[("to_number", a)],
        ])?;
        assert_eq!(transactional.overall_code, OK);
        assert_unlimited_by_rules(&transactional, 0);
        assert_eq!(summary(&transactional, 1), (OK, Some(100), 93));
        // The placeholder level alone has no limit.
        let placeholder = s.ask(&[&[("message_type", "marketing")]])?;
        assert_unlimited_by_rules(&placeholder, 0);
        Ok(())
    });
}

#[test]
fn example3_the_exact_address_wins_over_the_key_only_rule() {
    run(
        "example3-blocked-address.yaml",
        "edge_proxy_per_ip",
        &[],
        |s| {
            for sent in 1..=10 {
                let answer = s.ask(&[&[("remote_address", "50.0.0.1")]])?;
                assert_eq!(answer.overall_code, OK);
                assert_eq!(limit(&answer.statuses[0]), Some(("", 10, SECOND)));
                assert_eq!(answer.statuses[0].limit_remaining, 10 - sent);
            }
            let eleventh = s.ask(&[&[("remote_address", "50.0.0.1")]])?;
            assert_eq!(eleventh.overall_code, OVER);

            // Every address counts on its own.
            let other = s.ask(&[&[("remote_address", "50.0.0.2")]])?;
            assert_eq!(summary(&other, 0), (OK, Some(10), 9));

            // The blocked address is over from its first request.
            for _ in 0..2 {
                let blocked = s.ask(&[&[("remote_address", "50.0.0.5")]])?;
                assert_eq!(blocked.overall_code, OVER);
                assert_eq!(limit(&blocked.statuses[0]), Some(("", 0, SECOND)));
                assert_eq!(blocked.statuses[0].limit_remaining, 0);
            }
            Ok(())
        },
    );
}

#[test]
fn example4_a_limit_applies_only_at_the_depth_of_the_request() {
    let two_entries: Entries<'_> = &[("key", "value"), ("subkey", "subvalue")];
    run("example4-flat.yaml", "example4_flat", &[], |s| {
        // Deeper than the rules: no limit, however many hits.
        let deep = s.ask_hits(&[two_entries], 1000)?;
        assert_eq!(deep.overall_code, OK);
        assert_unlimited_by_rules(&deep, 0);
        let flat = s.ask_hits(&[&[("key", "value")]], 300)?;
        assert_eq!(summary(&flat, 0), (OK, Some(300), 0));
        assert_eq!(limit(&flat.statuses[0]), Some(("", 300, SECOND)));
        assert_eq!(s.ask(&[&[("key", "value")]])?.overall_code, OVER);
        Ok(())
    });
    run("example4-nested.yaml", "example4_nested", &[], |s| {
        let deep = s.ask_hits(&[two_entries], 300)?;
        assert_eq!(summary(&deep, 0), (OK, Some(300), 0));
        assert_eq!(s.ask(&[two_entries])?.overall_code, OVER);
        // `subkey` is key-only: another value has its own counter.
        let sibling = s.ask(&[&[("key", "value"), ("subkey", "other")]])?;
        assert_eq!(summary(&sibling, 0), (OK, Some(300), 299));
        // The first level alone has no limit, nor does another value there.
        let shallow = s.ask_hits(&[&[("key", "value")]], 1000)?;
        assert_unlimited_by_rules(&shallow, 0);
        let elsewhere = s.ask(&[&[("key", "other"), ("subkey", "subvalue")]])?;
        assert_unlimited_by_rules(&elsewhere, 0);
        Ok(())
    });
}

#[test]
fn example5_unlimited_is_ok_with_the_largest_remaining() {
    run("example5-unlimited.yaml", "internal", &[], |s| {
        for _ in 0..3 {
            let ldap = s.ask_hits(&[&[("ldap", "bind")]], 1_000_000)?;
            assert_eq!(ldap.overall_code, OK);
            let status = &ldap.statuses[0];
            assert_eq!(status.code, OK);
            assert_eq!(status.limit_remaining, u32::MAX);
            assert!(status.current_limit.is_none());
            assert!(status.duration_until_reset.is_none());
        }
        // Unlike a descriptor that matches nothing (remaining 0).
        assert_unlimited_by_rules(&s.ask(&[&[("nfs", "x")]])?, 0);

        let azure = s.ask_hits(&[&[("azure", "vm")]], 100)?;
        assert_eq!(summary(&azure, 0), (OK, Some(100), 0));
        assert_eq!(limit(&azure.statuses[0]), Some(("", 100, MINUTE)));
        let both = s.ask(&[&[("ldap", "bind")], &[("azure", "vm")]])?;
        assert_eq!(both.overall_code, OVER);
        assert_eq!(summary(&both, 0), (OK, None, u32::MAX));
        assert_eq!(summary(&both, 1), (OVER, Some(100), 0));
        Ok(())
    });
}

#[test]
fn example6_shadow_mode_reports_but_never_limits() {
    run("example6-shadow-mode.yaml", "example6", &[], |s| {
        let user = |name| [("service", "auth-service"), ("user", name)];
        for sent in 1..=15u32 {
            let a = s.ask(&[&user("user-a")])?;
            assert_eq!(a.overall_code, OK, "shadow mode never limits");
            assert_eq!(a.statuses[0].code, OK);
            assert_eq!(limit(&a.statuses[0]), Some(("", 10, SECOND)));
            assert_eq!(a.statuses[0].limit_remaining, 10u32.saturating_sub(sent));
        }
        // ... but the breaches are in the statistics.
        assert_eq!(
            s.rule_metric("shadow_rejected", "example6.service.user_user-a"),
            5.0
        );
        assert_eq!(
            s.rule_metric("rejected", "example6.service.user_user-a"),
            0.0
        );

        let b = s.ask_hits(&[&user("user-b")], 20)?;
        assert_eq!(summary(&b, 0), (OK, Some(20), 0));
        let over = s.ask(&[&user("user-b")])?;
        assert_eq!(over.overall_code, OVER);
        assert_eq!(over.statuses[0].code, OVER);
        Ok(())
    });
}

#[test]
fn global_shadow_mode_answers_ok_overall_and_keeps_the_descriptor_codes() {
    // envoyproxy/ratelimit's SHADOW_MODE (README, "Global ShadowMode"): the
    // overall answer is always OK; the statuses still say which descriptor
    // was over, as envoyproxy/ratelimit leaves them.
    run(
        "example6-shadow-mode.yaml",
        "example6",
        &["--shadow"],
        |s| {
            let b: Entries<'_> = &[("service", "auth-service"), ("user", "user-b")];
            let full = s.ask_hits(&[b], 20)?;
            assert_eq!(summary(&full, 0), (OK, Some(20), 0));
            let over = s.ask(&[b, &[("service", "auth-service"), ("user", "user-a")]])?;
            assert_eq!(over.overall_code, OK);
            assert_eq!(summary(&over, 0), (OVER, Some(20), 0));
            assert_eq!(summary(&over, 1), (OK, Some(10), 9));
            assert_eq!(
                s.rule_metric("shadow_rejected", "example6.service.user_user-b"),
                1.0
            );
            Ok(())
        },
    );
}

#[test]
fn example7_replaces_drops_the_named_limit_without_counting_it() {
    run("example7-replaces.yaml", "example7", &[], |s| {
        let under_1: Entries<'_> = &[("key_1", "value_1"), ("user", "bkthomps")];
        let under_2: Entries<'_> = &[("key_2", "value_2"), ("user", "bkthomps")];
        let alone_1 = s.ask(&[under_1])?;
        assert_eq!(
            limit(&alone_1.statuses[0]),
            Some(("specific_limit", 5, SECOND))
        );
        assert_eq!(alone_1.statuses[0].limit_remaining, 4);
        let alone_2 = s.ask(&[under_2])?;
        assert_eq!(summary(&alone_2, 0), (OK, Some(10), 9));

        // Together only the 10 a second applies: 9 more pass, well past 5.
        for sent in 2..=10 {
            let both = s.ask(&[under_1, under_2])?;
            assert_eq!(both.overall_code, OK, "request {sent}");
            assert_unlimited_by_rules(&both, 0);
            assert_eq!(summary(&both, 1), (OK, Some(10), 10 - sent));
        }
        let eleventh = s.ask(&[under_1, under_2])?;
        assert_eq!(eleventh.overall_code, OVER);
        assert_eq!(summary(&eleventh, 1), (OVER, Some(10), 0));

        // `specific_limit` was not touched: one use of 5 so far.
        let again_1 = s.ask(&[under_1])?;
        assert_eq!(summary(&again_1, 0), (OK, Some(5), 3));
        Ok(())
    });
}

#[test]
fn example8_detailed_metric_counts_each_value_on_its_own() {
    run("example8-detailed-metric.yaml", "example8", &[], |s| {
        for sent in 1..=3 {
            let a = s.ask(&[&[("key1", "unspecified_value")]])?;
            assert_eq!(summary(&a, 0), (OK, Some(10), 10 - sent));
        }
        let b = s.ask(&[&[("key1", "unspecified_value2")]])?;
        assert_eq!(summary(&b, 0), (OK, Some(10), 9));
        let exact = s.ask(&[&[("key1", "value1")]])?;
        assert_eq!(summary(&exact, 0), (OK, Some(20), 19));
        assert_eq!(limit(&exact.statuses[0]), Some(("", 20, MINUTE)));

        assert_eq!(
            s.rule_metric("requests", "example8.key1_unspecified_value"),
            3.0
        );
        assert_eq!(
            s.rule_metric("requests", "example8.key1_unspecified_value2"),
            1.0
        );
        assert_eq!(s.rule_metric("requests", "example8.key1_value1"), 1.0);
        assert_eq!(
            s.rule_metric("requests", "example8.key1"),
            0.0,
            "not rolled up under the key"
        );
        Ok(())
    });
}

#[test]
fn example9_a_wildcard_value_limits_each_matching_value() {
    run("example9-wildcard.yaml", "example9", &[], |s| {
        let one = s.ask_hits(&[&[("key1", "value1")]], 20)?;
        assert_eq!(summary(&one, 0), (OK, Some(20), 0));
        assert_eq!(limit(&one.statuses[0]), Some(("", 20, MINUTE)));
        assert_eq!(s.ask(&[&[("key1", "value1")]])?.overall_code, OVER);
        let two = s.ask(&[&[("key1", "value2")]])?;
        assert_eq!(summary(&two, 0), (OK, Some(20), 19));
        let longer = s.ask(&[&[("key1", "value_with_suffix")]])?;
        assert_eq!(summary(&longer, 0), (OK, Some(20), 19));
        for other in ["valu", "other", "Value1"] {
            assert_unlimited_by_rules(&s.ask_hits(&[&[("key1", other)]], 100)?, 0);
        }
        // The prefix compares the value only, not `key_value`.
        assert_unlimited_by_rules(&s.ask(&[&[("key1_value", "x")]])?, 0);
        Ok(())
    });
}

#[test]
fn replaces_raises_one_users_limit_on_one_read_endpoint_only() {
    run("replaces-read-endpoint.yaml", "docs_replaces", &[], |s| {
        let read = |user| [("category", "read"), ("user", user)];
        let reports = |user| [("endpoint", "/reports"), ("user", user)];

        // alice on /reports: 6 a minute instead of the read class's 3.
        for sent in 1..=6 {
            let answer = s.ask(&[&read("alice"), &reports("alice")])?;
            assert_eq!(answer.overall_code, OK, "request {sent}");
            assert_unlimited_by_rules(&answer, 0);
            assert_eq!(summary(&answer, 1), (OK, Some(6), 6 - sent));
        }
        assert_eq!(
            s.ask(&[&read("alice"), &reports("alice")])?.overall_code,
            OVER
        );
        // Her other read endpoints keep the class budget, untouched so far.
        let elsewhere = s.ask(&[&read("alice"), &[("endpoint", "/items"), ("user", "alice")]])?;
        assert_eq!(summary(&elsewhere, 0), (OK, Some(3), 2));
        assert_unlimited_by_rules(&elsewhere, 1);

        // bob on /reports has no replacing rule: the read class's 3.
        for _ in 0..3 {
            let bob = s.ask(&[&read("bob"), &reports("bob")])?;
            assert_eq!(bob.overall_code, OK);
            assert_unlimited_by_rules(&bob, 1);
        }
        let bob = s.ask(&[&read("bob"), &reports("bob")])?;
        assert_eq!(bob.overall_code, OVER);
        assert_eq!(limit(&bob.statuses[0]), Some(("read_per_user", 3, MINUTE)));

        // Writes are a class of their own.
        let write = s.ask(&[&[("category", "write"), ("user", "alice")]])?;
        assert_eq!(
            limit(&write.statuses[0]),
            Some(("write_per_user", 1, MINUTE))
        );
        assert_eq!(write.overall_code, OK);
        Ok(())
    });
}

#[test]
fn a_descriptor_without_limit_or_children_is_whitelisted() {
    run("definitions-whitelisted.yaml", "docs_whitelist", &[], |s| {
        for _ in 0..3 {
            let answer = s.ask(&[&[("internal_caller", "batch")]])?;
            assert_eq!(answer.overall_code, OK);
            assert_unlimited_by_rules(&answer, 0);
        }
        assert_eq!(s.ask(&[&[("caller", "a")]])?.overall_code, OK);
        assert_eq!(s.ask(&[&[("caller", "a")]])?.overall_code, OVER);
        Ok(())
    });
}

#[test]
fn the_demo_environment_walkthrough() {
    run("demo-environment.yaml", "rl", &[], |s| {
        // `curl /header -H "foo: foo"`: 2 a minute.
        let foo: Entries<'_> = &[("foo", "foo")];
        assert_eq!(summary(&s.ask(&[foo])?, 0), (OK, Some(2), 1));
        assert_eq!(summary(&s.ask(&[foo])?, 0), (OK, Some(2), 0));
        assert_eq!(s.ask(&[foo])?.overall_code, OVER);

        // Two headers, foo and bar: 3 a minute of their own.
        let bar: Entries<'_> = &[("foo", "foo"), ("bar", "bar")];
        for sent in 1..=3 {
            assert_eq!(summary(&s.ask(&[bar])?, 0), (OK, Some(3), 3 - sent));
        }
        assert_eq!(s.ask(&[bar])?.overall_code, OVER);

        // foo and baz: 1 a second, so the second is limited.
        let baz: Entries<'_> = &[("foo", "foo"), ("baz", "baz")];
        let first = s.ask(&[baz])?;
        assert_eq!(summary(&first, 0), (OK, Some(1), 0));
        assert_eq!(limit(&first.statuses[0]), Some(("", 1, SECOND)));
        assert_eq!(s.ask(&[baz])?.overall_code, OVER);
        let not_so_shady: Entries<'_> = &[("foo", "foo"), ("baz", "not-so-shady")];
        assert_eq!(s.ask(&[not_so_shady])?.overall_code, OK);
        assert_eq!(s.ask(&[not_so_shady])?.overall_code, OVER);

        // A banned bar value is always limited.
        let banned = s.ask(&[&[("foo", "foo"), ("bar", "banned")]])?;
        assert_eq!(banned.overall_code, OVER);
        assert_eq!(limit(&banned.statuses[0]), Some(("", 0, MINUTE)));

        // baz: shady is in shadow mode, never limited.
        let shady: Entries<'_> = &[("foo", "foo"), ("baz", "shady")];
        for sent in 1..=3u32 {
            let answer = s.ask(&[shady])?;
            assert_eq!(answer.overall_code, OK, "request {sent}");
            assert_eq!(limit(&answer.statuses[0]), Some(("", 1, MINUTE)));
        }

        // Unlimited, nested and at the top.
        for entries in [&[("foo", "foo"), ("bay", "x")][..], &[("qux", "x")][..]] {
            let answer = s.ask(&[entries])?;
            assert_eq!(summary(&answer, 0), (OK, None, u32::MAX));
        }

        // The cluster pair: 1 a minute; another destination is not limited.
        let mock: Entries<'_> = &[("source_cluster", "proxy"), ("destination_cluster", "mock")];
        assert_eq!(s.ask(&[mock])?.overall_code, OK);
        assert_eq!(s.ask(&[mock])?.overall_code, OVER);
        let other = s.ask(&[&[("source_cluster", "proxy"), ("destination_cluster", "db")]])?;
        assert_unlimited_by_rules(&other, 0);
        Ok(())
    });
}
