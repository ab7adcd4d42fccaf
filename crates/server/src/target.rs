//! [`Target`]: what a decision request is about, validated — an inline
//! limit and key, or a rules domain and its descriptors — plus the request's
//! decision time. Everything a client can get wrong is refused here, before
//! any store is asked.

use std::cell::RefCell;
use std::time::Duration;

use tollgate_core::calendar::{Calendar, CalendarUnit};
use tollgate_core::rate::parse_duration;
use tollgate_core::time::NANOS_PER_MS;
use tollgate_core::{AlgorithmName, Limit, LimitError, Moment, Rate, SyncMode};

use crate::error::ApiError;
use crate::settings::Settings;
use crate::wire::{DecisionRequest, DescriptorSpec, EntrySpec, LimitSpec};

/// Store keys of inline limits (and Databox ids) start with this byte, rules
/// counters with [`RULES_KEY_PREFIX`], so a client can never name a rule's
/// counter as an inline key.
pub const INLINE_KEY_PREFIX: u8 = b'i';
pub use tollgate_rules::check::RULES_KEY_PREFIX;

/// A validated decision request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One limit given in the request, counted under `key` (store key,
    /// prefixed).
    Inline {
        /// The store key.
        key: Vec<u8>,
        /// The limit.
        limit: Limit,
    },
    /// A rules domain and the request's descriptors.
    Rules {
        /// The domain.
        domain: String,
        /// Each descriptor's (key, value) entries.
        descriptors: Vec<Vec<(String, String)>>,
    },
}

impl Target {
    /// The target of `request`: either `key` and `limit`, or `domain` and
    /// `descriptors`.
    pub fn of(request: &DecisionRequest, settings: &Settings) -> Result<Target, ApiError> {
        match (
            &request.key,
            &request.limit,
            &request.domain,
            &request.descriptors,
        ) {
            (Some(key), Some(limit), None, None) => Ok(Target::Inline {
                key: store_key(key, settings)?,
                limit: limit_of(limit)?,
            }),
            (None, None, Some(domain), Some(descriptors)) => Ok(Target::Rules {
                domain: nonempty("domain", domain)?.to_owned(),
                descriptors: descriptors_of(descriptors, settings)?,
            }),
            (Some(_), None, None, None) => {
                Err(invalid("an inline request needs \"limit\" beside \"key\""))
            }
            (None, Some(_), None, None) => {
                Err(invalid("an inline request needs \"key\" beside \"limit\""))
            }
            (None, None, Some(_), None) => Err(invalid(
                "a rules-based request needs \"descriptors\" beside \"domain\"",
            )),
            (None, None, None, Some(_)) => Err(invalid(
                "a rules-based request needs \"domain\" beside \"descriptors\"",
            )),
            (None, None, None, None) => Err(invalid(
                "give either \"key\" and \"limit\", or \"domain\" and \"descriptors\"",
            )),
            _ => Err(invalid(
                "give either \"key\" and \"limit\" or \"domain\" and \"descriptors\", not both",
            )),
        }
    }
}

/// The store key of an inline key or Databox id.
pub fn store_key(key: &str, settings: &Settings) -> Result<Vec<u8>, ApiError> {
    nonempty("key", key)?;
    if key.len() > settings.max_key_bytes {
        return Err(ApiError::bad_request(
            "key_too_long",
            format!(
                "key is {} bytes long; the limit is {}",
                key.len(),
                settings.max_key_bytes
            ),
        ));
    }
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(INLINE_KEY_PREFIX);
    out.extend_from_slice(key.as_bytes());
    Ok(out)
}

/// The limit an inline `limit` object describes. Its options are checked
/// when the store first builds it (a bad combination is a `400` from there,
/// before anything is counted), not on every request; but `sync: async`
/// where usage cannot be merged is refused here.
pub fn limit_of(spec: &LimitSpec) -> Result<Limit, ApiError> {
    if !is_plain(spec) {
        return build_limit(spec);
    }
    if let Some(limit) = kept_plain_limit(spec.algorithm.as_deref(), &spec.rate) {
        return Ok(limit);
    }
    let limit = build_limit(spec)?;
    keep_plain_limit(spec.algorithm.as_deref(), &spec.rate, limit);
    Ok(limit)
}

