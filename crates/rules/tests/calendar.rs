//! Calendar windows in rules files: `window: calendar_<unit>` with
//! `timezone` and `anchor`, and every bad value a load error naming the
//! file, line and column.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_core::calendar::{Calendar, CalendarUnit};
use tollgate_core::time::NANOS_PER_SEC as S;
use tollgate_core::AlgorithmName;
use tollgate_rules::{RateLimitUnit, Rule, RuleSet};

fn rule(rate_limit: &str) -> Rule {
    let yaml = format!("domain: d\ndescriptors:\n  - key: k\n{rate_limit}");
    let rules = RuleSet::from_yaml(&yaml, "d.yaml").unwrap_or_else(|e| panic!("{e}"));
    rules.domain("d").unwrap().rules()[0].clone()
}

#[test]
fn a_calendar_window_reaches_the_limit() {
    let monthly = rule(
        "    rate_limit:\n      window: calendar_month\n      timezone: Europe/London\n      anchor: 15\n      requests_per_unit: 10000\n",
    );
    let limit = monthly.limits()[0];
    assert_eq!(limit.algorithm, AlgorithmName::FixedWindow);
    assert_eq!(limit.rate.limit(), 10_000);
    assert_eq!(
        limit.calendar,
        Some(Calendar::new(CalendarUnit::Month, "Europe/London", Some(15)).unwrap())
    );
    // Envoy hears of 10000 per MONTH.
    assert_eq!(monthly.reported_limits()[0].unit, RateLimitUnit::Month);
    // The limit decides on the real cycle: 2026-03-20 is in the one from
    // March 15 to 2026-04-15 00:00 BST.
    let algorithm = limit.build().unwrap();
    let tollgate_core::AnyAlgorithm::FixedWindow(fixed) = algorithm else {
        unreachable!()
    };
    use tollgate_core::Algorithm;
    let mut state = fixed.new_state();
    let d = fixed.check(&mut state, 1_774_000_000 * S, 1).unwrap();
    assert_eq!(d.reset_after.as_secs(), 1_776_207_600 - 1_774_000_000);

    let daily = rule(
        "    rate_limit: {window: calendar_day, timezone: America/New_York, requests_per_unit: 5, algorithm: sliding_window_counter}\n",
    );
    let limit = daily.limits()[0];
    assert_eq!(limit.algorithm, AlgorithmName::SlidingWindowCounter);
    assert_eq!(limit.calendar.map(|c| c.anchor()), Some(0));
    assert_eq!(daily.reported_limits()[0].unit, RateLimitUnit::Day);

    for unit in CalendarUnit::ALL {
        let r = rule(&format!(
            "    rate_limits:\n      - {{window: {unit}, timezone: UTC, requests_per_unit: 3}}\n"
        ));
        assert_eq!(r.limits()[0].calendar.map(|c| c.unit()), Some(unit));
    }
}

/// Loads `yaml` and returns the error message.
fn error(yaml: &str) -> String {
    match RuleSet::from_yaml(yaml, "rules/api.yaml") {
        Ok(_) => panic!("loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
fn check(rate_limit: &str, place: &str, reason: &str) {
    let message = error(&format!(
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n{rate_limit}"
    ));
    let prefix = format!("rules/api.yaml:{place}: ");
    assert!(
        message.starts_with(&prefix) && message.contains(reason),
        "expected {prefix}…{reason}…, got: {message}"
    );
}

#[test]
fn bad_calendar_values_name_their_place() {
    check(
        "      window: calendar_month\n      timezone: Mars/Olympus_Mons\n      requests_per_unit: 5\n",
        "6:17",
        "unknown time zone \"Mars/Olympus_Mons\"",
    );
    check(
        "      window: calendar_month\n      timezone: UTC\n      anchor: 32\n      requests_per_unit: 5\n",
        "7:15",
        "anchor 32 does not fit calendar_month: its anchor is the day of the month the cycle starts, 1 to 31",
    );
    check(
        "      window: calendar_week\n      timezone: UTC\n      anchor: 0\n      requests_per_unit: 5\n",
        "7:15",
        "1 (Monday) to 7 (Sunday)",
    );
    check(
        "      window: calendar_day\n      timezone: UTC\n      anchor: -1\n      requests_per_unit: 5\n",
        "7:15",
        "`anchor` must be a whole number",
    );
    check(
        "      window: calendar_fortnight\n      timezone: UTC\n      requests_per_unit: 5\n",
        "5:15",
        "unknown calendar unit \"calendar_fortnight\"",
    );
    check(
        "      window: calendar_month\n      requests_per_unit: 5\n",
        "5:15",
        "a calendar window needs `timezone`",
    );
    check(
        "      window: 5m\n      timezone: UTC\n      requests_per_unit: 5\n",
        "6:7",
        "`timezone` applies only to calendar windows",
    );
    check(
        "      unit: day\n      anchor: 15\n      requests_per_unit: 5\n",
        "6:7",
        "`anchor` applies only to calendar windows",
    );
    check(
        "      window: calendar_month\n      timezone: UTC\n      algorithm: gcra\n      requests_per_unit: 5\n",
        "5:15",
        "option \"calendar window\" does not apply to algorithm gcra",
    );
    check(
        "      window: calendar_month\n      timezone: [UTC]\n      requests_per_unit: 5\n",
        "6:17",
        "`timezone` must be a string",
    );
    check(
        "      unlimited: true\n      timezone: UTC\n",
        "6:7",
        "`timezone` must not be given when `unlimited` is true",
    );
}
