//! Calendar windows: a day, week, month or year on the clock of an IANA
//! time zone, optionally from an anchor (billing cycles from the 15th to
//! the 14th), as `[start, end)` instants for the window algorithms.
//!
//! This module owns the calendar arithmetic, and nothing else: it turns an
//! instant into the window holding it, and a window's number back into its
//! bounds. The time zone rules come from the IANA database through `jiff`
//! (the system's copy where there is one, a bundled copy otherwise), so
//! windows follow daylight saving time: the New York day of the spring
//! change is 23 hours long, the Lord Howe Island day of its change 23½.
//!
//! | unit | `anchor` | a window |
//! |---|---|---|
//! | `calendar_day` | the hour the day starts, 0 to 23 (default 0) | from `anchor`:00 local time to the same hour the next day |
//! | `calendar_week` | the weekday it starts, 1 = Monday to 7 = Sunday (default 1, ISO weeks) | from 00:00 on that weekday for 7 local days |
//! | `calendar_month` | the day of the month it starts, 1 to 31 (default 1) | from 00:00 on that day to 00:00 on that day of the next month; in a month too short for the anchor, on its last day (an anchor of 31 starts cycles on Jan 31, Feb 28 or 29, Mar 31, Apr 30) |
//! | `calendar_year` | the month it starts, 1 to 12 (default 1) | from 00:00 on the 1st of that month for 12 months |
//!
//! A local start time that does not exist (a daylight saving gap) is taken
//! as the first instant after the gap; one that occurs twice (a fold) as
//! the first occurrence. Each window ends where the next starts, so the
//! windows tile time without gaps or overlaps.
//!
//! Windows are numbered in whole units from 1900 on the zone's calendar
//! (days since 1900-01-01, weeks, months since January 1900, years since
//! 1900), so consecutive windows have consecutive numbers.
//!
//! ```
//! use tollgate_core::calendar::{Calendar, CalendarUnit};
//! use tollgate_core::time::NANOS_PER_SEC as S;
//!
//! // Billing cycles from the 15th, New York time.
//! let cycle = Calendar::new(CalendarUnit::Month, "America/New_York", Some(15)).unwrap();
//! // 2026-03-20 12:00 UTC is in the cycle from March 15 to April 15.
//! let window = cycle.window_at(1_774_008_000 * S);
//! assert_eq!(window.start, 1_773_547_200 * S); // 2026-03-15 00:00 EDT
//! assert_eq!(window.end, 1_776_225_600 * S); // 2026-04-15 00:00 EDT
//! assert_eq!(cycle.window(window.index + 1).start, window.end);
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// The calendar unit of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalendarUnit {
    /// `calendar_day`
    Day,
    /// `calendar_week`
    Week,
    /// `calendar_month`
    Month,
    /// `calendar_year`
    Year,
}

impl CalendarUnit {
    /// Every unit.
    pub const ALL: [CalendarUnit; 4] = [
        CalendarUnit::Day,
        CalendarUnit::Week,
        CalendarUnit::Month,
        CalendarUnit::Year,
    ];

    /// The configuration name, e.g. `calendar_month`.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarUnit::Day => "calendar_day",
            CalendarUnit::Week => "calendar_week",
            CalendarUnit::Month => "calendar_month",
            CalendarUnit::Year => "calendar_year",
        }
    }

    /// The anchors the unit takes, and its default one.
    pub fn anchors(self) -> (std::ops::RangeInclusive<u8>, u8) {
        match self {
            CalendarUnit::Day => (0..=23, 0),
            CalendarUnit::Week => (1..=7, 1),
            CalendarUnit::Month => (1..=31, 1),
            CalendarUnit::Year => (1..=12, 1),
        }
    }

    /// What the unit's anchor means, for error messages.
    fn anchor_meaning(self) -> &'static str {
        match self {
            CalendarUnit::Day => "the hour the day starts, 0 to 23",
            CalendarUnit::Week => "the weekday the week starts, 1 (Monday) to 7 (Sunday)",
            CalendarUnit::Month => "the day of the month the cycle starts, 1 to 31",
            CalendarUnit::Year => "the month the year starts, 1 to 12",
        }
    }

    /// The usual length of a window, in seconds: a day, 7 days, 30 days,
    /// 365 days. Windows are longer or shorter than this (daylight saving
    /// time, month lengths, leap years); [`longest`](Self::longest_secs)
    /// bounds them.
    pub fn nominal_secs(self) -> u64 {
        const DAY: u64 = 86_400;
        match self {
            CalendarUnit::Day => DAY,
            CalendarUnit::Week => 7 * DAY,
            CalendarUnit::Month => 30 * DAY,
            CalendarUnit::Year => 365 * DAY,
        }
    }

    /// No window of the unit is longer than this, in seconds: the longest
    /// day, week, month (31 days) or year (366 days) plus two hours, the
    /// largest daylight saving change the database has.
    pub fn longest_secs(self) -> u64 {
        const DAY: u64 = 86_400;
        let days = match self {
            CalendarUnit::Day => 1,
            CalendarUnit::Week => 7,
            CalendarUnit::Month => 31,
            CalendarUnit::Year => 366,
        };
        days * DAY + 2 * 3_600
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CalendarUnit {
    type Err = CalendarError;

    fn from_str(name: &str) -> Result<Self, CalendarError> {
        CalendarUnit::ALL
            .into_iter()
            .find(|unit| unit.as_str() == name)
            .ok_or_else(|| CalendarError::Unit {
                name: name.to_owned(),
            })
    }
}

/// Why a calendar could not be built. Each message names the bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// Not one of the four units.
    #[error("unknown calendar unit {name:?} (expected calendar_day, calendar_week, calendar_month or calendar_year)")]
    Unit {
        /// The rejected name.
        name: String,
    },
    /// Not a time zone of the IANA database.
    #[error("unknown time zone {name:?} (expected an IANA name such as Europe/London or America/New_York)")]
    Zone {
        /// The rejected name.
        name: String,
    },
    /// An anchor out of the unit's range.
    #[error("anchor {anchor} does not fit {unit}: its anchor is {}", unit.anchor_meaning())]
    Anchor {
        /// The unit.
        unit: CalendarUnit,
        /// The rejected anchor.
        anchor: u64,
    },
}

