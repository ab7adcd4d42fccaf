//! The connection settings shared by `serve` and `gateway`: how long a
//! client may take over a request head, a body and an idle connection, and
//! how many connections each listener holds. Flags (and their environment
//! variables) over the config file's keys, validated once into a
//! [`ConnectionSettings`].

use std::time::Duration;

use tollgate_core::rate::parse_duration;
use tollgate_listener::{
    default_max_connections, ConnectionSettings, DEFAULT_BODY_READ_TIMEOUT,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
};

use crate::args::ConnectionArgs;
use crate::config_file::ConfigError;

/// The connection keys of a config file (declared by each subcommand's
/// file, as the store's are).
#[derive(Debug, Default)]
pub struct ConnectionFile {
    /// `header_read_timeout`.
    pub header_read_timeout: Option<String>,
    /// `body_read_timeout`.
    pub body_read_timeout: Option<String>,
    /// `idle_timeout`.
    pub idle_timeout: Option<String>,
    /// `max_connections`.
    pub max_connections: Option<usize>,
}

/// Merges `args` over `file`. `descriptors_per_connection` is what one
/// client connection costs the process in file descriptors, for the
/// default cap (see [`default_max_connections`]).
pub fn resolve(
    args: &ConnectionArgs,
    file: ConnectionFile,
    descriptors_per_connection: usize,
) -> Result<ConnectionSettings, ConfigError> {
    let duration = |name: &str, flag: &Option<String>, key: Option<String>, default| match flag
        .clone()
        .or(key)
    {
        None => Ok(default),
        Some(text) => parse_duration(&text)
            .ok()
            .filter(|d: &Duration| !d.is_zero())
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "{name} {text:?} is not a positive duration like 30s or 500ms"
                ))
            }),
    };
    let max_connections = match args.max_connections.or(file.max_connections) {
        None => default_max_connections(descriptors_per_connection),
        Some(0) => {
            return Err(ConfigError::Invalid(
                "max_connections must be at least 1".into(),
            ))
        }
        Some(n) => n,
    };
    Ok(ConnectionSettings {
        header_read_timeout: duration(
            "header_read_timeout",
            &args.header_read_timeout,
            file.header_read_timeout,
            DEFAULT_HEADER_READ_TIMEOUT,
        )?,
        body_read_timeout: duration(
            "body_read_timeout",
            &args.body_read_timeout,
            file.body_read_timeout,
            DEFAULT_BODY_READ_TIMEOUT,
        )?,
        idle_timeout: duration(
            "idle_timeout",
            &args.idle_timeout,
            file.idle_timeout,
            DEFAULT_IDLE_TIMEOUT,
        )?,
        max_connections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let defaults = resolve(&ConnectionArgs::default(), ConnectionFile::default(), 2).unwrap();
        assert_eq!(defaults.header_read_timeout, Duration::from_secs(30));
        assert_eq!(defaults.body_read_timeout, Duration::from_secs(60));
        assert_eq!(defaults.idle_timeout, Duration::from_secs(75));
        assert_eq!(defaults.max_connections, default_max_connections(2));
        let file = || ConnectionFile {
            header_read_timeout: Some("5s".into()),
            body_read_timeout: Some("7s".into()),
            idle_timeout: Some("2m".into()),
            max_connections: Some(50),
        };
        let from_file = resolve(&ConnectionArgs::default(), file(), 2).unwrap();
        assert_eq!(
            from_file,
            ConnectionSettings {
                header_read_timeout: Duration::from_secs(5),
                body_read_timeout: Duration::from_secs(7),
                idle_timeout: Duration::from_secs(120),
                max_connections: 50,
            }
        );
        let flags = ConnectionArgs {
            header_read_timeout: Some("200ms".into()),
            max_connections: Some(3),
            ..ConnectionArgs::default()
        };
        let merged = resolve(&flags, file(), 2).unwrap();
        assert_eq!(merged.header_read_timeout, Duration::from_millis(200));
        assert_eq!(merged.body_read_timeout, Duration::from_secs(7));
        assert_eq!(merged.max_connections, 3);
    }

    #[test]
    fn bad_values_are_errors_naming_the_setting() {
        let cases = [
            (
                ConnectionArgs {
                    header_read_timeout: Some("0s".into()),
                    ..ConnectionArgs::default()
                },
                "header_read_timeout \"0s\"",
            ),
            (
                ConnectionArgs {
                    body_read_timeout: Some("soon".into()),
                    ..ConnectionArgs::default()
                },
                "body_read_timeout \"soon\"",
            ),
            (
                ConnectionArgs {
                    idle_timeout: Some("-1s".into()),
                    ..ConnectionArgs::default()
                },
                "idle_timeout",
            ),
            (
                ConnectionArgs {
                    max_connections: Some(0),
                    ..ConnectionArgs::default()
                },
                "max_connections must be at least 1",
            ),
        ];
        for (args, expected) in cases {
            let error = resolve(&args, ConnectionFile::default(), 2)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
