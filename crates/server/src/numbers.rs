//! Unsigned integers in JSON bodies, as JSON and JSON Schema define them.
//!
//! JSON has one number type, and JSON Schema's `integer` is any number
//! whose fractional part is zero: `20`, `20.0` and `2e1` are the same
//! integer, and a client (or a generator working from `docs/openapi.yaml`)
//! may send any of them. serde reads only the first as a `u64`; these
//! helpers read all three. A fraction, a negative number, or a number past
//! `u64` is refused, naming the value. A whole number written with a
//! fraction or an exponent is exact only below 2^53 (it travels as a
//! double); from there on it is refused rather than rounded, and the message
//! says to write it without a fraction or exponent. `null` is absent for
//! the optional fields.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

/// 2^53: every whole number below it has a double of its own; from it on,
/// neighbours share one (2^53 + 1 reads as 2^53).
const INEXACT_FROM: f64 = 9_007_199_254_740_992.0;
/// 2^64, the first number past `u64`.
const U64_END: f64 = 18_446_744_073_709_551_616.0;

/// Reads an unsigned integer from any JSON number with no fractional part.
struct WholeNumber;

impl Visitor<'_> for WholeNumber {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an unsigned integer")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<u64, E> {
        Ok(n)
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<u64, E> {
        u64::try_from(n).map_err(|_| E::custom(format!("{n} is not an unsigned integer")))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<u64, E> {
        whole(n).map_err(E::custom)
    }
}

/// `n` as a `u64` when it is a whole, non-negative number below 2^53.
pub(crate) fn whole(n: f64) -> Result<u64, String> {
    if !n.is_finite() || n < 0.0 || n.fract() != 0.0 {
        return Err(format!("{n} is not an unsigned integer"));
    }
    if n >= U64_END {
        return Err(format!(
            "{n} is past the largest unsigned integer, 2^64 - 1"
        ));
    }
    if n >= INEXACT_FROM {
        return Err(format!(
            "{n} is 2^53 or more, where a number with a fraction or exponent is not exact: \
             write it as digits alone"
        ));
    }
    // Whole, non-negative and below 2^53: the conversion is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(n as u64)
}

/// A `serde_json::Number` as a `u64`, whole-valued floats included.
pub(crate) fn number_to_u64(n: &serde_json::Number) -> Result<u64, String> {
    if let Some(v) = n.as_u64() {
        return Ok(v);
    }
    match n.as_f64() {
        Some(f) if n.as_i64().is_none() => whole(f),
        _ => Err(format!("{n} is not an unsigned integer")),
    }
}

/// `deserialize_with` for a required `u64`.
pub(crate) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(WholeNumber)
}

/// `deserialize_with` for an optional `u64` (with `#[serde(default)]`):
/// `null` is absent.
pub(crate) fn optional_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Optional;

    impl<'de> Visitor<'de> for Optional {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an unsigned integer or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
            u64(d).map(Some)
        }
    }

    d.deserialize_option(Optional)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        #[serde(deserialize_with = "super::u64")]
        required: u64,
        #[serde(default, deserialize_with = "super::optional_u64")]
        optional: Option<u64>,
    }

    fn read(json: &str) -> Result<Body, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_in_any_notation_are_integers() {
        for json in [
            r#"{"required": 20, "optional": 7}"#,
            r#"{"required": 20.0, "optional": 7.000}"#,
            r#"{"required": 2e1, "optional": 0.7E1}"#,
        ] {
            assert_eq!(
                read(json),
                Ok(Body {
                    required: 20,
                    optional: Some(7)
                }),
                "{json}"
            );
        }
        assert_eq!(
            read(r#"{"required": 18446744073709551615}"#).map(|b| b.required),
            Ok(u64::MAX)
        );
        assert_eq!(
            read(r#"{"required": 9007199254740991.0}"#).map(|b| b.required),
            Ok((1 << 53) - 1)
        );
    }

    #[test]
    fn null_or_absent_is_none() {
        for json in [r#"{"required": 1}"#, r#"{"required": 1, "optional": null}"#] {
            assert_eq!(read(json).map(|b| b.optional), Ok(None), "{json}");
        }
        assert!(read(r#"{"required": null}"#).is_err());
    }

    #[test]
    fn fractions_negatives_and_inexact_numbers_are_refused_by_value() {
        for (json, says) in [
            (r#"{"required": 1.5}"#, "1.5 is not an unsigned integer"),
            (r#"{"required": -1}"#, "-1 is not an unsigned integer"),
            (r#"{"required": -1.0}"#, "-1 is not an unsigned integer"),
            (r#"{"required": 1e300}"#, "past the largest"),
            (r#"{"required": 18446744073709551616}"#, "past the largest"),
            (r#"{"required": 9007199254740993.0}"#, "2^53 or more"),
            (r#"{"required": "1"}"#, "expected an unsigned integer"),
            (r#"{"required": 1, "optional": 0.5}"#, "0.5 is not"),
        ] {
            let error = read(json).unwrap_err();
            assert!(error.contains(says), "{json}: {error}");
        }
    }

    #[test]
    fn a_number_value_converts_the_same_way() {
        let n = |json: &str| -> serde_json::Number { serde_json::from_str(json).unwrap() };
        assert_eq!(super::number_to_u64(&n("3")), Ok(3));
        assert_eq!(super::number_to_u64(&n("3.0")), Ok(3));
        assert!(super::number_to_u64(&n("-3")).is_err());
        assert!(super::number_to_u64(&n("3.5")).is_err());
    }
}