/// Whether `spec` is an algorithm and a rate alone, the limit most clients
/// send on every request.
fn is_plain(spec: &LimitSpec) -> bool {
    let LimitSpec {
        algorithm: _,
        rate: _,
        burst,
        step,
        lease_ttl,
        window,
        timezone,
        anchor,
        sync,
    } = spec;
    burst.is_none()
        && step.is_none()
        && lease_ttl.is_none()
        && window.is_none()
        && timezone.is_none()
        && anchor.is_none()
        && sync.is_none()
}

/// Plain limits kept per thread.
const KEPT_PLAIN: usize = 4;
/// Longer texts are built each time rather than kept.
const KEPT_PLAIN_TEXT: usize = 32;

/// An algorithm's and a rate's texts, and the limit built from them.
type PlainLimit = (Option<Box<str>>, Box<str>, Limit);

thread_local! {
    /// The plain limits a thread built last (only those that were valid),
    /// and the entry to replace next once full.
    static PLAIN_LIMITS: RefCell<(usize, Vec<PlainLimit>)> =
        const { RefCell::new((0, Vec::new())) };
}

/// The limit kept for a plain limit of these texts, if any.
fn kept_plain_limit(algorithm: Option<&str>, rate: &str) -> Option<Limit> {
    PLAIN_LIMITS.with(|kept| {
        let kept = kept.try_borrow().ok()?;
        kept.1
            .iter()
            .find(|(a, r, _)| **r == *rate && a.as_deref() == algorithm)
            .map(|&(_, _, limit)| limit)
    })
}

/// Keeps `limit`, built from these texts, for the requests after.
fn keep_plain_limit(algorithm: Option<&str>, rate: &str, limit: Limit) {
    if rate.len() > KEPT_PLAIN_TEXT || algorithm.is_some_and(|a| a.len() > KEPT_PLAIN_TEXT) {
        return;
    }
    PLAIN_LIMITS.with(|kept| {
        let Ok(mut kept) = kept.try_borrow_mut() else {
            return;
        };
        let (next, limits) = &mut *kept;
        let entry = (algorithm.map(Box::from), Box::from(rate), limit);
        if limits.len() < KEPT_PLAIN {
            limits.push(entry);
        } else {
            limits[*next] = entry;
            *next = (*next + 1) % KEPT_PLAIN;
        }
    });
}

/// The limit `spec` describes, built from its texts.
fn build_limit(spec: &LimitSpec) -> Result<Limit, ApiError> {
    let calendar = calendar_of(spec)?;
    let algorithm = match spec.algorithm.as_deref() {
        Some(name) => name.parse::<AlgorithmName>()?,
        None if calendar.is_some() => AlgorithmName::FixedWindow,
        None => AlgorithmName::TokenBucket,
    };
    let rate = match calendar {
        Some(calendar) => count_per_window(&spec.rate, calendar)?,
        None => rate_of(&spec.rate)?,
    };
    let mut limit = Limit::new(algorithm, rate);
    limit.calendar = calendar;
    limit.burst = spec.burst;
    limit.step = spec
        .step
        .as_deref()
        .map(|s| duration("step", s))
        .transpose()?;
    limit.lease_ttl = spec
        .lease_ttl
        .as_deref()
        .map(|s| duration("lease_ttl", s))
        .transpose()?;
    limit.sync = spec
        .sync
        .as_deref()
        .map(str::parse::<SyncMode>)
        .transpose()?;
    // Stores keep built limits without their mode: checked here.
    limit.check_sync()?;
    Ok(limit)
}

