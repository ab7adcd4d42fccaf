//! `POST /json`: envoyproxy/ratelimit's HTTP endpoint. The body is a
//! `RateLimitRequest` in the protobuf JSON mapping (field names in
//! snake_case or lowerCamelCase, enums by name or number, 64-bit integers as
//! numbers or strings); the answer is the `RateLimitResponse` in the same
//! mapping (lowerCamelCase, default values left out), `200` when the overall
//! code is OK and `429` when it is OVER_LIMIT.

use std::time::Instant;

use axum::extract::State;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use tollgate_core::Store;
use tollgate_rules::RateLimitUnit;

use crate::answer::{Answer, AnswerBody, Applied};
use crate::app::App;
use crate::envoy::{self, Code, DescriptorStatus, EnvoyDescriptor, EnvoyRequest};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::target::moment;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hitsAddend", deserialize_with = "u32_or_string")]
    hits_addend: u32,
    /// tollgate's extension for tests and replays (`--trust-client-time`).
    #[serde(
        default,
        alias = "atMs",
        deserialize_with = "crate::numbers::optional_u64"
    )]
    at_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(
        default,
        alias = "hitsAddend",
        deserialize_with = "optional_u64_or_string"
    )]
    hits_addend: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(default, alias = "requestsPerUnit", deserialize_with = "u32_or_string")]
    requests_per_unit: u32,
    #[serde(default)]
    unit: Option<Value>,
}

fn u32_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = optional_u64_or_string(d)?.unwrap_or(0);
    u32::try_from(v).map_err(|_| D::Error::custom(format!("{v} does not fit a uint32")))
}

fn optional_u64_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => crate::numbers::number_to_u64(&n)
            .map(Some)
            .map_err(D::Error::custom),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("{s:?} is not an unsigned integer"))),
        Some(other) => Err(D::Error::custom(format!(
            "{other} is not an unsigned integer"
        ))),
    }
}

/// The override's unit: a name (`MINUTE`) or number (`2`) of
/// `envoy.type.v3.RateLimitUnit`.
fn override_unit(given: Option<&Value>) -> Result<RateLimitUnit, ApiError> {
    let unit = match given {
        Some(Value::String(name)) => {
            RateLimitUnit::from_name(name).filter(|u| *u != RateLimitUnit::Week)
        }
        Some(Value::Number(n)) => match crate::numbers::number_to_u64(n).ok() {
            Some(1) => Some(RateLimitUnit::Second),
            Some(2) => Some(RateLimitUnit::Minute),
            Some(3) => Some(RateLimitUnit::Hour),
            Some(4) => Some(RateLimitUnit::Day),
            Some(5) => Some(RateLimitUnit::Month),
            Some(6) => Some(RateLimitUnit::Year),
            _ => None,
        },
        _ => None,
    };
    unit.ok_or_else(|| {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "limit override unit {} is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR",
                unit_text(given)
            ),
        )
    })
}

fn unit_text(unit: Option<&Value>) -> String {
    unit.map_or_else(|| "(missing)".to_owned(), ToString::to_string)
}

