//! The Envoy rate limit gRPC API of `tollgate serve`, through the real
//! binary and a tonic client: answers as envoyproxy/ratelimit gives them,
//! errors, the health service, and the same counters as `POST /json`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::Server;
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use tollgate_server::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const RULES: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      name: per-user
      algorithm: sliding_window_log
      unit: hour
      requests_per_unit: 3
  - key: bucket
    rate_limit:
      name: bucket
      algorithm: token_bucket
      unit: second
      requests_per_unit: 10
      burst: 20
  - key: health
    rate_limit:
      unlimited: true
"#;

fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    support::write(&path, RULES);
    let mut args = vec!["--rules", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    (dir, server)
}

fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn ask(
    server: &Server,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut client = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .unwrap();
    client
        .should_rate_limit(request)
        .await
        .map(tonic::Response::into_inner)
}

#[test]
fn answers_as_envoyproxy_ratelimit_does() {
    let (_dir, s) = start(&[]);
    runtime().block_on(async {
        let user = || {
            request(vec![
                descriptor(&[("user", "alice")]),
                descriptor(&[("nothing", "x")]),
            ])
        };
        let first = ask(&s, user()).await.unwrap();
        assert_eq!(first.overall_code, Code::Ok as i32);
        let status = &first.statuses[0];
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("per-user", 3, 3)
        );
        assert_eq!(status.limit_remaining, 2);
        assert!(status.duration_until_reset.is_some());
        assert_eq!(first.statuses[1].code, Code::Ok as i32);
        assert!(
            first.statuses[1].current_limit.is_none(),
            "no rule, no limit"
        );

        ask(&s, user()).await.unwrap();
        ask(&s, user()).await.unwrap();
        let over = ask(&s, user()).await.unwrap();
        assert_eq!(over.overall_code, Code::OverLimit as i32);
        assert_eq!(over.statuses[0].code, Code::OverLimit as i32);
        assert_eq!(over.statuses[1].code, Code::Ok as i32);

        let unlimited = ask(&s, request(vec![descriptor(&[("health", "x")])]))
            .await
            .unwrap();
        assert_eq!(unlimited.statuses[0].limit_remaining, u32::MAX);
    });
}

#[test]
fn hits_addend_zero_checks_without_counting_and_overrides_replace_the_limit() {
    let (_dir, s) = start(&[]);
    runtime().block_on(async {
        let mut peek = descriptor(&[("user", "bob")]);
        peek.hits_addend = Some(0);
        for _ in 0..5 {
            let answer = ask(&s, request(vec![peek.clone()])).await.unwrap();
            assert_eq!(answer.statuses[0].limit_remaining, 3);
        }
        let mut heavy = request(vec![descriptor(&[("user", "bob")])]);
        heavy.hits_addend = 2;
        assert_eq!(ask(&s, heavy).await.unwrap().statuses[0].limit_remaining, 1);

        let mut overridden = descriptor(&[("user", "carol")]);
        overridden.limit = Some(RateLimitOverride {
            requests_per_unit: 1,
            unit: 4,
        });
        let first = ask(&s, request(vec![overridden.clone()])).await.unwrap();
        assert_eq!(
            first.statuses[0]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            1
        );
        let second = ask(&s, request(vec![overridden])).await.unwrap();
        assert_eq!(second.overall_code, Code::OverLimit as i32);
    });
}

#[test]
fn malformed_requests_are_invalid_arguments() {
    let (_dir, s) = start(&[]);
    runtime().block_on(async {
        let mut empty_domain = request(vec![descriptor(&[("user", "x")])]);
        empty_domain.domain.clear();
        let e = ask(&s, empty_domain).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("domain"), "{}", e.message());
        assert_eq!(
            ask(&s, request(vec![])).await.unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            ask(&s, request(vec![descriptor(&[])]))
                .await
                .unwrap_err()
                .code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            ask(&s, request(vec![descriptor(&[("", "x")])]))
                .await
                .unwrap_err()
                .code(),
            tonic::Code::InvalidArgument
        );
    });
}