/// The calendar of an inline limit's `window`, `timezone` and `anchor`;
/// `None` without a `window`.
fn calendar_of(spec: &LimitSpec) -> Result<Option<Calendar>, ApiError> {
    let Some(window) = spec.window.as_deref() else {
        if spec.timezone.is_some() || spec.anchor.is_some() {
            return Err(ApiError::bad_request(
                "invalid_limit",
                "\"timezone\" and \"anchor\" apply only to a calendar \"window\"",
            ));
        }
        return Ok(None);
    };
    let unit: CalendarUnit = window.parse().map_err(LimitError::from)?;
    let zone = spec.timezone.as_deref().ok_or_else(|| {
        ApiError::bad_request(
            "invalid_limit",
            "a calendar window needs \"timezone\": an IANA name such as UTC or Europe/London",
        )
    })?;
    Ok(Some(
        Calendar::new(unit, zone, spec.anchor).map_err(LimitError::from)?,
    ))
}

/// The rate of a calendar limit: `text` is the count per window alone,
/// its period the unit's usual length (named, never used by the windows).
fn count_per_window(text: &str, calendar: Calendar) -> Result<Rate, ApiError> {
    let count = text.trim().parse::<u64>().map_err(|_| {
        ApiError::bad_request(
            "invalid_rate",
            format!("with a calendar window, \"rate\" is the count per window alone, e.g. \"10000\"; found {text:?}"),
        )
    })?;
    let period = calendar.unit().nominal_secs() * tollgate_core::time::NANOS_PER_SEC;
    Rate::from_nanos(count, period).map_err(|e| LimitError::from(e).into())
}

/// The rate `text` writes, parsed once per text and worker thread: clients
/// send the same few rates on every request, and parsing one cost more than
/// the rest of the limit. Only rates that parse are kept, so a bad one is
/// refused as it always was.
fn rate_of(text: &str) -> Result<Rate, ApiError> {
    /// Rates kept per thread.
    const KEPT: usize = 4;
    /// Longer texts are parsed each time rather than kept.
    const KEPT_TEXT: usize = 32;
    /// The texts and their rates, replaced in turn once full.
    struct Kept {
        next: usize,
        rates: Vec<(Box<str>, Rate)>,
    }
    thread_local! {
        static RATES: RefCell<Kept> = const {
            RefCell::new(Kept {
                next: 0,
                rates: Vec::new(),
            })
        };
    }
    let kept = RATES.with(|kept| {
        let kept = kept.try_borrow().ok()?;
        kept.rates
            .iter()
            .find(|(t, _)| **t == *text)
            .map(|&(_, r)| r)
    });
    if let Some(rate) = kept {
        return Ok(rate);
    }
    let rate: Rate = text
        .parse()
        .map_err(|e| ApiError::bad_request("invalid_rate", format!("{e}")))?;
    if text.len() <= KEPT_TEXT {
        RATES.with(|kept| {
            let Ok(mut kept) = kept.try_borrow_mut() else {
                return;
            };
            if kept.rates.len() < KEPT {
                kept.rates.push((text.into(), rate));
            } else {
                let next = kept.next;
                kept.rates[next] = (text.into(), rate);
                kept.next = (next + 1) % KEPT;
            }
        });
    }
    Ok(rate)
}

/// A duration field such as `"1s"`.
pub fn duration(field: &str, text: &str) -> Result<Duration, ApiError> {
    parse_duration(text)
        .map_err(|e| ApiError::bad_request("invalid_limit", format!("{field}: {e}")))
}

fn descriptors_of(
    descriptors: &[DescriptorSpec],
    settings: &Settings,
) -> Result<Vec<Vec<(String, String)>>, ApiError> {
    if descriptors.is_empty() {
        return Err(invalid("\"descriptors\" is empty"));
    }
    if descriptors.len() > settings.max_descriptors {
        return Err(invalid(format!(
            "{} descriptors; at most {} are accepted",
            descriptors.len(),
            settings.max_descriptors
        )));
    }
    descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| entries_of(i, &d.entries, settings))
        .collect()
}

