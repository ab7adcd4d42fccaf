//! The baseline of `scripts/bench-grpc`: tollgate's gRPC stack with no
//! decision behind it.
//!
//! Same stack as `tollgate serve --grpc`: the `RateLimitService` generated
//! from tollgate's own `.proto` files, served next to the `grpc.health.v1`
//! service by tonic's routes on `tollgate_listener::serve` (HTTP/2 only,
//! default connection settings), on a default tokio multi-thread runtime (one worker per CPU it may
//! run on) and the `tollgate` binary's allocator. `ShouldRateLimit` answers
//! every request with the same `RateLimitResponse` tollgate gives an admitted
//! request of the benchmark (`examples/rules/bench-grpc.yaml`): overall OK and
//! one status with the rule's limit, its name, a remaining count and a
//! duration until reset, so the answer encodes to the same size.
//!
//! Whatever tollgate answers less than this is the cost of the decision:
//! request conversion, rule matching, the store, metrics.
//!
//! ```text
//! grpc_noop [ADDRESS]     # default 127.0.0.1:0; prints `grpc_noop: listening on http://ADDR`
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tollgate_listener::{ConnectionSettings, Protocols, Unobserved};
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use tollgate_server::proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use tollgate_server::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::service::Routes;
use tonic::{Request, Response, Status};

/// The `tollgate` binary's allocator, so the two servers differ only by the
/// decision behind the answer.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers every request with one fixed status per descriptor.
struct Noop;

/// tollgate's answer to an admitted request of the benchmark, for one
/// descriptor.
fn status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        current_limit: Some(RateLimit {
            name: "per_user".into(),
            requests_per_unit: 1_000_000,
            unit: 1,
        }),
        limit_remaining: 999_999,
        duration_until_reset: Some(prost_types::Duration {
            seconds: 0,
            nanos: 500_000_000,
        }),
        quota: None,
    }
}

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // Decoded like tollgate's, and as many statuses as descriptors.
        let descriptors = request.into_inner().descriptors.len();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![status(); descriptors],
            ..RateLimitResponse::default()
        }))
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let address: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:0")
        .parse()?;
    // The same runtime as `tollgate serve`.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("grpc_noop")
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(address).await?;
        println!("grpc_noop: listening on http://{}", listener.local_addr()?);
        // The same server as `tollgate_server::grpc::serve_grpc`.
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<RateLimitServiceServer<Noop>>().await;
        let routes = Routes::new(health_service)
            .add_service(RateLimitServiceServer::new(Noop))
            .prepare();
        tollgate_listener::serve(
            listener,
            ConnectionSettings::default(),
            Protocols::Http2,
            Arc::new(Unobserved),
            move |_| (routes.clone(), std::future::pending()),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
        Ok(())
    })
}