/// A time zone of the IANA database, known by its name.
struct Zone {
    name: String,
    tz: TimeZone,
}

/// Every zone a calendar has been built with: a handful in practice, and
/// never more than the database's names (only zones it knows get here), so
/// each is kept for the process's life and calendars stay `Copy`.
fn zones() -> &'static Mutex<Vec<&'static Zone>> {
    static ZONES: OnceLock<Mutex<Vec<&'static Zone>>> = OnceLock::new();
    ZONES.get_or_init(|| Mutex::new(Vec::new()))
}

/// The zone called `name` (IANA names, matched without regard to case).
fn zone(name: &str) -> Result<&'static Zone, CalendarError> {
    let unknown = || CalendarError::Zone {
        name: name.to_owned(),
    };
    let tz = TimeZone::get(name).map_err(|_| unknown())?;
    let canonical = tz.iana_name().ok_or_else(unknown)?.to_owned();
    let mut known = zones()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(zone) = known.iter().find(|z| z.name == canonical) {
        return Ok(zone);
    }
    let zone: &'static Zone = Box::leak(Box::new(Zone {
        name: canonical,
        tz,
    }));
    known.push(zone);
    Ok(zone)
}

/// A window of a calendar: its number and its bounds `[start, end)`, in
/// ns since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// The window's number (see the [module](self)); the next window's is
    /// one more.
    pub index: u64,
    /// The first instant of the window.
    pub start: u64,
    /// The first instant after it: the next window's start.
    pub end: u64,
}

/// Windows of one calendar unit in one time zone, from one anchor.
#[derive(Clone, Copy)]
pub struct Calendar {
    unit: CalendarUnit,
    anchor: u8,
    zone: &'static Zone,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.unit == other.unit && self.anchor == other.anchor && self.zone.name == other.zone.name
    }
}

impl Eq for Calendar {}

impl std::hash::Hash for Calendar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.unit.hash(state);
        self.anchor.hash(state);
        self.zone.name.hash(state);
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("unit", &self.unit)
            .field("anchor", &self.anchor)
            .field("zone", &self.zone.name)
            .finish()
    }
}

impl fmt::Display for Calendar {
    /// `calendar_month Europe/London 15`: unit, zone, anchor.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.unit, self.zone.name, self.anchor)
    }
}

/// Days from 1900-01-01 to 1970-01-01.
const DAYS_1900_TO_1970: i64 = 25_567;
const SECS_PER_DAY: i64 = 86_400;

impl Calendar {
    /// Windows of `unit` on the clock of the IANA zone `zone`, from
    /// `anchor` (the unit's default when `None`; see the
    /// [module](self) for what an anchor means).
    pub fn new(unit: CalendarUnit, zone: &str, anchor: Option<u64>) -> Result<Self, CalendarError> {
        let (range, default) = unit.anchors();
        let anchor = match anchor {
            None => default,
            Some(a) => u8::try_from(a)
                .ok()
                .filter(|a| range.contains(a))
                .ok_or(CalendarError::Anchor { unit, anchor: a })?,
        };
        Ok(Calendar {
            unit,
            anchor,
            zone: self::zone(zone)?,
        })
    }

