//! [`Settings`]: the service's behaviour switches, validated once by the
//! binary and passed in.

use std::time::Duration;

/// How the decision service behaves. `Default` is what `tollgate serve`
/// uses without flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Honour `at_ms` in requests (client-side deployments and tests).
    pub trust_client_time: bool,
    /// Bearer token that admin routes require; admin routes are open when
    /// `None`.
    pub admin_token: Option<String>,
    /// Largest accepted request body, in bytes (larger answers `413`).
    pub max_body_bytes: usize,
    /// Longest accepted key (inline key, Databox id, descriptor value), in
    /// bytes.
    pub max_key_bytes: usize,
    /// Most descriptors in one request, and most entries in one descriptor.
    pub max_descriptors: usize,
    /// Global shadow mode: decide, count, report, never reject.
    pub shadow: bool,
    /// Global quota mode: every rule is a quota rule (see
    /// `tollgate_rules::check::over_limit`), envoyproxy/ratelimit's
    /// `GLOBAL_QUOTA_MODE`.
    pub quota_mode: bool,
    /// Load the files of one domain as one (also for `POST /admin/reload`).
    pub merge_domains: bool,
    /// Send the rate-limit headers of SPEC §7 with decisions.
    pub headers: bool,
    /// Fill the gRPC answer's `dynamic_metadata` as envoyproxy/ratelimit's
    /// `RESPONSE_DYNAMIC_METADATA` does (see `grpc`).
    pub response_dynamic_metadata: bool,
    /// The most settle tickets held at once (open or settled, until their
    /// lifetime ends); a check with `"settle": true` is refused while the
    /// table is full.
    pub ticket_capacity: usize,
    /// How long a settle ticket lives after its check; an expired ticket
    /// is never settled (its estimate stands).
    pub ticket_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            trust_client_time: false,
            admin_token: None,
            max_body_bytes: 64 * 1024,
            max_key_bytes: 1024,
            max_descriptors: 64,
            shadow: false,
            quota_mode: false,
            merge_domains: false,
            headers: true,
            response_dynamic_metadata: false,
            ticket_capacity: crate::tickets::DEFAULT_CAPACITY,
            ticket_ttl: crate::tickets::DEFAULT_TTL,
        }
    }
}