/// Descriptor `i`'s entries, validated: at least one, at most
/// `max_descriptors`, keys not empty, each key and value together within
/// `max_key_bytes`.
pub fn entries_of(
    i: usize,
    entries: &[EntrySpec<'_>],
    settings: &Settings,
) -> Result<Vec<(String, String)>, ApiError> {
    if entries.is_empty() {
        return Err(invalid(format!("descriptor {i} has no entries")));
    }
    if entries.len() > settings.max_descriptors {
        return Err(invalid(format!(
            "descriptor {i} has {} entries; at most {} are accepted",
            entries.len(),
            settings.max_descriptors
        )));
    }
    entries
        .iter()
        .map(|e| {
            nonempty("descriptor entry key", &e.key)?;
            if e.key.len() + e.value.len() > settings.max_key_bytes {
                return Err(ApiError::bad_request(
                    "key_too_long",
                    format!(
                        "descriptor {i} entry {:?} is over the {}-byte limit",
                        e.key, settings.max_key_bytes
                    ),
                ));
            }
            Ok((e.key.clone().into_owned(), e.value.clone().into_owned()))
        })
        .collect()
}

/// The decision time: `at_ms` when the server trusts client time, the
/// store's clock otherwise. An `at_ms` out of range (past 2^62 ns) is bad
/// input either way, so a request's validity does not depend on the
/// server's settings.
pub fn moment(settings: &Settings, at_ms: Option<u64>) -> Result<Moment, ApiError> {
    let Some(ms) = at_ms else {
        return Ok(Moment::Now);
    };
    let at = ms
        .checked_mul(NANOS_PER_MS)
        .filter(|&ns| ns < 1 << 62)
        .ok_or_else(|| invalid(format!("at_ms {ms} is out of range")))?;
    Ok(if settings.trust_client_time {
        Moment::At(at)
    } else {
        Moment::Now
    })
}

/// The request's cost: 1 when absent.
pub fn cost(cost: Option<u64>) -> u64 {
    cost.unwrap_or(1)
}

fn nonempty<'a>(field: &str, value: &'a str) -> Result<&'a str, ApiError> {
    if value.is_empty() {
        Err(invalid(format!("{field} must not be empty")))
    } else {
        Ok(value)
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_request", message)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::wire::EntrySpec;

    #[test]
    fn kept_rates_are_the_parsed_ones_and_bad_rates_stay_refused() {
        let texts: Vec<String> = (1..=12u64)
            .map(|n| format!("{n}/s"))
            .chain(["5 per minute".into(), format!("{}/s", "9".repeat(40))])
            .collect();
        for _round in 0..3 {
            for text in &texts {
                let parsed = text.parse::<Rate>().map_err(|e| e.to_string());
                let kept = rate_of(text).map_err(|e| e.message);
                assert_eq!(kept.is_ok(), parsed.is_ok(), "{text}");
                if let (Ok(kept), Ok(parsed)) = (&kept, parsed) {
                    assert_eq!(*kept, parsed, "{text}");
                }
            }
            assert!(rate_of("1/fortnight").is_err());
            assert!(rate_of("0/s").is_err());
        }
    }

    #[test]
    fn kept_plain_limits_are_the_built_ones_and_bad_ones_stay_refused() {
        let algorithms = [
            None,
            Some("gcra"),
            Some("token_bucket"),
            Some("fixed_window"),
        ];
        let rates: Vec<String> = (1..=6u64).map(|n| format!("{n}/s")).collect();
        for _round in 0..3 {
            for algorithm in algorithms {
                for rate in &rates {
                    let spec = LimitSpec {
                        algorithm: algorithm.map(Cow::Borrowed),
                        ..plain_spec(rate)
                    };
                    let kept = limit_of(&spec).map_err(|e| e.message);
                    let built = build_limit(&spec).map_err(|e| e.message);
                    assert_eq!(kept, built, "{algorithm:?} {rate}");
                    assert!(kept.is_ok(), "{algorithm:?} {rate}");
                }
                // Never kept: refused each time, as built.
                for rate in ["0/s", "1/fortnight"] {
                    let spec = LimitSpec {
                        algorithm: algorithm.map(Cow::Borrowed),
                        ..plain_spec(rate)
                    };
                    assert!(limit_of(&spec).is_err(), "{algorithm:?} {rate}");
                }
            }
            let spec = LimitSpec {
                algorithm: Some(Cow::Borrowed("no_such_algorithm")),
                ..plain_spec("1/s")
            };
            assert!(limit_of(&spec).is_err());
            // Not plain: built each time, with its options.
            let spec = LimitSpec {
                algorithm: Some(Cow::Borrowed("token_bucket")),
                burst: Some(7),
                ..plain_spec("1/s")
            };
            assert_eq!(limit_of(&spec).map(|l| l.burst).ok(), Some(Some(7)));
        }
    }

    fn plain_spec(rate: &str) -> LimitSpec<'_> {
        LimitSpec::plain(None, Cow::Borrowed(rate))
    }

    #[test]
    fn at_ms_past_2_62_ns_is_bad_input_whether_or_not_client_time_is_trusted() {
        let largest = (1u64 << 62) / NANOS_PER_MS;
        for trust_client_time in [false, true] {
            let settings = Settings {
                trust_client_time,
                ..Settings::default()
            };
            assert!(moment(&settings, Some(largest)).is_ok());
            assert!(moment(&settings, Some(largest + 1)).is_err());
            assert!(moment(&settings, Some(u64::MAX)).is_err());
        }
        let untrusted = Settings::default();
        assert_eq!(moment(&untrusted, Some(5)).ok(), Some(Moment::Now));
    }

    fn inline<'a>(key: &'a str, rate: &'a str) -> DecisionRequest<'a> {
        DecisionRequest {
            key: Some(key.into()),
            limit: Some(LimitSpec::plain(Some("gcra".into()), rate.into())),
            ..DecisionRequest::default()
        }
    }

    #[test]
    fn inline_keys_are_prefixed_and_bounded() {
        let s = Settings::default();
        let Target::Inline { key, limit } = Target::of(&inline("u1", "10/s"), &s).unwrap() else {
            panic!("not inline");
        };
        assert_eq!(key, b"iu1");
        assert_eq!(limit.algorithm, AlgorithmName::Gcra);
        let long = "k".repeat(s.max_key_bytes + 1);
        assert_eq!(
            Target::of(&inline(&long, "10/s"), &s).unwrap_err().code,
            "key_too_long"
        );
        assert_eq!(
            Target::of(&inline("", "10/s"), &s).unwrap_err().code,
            "invalid_request"
        );
    }

    #[test]
    fn bad_limits_name_the_value() {
        let s = Settings::default();
        let e = Target::of(&inline("u", "10/fortnight"), &s).unwrap_err();
        assert_eq!(e.code, "invalid_rate");
        assert!(e.message.contains("fortnight"), "{}", e.message);
        let mut r = inline("u", "10/s");
        r.limit.as_mut().unwrap().algorithm = Some("magic".into());
        assert_eq!(Target::of(&r, &s).unwrap_err().code, "unknown_algorithm");
    }

    #[test]
    fn mixed_or_missing_targets_are_refused() {
        let s = Settings::default();
        let mut r = inline("u", "1/s");
        r.domain = Some("api".into());
        assert_eq!(Target::of(&r, &s).unwrap_err().code, "invalid_request");
        let empty = DecisionRequest {
            domain: Some("api".into()),
            descriptors: Some(vec![DescriptorSpec { entries: vec![] }]),
            ..DecisionRequest::default()
        };
        assert!(Target::of(&empty, &s)
            .unwrap_err()
            .message
            .contains("no entries"));
        let ok = DecisionRequest {
            domain: Some("api".into()),
            descriptors: Some(vec![DescriptorSpec {
                entries: vec![EntrySpec {
                    key: "user".into(),
                    value: "42".into(),
                }],
            }]),
            ..DecisionRequest::default()
        };
        assert!(matches!(Target::of(&ok, &s).unwrap(), Target::Rules { .. }));
    }

    #[test]
    fn client_time_only_when_trusted() {
        let mut s = Settings::default();
        assert_eq!(moment(&s, Some(5)).unwrap(), Moment::Now);
        s.trust_client_time = true;
        assert_eq!(moment(&s, Some(5)).unwrap(), Moment::At(5_000_000));
        assert!(moment(&s, Some(u64::MAX)).is_err());
    }
}
