//! The Envoy rate limit service over gRPC (`ShouldRateLimit`) and the
//! standard `grpc.health.v1.Health` service: a thin adapter that converts
//! protobuf messages to and from the transport-independent decision of
//! [`envoy`](crate::envoy), which `POST /json` shares.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use prost_types::value::Kind;
use tokio::net::TcpListener;
use tollgate_core::{Moment, Store};
use tollgate_listener::{ConnectionSettings, Protocols};
use tollgate_rules::{Descriptor, Metadata, MetadataValue, RateLimitUnit};
use tonic::service::Routes;
use tonic::{Request, Response, Status};

use crate::app::App;
use crate::envoy::{self, Code, DescriptorView, RequestView};
use crate::error::ApiError;
use crate::headers::rate_limit_headers;
use crate::latency::LatencyHistogram;
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    self, DescriptorStatus, RateLimit,
};
use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// The `RateLimitService` implementation.
pub struct RateLimitGrpc<S> {
    app: App<S>,
    response_headers: bool,
    /// The `grpc` route's latency histogram, kept rather than found by
    /// name per call.
    latency: LatencyHistogram,
}

impl<S: Store> RateLimitGrpc<S> {
    /// The service over `app`; with `response_headers`, the SPEC §7 headers
    /// go into `response_headers_to_add` for Envoy to pass on.
    pub fn new(app: App<S>, response_headers: bool) -> RateLimitGrpc<S> {
        RateLimitGrpc {
            latency: app.metrics().route_latency("grpc"),
            app,
            response_headers,
        }
    }
}

/// The status a refused request or a store failure answers.
fn status_of(error: ApiError) -> Status {
    match error.status.as_u16() {
        400 | 413 => Status::invalid_argument(error.message),
        503 => Status::unavailable(error.message),
        _ => Status::internal(error.message),
    }
}

/// The unit of a request-side override (`envoy.type.v3.RateLimitUnit`).
fn unit_of(unit: i32) -> Option<RateLimitUnit> {
    match unit {
        1 => Some(RateLimitUnit::Second),
        2 => Some(RateLimitUnit::Minute),
        3 => Some(RateLimitUnit::Hour),
        4 => Some(RateLimitUnit::Day),
        5 => Some(RateLimitUnit::Month),
        6 => Some(RateLimitUnit::Year),
        _ => None,
    }
}

/// Refuses a request whose request-side override has an unknown unit,
/// before anything is decided.
fn check_override_units(request: &RateLimitRequest) -> Result<(), Status> {
    for d in &request.descriptors {
        if let Some(unit) = d.limit.as_ref().map(|o| o.unit) {
            if unit_of(unit).is_none() {
                return Err(Status::invalid_argument(format!(
                    "limit override unit {unit} is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR"
                )));
            }
        }
    }
    Ok(())
}

/// The request is decided as decoded, without a copy.
impl RequestView for RateLimitRequest {
    type Descriptor = RateLimitDescriptor;
    fn domain(&self) -> &str {
        &self.domain
    }
    fn descriptors(&self) -> &[RateLimitDescriptor] {
        &self.descriptors
    }
    fn hits_addend(&self) -> u32 {
        self.hits_addend
    }
}

impl Descriptor for RateLimitDescriptor {
    fn len(&self) -> usize {
        self.entries.len()
    }
    fn entry(&self, index: usize) -> (&str, &str) {
        let entry = &self.entries[index];
        (&entry.key, &entry.value)
    }
}

impl DescriptorView for RateLimitDescriptor {
    /// An override with an unknown unit reads as none: the service refuses
    /// such a request first ([`check_override_units`]).
    fn limit(&self) -> Option<(u32, RateLimitUnit)> {
        let limit = self.limit.as_ref()?;
        Some((limit.requests_per_unit, unit_of(limit.unit)?))
    }
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }
}

