//! Calendar windows: their bounds in several time zones across daylight
//! saving changes, month lengths, leap years and anchors, and the two
//! window algorithms deciding on them with an injected clock. Expected
//! instants were computed independently (Python's zoneinfo); the civil
//! time each one names is in its comment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tollgate_core::algorithm::Algorithm;
use tollgate_core::calendar::{Calendar, CalendarError, CalendarUnit, Window};
use tollgate_core::time::NANOS_PER_SEC as S;
use tollgate_core::{AlgorithmName, AnyAlgorithm, Limit, LimitError, Rate};

fn calendar(unit: CalendarUnit, zone: &str, anchor: Option<u64>) -> Calendar {
    Calendar::new(unit, zone, anchor).unwrap()
}

/// The window holding `at` (Unix seconds), in Unix seconds.
fn bounds(calendar: &Calendar, at: u64) -> (u64, u64) {
    let w = calendar.window_at(at * S);
    (w.start / S, w.end / S)
}

use CalendarUnit::{Day, Month, Week, Year};

#[test]
fn new_york_days_across_both_dst_changes() {
    let days = calendar(Day, "America/New_York", None);
    // 2026-03-08, spring forward: 00:00 EST to 00:00 EDT, 23 hours.
    assert_eq!(bounds(&days, 1_772_946_000), (1_772_946_000, 1_773_028_800));
    assert_eq!(bounds(&days, 1_773_028_799), (1_772_946_000, 1_773_028_800));
    // 2026-11-01, fall back: 00:00 EDT to 00:00 EST, 25 hours.
    assert_eq!(
        bounds(&days, 1_793_505_600 + 24 * 3600),
        (1_793_505_600, 1_793_595_600)
    );
    assert_eq!(
        bounds(&days, 1_793_595_600),
        (1_793_595_600, 1_793_595_600 + 86_400)
    );
}

#[test]
fn a_day_anchored_in_a_dst_gap_starts_after_the_gap() {
    // Days from 02:00: on 2026-03-08 New York skips 02:00-03:00, so that
    // day starts at 03:00 EDT; the day before it ran from 2026-03-07 02:00
    // EST, and it runs to 2026-03-09 02:00 EDT.
    let days = calendar(Day, "America/New_York", Some(2));
    assert_eq!(bounds(&days, 1_772_953_199), (1_772_866_800, 1_772_953_200));
    assert_eq!(bounds(&days, 1_772_953_200), (1_772_953_200, 1_773_036_000));
}

#[test]
fn london_days_and_months_follow_british_summer_time() {
    let days = calendar(Day, "Europe/London", None);
    // 2026-03-29 (23 h) and 2026-10-25 (25 h).
    assert_eq!(bounds(&days, 1_774_742_400), (1_774_742_400, 1_774_825_200));
    assert_eq!(bounds(&days, 1_792_900_000), (1_792_882_800, 1_792_972_800));
    // March 2026: 00:00 GMT on the 1st to 00:00 BST on April 1st, 31 days
    // less an hour.
    let months = calendar(Month, "Europe/London", None);
    assert_eq!(
        bounds(&months, 1_774_000_000),
        (1_772_323_200, 1_774_998_000)
    );
}

#[test]
fn kolkata_days_start_at_half_past_six_utc() {
    let days = calendar(Day, "Asia/Kolkata", None);
    // 2026-01-01 00:00 IST is 2025-12-31 18:30 UTC.
    assert_eq!(bounds(&days, 1_767_205_800), (1_767_205_800, 1_767_292_200));
    assert_eq!(bounds(&days, 1_767_205_799), (1_767_119_400, 1_767_205_800));
    let months = calendar(Month, "Asia/Kolkata", None);
    assert_eq!(
        bounds(&months, 1_767_300_000),
        (1_767_205_800, 1_769_884_200)
    );
}