#[test]
fn grpc_and_json_share_the_counters_and_headers_can_be_passed_on() {
    let (_dir, s) = start(&["--response-headers"]);
    runtime().block_on(async {
        let answer = ask(&s, request(vec![descriptor(&[("user", "dave")])]))
            .await
            .unwrap();
        assert_eq!(answer.statuses[0].limit_remaining, 2);
        let policy = answer
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "ratelimit-policy")
            .expect("RateLimit-Policy passed on");
        assert_eq!(policy.value, r#""per-user";q=3;w=3600"#);
        // A bucket: its burst over the time to refill it.
        let answer = ask(&s, request(vec![descriptor(&[("bucket", "b")])]))
            .await
            .unwrap();
        let policy = answer
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "ratelimit-policy")
            .expect("RateLimit-Policy passed on");
        assert_eq!(policy.value, r#""bucket";q=20;w=2"#);
    });
    let (status, body) = s.call(
        "/json",
        &json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "dave"}]}]}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        body["statuses"][0]["limitRemaining"], 1,
        "the gRPC call counted"
    );
}

#[test]
fn the_health_service_reports_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let (_dir, s) = start(&[]);
    runtime().block_on(async {
        let channel = tonic::transport::Channel::from_shared(s.grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = HealthClient::new(channel);
        let answer = client
            .check(HealthCheckRequest {
                service: "envoy.service.ratelimit.v3.RateLimitService".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.status, ServingStatus::Serving as i32);
    });
}

const ENVOY_FEATURES: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: per-address
      algorithm: sliding_window_log
      unit: hour
      requests_per_unit: 2
  - key: remote_address
    value: "10.0.0.1"
    rate_limit:
      name: vip
      algorithm: sliding_window_log
      unit: hour
      requests_per_unit: 5
      replaces:
        - name: per-address
  - key: path
    value: /api/*
    rate_limit:
      algorithm: sliding_window_log
      unit: hour
      requests_per_unit: 1
  - key: trial
    shadow_mode: true
    rate_limit:
      algorithm: sliding_window_log
      unit: hour
      requests_per_unit: 1
"#;

fn start_with(rules: &str) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    support::write(&path, rules);
    let server = Server::start(&["--rules", path.to_str().unwrap()]);
    (dir, server)
}

fn edge(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

#[test]
fn replaces_drops_the_named_limit() {
    let (_dir, s) = start_with(ENVOY_FEATURES);
    runtime().block_on(async {
        // The exact value's limit (vip, 5) is found before the key-only one;
        // a request naming both descriptors drops `per-address`.
        let both = || {
            edge(vec![
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("remote_address", "10.0.0.2")]),
            ])
        };
        let answer = ask(&s, both()).await.unwrap();
        assert_eq!(
            answer.statuses[0].current_limit.as_ref().unwrap().name,
            "vip"
        );
        assert!(
            answer.statuses[1].current_limit.is_none(),
            "replaced by vip"
        );
        for _ in 0..4 {
            assert_eq!(ask(&s, both()).await.unwrap().overall_code, Code::Ok as i32);
        }
        assert_eq!(
            ask(&s, both()).await.unwrap().overall_code,
            Code::OverLimit as i32
        );
    });
}

#[test]
fn wildcards_count_each_value_and_shadow_mode_never_rejects() {
    let (_dir, s) = start_with(ENVOY_FEATURES);
    runtime().block_on(async {
        let path = |p: &str| edge(vec![descriptor(&[("path", p)])]);
        assert_eq!(
            ask(&s, path("/api/a")).await.unwrap().overall_code,
            Code::Ok as i32
        );
        assert_eq!(
            ask(&s, path("/api/a")).await.unwrap().overall_code,
            Code::OverLimit as i32
        );
        assert_eq!(
            ask(&s, path("/api/b")).await.unwrap().overall_code,
            Code::Ok as i32,
            "one counter per value"
        );
        let other = ask(&s, path("/web")).await.unwrap();
        assert!(
            other.statuses[0].current_limit.is_none(),
            "no match outside the prefix"
        );

        let trial = || edge(vec![descriptor(&[("trial", "t")])]);
        ask(&s, trial()).await.unwrap();
        let over = ask(&s, trial()).await.unwrap();
        assert_eq!(
            over.overall_code,
            Code::Ok as i32,
            "shadow mode never rejects"
        );
        assert_eq!(over.statuses[0].code, Code::Ok as i32);
        assert_eq!(over.statuses[0].limit_remaining, 0);
    });
}

#[test]
fn an_unknown_domain_is_ok_without_limits() {
    let (_dir, s) = start_with(ENVOY_FEATURES);
    runtime().block_on(async {
        let mut r = edge(vec![descriptor(&[("remote_address", "1.2.3.4")])]);
        r.domain = "nowhere".into();
        let answer = ask(&s, r).await.unwrap();
        assert_eq!(answer.overall_code, Code::Ok as i32);
        assert_eq!(answer.statuses.len(), 1);
        assert!(answer.statuses[0].current_limit.is_none());
    });
}
