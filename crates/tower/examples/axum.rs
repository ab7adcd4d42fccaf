//! An axum app behind tollgate's rate-limiting layer, on the embedded
//! memory store, with its rules inline.
//!
//! ```text
//! cargo run -p tollgate-tower --example axum --features axum [-- 127.0.0.1:3000]
//! curl -i http://127.0.0.1:3000/api/hello        # 200, then 429 after 5 in a minute
//! curl -i -X POST http://127.0.0.1:3000/login     # 1 per 10 s per client
//! ```

use std::net::SocketAddr;

use axum::routing::{get, post};
use axum::Router;
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::RuleSet;
use tollgate_tower::RateLimitLayer;

/// Routes turn requests into descriptors; descriptors say the limits.
const RULES: &str = r#"
domain: app
routes:
  - name: login
    match: {path: /login, methods: [POST]}
    descriptors: [[{generic_key: {descriptor_value: login}}, remote_address]]
  - name: api
    match: {path_prefix: /api/}
    descriptors: [[remote_address]]
descriptors:
  - key: generic_key
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {window: 10s, requests_per_unit: 1, algorithm: gcra, name: login}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra, name: per_client}
"#;

/// The app: two handlers and the layer around them.
pub(crate) fn app() -> Result<Router, tollgate_rules::RulesError> {
    let rules = RuleSet::from_yaml(RULES, "app.yaml")?;
    let store = LocalStore::system(MemoryStore::new(MemoryConfig::default()));
    Ok(Router::new()
        .route("/api/hello", get(|| async { "hello\n" }))
        .route("/login", post(|| async { "welcome\n" }))
        .layer(RateLimitLayer::from_rules(store, rules, "app")))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The connection's address reaches the layer as ConnectInfo (the
    // `axum` feature), so `remote_address` is the client IP.
    axum::serve(
        listener,
        app()?.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
