//! Logs of the long-running subcommands: structured `tracing` events on
//! stderr, as text or JSON lines, at the level `RUST_LOG` sets (`info` by
//! default). Stdout is kept for the lines scripts read (the bound
//! addresses).

use crate::config_file::ConfigError;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The format named `text` or `json`; text when `None`.
    pub fn parse(name: Option<&str>) -> Result<LogFormat, ConfigError> {
        match name {
            None | Some("text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(ConfigError::Invalid(format!(
                "log format {other:?} is not one of: text, json"
            ))),
        }
    }
}

/// Installs the process's subscriber (once; later calls change nothing).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
