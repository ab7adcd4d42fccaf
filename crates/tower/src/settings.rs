//! [`Settings`]: the middleware's behaviour switches.

use crate::descriptors::DEFAULT_MAX_VALUE_BYTES;
use crate::grouping::AddressGrouping;

/// How the middleware behaves. `Default`: enforce, send the headers on
/// admitted responses, values of at most 1,024 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Global shadow (dry-run) mode: every request is decided and counted,
    /// none is rejected or held, and clients see no rate-limit headers; the
    /// observer hears every decision, `shadow_rejected` included.
    pub shadow: bool,
    /// Global quota mode: every rule is a quota rule, so a request is
    /// rejected only when every rule that applies to it is over (see
    /// `tollgate_rules::check::over_limit`).
    pub quota_mode: bool,
    /// Send the rate-limit headers (SPEC §7) on admitted responses. A `429`
    /// always carries them: a rejection that does not say how long to wait
    /// only makes clients retry sooner.
    pub headers: bool,
    /// The longest value a request can put into a descriptor entry (a
    /// header, the path, the host), in bytes; longer ones are cut to it.
    pub max_value_bytes: usize,
    /// Which client addresses share a key (`remote_address` entries and
    /// the inline [`ClientIp`](crate::ClientIp) key): IPv6 by /64 and IPv4
    /// by /32 unless told.
    pub address_grouping: AddressGrouping,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            shadow: false,
            quota_mode: false,
            headers: true,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            address_grouping: AddressGrouping::default(),
        }
    }
}