#[test]
fn lord_howe_days_of_its_half_hour_changes() {
    let days = calendar(Day, "Australia/Lord_Howe", None);
    // 2026-04-05: 02:00 goes back to 01:30, a day of 24 h 30 min.
    assert_eq!(bounds(&days, 1_775_307_600), (1_775_307_600, 1_775_395_800));
    // 2026-10-04: 02:00 jumps to 02:30, a day of 23 h 30 min.
    assert_eq!(bounds(&days, 1_791_100_000), (1_791_034_200, 1_791_118_800));
}

#[test]
fn utc_month_lengths_and_leap_years() {
    let months = calendar(Month, "UTC", None);
    // February 2024 has 29 days, February 2026 28.
    assert_eq!(
        bounds(&months, 1_706_745_600),
        (1_706_745_600, 1_709_251_200)
    );
    assert_eq!((1_709_251_200 - 1_706_745_600) / 86_400, 29);
    assert_eq!(
        bounds(&months, 1_772_323_199),
        (1_769_904_000, 1_772_323_200)
    );
    assert_eq!((1_772_323_200 - 1_769_904_000) / 86_400, 28);
    let years = calendar(Year, "UTC", None);
    assert_eq!(
        bounds(&years, 1_709_164_800),
        (1_704_067_200, 1_735_689_600)
    );
    assert_eq!((1_735_689_600 - 1_704_067_200) / 86_400, 366);
}

#[test]
fn anchors_late_in_the_month_fall_on_the_last_day_of_short_months() {
    // The 31st: Jan 31, Feb 29 (2024), Mar 31, Apr 30, May 31.
    let cycles = calendar(Month, "UTC", Some(31));
    let starts = [
        1_706_659_200,
        1_709_164_800,
        1_711_843_200,
        1_714_435_200,
        1_717_113_600,
    ];
    for pair in starts.windows(2) {
        assert_eq!(bounds(&cycles, pair[0]), (pair[0], pair[1]));
        assert_eq!(bounds(&cycles, pair[1] - 1), (pair[0], pair[1]));
    }
    // The 30th in 2026: Jan 30, Feb 28, Mar 30.
    let cycles = calendar(Month, "UTC", Some(30));
    assert_eq!(
        bounds(&cycles, 1_770_000_000),
        (1_769_731_200, 1_772_236_800)
    );
    assert_eq!(
        bounds(&cycles, 1_772_236_800),
        (1_772_236_800, 1_774_828_800)
    );
    // The 29th: Feb 29 in 2024; Feb 28 in 2026, then Mar 29.
    let cycles = calendar(Month, "UTC", Some(29));
    assert_eq!(bounds(&cycles, 1_709_164_800).0, 1_709_164_800);
    assert_eq!(
        bounds(&cycles, 1_770_000_000),
        (1_769_644_800, 1_772_236_800)
    );
    assert_eq!(
        bounds(&cycles, 1_772_236_800),
        (1_772_236_800, 1_774_742_400)
    );
}

#[test]
fn weeks_and_years_from_their_anchors() {
    // Weeks from Sunday, New York: 2026-11-01 (a fall-back Sunday) to
    // 2026-11-08, 7 days and an hour.
    let weeks = calendar(Week, "America/New_York", Some(7));
    assert_eq!(
        bounds(&weeks, 1_793_600_000),
        (1_793_505_600, 1_794_114_000)
    );
    assert_eq!(bounds(&weeks, 1_793_505_599).0, 1_792_900_800);
    // ISO weeks (Monday), London: 2026-03-23 to 2026-03-30 (a week with
    // the spring change).
    let weeks = calendar(Week, "Europe/London", None);
    assert_eq!(
        bounds(&weeks, 1_774_500_000),
        (1_774_224_000, 1_774_825_200)
    );
    // Fiscal years from April, London.
    let years = calendar(Year, "Europe/London", Some(4));
    assert_eq!(
        bounds(&years, 1_790_000_000),
        (1_774_998_000, 1_806_534_000)
    );
    assert_eq!(bounds(&years, 1_774_997_999).1, 1_774_998_000);
}

