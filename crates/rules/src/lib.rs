//! Rules files for tollgate: parse and validate them, resolve request
//! descriptors to limits, and watch them for changes.
//!
//! The format is envoyproxy/ratelimit's: a file it accepts loads unchanged
//! and means the same (`domain`, nested `descriptors` with `key`, optional
//! `value` — exact, or a wildcard with `*` anywhere — `rate_limit`,
//! `shadow_mode`, `detailed_metric`, `share_threshold`, `quota_mode`,
//! `metadata`, `unlimited`, `name` and `replaces`).
//! tollgate adds, on each `rate_limit`, an `algorithm` (default
//! `fixed_window`, envoy's behaviour), `burst`, `step`, `window`,
//! `lease_ttl`, `ban` and `sync` (`exact` or `async` on a shared store), and a list form `rate_limits:` for several limits on one
//! descriptor; and beside `descriptors`, a `routes:` list that turns HTTP
//! requests into descriptors for the gateway and the tower middleware.
//! `docs/rules.md` describes the format and where tollgate differs from
//! envoy.
//!
//! This crate does no networking and runs no async runtime; the server
//! calls [`RuleSet::resolve`] on its hot path (no allocation beyond the
//! answer's vector) and keeps the [`RuleSet`] a [`watch::RulesWatcher`]
//! hands it. [`check`] decides a request through any
//! [`Store`](tollgate_core::Store): the store does the I/O, this crate only
//! awaits it.
//!
//! # Example
//!
//! ```
//! use tollgate_rules::RuleSet;
//!
//! let yaml = r#"
//! domain: messaging
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit:
//!           unit: day
//!           requests_per_unit: 5
//!   - key: to_number
//!     rate_limit:
//!       unit: day
//!       requests_per_unit: 100
//!       algorithm: token_bucket
//!       burst: 10
//! "#;
//! let rules = RuleSet::from_yaml(yaml, "messaging.yaml").unwrap();
//! let request = [
//!     vec![("message_type", "marketing"), ("to_number", "2061111111")],
//!     vec![("to_number", "2061111111")],
//! ];
//! let resolved = rules.resolve("messaging", &request).unwrap();
//!
//! let marketing = resolved[0].unwrap();
//! assert_eq!(marketing.rule().id(), "messaging.message_type_marketing.to_number");
//! assert_eq!(marketing.rule().reported_limits()[0].requests_per_unit, 5);
//!
//! let any_number = resolved[1].unwrap();
//! assert_eq!(any_number.rule().limits()[0].burst, Some(10));
//! // Each phone number has its own counter.
//! let other = [vec![("to_number", "2062222222")]];
//! let other = rules.resolve("messaging", &other).unwrap();
//! assert_ne!(any_number.counter_key(), other[0].unwrap().counter_key());
//! ```
//!
//! # Layout
//!
//! - `yaml`: text to a tree of nodes with line and column, bounded.
//! - `parse`: the schema — a tree to a validated [`Domain`], every error
//!   with its place.
//! - `rule`: [`Rule`], [`RateLimitUnit`], [`ReportedLimit`], counter keys.
//! - `matcher`: [`Domain`] and matching one descriptor to one rule.
//! - `metadata`: [`MetadataValue`], a descriptor's `metadata` mapping.
//! - `wildcard`: wildcard values, compiled, and their per-level index.
//! - `resolve`: [`Descriptor`], [`Resolved`], and `replaces`.
//! - `ruleset`: [`RuleSet`], reading files and directories.
//! - `route`, `route_parse`, `glob`, `networks`: [`Route`]s, the `routes:`
//!   list that turns HTTP requests into descriptors (for the gateway and the
//!   tower middleware), its schema, [`PathGlob`], and [`NetworkSet`] (the
//!   client networks of `client_cidr`).
//! - `route_cost`: a route's `cost:` ([`ResponseCost`]: the estimate, the
//!   response header or trailer holding the actual cost) and `count_if:`
//!   ([`StatusFilter`]).
//! - [`overrides`]: [`overrides::OverrideTable`], limits set at runtime
//!   for exact descriptors, ahead of the files.
//! - [`check`]: the rules decision through a store, shared by every
//!   transport.
//! - [`watch`]: [`watch::RulesWatcher`], reloading on change.
//! - `error`: [`RulesError`], [`ErrorKind`], [`UnknownDomain`].

pub mod check;
mod error;
mod glob;
mod matcher;
mod metadata;
mod networks;
pub mod overrides;
mod parse;
mod resolve;
mod route;
mod route_cost;
mod route_parse;
mod rule;
mod ruleset;
pub mod watch;
mod wildcard;
mod yaml;

pub use error::{ErrorKind, Location, RulesError, UnknownDomain};
pub use glob::PathGlob;
pub use matcher::Domain;
pub use metadata::{Metadata, MetadataValue};
pub use networks::{InvalidNetwork, InvalidNetworkReason, NetworkSet};
pub use resolve::{Descriptor, Resolved};
pub use route::{
    Action, HostMatch, OnMissing, PathMatch, Route, RouteMatch, DEFAULT_MISSING_STATUS,
    MAX_ROUTE_TEXT,
};
pub use route_cost::{InvalidStatus, ResponseCost, StatusFilter, StatusPattern};
pub use rule::{
    parse_counter_key, CounterKeyParts, PathStep, RateLimitUnit, ReportedLimit, Rule, ValueMatch,
    OVERRIDE_LABEL,
};
pub use ruleset::{LoadOptions, RuleSet, MAX_FILE_BYTES};
pub use yaml::{MAX_DEPTH, MAX_NODES};