    /// The unit.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The anchor (the unit's default when none was given).
    pub fn anchor(&self) -> u8 {
        self.anchor
    }

    /// The time zone's IANA name.
    pub fn zone_name(&self) -> &'static str {
        &self.zone.name
    }

    /// The window holding `instant` (ns since the Unix epoch). Instants
    /// beyond the calendar's reach (after the year 9999, never a `u64` of
    /// ns) fall in a last window that never ends.
    pub fn window_at(&self, instant: u64) -> Window {
        self.locate(instant).unwrap_or(Window {
            index: u64::MAX,
            start: instant,
            end: u64::MAX,
        })
    }

    /// The window numbered `index` (a number [`window_at`](Self::window_at)
    /// gave, or one near it). Bounds beyond the `u64` range saturate.
    pub fn window(&self, index: u64) -> Window {
        let bounds = i64::try_from(index)
            .ok()
            .and_then(|i| Some((self.start(i)?, self.start(i.checked_add(1)?)?)));
        match bounds {
            Some((start, end)) => Window {
                index,
                start: saturate(start),
                end: saturate(end),
            },
            None => Window {
                index,
                start: u64::MAX,
                end: u64::MAX,
            },
        }
    }

    fn locate(&self, instant: u64) -> Option<Window> {
        let t = i128::from(instant);
        let ts = Timestamp::from_nanosecond(t).ok()?;
        let local = self.zone.tz.to_datetime(ts);
        let mut index = self.index_of(local.date())?;
        // The local date's window, or the one before it (before a day's
        // anchor hour) or after it (in a fold): at most a step each way.
        for _ in 0..4 {
            let start = self.start(index)?;
            let end = self.start(index + 1)?;
            if t < start {
                index -= 1;
            } else if t >= end {
                index += 1;
            } else {
                return Some(Window {
                    index: u64::try_from(index).ok()?,
                    start: saturate(start),
                    end: saturate(end),
                });
            }
        }
        None
    }

    /// The number of the window that starts on `date` or holds it at noon.
    fn index_of(&self, date: Date) -> Option<i64> {
        let months = || i64::from(date.year() - 1900) * 12 + i64::from(date.month() - 1);
        Some(match self.unit {
            CalendarUnit::Day => days_since_1900(date)?,
            CalendarUnit::Week => {
                (days_since_1900(date)? - i64::from(self.anchor - 1)).div_euclid(7)
            }
            CalendarUnit::Month => months(),
            CalendarUnit::Year => months().div_euclid(12),
        })
    }

    /// The first instant (ns) of window `index`.
    fn start(&self, index: i64) -> Option<i128> {
        let (date, hour) = match self.unit {
            CalendarUnit::Day => (date_of_day(index)?, self.anchor),
            // 1900-01-01 was a Monday.
            CalendarUnit::Week => (
                date_of_day(index.checked_mul(7)? + i64::from(self.anchor - 1))?,
                0,
            ),
            CalendarUnit::Month => {
                let year = i16::try_from(1900 + index.div_euclid(12)).ok()?;
                let month = i8::try_from(1 + index.rem_euclid(12)).ok()?;
                let first = Date::new(year, month, 1).ok()?;
                let day = i8::try_from(self.anchor).ok()?.min(first.days_in_month());
                (Date::new(year, month, day).ok()?, 0)
            }
            CalendarUnit::Year => {
                let year = i16::try_from(1900 + index).ok()?;
                (Date::new(year, i8::try_from(self.anchor).ok()?, 1).ok()?, 0)
            }
        };
        let local = date.to_datetime(Time::new(i8::try_from(hour).ok()?, 0, 0, 0).ok()?);
        self.instant_of(local)
    }

    /// The instant a local time names: the first after a gap, the first
    /// of a fold.
    fn instant_of(&self, local: DateTime) -> Option<i128> {
        let ts = self
            .zone
            .tz
            .to_ambiguous_timestamp(local)
            .compatible()
            .ok()?;
        Some(ts.as_nanosecond())
    }
}

fn days_since_1900(date: Date) -> Option<i64> {
    let midnight = TimeZone::UTC
        .to_timestamp(date.to_datetime(Time::midnight()))
        .ok()?;
    Some(midnight.as_second().div_euclid(SECS_PER_DAY) + DAYS_1900_TO_1970)
}

fn date_of_day(days: i64) -> Option<Date> {
    let secs = days
        .checked_sub(DAYS_1900_TO_1970)?
        .checked_mul(SECS_PER_DAY)?;
    let ts = Timestamp::from_second(secs).ok()?;
    Some(TimeZone::UTC.to_datetime(ts).date())
}

/// An instant in ns as a `u64`: 0 before the epoch, `u64::MAX` past 2554.
fn saturate(ns: i128) -> u64 {
    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
}