/// A status in protobuf, made as the descriptor is decided.
impl From<envoy::DescriptorStatus<'_>> for DescriptorStatus {
    fn from(s: envoy::DescriptorStatus<'_>) -> DescriptorStatus {
        DescriptorStatus {
            code: code_of(s.code),
            current_limit: s.current_limit.map(|l| RateLimit {
                name: l.name.unwrap_or_default().to_owned(),
                requests_per_unit: l.requests_per_unit,
                unit: l.unit as i32,
            }),
            limit_remaining: s.limit_remaining,
            duration_until_reset: s.duration_until_reset.map(duration_of),
            quota: None,
        }
    }
}

fn code_of(code: Code) -> i32 {
    match code {
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    }
}

fn duration_of(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimitGrpc<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = std::time::Instant::now();
        let request = request.into_inner();
        check_override_units(&request)?;
        let answer: envoy::EnvoyResponse<DescriptorStatus> =
            envoy::should_rate_limit(&self.app, &request, Moment::Now, self.response_headers)
                .await
                .map_err(status_of)?;
        self.latency.observe(started.elapsed());
        let over = answer.overall_code == Code::OverLimit;
        let response_headers_to_add = if self.response_headers {
            let headers = rate_limit_headers(&answer.applied, answer.top.as_ref(), over);
            headers
                .iter()
                .map(|(name, value)| HeaderValue {
                    key: name.as_str().to_owned(),
                    value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    raw_value: Vec::new(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let dynamic_metadata = self
            .app
            .settings()
            .response_dynamic_metadata
            .then(|| dynamic_metadata(&request, &answer.passed_metadata));
        Ok(Response::new(RateLimitResponse {
            overall_code: code_of(answer.overall_code),
            statuses: answer.statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..RateLimitResponse::default()
        }))
    }
}

/// The `dynamic_metadata` envoyproxy/ratelimit sends with
/// `RESPONSE_DYNAMIC_METADATA`, for Envoy filters that read it: `domain`;
/// `descriptors`, one `{entries: ["key=value", …]}` each (with `limit`
/// `{requestsPerUnit, unit}` for a request-side override and `hitsAddend`
/// when the descriptor has its own); the request's `hitsAddend` when not 0;
/// and `metadata`, the `metadata` mappings of the descriptors that passed
/// merged in request order (a name keeps its first value), when any.
fn dynamic_metadata<R: RequestView>(request: &R, passed: &[Arc<Metadata>]) -> prost_types::Struct {
    let mut fields = BTreeMap::new();
    fields.insert("domain".to_owned(), string_value(request.domain()));
    let descriptors = request
        .descriptors()
        .iter()
        .map(|d| {
            let mut descriptor = BTreeMap::new();
            let entries = (0..d.len())
                .map(|i| d.entry(i))
                .map(|(key, value)| string_value(&format!("{key}={value}")))
                .collect();
            descriptor.insert("entries".to_owned(), list_value(entries));
            if let Some((requests_per_unit, unit)) = d.limit() {
                let mut limit = BTreeMap::new();
                limit.insert(
                    "requestsPerUnit".to_owned(),
                    number_value(f64::from(requests_per_unit)),
                );
                limit.insert("unit".to_owned(), string_value(unit.as_str()));
                descriptor.insert("limit".to_owned(), struct_value(limit));
            }
            if let Some(hits) = d.hits_addend() {
                descriptor.insert("hitsAddend".to_owned(), number_value(hits as f64));
            }
            struct_value(descriptor)
        })
        .collect();
    fields.insert("descriptors".to_owned(), list_value(descriptors));
    if request.hits_addend() != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            number_value(f64::from(request.hits_addend())),
        );
    }
    let mut merged = BTreeMap::new();
    for metadata in passed {
        for (name, value) in metadata.iter() {
            merged
                .entry(name.clone())
                .or_insert_with(|| metadata_value(value));
        }
    }
    if !merged.is_empty() {
        fields.insert("metadata".to_owned(), struct_value(merged));
    }
    prost_types::Struct { fields }
}

fn metadata_value(value: &MetadataValue) -> prost_types::Value {
    match value {
        MetadataValue::Null => prost_types::Value {
            kind: Some(Kind::NullValue(0)),
        },
        MetadataValue::Bool(b) => prost_types::Value {
            kind: Some(Kind::BoolValue(*b)),
        },
        MetadataValue::Number(n) => number_value(*n),
        MetadataValue::String(s) => string_value(s),
        MetadataValue::List(items) => list_value(items.iter().map(metadata_value).collect()),
        MetadataValue::Map(map) => struct_value(
            map.iter()
                .map(|(k, v)| (k.clone(), metadata_value(v)))
                .collect(),
        ),
    }
}

fn string_value(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

fn number_value(n: f64) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list_value(values: Vec<prost_types::Value>) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::ListValue(prost_types::ListValue { values })),
    }
}

