//! The rules-file schema: one YAML document into one validated [`Domain`].
//!
//! This module owns which fields exist where, what types they take, and
//! every check made at load: unknown, duplicate and missing fields, wrong
//! types, duplicate descriptors, units, numbers, durations, algorithm
//! options (each limit is built once with [`Limit::build`]). Each error
//! names the line and column of the offending node. It does not read files
//! (`ruleset`) or match requests (`matcher`).

use std::sync::Arc;

use std::time::Duration;
use tollgate_core::rate::parse_duration;

use tollgate_core::ban::Ban;
use tollgate_core::calendar::{Calendar, CalendarError, CalendarUnit};
use tollgate_core::{AlgorithmName, Limit, LimitError, Rate, SyncMode};

use crate::error::{ErrorKind, Location, RulesError};
use crate::matcher::{Domain, NodeId};
use crate::rule::{key_prefix, PathStep, RateLimitUnit, ReportedLimit, Rule, ValueMatch};
use crate::yaml::{self, Node, Value};

const FILE_FIELDS: &[&str] = &["domain", "descriptors", "routes"];
const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "rate_limits",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
    "share_threshold",
    "quota_mode",
    "metadata",
    "value_to_metric",
];
const RATE_LIMIT_FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "step",
    "window",
    "timezone",
    "anchor",
    "lease_ttl",
    "ban",
    "sync",
];
const LIST_LIMIT_FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "step",
    "window",
    "timezone",
    "anchor",
    "lease_ttl",
    "ban",
    "sync",
];
const REPLACES_FIELDS: &[&str] = &["name"];
/// The fields of a runtime override (see `overrides`): a descriptor's
/// limit fields, without those that name request values in metrics.
const OVERRIDE_FIELDS: &[&str] = &["rate_limit", "rate_limits", "shadow_mode", "quota_mode"];
const BAN_FIELDS: &[&str] = &["after", "within", "for"];

const NANOS_PER_SEC: u64 = 1_000_000_000;

pub(crate) type Result<T> = std::result::Result<T, RulesError>;

/// Parses one rules file's text into its domain.
pub(crate) fn parse_domain(text: &str, file: &str) -> Result<Domain> {
    parse_domain_into(text, file, |_| None)
}

/// Parses one rules file's text into its domain, adding its descriptors to
/// the domain `existing` hands back for the file's domain name, if any (a
/// domain merged from several files); a descriptor the existing domain
/// already has is an error naming both places.
pub(crate) fn parse_domain_into(
    text: &str,
    file: &str,
    existing: impl FnOnce(&str) -> Option<Domain>,
) -> Result<Domain> {
    let root = yaml::parse(text).map_err(|(at, kind)| match at {
        Some(at) => RulesError::at(file, at, kind),
        None => RulesError::file(file, kind),
    })?;
    let start = Location { line: 1, column: 1 };
    let Some(root) = root else {
        return Err(RulesError::at(
            file,
            start,
            ErrorKind::MissingField {
                field: "domain",
                context: "the file",
            },
        ));
    };
    let mut parser = FileParser {
        file,
        file_label: Arc::from(file),
    };
    parser.file(&root, existing)
}

/// Parses a runtime override's limit (`text`, a YAML or JSON mapping with
/// `rate_limit` or `rate_limits`, and optionally `shadow_mode` and
/// `quota_mode`) into the rule of `domain`'s exact descriptors that carry
/// it. Errors name `label` as their file.
pub(crate) fn parse_override(domain: &str, text: &str, label: &str) -> Result<Rule> {
    let root = yaml::parse(text).map_err(|(at, kind)| match at {
        Some(at) => RulesError::at(label, at, kind),
        None => RulesError::file(label, kind),
    })?;
    let start = Location { line: 1, column: 1 };
    let missing = ErrorKind::MissingField {
        field: "rate_limit",
        context: "an override",
    };
    let Some(root) = root else {
        return Err(RulesError::at(label, start, missing));
    };
    let mut parser = FileParser {
        file: label,
        file_label: Arc::from(label),
    };
    let fields = parser.fields(&root, "the override", "an override", OVERRIDE_FIELDS)?;
    let specs = match (fields.get("rate_limit"), fields.get("rate_limits")) {
        (Some(_), Some(_)) => {
            let at = fields.key_at("rate_limits").unwrap_or(fields.at);
            return Err(parser.err(at, ErrorKind::BothRateLimitForms));
        }
        (Some(one), None) => vec![parser.limit(one, true)?],
        (None, Some(list)) => parser.limit_list(list)?,
        (None, None) => return Err(parser.err(fields.at, missing)),
    };
    let flags = RuleFlags {
        shadow_mode: parser.flag(&fields, "shadow_mode")?,
        detailed_metric: false,
        quota_mode: parser.flag(&fields, "quota_mode")?,
    };
    let id = crate::rule::override_id(domain);
    let mut rule = parser.rule(domain, &id, &[], specs, flags, 0)?;
    rule.key_prefix = crate::rule::override_key_prefix(domain);
    rule.exact_entries = true;
    Ok(rule)
}