impl JsonRequest {
    fn into_request(self) -> Result<(EnvoyRequest, Option<u64>), ApiError> {
        let descriptors = self
            .descriptors
            .into_iter()
            .map(|d| {
                let limit = d
                    .limit
                    .map(|o| {
                        Ok::<_, ApiError>((o.requests_per_unit, override_unit(o.unit.as_ref())?))
                    })
                    .transpose()?;
                Ok(EnvoyDescriptor {
                    entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                    limit,
                    hits_addend: d.hits_addend,
                })
            })
            .collect::<Result<_, ApiError>>()?;
        let request = EnvoyRequest {
            domain: self.domain,
            descriptors,
            hits_addend: self.hits_addend,
        };
        Ok((request, self.at_ms))
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonResponse {
    overall_code: &'static str,
    statuses: Vec<JsonStatus>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: &'static str,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// A `google.protobuf.Duration` in the JSON mapping: seconds with 0, 3, 6
/// or 9 fractional digits and an `s`.
fn duration_json(d: std::time::Duration) -> String {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    if nanos == 0 {
        format!("{secs}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{secs}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{secs}.{:06}s", nanos / 1_000)
    } else {
        format!("{secs}.{nanos:09}s")
    }
}

impl AnswerBody for JsonResponse {
    fn to_json(&self) -> Result<axum::body::Bytes, serde_json::Error> {
        serde_json::to_vec(self).map(Into::into)
    }
}

impl From<DescriptorStatus<'_>> for JsonStatus {
    fn from(status: DescriptorStatus<'_>) -> JsonStatus {
        JsonStatus {
            code: code_name(status.code),
            current_limit: status.current_limit.map(|l| JsonLimit {
                name: l.name.map(str::to_owned),
                requests_per_unit: l.requests_per_unit,
                unit: l.unit.as_str(),
            }),
            limit_remaining: status.limit_remaining,
            duration_until_reset: status.duration_until_reset.map(duration_json),
        }
    }
}

/// `POST /json`.
pub(crate) async fn should_rate_limit<S: Store>(
    State(app): State<App<S>>,
    JsonBody(request): JsonBody<JsonRequest>,
) -> Result<Answer<JsonResponse>, ApiError> {
    let started = Instant::now();
    let (request, at_ms) = request.into_request()?;
    let at = moment(app.settings(), at_ms)?;
    let headers = app.settings().headers;
    let response = envoy::should_rate_limit(&app, &request, at, headers).await?;
    app.metrics().observe_latency("json", started.elapsed());
    let rejected = response.overall_code == Code::OverLimit;
    Ok(Answer {
        body: JsonResponse {
            overall_code: code_name(response.overall_code),
            statuses: response.statuses,
        },
        applied: Applied::Limits(response.applied),
        top: response.top,
        rejected,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_use_the_protobuf_json_form() {
        assert_eq!(duration_json(Duration::from_secs(12)), "12s");
        assert_eq!(duration_json(Duration::from_millis(1500)), "1.500s");
        assert_eq!(duration_json(Duration::from_micros(1)), "0.000001s");
        assert_eq!(duration_json(Duration::from_nanos(5)), "0.000000005s");
    }

    #[test]
    fn both_field_spellings_and_string_integers_decode() {
        let r: JsonRequest = serde_json::from_str(
            r#"{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k"}],"hits_addend":0,"limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}"#,
        )
        .unwrap();
        let (r, _) = r.into_request().unwrap();
        assert_eq!(r.hits_addend, 3);
        assert_eq!(r.descriptors[0].hits_addend, Some(0));
        assert_eq!(r.descriptors[0].limit, Some((5, RateLimitUnit::Minute)));
    }

    #[test]
    fn unknown_override_units_are_refused() {
        let r: JsonRequest = serde_json::from_str(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":5,"unit":"FORTNIGHT"}}]}"#,
        )
        .unwrap();
        assert!(r.into_request().unwrap_err().message.contains("FORTNIGHT"));
    }

    #[test]
    fn whole_numbers_with_a_fraction_and_nulls_decode_as_their_values() {
        let r: JsonRequest = serde_json::from_str(
            r#"{"domain":"d","hitsAddend":2.0,"atMs":5e3,"descriptors":[{"entries":[{"key":"k"}],"hits_addend":null,"limit":{"requestsPerUnit":5.0,"unit":2.0}}]}"#,
        )
        .unwrap();
        let (r, at_ms) = r.into_request().unwrap();
        assert_eq!((r.hits_addend, at_ms), (2, Some(5000)));
        assert_eq!(r.descriptors[0].hits_addend, None);
        assert_eq!(r.descriptors[0].limit, Some((5, RateLimitUnit::Minute)));
        let r: JsonRequest =
            serde_json::from_str(r#"{"domain":"d","descriptors":[],"at_ms":null}"#).unwrap();
        assert_eq!(r.at_ms, None);
        for bad in [r#"{"hitsAddend":2.5}"#, r#"{"atMs":-1.0}"#] {
            let error = serde_json::from_str::<JsonRequest>(bad).err().unwrap();
            assert!(
                error.to_string().contains("not an unsigned integer"),
                "{bad}: {error}"
            );
        }
    }
}