#[test]
fn bad_zones_and_anchors_are_named() {
    let err = Calendar::new(Month, "Mars/Olympus_Mons", None).unwrap_err();
    assert_eq!(
        err,
        CalendarError::Zone {
            name: "Mars/Olympus_Mons".into()
        }
    );
    assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
    for (unit, anchor) in [
        (Month, 0),
        (Month, 32),
        (Day, 24),
        (Week, 0),
        (Week, 8),
        (Year, 13),
        (Month, u64::MAX),
    ] {
        let err = Calendar::new(unit, "UTC", Some(anchor)).unwrap_err();
        assert_eq!(err, CalendarError::Anchor { unit, anchor });
        assert!(err.to_string().contains(&anchor.to_string()), "{err}");
    }
    assert!("calendar_fortnight".parse::<CalendarUnit>().is_err());
    assert_eq!("calendar_week".parse::<CalendarUnit>(), Ok(Week));
    // Zone names are matched without regard to case, and one calendar is
    // equal to another of the same zone whatever case named it.
    assert_eq!(
        calendar(Month, "europe/london", None),
        calendar(Month, "Europe/London", Some(1))
    );
}

#[test]
fn calendar_windows_only_on_the_two_window_algorithms() {
    let month = calendar(Month, "UTC", None);
    let rate = Rate::per_second(10).unwrap();
    for name in AlgorithmName::ALL {
        let built = Limit::new(name, rate).with_calendar(month).build();
        match name {
            AlgorithmName::FixedWindow | AlgorithmName::SlidingWindowCounter => {
                assert!(built.is_ok(), "{name}")
            }
            _ => assert_eq!(
                built.unwrap_err(),
                LimitError::Option {
                    option: "calendar window",
                    algorithm: name
                }
            ),
        }
    }
}

fn window_limit(name: AlgorithmName, n: u64, calendar: Calendar) -> AnyAlgorithm {
    Limit::new(name, format!("{n}/d").parse().unwrap())
        .with_calendar(calendar)
        .build()
        .unwrap()
}

#[test]
fn a_monthly_fixed_window_resets_at_the_real_month_end() {
    let months = calendar(Month, "America/New_York", None);
    let AnyAlgorithm::FixedWindow(limit) = window_limit(AlgorithmName::FixedWindow, 3, months)
    else {
        unreachable!()
    };
    let mut state = limit.new_state();
    // 2026-01-31 23:59 EST; February starts at 2026-02-01 00:00 EST.
    let now = 1_769_921_940 * S;
    let feb = 1_769_922_000 * S;
    for left in [2, 1, 0] {
        let d = limit.check(&mut state, now, 1).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, left);
        assert_eq!(d.reset_after.as_nanos(), u128::from(feb - now));
    }
    let refused = limit.check(&mut state, now, 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after.as_nanos(), u128::from(feb - now));
    assert!(!limit.check(&mut state, feb - 1, 1).unwrap().allowed);
    // February: a fresh window, which ends on March 1st (28 days).
    let d = limit.check(&mut state, feb, 3).unwrap();
    assert!(d.allowed);
    assert_eq!(d.reset_after.as_secs(), 1_772_341_200 - 1_769_922_000);
    // A reservation that does not fit February lands on March 1st.
    let r = limit.reserve(&mut state, feb, 1, None).unwrap();
    assert_eq!(r.wait.as_secs(), 1_772_341_200 - 1_769_922_000);
}