fn struct_value(fields: BTreeMap<String, prost_types::Value>) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StructValue(prost_types::Struct { fields })),
    }
}

/// Serves `ShouldRateLimit` and the health service on `listener` until
/// `shutdown` completes; calls in flight are answered first.
///
/// Connections speak HTTP/2 only and are held to `connections` (see
/// `tollgate_listener`: a cap on open connections, an idle timeout, a body
/// read timeout, which fails the call), counted in `app`'s metrics under
/// `listener="grpc"`.
pub async fn serve_grpc<S: Store>(
    listener: TcpListener,
    app: App<S>,
    response_headers: bool,
    connections: ConnectionSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<RateLimitGrpc<S>>>()
        .await;
    let observer = Arc::new(app.metrics().connections("grpc"));
    let routes = Routes::new(health_service)
        .add_service(RateLimitServiceServer::new(RateLimitGrpc::new(
            app,
            response_headers,
        )))
        .prepare();
    tollgate_listener::serve(
        listener,
        connections,
        Protocols::Http2,
        observer,
        move |_| (routes.clone(), std::future::pending()),
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };

    fn descriptor(unit: Option<i32>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "user".into(),
                    value: "42".into(),
                },
                Entry {
                    key: "path".into(),
                    value: "/".into(),
                },
            ],
            limit: unit.map(|unit| RateLimitOverride {
                requests_per_unit: 5,
                unit,
            }),
            hits_addend: Some(3),
        }
    }

    #[test]
    fn a_protobuf_descriptor_reads_as_decoded() {
        let d = descriptor(Some(2));
        assert_eq!(Descriptor::len(&d), 2);
        assert_eq!(d.entry(1), ("path", "/"));
        assert_eq!(d.limit(), Some((5, RateLimitUnit::Minute)));
        assert_eq!(DescriptorView::hits_addend(&d), Some(3));
        assert_eq!(descriptor(None).limit(), None);
    }

    #[test]
    fn an_unknown_override_unit_is_refused_before_anything_else() {
        // An empty domain would be refused too, but the unit is named first.
        let request = RateLimitRequest {
            descriptors: vec![descriptor(Some(6)), descriptor(Some(7))],
            ..RateLimitRequest::default()
        };
        let status = check_override_units(&request).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("unit 7"), "{}", status.message());
        let request = RateLimitRequest {
            descriptors: vec![descriptor(Some(1)), descriptor(None)],
            ..RateLimitRequest::default()
        };
        assert!(check_override_units(&request).is_ok());
    }

    #[test]
    fn statuses_carry_the_rules_name_or_an_empty_one() {
        let named = envoy::DescriptorStatus {
            code: Code::OverLimit,
            current_limit: Some(envoy::CurrentLimit {
                name: Some("per_user"),
                requests_per_unit: 10,
                unit: RateLimitUnit::Hour,
            }),
            limit_remaining: 0,
            duration_until_reset: Some(Duration::from_millis(1500)),
        };
        let status = DescriptorStatus::from(named.clone());
        assert_eq!(status.code, rate_limit_response::Code::OverLimit as i32);
        let limit = status.current_limit.unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit),
            ("per_user", 10)
        );
        assert_eq!(limit.unit, RateLimitUnit::Hour as i32);
        let duration = status.duration_until_reset.unwrap();
        assert_eq!((duration.seconds, duration.nanos), (1, 500_000_000));
        let unnamed = envoy::DescriptorStatus {
            current_limit: named
                .current_limit
                .map(|l| envoy::CurrentLimit { name: None, ..l }),
            ..named
        };
        assert_eq!(
            DescriptorStatus::from(unnamed).current_limit.unwrap().name,
            ""
        );
    }
}
