//! Errors: [`RulesError`] for anything wrong with a rules file (always naming
//! the file, and the line and column where there is one), and
//! [`UnknownDomain`] for a request naming a domain no file defines.
//!
//! This module owns the wording of every load error; it does not decide
//! what is an error (that is `parse` and `ruleset`).

use std::fmt;

use tollgate_core::{LimitError, RateError};

/// A place in a rules file: line and column, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
}

/// Why a rules file (or directory of them) could not be loaded.
///
/// Its `Display` is `FILE:LINE:COLUMN: reason`, or `FILE: reason` when the
/// problem has no place in the file (it could not be read, say).
///
/// ```
/// use tollgate_rules::RuleSet;
///
/// let err = RuleSet::from_yaml("domain: api\ndescriptors:\n  - key: user\n    colour: red\n", "api.yaml")
///     .unwrap_err();
/// assert_eq!(err.to_string(), "api.yaml:4:5: unknown field `colour` in a descriptor (expected one of: key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, share_threshold, quota_mode, metadata, value_to_metric)");
/// assert_eq!(err.line(), Some(4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {kind}", LocationSuffix(*.location))]
pub struct RulesError {
    file: String,
    location: Option<Location>,
    kind: ErrorKind,
}

impl RulesError {
    /// An error at `location` in `file`.
    pub(crate) fn at(file: &str, location: Location, kind: ErrorKind) -> RulesError {
        RulesError {
            file: file.to_string(),
            location: Some(location),
            kind,
        }
    }

    /// An error about `file` as a whole.
    pub(crate) fn file(file: &str, kind: ErrorKind) -> RulesError {
        RulesError {
            file: file.to_string(),
            location: None,
            kind,
        }
    }

    /// The file (or directory) the error is about, as it was named.
    pub fn file_name(&self) -> &str {
        &self.file
    }

    /// Where in the file, when the error has a place.
    pub fn location(&self) -> Option<Location> {
        self.location
    }

    /// The line, when the error has a place.
    pub fn line(&self) -> Option<usize> {
        self.location.map(|l| l.line)
    }

    /// What is wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
}

struct LocationSuffix(Option<Location>);

impl fmt::Display for LocationSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(l) => write!(f, ":{}:{}", l.line, l.column),
            None => Ok(()),
        }
    }
}

