//! The optional TOML config file of the long-running subcommands (`serve`,
//! `gateway`), and [`ConfigError`], the error of any setting that cannot be
//! used, wherever it came from. The binary exits 64 on a `ConfigError`.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML or has unknown keys.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why, with the place.
        message: String,
    },
    /// A value is out of range or unknown.
    #[error("{0}")]
    Invalid(String),
}

/// Reads the config file at `path` into `T` (whose `deny_unknown_fields`
/// makes a misspelt key an error naming it).
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: one_line(&text, &e),
    })
}

/// `line L, column C: reason` — toml's own rendering quotes the source
/// over several lines, and a bad setting is reported on one.
fn one_line(text: &str, error: &toml::de::Error) -> String {
    let reason = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let mut start = span.start.min(text.len());
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let before = &text[..start];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[line_start..].chars().count() + 1;
            format!("line {line}, column {column}: {reason}")
        }
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Settings {
        port: Option<u16>,
    }

    #[test]
    fn errors_name_the_place_on_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.toml");
        for (text, expected) in [
            (
                "port = 1\n  colour = 2\n",
                "line 2, column 3: unknown field `colour`",
            ),
            ("port = \"x\"\n", "line 1, column 8:"),
            ("port = [\n", "line 1, column 9: unclosed array"),
            ("é = 1\n", "line 1, column 1:"),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = read::<Settings>(&path).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }
}