#[test]
fn a_sliding_counter_weighs_by_the_current_month_length() {
    let months = calendar(Month, "UTC", None);
    let AnyAlgorithm::SlidingWindowCounter(limit) =
        window_limit(AlgorithmName::SlidingWindowCounter, 28, months)
    else {
        unreachable!()
    };
    let mut state = limit.new_state();
    // 28 in January 2026, then February (28 days): a day of February
    // weighs January's 28 down by one.
    let jan = 1_767_225_600 * S;
    let feb = 1_769_904_000 * S;
    let mar = 1_772_323_200 * S;
    let day = 86_400 * S;
    assert!(limit.check(&mut state, jan, 28).unwrap().allowed);
    let d = limit.check(&mut state, feb, 1).unwrap();
    assert!(!d.allowed);
    // floor(28 × (28 d − e) / 28 d) = 27 from e = 1 ns to e = 1 day.
    assert_eq!(d.retry_after.as_nanos(), 1);
    // January's 28 weigh nothing once floor(28 × (28 d − e) / 28 d) = 0:
    // 27 days and a nanosecond into February.
    assert_eq!(d.reset_after.as_nanos(), u128::from(27 * day + 1));
    assert!(mar - feb == 28 * day);
    let d = limit.check(&mut state, feb + 1, 1).unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    let d = limit.check(&mut state, feb + 1, 1).unwrap();
    assert!(!d.allowed);
    // 26 from one day and a nanosecond into February.
    assert_eq!(d.retry_after.as_nanos(), u128::from(day));
    assert!(!limit.check(&mut state, feb + day, 1).unwrap().allowed);
    let d = limit.check(&mut state, feb + day + 1, 1).unwrap();
    assert!(d.allowed);
    // Counted in February, weighing on March (31 days): quiet once March's
    // weight of those 2 is 0, 15.5 days in.
    let quiet = mar + (31 * day) / 2 + 1;
    assert_eq!(d.reset_after.as_nanos(), u128::from(quiet - feb - day - 1));
}

/// The tiling property, in every zone of the tests and a few more.
fn check_window(calendar: &Calendar, t: u64) {
    let w: Window = calendar.window_at(t);
    assert!(w.start <= t && t < w.end, "{calendar} {t}: {w:?}");
    assert_eq!(calendar.window(w.index), w, "{calendar} {t}");
    let next = calendar.window(w.index + 1);
    assert_eq!(next.start, w.end, "{calendar} {t}");
    // The next window starts where this one ends (a day the zone skipped
    // entirely, Samoa's 2011-12-30, is a window of no length between them).
    let after = calendar.window_at(w.end);
    assert_eq!(after.start, w.end, "{calendar} {t}");
    assert!(after.index > w.index, "{calendar} {t}");
    assert_eq!(
        calendar.window_at(w.end - 1).index,
        w.index,
        "{calendar} {t}"
    );
    let longest = calendar.unit().longest_secs() * S;
    assert!(w.end - w.start <= longest, "{calendar} {t}: {w:?}");
}

const ZONES: [&str; 8] = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "America/Sao_Paulo",
    "Antarctica/Troll",
];

proptest! {
    #[test]
    fn windows_tile_time(
        zone in prop::sample::select(&ZONES[..]),
        unit in prop::sample::select(&CalendarUnit::ALL[..]),
        anchor_seed in 0u8..=31,
        // 1970 to 2100.
        t in 0u64..4_102_444_800 * S,
    ) {
        let (range, _) = unit.anchors();
        let anchor = range.start() + anchor_seed % (range.end() - range.start() + 1);
        let calendar = Calendar::new(unit, zone, Some(u64::from(anchor))).unwrap();
        check_window(&calendar, t);
    }
}

#[test]
fn windows_tile_every_hour_of_a_dst_year() {
    for zone in ZONES {
        for unit in CalendarUnit::ALL {
            let (range, _) = unit.anchors();
            for anchor in [*range.start(), *range.end()] {
                let calendar = Calendar::new(unit, zone, Some(u64::from(anchor))).unwrap();
                // 2026, every 30 minutes.
                let mut t = 1_767_225_600 * S;
                while t < 1_798_761_600 * S {
                    check_window(&calendar, t);
                    t += 1_800 * S;
                }
            }
        }
    }
}