/// A mapping's fields, checked against the allowed names.
pub(crate) struct Fields<'n> {
    pub(crate) at: Location,
    pub(crate) entries: Vec<(&'n str, &'n Node, &'n Node)>,
}

impl<'n> Fields<'n> {
    /// The value of `name`, unless absent or null.
    pub(crate) fn get(&self, name: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(n, _, v)| *n == name && !v.is_null())
            .map(|(_, _, v)| *v)
    }

    /// Where the field `name` is written (its key), if present.
    pub(crate) fn key_at(&self, name: &str) -> Option<Location> {
        self.get(name)?;
        self.entries
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, k, _)| k.at)
    }
}

pub(crate) struct FileParser<'f> {
    pub(crate) file: &'f str,
    /// The same, shared by the descriptors it defines.
    file_label: Arc<str>,
}

/// A descriptor's switches, as its mapping gives them.
#[derive(Debug, Clone, Copy)]
struct RuleFlags {
    shadow_mode: bool,
    detailed_metric: bool,
    quota_mode: bool,
}

/// A rate limit as one mapping says it, before it joins a rule.
struct LimitSpec {
    at: Location,
    name: Option<(String, Location)>,
    replaces: Vec<(String, Location)>,
    kind: LimitKind,
}

enum LimitKind {
    Unlimited,
    DenyAll(ReportedLimit),
    Limited(Limit, ReportedLimit),
}

impl<'f> FileParser<'f> {
    pub(crate) fn err(&self, at: Location, kind: ErrorKind) -> RulesError {
        RulesError::at(self.file, at, kind)
    }

    fn file(
        &mut self,
        root: &Node,
        existing: impl FnOnce(&str) -> Option<Domain>,
    ) -> Result<Domain> {
        let fields = self.fields(root, "the file", "the file", FILE_FIELDS)?;
        let Some(domain_node) = fields.get("domain") else {
            let at = fields.key_at("domain").unwrap_or(fields.at);
            let kind = if fields.entries.iter().any(|(n, _, _)| *n == "domain") {
                ErrorKind::EmptyDomain
            } else {
                ErrorKind::MissingField {
                    field: "domain",
                    context: "the file",
                }
            };
            return Err(self.err(at, kind));
        };
        let name = self.string("domain", domain_node)?;
        if name.is_empty() {
            return Err(self.err(domain_node.at, ErrorKind::EmptyDomain));
        }
        let mut domain = existing(&name).unwrap_or_else(|| {
            Domain::new(name.clone(), self.file.to_string(), domain_node.at.line)
        });
        if let Some(list) = fields.get("descriptors") {
            self.descriptors(&mut domain, list, 0, &name, &[])?;
        }
        if let Some(list) = fields.get("routes") {
            if domain.routes().is_some() {
                let at = fields.key_at("routes").unwrap_or(fields.at);
                return Err(self.err(at, ErrorKind::MergedRoutes { domain: name }));
            }
            domain.set_routes(self.routes(list)?);
        }
        Ok(domain)
    }