/// What is wrong with a rules file; one variant per kind of mistake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file or directory could not be read.
    #[error("cannot read: {0}")]
    Io(String),
    /// The file is not UTF-8.
    #[error("not valid UTF-8 text")]
    NotUtf8,
    /// The file is larger than [`MAX_FILE_BYTES`](crate::MAX_FILE_BYTES).
    #[error("file is {size} bytes, more than the {max} bytes a rules file may have")]
    TooLarge {
        /// The file's size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// Nesting deeper than [`MAX_DEPTH`](crate::MAX_DEPTH).
    #[error("nesting is deeper than {max} levels")]
    TooDeep {
        /// The bound.
        max: usize,
    },
    /// More YAML nodes (after expanding aliases) than a rules file may have.
    #[error("more than {max} YAML nodes (after expanding aliases)")]
    TooManyNodes {
        /// The bound.
        max: usize,
    },
    /// The text is not YAML.
    #[error("YAML syntax error: {0}")]
    Syntax(String),
    /// The file holds more than one YAML document.
    #[error("a rules file holds one YAML document; found a second one")]
    SeveralDocuments,
    /// An alias names no anchor seen before it.
    #[error("alias refers to an unknown anchor")]
    UnknownAnchor,
    /// A field this position does not know.
    #[error("unknown field `{field}` in {context} (expected one of: {expected})")]
    UnknownField {
        /// The field's name.
        field: String,
        /// Where it was found, e.g. "a descriptor".
        context: &'static str,
        /// The fields allowed there.
        expected: &'static str,
    },
    /// The same field twice in one mapping.
    #[error("field `{field}` is given twice (first at line {first_line})")]
    DuplicateField {
        /// The field's name.
        field: String,
        /// Where it was first given.
        first_line: usize,
    },
    /// A required field is missing.
    #[error("missing field `{field}` in {context}")]
    MissingField {
        /// The field's name.
        field: &'static str,
        /// Where it is missing, e.g. "a rate_limit".
        context: &'static str,
    },
    /// A value of the wrong kind.
    #[error("`{field}` must be {expected}, found {found}")]
    WrongType {
        /// The field (or "the file" for the top level).
        field: String,
        /// What it must be.
        expected: &'static str,
        /// What it was.
        found: String,
    },
    /// A mapping key that is not a plain string.
    #[error("mapping keys must be strings")]
    NonStringKey,
    /// `domain` is empty.
    #[error("`domain` must not be empty")]
    EmptyDomain,
    /// Two files define the same domain (and domains are not merged).
    #[error("domain {domain:?} is already defined in {first_file} (--merge-domains merges the files of one domain)")]
    DuplicateDomain {
        /// The domain.
        domain: String,
        /// The file that defined it first.
        first_file: String,
    },
    /// A descriptor's `key` is empty.
    #[error("descriptor `key` must not be empty")]
    EmptyKey,
    /// Two descriptors with the same key and value at one level.
    #[error("duplicate descriptor {descriptor} (first at line {first_line})")]
    DuplicateDescriptor {
        /// The descriptor's rule path, e.g. `api.user_42`.
        descriptor: String,
        /// Where the first one is.
        first_line: usize,
    },
    /// With `--merge-domains`, a descriptor another file of the domain
    /// already defines.
    #[error("duplicate descriptor {descriptor} (first at {first_file}:{first_line})")]
    DuplicateMergedDescriptor {
        /// The descriptor's rule path.
        descriptor: String,
        /// The file that defines it first.
        first_file: String,
        /// Where in that file.
        first_line: usize,
    },
    /// With `--merge-domains`, `routes:` in two files of one domain.
    #[error("`routes` of domain {domain:?} are already given by another of its files; give them in one file")]
    MergedRoutes {
        /// The domain.
        domain: String,
    },
    /// `rate_limit` and `rate_limits` on one descriptor.
    #[error("a descriptor has `rate_limit` or `rate_limits`, not both")]
    BothRateLimitForms,
    /// `rate_limits` is an empty list.
    #[error("`rate_limits` must list at least one limit")]
    EmptyRateLimits,
    /// A unit envoyproxy/ratelimit does not know.
    #[error("invalid rate limit unit {unit:?} (expected second, minute, hour, day, week, month or year)")]
    InvalidUnit {
        /// The rejected unit.
        unit: String,
    },
    /// `unit` (or another limit field) together with `unlimited: true`.
    #[error("`{field}` must not be given when `unlimited` is true")]
    FieldWithUnlimited {
        /// The offending field.
        field: &'static str,
    },
    /// Both `unit` and `window`.
    #[error("give `unit` or `window`, not both")]
    UnitAndWindow,
    /// `timezone` or `anchor` on a limit whose window is not a calendar's.
    #[error("`{field}` applies only to calendar windows (`window: calendar_day`, `calendar_week`, `calendar_month` or `calendar_year`)")]
    CalendarOnly {
        /// The offending field.
        field: &'static str,
    },
    /// A calendar window without `timezone`.
    #[error("a calendar window needs `timezone`: an IANA name such as UTC, Europe/London or America/New_York")]
    MissingTimezone,
    /// A number that does not parse or is out of range.
    #[error("`{field}` must be a whole number from {min} to {max}, found {text:?}")]
    Number {
        /// The field.
        field: &'static str,
        /// The text found.
        text: String,
        /// The smallest allowed value.
        min: u64,
        /// The largest allowed value.
        max: u64,
    },
    /// `requests_per_unit: 0` (deny every request) with options that cannot apply.
    #[error("`requests_per_unit: 0` denies every request and takes no `{field}`")]
    ZeroWithOption {
        /// The offending field.
        field: &'static str,
    },
    /// A duration field (`window`, `step`, `lease_ttl`) that does not parse.
    #[error("`{field}`: {source}")]
    Duration {
        /// The field.
        field: &'static str,
        /// Why.
        source: RateError,
    },
    /// An unknown algorithm, or options the algorithm rejects.
    #[error("{0}")]
    Limit(LimitError),
    /// An empty name in `replaces`.
    #[error("`replaces` entries must have a non-empty `name`")]
    EmptyReplaces,
    /// A limit that replaces its own name.
    #[error("`replaces` must not name the limit itself ({name:?})")]
    ReplacesSelf {
        /// The name.
        name: String,
    },
    /// Entries of one `rate_limits` list disagree on the rule's name.
    #[error(
        "entries of one `rate_limits` list name the rule differently ({first:?} and {second:?})"
    )]
    ConflictingNames {
        /// The first name.
        first: String,
        /// The other one.
        second: String,
    },
    /// The same limit twice in one `rate_limits` list.
    #[error("limit {limit} appears twice in this `rate_limits` list")]
    DuplicateLimit {
        /// The limit, in tollgate's notation.
        limit: String,
    },
    /// A route field with a value it cannot take.
    #[error("`{field}`: {reason}")]
    InvalidRouteValue {
        /// The field.
        field: &'static str,
        /// What is wrong, naming the value.
        reason: String,
    },
    /// A route action the format does not know.
    #[error("unknown action `{action}` (expected one of: remote_address, request_headers, generic_key, method, path, host, api_key)")]
    UnknownAction {
        /// The name found.
        action: String,
    },
    /// A route's `match` with more than one of `path`, `path_prefix`, `path_glob`.
    #[error("a route's match takes one of `path`, `path_prefix` and `path_glob`, not several")]
    SeveralPathMatches,
    /// `share_threshold: true` on a descriptor whose value has no `*`.
    #[error("`share_threshold` applies to wildcard values only (a `value` with `*`); {value:?} has none")]
    ShareThresholdWithoutWildcard {
        /// The descriptor's value as written (empty when it has none).
        value: String,
    },
    /// `nodelay` and `delay` on one route.
    #[error("`nodelay` and `delay` exclude each other (`nodelay` holds no request; `delay: N` holds those queued after the first N)")]
    NodelayAndDelay,
}

/// A request named a domain that no loaded rules file defines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown domain {domain:?}")]
pub struct UnknownDomain {
    /// The domain asked for.
    pub domain: String,
}
