//! The Redis store on the ways a deployment reaches Redis besides plain TCP:
//! TLS (`rediss://`) with a private CA, with and without mutual TLS, and a
//! unix socket (`unix://`, `redis+unix://`), each on a real `redis-server`
//! the test starts with certificates it generates; and the TLS settings that
//! are refused before anything connects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store, StoreError};
use tollgate_redis::{OpenError, RedisConfig, RedisStore, TlsError};
use tollgate_testkit::{ClientCerts, RedisServer, TestCertificates};

/// The store's timeout: long, so that on a loaded machine a failing TLS
/// handshake (and the connection's one retry) always ends before it and the
/// error says why, rather than depending on which comes first.
const TIMEOUT: Duration = Duration::from_secs(20);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn two_per_hour() -> Limit {
    Limit::new(
        AlgorithmName::Gcra,
        Rate::new(2, Duration::from_secs(3600)).unwrap(),
    )
}

fn config(ca: Option<&PathBuf>, identity: Option<(&PathBuf, &PathBuf)>) -> RedisConfig {
    RedisConfig {
        timeout: TIMEOUT,
        tls_ca: ca.cloned(),
        tls_cert: identity.map(|(cert, _)| cert.clone()),
        tls_key: identity.map(|(_, key)| key.clone()),
        ..RedisConfig::default()
    }
}

/// Three checks of a 2-per-hour limit on one key: what each decided, or
/// the first error and how long it took to come.
fn three_checks(url: &str, config: RedisConfig) -> Result<Vec<bool>, (StoreError, Duration)> {
    let runtime = runtime();
    let _context = runtime.enter();
    let store = RedisStore::open(&url.parse().unwrap(), config).unwrap();
    let limit = two_per_hour();
    let request = [LimitKey {
        limit: &limit,
        key: b"client",
    }];
    runtime.block_on(async {
        let mut allowed = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            match store.check(&request, Moment::Now, 1).await {
                Ok(decisions) => allowed.push(decisions[0].allowed),
                Err(error) => return Err((error, started.elapsed())),
            }
        }
        Ok(allowed)
    })
}

/// The call failed as an outage with the connection's own error, before
/// the store's timeout (not a hang that the timeout ended); the error.
fn assert_fails_fast(result: Result<Vec<bool>, (StoreError, Duration)>) -> StoreError {
    let (error, took) = result.expect_err("the check must fail");
    assert!(error.is_outage(), "{error}");
    assert!(
        !matches!(error, StoreError::Timeout(_)),
        "the store timed out after {took:?} instead of saying why it failed"
    );
    error
}

#[test]
fn tls_with_the_private_ca_trusted_decides() {
    let redis = RedisServer::start_tls(ClientCerts::NotRequested);
    let certs = redis.certificates().unwrap();
    assert!(redis.url().starts_with("rediss://127.0.0.1:"));
    let decided = three_checks(&redis.url(), config(Some(&certs.ca), None)).unwrap();
    assert_eq!(decided, [true, true, false]);
    assert!(redis.command("DBSIZE").is_some_and(|r| r.starts_with(":1")));
}

#[test]
fn tls_without_the_ca_fails_fast() {
    let redis = RedisServer::start_tls(ClientCerts::NotRequested);
    // The system's roots do not know the test CA.
    let error = assert_fails_fast(three_checks(&redis.url(), config(None, None)));
    assert!(error.to_string().contains("certificate"), "{error}");
    assert!(redis.command("DBSIZE").is_some_and(|r| r.starts_with(":0")));
}

#[test]
fn mutual_tls_works_with_the_client_certificate_only() {
    let redis = RedisServer::start_tls(ClientCerts::Required);
    let certs = redis.certificates().unwrap();
    let identity = (&certs.client_cert, &certs.client_key);
    let decided = three_checks(&redis.url(), config(Some(&certs.ca), Some(identity))).unwrap();
    assert_eq!(decided, [true, true, false]);

    let error = assert_fails_fast(three_checks(&redis.url(), config(Some(&certs.ca), None)));
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
}

#[test]
fn unix_sockets_decide() {
    let redis = RedisServer::start_unix();
    let socket = redis.socket().unwrap().display().to_string();
    assert_eq!(redis.url(), format!("unix://{socket}"));
    assert_eq!(redis.port(), 0);
    let decided = three_checks(&redis.url(), config(None, None)).unwrap();
    assert_eq!(decided, [true, true, false]);
    // The same key through the other spelling: the same counts.
    let url = format!("redis+unix://{socket}");
    let decided = three_checks(&url, config(None, None)).unwrap();
    assert_eq!(decided, [false, false, false]);
    assert!(redis.command("DBSIZE").is_some_and(|r| r.starts_with(":1")));
}

/// `open` with these settings, which must be refused.
fn refused(url: &str, config: RedisConfig) -> OpenError {
    let runtime = runtime();
    let _context = runtime.enter();
    match RedisStore::open(&url.parse().unwrap(), config) {
        Ok(_) => panic!("{url}: the settings were accepted"),
        Err(error) => error,
    }
}

#[test]
fn unusable_tls_settings_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::generate(dir.path());
    let tls = "rediss://127.0.0.1:1";

    let error = refused(
        tls,
        RedisConfig {
            tls_cert: Some(certs.client_cert.clone()),
            ..RedisConfig::default()
        },
    );
    assert!(matches!(
        error,
        OpenError::Tls(TlsError::CertWithoutKey { .. })
    ));
    assert!(error.to_string().contains("client.pem"), "{error}");

    let error = refused(
        tls,
        RedisConfig {
            tls_key: Some(certs.client_key.clone()),
            ..RedisConfig::default()
        },
    );
    assert!(matches!(
        error,
        OpenError::Tls(TlsError::KeyWithoutCert { .. })
    ));

    let missing = dir.path().join("no-such-ca.pem");
    let error = refused(tls, config(Some(&missing), None));
    assert!(matches!(error, OpenError::Tls(TlsError::Read { .. })));
    assert!(
        error.to_string().contains(&missing.display().to_string()),
        "{error}"
    );

    // A key is not a CA bundle.
    let error = refused(tls, config(Some(&certs.client_key), None));
    assert!(error.to_string().contains("client.key"), "{error}");
    assert!(error.to_string().contains("no PEM certificate"), "{error}");

    // The server's key is not the client certificate's.
    let error = refused(
        tls,
        config(None, Some((&certs.client_cert, &certs.server_key))),
    );
    assert!(matches!(error, OpenError::Tls(TlsError::Identity { .. })));

    for plain in [
        "redis://127.0.0.1:1",
        "unix:///tmp/redis.sock",
        "redis+cluster://127.0.0.1:1,127.0.0.1:2",
    ] {
        let error = refused(plain, config(Some(&certs.ca), None));
        assert!(matches!(error, OpenError::Tls(TlsError::NotTls { .. })));
        assert!(error.to_string().contains("rediss://"), "{error}");
    }
}

#[test]
fn a_tls_cluster_endpoint_takes_the_tls_files() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::generate(dir.path());
    let runtime = runtime();
    let _context = runtime.enter();
    let identity = (&certs.client_cert, &certs.client_key);
    let url = "rediss+cluster://127.0.0.1:1,127.0.0.1:2";
    assert!(RedisStore::open(
        &url.parse().unwrap(),
        config(Some(&certs.ca), Some(identity))
    )
    .is_ok());
}