    fn descriptors(
        &mut self,
        domain: &mut Domain,
        list: &Node,
        parent: NodeId,
        parent_id: &str,
        path: &[PathStep],
    ) -> Result<()> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type("descriptors", "a list of descriptors", list));
        };
        for item in items {
            self.descriptor(domain, item, parent, parent_id, path)?;
        }
        Ok(())
    }

    fn descriptor(
        &mut self,
        domain: &mut Domain,
        item: &Node,
        parent: NodeId,
        parent_id: &str,
        path: &[PathStep],
    ) -> Result<()> {
        let fields = self.fields(item, "descriptors", "a descriptor", DESCRIPTOR_FIELDS)?;
        let Some(key_node) = fields.get("key") else {
            return Err(self.err(
                fields.key_at("key").unwrap_or(fields.at),
                ErrorKind::MissingField {
                    field: "key",
                    context: "a descriptor",
                },
            ));
        };
        let key = self.string("key", key_node)?;
        if key.is_empty() {
            return Err(self.err(key_node.at, ErrorKind::EmptyKey));
        }
        let value_text = match fields.get("value") {
            Some(node) => self.string("value", node)?,
            None => String::new(),
        };
        // Envoy's names: `key`, or `key_value` with the value as written.
        let id = if value_text.is_empty() {
            format!("{parent_id}.{key}")
        } else {
            format!("{parent_id}.{key}_{value_text}")
        };
        let value = if value_text.is_empty() {
            ValueMatch::Any
        } else if value_text.contains('*') {
            ValueMatch::Wildcard(value_text.clone())
        } else {
            ValueMatch::Exact(value_text.clone())
        };
        let share_threshold = self.flag(&fields, "share_threshold")?;
        if share_threshold && !matches!(value, ValueMatch::Wildcard(_)) {
            let at = fields.key_at("share_threshold").unwrap_or(fields.at);
            return Err(self.err(
                at,
                ErrorKind::ShareThresholdWithoutWildcard { value: value_text },
            ));
        }
        if let Some((first_file, first_line)) = domain.existing(parent, &key, &value) {
            let kind = if *first_file == *self.file {
                ErrorKind::DuplicateDescriptor {
                    descriptor: id,
                    first_line,
                }
            } else {
                ErrorKind::DuplicateMergedDescriptor {
                    descriptor: id,
                    first_file: first_file.to_string(),
                    first_line,
                }
            };
            return Err(self.err(fields.at, kind));
        }
        let flags = RuleFlags {
            shadow_mode: self.flag(&fields, "shadow_mode")?,
            detailed_metric: self.flag(&fields, "detailed_metric")?,
            quota_mode: self.flag(&fields, "quota_mode")?,
        };
        let metadata = match fields.get("metadata") {
            Some(node) => Some(std::sync::Arc::new(self.metadata(node)?)),
            None => None,
        };
        let step = PathStep {
            key: key.clone(),
            value: value.clone(),
            share_threshold,
            value_to_metric: self.flag(&fields, "value_to_metric")?,
        };
        let node = domain.add(parent, &key, value, fields.at.line, &self.file_label);
        let mut path = path.to_vec();
        path.push(step);

        let specs = match (fields.get("rate_limit"), fields.get("rate_limits")) {
            (Some(_), Some(_)) => {
                let at = fields.key_at("rate_limits").unwrap_or(fields.at);
                return Err(self.err(at, ErrorKind::BothRateLimitForms));
            }
            (Some(one), None) => Some(vec![self.limit(one, true)?]),
            (None, Some(list)) => Some(self.limit_list(list)?),
            (None, None) => None,
        };
        if let Some(specs) = specs {
            let mut rule = self.rule(domain.name(), &id, &path, specs, flags, fields.at.line)?;
            rule.metadata = metadata;
            domain.set_rule(node, rule);
        }
        if let Some(nested) = fields.get("descriptors") {
            self.descriptors(domain, nested, node, &id, &path)?;
        }
        Ok(())
    }

    fn limit_list(&mut self, list: &Node) -> Result<Vec<LimitSpec>> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type("rate_limits", "a list of rate limits", list));
        };
        if items.is_empty() {
            return Err(self.err(list.at, ErrorKind::EmptyRateLimits));
        }
        items.iter().map(|item| self.limit(item, false)).collect()
    }

    fn rule(
        &self,
        domain: &str,
        id: &str,
        path: &[PathStep],
        specs: Vec<LimitSpec>,
        flags: RuleFlags,
        line: usize,
    ) -> Result<Rule> {
        let mut name: Option<(String, Location)> = None;
        let mut replaces: Vec<(String, Location)> = Vec::new();
        let mut limits = Vec::new();
        let mut reported = Vec::new();
        let mut unlimited = false;
        let mut denies_all = false;
        for spec in specs {
            if let Some((n, at)) = spec.name {
                match &name {
                    Some((first, _)) if *first != n => {
                        return Err(self.err(
                            at,
                            ErrorKind::ConflictingNames {
                                first: first.clone(),
                                second: n,
                            },
                        ))
                    }
                    Some(_) => {}
                    None => name = Some((n, at)),
                }
            }
            replaces.extend(spec.replaces);
            match spec.kind {
                LimitKind::Unlimited => unlimited = true,
                LimitKind::DenyAll(r) => {
                    denies_all = true;
                    reported.push(r);
                }
                LimitKind::Limited(limit, r) => {
                    if limits.contains(&limit) {
                        return Err(self.err(
                            spec.at,
                            ErrorKind::DuplicateLimit {
                                limit: limit.to_string(),
                            },
                        ));
                    }
                    limits.push(limit);
                    reported.push(r);
                }
            }
        }
        if let Some((own, _)) = &name {
            if let Some((_, at)) = replaces.iter().find(|(r, _)| r == own) {
                return Err(self.err(*at, ErrorKind::ReplacesSelf { name: own.clone() }));
            }
        }
        let name = name.map(|(n, _)| n);
        let header_names = crate::rule::header_names(name.as_deref().unwrap_or(id), &limits);
        let policies = limits.iter().map(Limit::policy).collect();
        Ok(Rule {
            id: id.to_string(),
            domain: domain.to_string(),
            path: path.to_vec(),
            name,
            replaces: replaces.into_iter().map(|(r, _)| r).collect(),
            limits,
            reported,
            unlimited,
            denies_all,
            shadow_mode: flags.shadow_mode,
            detailed_metric: flags.detailed_metric,
            quota_mode: flags.quota_mode,
            metadata: None,
            key_prefix: key_prefix(domain, path),
            exact_entries: false,
            policies,
            header_names,
            line,
        })
    }

    /// One `rate_limit` mapping (or one entry of `rate_limits`).
    fn limit(&mut self, node: &Node, single: bool) -> Result<LimitSpec> {
        let (context, allowed) = if single {
            ("a rate_limit", RATE_LIMIT_FIELDS)
        } else {
            ("a rate_limits entry", LIST_LIMIT_FIELDS)
        };
        let field = if single { "rate_limit" } else { "rate_limits" };
        let f = self.fields(node, field, context, allowed)?;
        let name = match f.get("name") {
            Some(n) => Some((self.string("name", n)?, n.at)).filter(|(s, _)| !s.is_empty()),
            None => None,
        };
        let replaces = match f.get("replaces") {
            Some(list) => self.replaces(list)?,
            None => Vec::new(),
        };
        let spec = |kind| LimitSpec {
            at: f.at,
            name: name.clone(),
            replaces: replaces.clone(),
            kind,
        };
        const OPTIONS: [&str; 9] = [
            "algorithm",
            "burst",
            "step",
            "window",
            "timezone",
            "anchor",
            "lease_ttl",
            "ban",
            "sync",
        ];
        if self.flag(&f, "unlimited")? {
            // Envoy also ignores `requests_per_unit` here; it rejects `unit`.
            for field in ["unit"].into_iter().chain(OPTIONS) {
                if let Some(at) = f.key_at(field) {
                    return Err(self.err(at, ErrorKind::FieldWithUnlimited { field }));
                }
            }
            return Ok(spec(LimitKind::Unlimited));
        }
        let (unit, window) = match (f.get("unit"), f.get("window")) {
            (Some(_), Some(w)) => return Err(self.err(w.at, ErrorKind::UnitAndWindow)),
            (Some(u), None) => {
                let text = self.string("unit", u)?;
                let unit = RateLimitUnit::from_name(&text)
                    .ok_or_else(|| self.err(u.at, ErrorKind::InvalidUnit { unit: text }))?;
                (Some(unit), None)
            }
            (None, Some(w)) => (None, Some(w)),
            (None, None) if f.get("timezone").is_some() || f.get("anchor").is_some() => {
                let field = if f.get("timezone").is_some() {
                    "timezone"
                } else {
                    "anchor"
                };
                let at = f.key_at(field).unwrap_or(f.at);
                return Err(self.err(at, ErrorKind::CalendarOnly { field }));
            }
            (None, None) => {
                return Err(self.err(
                    f.at,
                    ErrorKind::MissingField {
                        field: "unit",
                        context,
                    },
                ))
            }
        };
        let Some(rpu_node) = f.get("requests_per_unit") else {
            return Err(self.err(
                f.at,
                ErrorKind::MissingField {
                    field: "requests_per_unit",
                    context,
                },
            ));
        };
        let min = if single { 0 } else { 1 };
        let rpu = self.number("requests_per_unit", rpu_node, min, u64::from(u32::MAX))?;
        let requests_per_unit = u32::try_from(rpu).unwrap_or(u32::MAX);
        if rpu == 0 {
            if let Some(field) = OPTIONS.into_iter().find(|o| f.get(o).is_some()) {
                let at = f.key_at(field).unwrap_or(f.at);
                return Err(self.err(at, ErrorKind::ZeroWithOption { field }));
            }
            let unit = unit.unwrap_or(RateLimitUnit::Second);
            return Ok(spec(LimitKind::DenyAll(ReportedLimit {
                requests_per_unit,
                unit,
            })));
        }
        let calendar = match window {
            Some(w) => self.calendar(&f, w)?,
            None => None,
        };
        if calendar.is_none() {
            if let Some(field) = ["timezone", "anchor"]
                .into_iter()
                .find(|o| f.get(o).is_some())
            {
                let at = f.key_at(field).unwrap_or(f.at);
                return Err(self.err(at, ErrorKind::CalendarOnly { field }));
            }
        }
        let (period_ns, period_at) = match (unit, window, calendar) {
            (Some(unit), _, _) => (unit.seconds() * NANOS_PER_SEC, rpu_node.at),
            // A calendar window's rate has the unit's usual length (named
            // in reports, never used by the windows).
            (None, Some(w), Some(calendar)) => {
                (calendar.unit().nominal_secs() * NANOS_PER_SEC, w.at)
            }
            (None, Some(w), None) => (self.duration("window", w)?.0, w.at),
            (None, None, _) => (NANOS_PER_SEC, f.at),
        };
        let reported = ReportedLimit {
            requests_per_unit,
            unit: unit.unwrap_or_else(|| RateLimitUnit::nearest(period_ns)),
        };
        let rate = Rate::from_nanos(rpu, period_ns)
            .map_err(|e| self.err(period_at, ErrorKind::Limit(LimitError::Rate(e))))?;
        let algorithm = match f.get("algorithm") {
            Some(a) => self
                .string("algorithm", a)?
                .parse::<AlgorithmName>()
                .map_err(|e| self.err(a.at, ErrorKind::Limit(e)))?,
            None => AlgorithmName::FixedWindow,
        };
        let mut limit = Limit::new(algorithm, rate);
        if let Some(calendar) = calendar {
            limit = limit.with_calendar(calendar);
        }
        if let Some(b) = f.get("burst") {
            limit = limit.with_burst(self.number("burst", b, 0, u64::MAX)?);
        }
        if let Some(s) = f.get("step") {
            limit = limit.with_step(std::time::Duration::from_nanos(self.duration("step", s)?.0));
        }
        if let Some(t) = f.get("lease_ttl") {
            let ttl = self.duration("lease_ttl", t)?.0;
            limit = limit.with_lease_ttl(std::time::Duration::from_nanos(ttl));
        }
        if let Err(e) = limit.build() {
            let field = match &e {
                LimitError::Option {
                    option: "calendar window",
                    ..
                } => Some("window"),
                LimitError::Option { option, .. } => Some(*option),
                LimitError::Burst { .. } | LimitError::Storage { .. } => Some("burst"),
                LimitError::Step { .. } => Some("step"),
                LimitError::LeaseTtl { .. } => Some("lease_ttl"),
                _ => None,
            };
            let at = field.and_then(|n| f.get(n)).map_or(f.at, |n| n.at);
            return Err(self.err(at, ErrorKind::Limit(e)));
        }
        if let Some(b) = f.get("ban") {
            limit = limit.with_ban(self.ban(b)?);
        }
        if let Some(node) = f.get("sync") {
            let mode = self
                .string("sync", node)?
                .parse::<SyncMode>()
                .map_err(|e| self.err(node.at, ErrorKind::Limit(e)))?;
            limit = limit.with_sync(mode);
            // `async` where usage cannot be merged (concurrency, a ban).
            limit
                .build()
                .map_err(|e| self.err(node.at, ErrorKind::Limit(e)))?;
        }
        Ok(spec(LimitKind::Limited(limit, reported)))
    }

    /// The calendar of `window: calendar_<unit>` with its `timezone` and
    /// `anchor`; `None` for any other window.
    fn calendar(&self, f: &Fields<'_>, window: &Node) -> Result<Option<Calendar>> {
        let text = self.string("window", window)?;
        if !text.starts_with("calendar_") {
            return Ok(None);
        }
        let unit: CalendarUnit = text
            .parse()
            .map_err(|e| self.err(window.at, ErrorKind::Limit(LimitError::Calendar(e))))?;
        let Some(zone_node) = f.get("timezone") else {
            return Err(self.err(window.at, ErrorKind::MissingTimezone));
        };
        let zone = self.string("timezone", zone_node)?;
        let anchor = match f.get("anchor") {
            Some(a) => Some((self.number("anchor", a, 0, u64::MAX)?, a.at)),
            None => None,
        };
        Calendar::new(unit, &zone, anchor.map(|(a, _)| a))
            .map(Some)
            .map_err(|e| {
                let at = match (&e, anchor) {
                    (CalendarError::Anchor { .. }, Some((_, at))) => at,
                    (CalendarError::Zone { .. }, _) => zone_node.at,
                    _ => window.at,
                };
                self.err(at, ErrorKind::Limit(LimitError::Calendar(e)))
            })
    }

    /// A limit's `ban: {after: N, within: D, for: D}`.
    fn ban(&self, node: &Node) -> Result<Ban> {
        let f = self.fields(node, "ban", "a ban", BAN_FIELDS)?;
        let required = |field| {
            f.get(field).ok_or_else(|| {
                self.err(
                    f.at,
                    ErrorKind::MissingField {
                        field,
                        context: "a ban",
                    },
                )
            })
        };
        let (after, within, duration) = (required("after")?, required("within")?, required("for")?);
        let count = self.number("after", after, 0, u64::MAX)?;
        let (within_ns, _) = self.duration("within", within)?;
        let (for_ns, _) = self.duration("for", duration)?;
        Ban::new(
            count,
            Duration::from_nanos(within_ns),
            Duration::from_nanos(for_ns),
        )
        .map_err(|e| {
            // Point at the field that is out of range.
            let at = match &e {
                LimitError::Ban { field: "after", .. } => after.at,
                LimitError::Ban {
                    field: "within", ..
                } => within.at,
                _ => duration.at,
            };
            self.err(at, ErrorKind::Limit(e))
        })
    }

    fn replaces(&mut self, list: &Node) -> Result<Vec<(String, Location)>> {
        let Value::Sequence(items) = &list.value else {
            return Err(self.wrong_type("replaces", "a list of {name: ...}", list));
        };
        let mut names = Vec::new();
        for item in items {
            let f = self.fields(item, "replaces", "a replaces entry", REPLACES_FIELDS)?;
            let name = match f.get("name") {
                Some(n) => self.string("name", n)?,
                None => String::new(),
            };
            if name.is_empty() {
                return Err(self.err(f.at, ErrorKind::EmptyReplaces));
            }
            names.push((name, f.at));
        }
        Ok(names)
    }

    // --- typed field access ---

    pub(crate) fn fields<'n>(
        &self,
        node: &'n Node,
        field: &str,
        context: &'static str,
        allowed: &'static [&'static str],
    ) -> Result<Fields<'n>> {
        let Value::Mapping(pairs) = &node.value else {
            return Err(self.wrong_type(field, "a mapping", node));
        };
        let mut entries: Vec<(&'n str, &'n Node, &'n Node)> = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let Value::Scalar { text, .. } = &key.value else {
                return Err(self.err(key.at, ErrorKind::NonStringKey));
            };
            if !allowed.contains(&text.as_str()) {
                return Err(self.err(
                    key.at,
                    ErrorKind::UnknownField {
                        field: text.clone(),
                        context,
                        expected: expected_list(allowed),
                    },
                ));
            }
            if let Some((_, first, _)) = entries.iter().find(|(n, _, _)| *n == text) {
                return Err(self.err(
                    key.at,
                    ErrorKind::DuplicateField {
                        field: text.clone(),
                        first_line: first.at.line,
                    },
                ));
            }
            entries.push((text.as_str(), key, value));
        }
        Ok(Fields {
            at: node.at,
            entries,
        })
    }

    pub(crate) fn wrong_type(
        &self,
        field: &str,
        expected: &'static str,
        node: &Node,
    ) -> RulesError {
        self.err(
            node.at,
            ErrorKind::WrongType {
                field: field.to_string(),
                expected,
                found: node.describe(),
            },
        )
    }

    /// Any scalar, as written (envoy's YAML decoder also reads `value: 42`
    /// as the string "42").
    pub(crate) fn string(&self, field: &str, node: &Node) -> Result<String> {
        match &node.value {
            Value::Scalar { text, .. } => Ok(text.clone()),
            _ => Err(self.wrong_type(field, "a string", node)),
        }
    }

    /// A boolean field, false when absent; YAML 1.1 spellings (`yes`, `on`,
    /// ...) are accepted because envoy's YAML 1.1 decoder accepts them.
    pub(crate) fn flag(&self, fields: &Fields<'_>, name: &str) -> Result<bool> {
        let Some(node) = fields.get(name) else {
            return Ok(false);
        };
        if let Value::Scalar { text, plain: true } = &node.value {
            match text.as_str() {
                "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y"
                | "Y" => return Ok(true),
                "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n"
                | "N" => return Ok(false),
                _ => {}
            }
        }
        Err(self.wrong_type(name, "true or false", node))
    }

    pub(crate) fn number(
        &self,
        field: &'static str,
        node: &Node,
        min: u64,
        max: u64,
    ) -> Result<u64> {
        let text = match &node.value {
            Value::Scalar { text, plain: true } => text.as_str(),
            _ => return Err(self.wrong_type(field, "a whole number", node)),
        };
        let digits: String = text
            .strip_prefix('+')
            .unwrap_or(text)
            .chars()
            .filter(|c| *c != '_')
            .collect();
        digits
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                self.err(
                    node.at,
                    ErrorKind::Number {
                        field,
                        text: text.to_string(),
                        min,
                        max,
                    },
                )
            })
    }

    /// A duration (`5m`, `90s`, `250ms`), in nanoseconds.
    fn duration(&self, field: &'static str, node: &Node) -> Result<(u64, Location)> {
        let text = self.string(field, node)?;
        let d = parse_duration(&text)
            .map_err(|source| self.err(node.at, ErrorKind::Duration { field, source }))?;
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok((nanos, node.at))
    }
}

/// The allowed field names joined for a message.
fn expected_list(allowed: &'static [&'static str]) -> &'static str {
    match allowed {
        a if a == FILE_FIELDS => "domain, descriptors, routes",
        a if a == DESCRIPTOR_FIELDS => {
            "key, value, rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, share_threshold, quota_mode, metadata, value_to_metric"
        }
        a if a == RATE_LIMIT_FIELDS => {
            "unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, step, window, timezone, anchor, lease_ttl, ban, sync"
        }
        a if a == LIST_LIMIT_FIELDS => {
            "unit, requests_per_unit, name, replaces, algorithm, burst, step, window, timezone, anchor, lease_ttl, ban, sync"
        }
        a if a == REPLACES_FIELDS => "name",
        a if a == OVERRIDE_FIELDS => "rate_limit, rate_limits, shadow_mode, quota_mode",
        a if a == BAN_FIELDS => "after, within, for",
        a => crate::route_parse::expected_route_fields(a),
    }
}
