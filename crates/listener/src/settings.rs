//! [`ConnectionSettings`]: how long a client may take and how many
//! connections may be open, with defaults near nginx's.

use std::time::Duration;

/// How long a client may take to send an HTTP/1 request head unless told
/// (hyper's own default; nginx's `client_header_timeout` is 60 s).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may pause while sending a request body unless told
/// (nginx's `client_body_timeout`).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a connection may move no byte before it is closed unless told
/// (nginx's `keepalive_timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// The most open connections per listener unless told, when the process
/// may open enough files (see [`default_max_connections`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// File descriptors kept out of the connections' share: rules files,
/// Redis connections, logs, the listeners themselves.
const HEADROOM: u64 = 256;

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Longest time an HTTP/1 connection waits for a request head: from
    /// its start, and from the end of each answer (the wait for the next
    /// request on a keep-alive connection counts too). Then the
    /// connection is closed, with no answer, whether part of a head came
    /// or none. An HTTP/2 connection's requests are not timed so.
    pub header_read_timeout: Duration,
    /// Longest pause in a request body: when no part of it arrives for
    /// this long, reading it fails with [`BodyTimeout`](crate::BodyTimeout).
    pub body_read_timeout: Duration,
    /// A connection on which no byte moved either way for this long is
    /// shut down gracefully.
    pub idle_timeout: Duration,
    /// The most connections open at once; more are closed as they come.
    pub max_connections: usize,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        ConnectionSettings {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The default cap of one listener: [`DEFAULT_MAX_CONNECTIONS`], or less
/// when the process may not open that many files — the open-files limit
/// less a headroom of 256, divided by the `descriptors_per_connection`
/// each client connection costs the process (2 for `serve`, whose two
/// listeners share the limit, and for the gateway, which opens an
/// upstream connection per client connection). At least 1.
pub fn default_max_connections(descriptors_per_connection: usize) -> usize {
    share(open_files_limit(), descriptors_per_connection)
}

fn share(limit: Option<u64>, descriptors_per_connection: usize) -> usize {
    let Some(limit) = limit else {
        return DEFAULT_MAX_CONNECTIONS;
    };
    let per = u64::try_from(descriptors_per_connection.max(1)).unwrap_or(u64::MAX);
    let fits = limit.saturating_sub(HEADROOM) / per;
    usize::try_from(fits)
        .unwrap_or(usize::MAX)
        .clamp(1, DEFAULT_MAX_CONNECTIONS)
}

/// The soft limit on open files of this process (`ulimit -n`), read from
/// `/proc/self/limits`; `None` where that file does not exist or says
/// `unlimited`.
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_files(&limits)
}

fn parse_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_is_read_from_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63459                63459                processes \n\
                      Max open files            20000                1048576              files     \n";
        assert_eq!(parse_open_files(limits), Some(20_000));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_files(unlimited), None);
        assert_eq!(parse_open_files(""), None);
    }

    #[test]
    fn the_default_cap_leaves_room_under_the_open_files_limit() {
        assert_eq!(share(None, 2), DEFAULT_MAX_CONNECTIONS);
        assert_eq!(share(Some(1_048_576), 2), DEFAULT_MAX_CONNECTIONS);
        // 20,000 descriptors, two per connection, 256 kept back.
        assert_eq!(share(Some(20_000), 2), 9_872);
        assert_eq!(share(Some(1_024), 2), 384);
        assert_eq!(share(Some(100), 2), 1);
        assert_eq!(share(Some(1_024), 0), 768);
    }
}
