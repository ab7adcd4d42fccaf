//! The memory store's snapshot file: loaded at start (never fatal), saved
//! atomically on shutdown and periodically; and beside it, `PATH.overrides`,
//! the runtime overrides (`/v1/overrides/{domain}`), saved the same way
//! within a second of a change and on shutdown.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tollgate_memory::{MemoryConfig, MemoryStore};
use tollgate_rules::overrides::OverrideTable;

/// How loading went, for the log and the `snapshot_loads` metric.
#[derive(Debug)]
pub enum Loaded {
    /// Restored.
    Ok,
    /// No file yet: a first start.
    Missing,
    /// The file could not be read or is not a valid snapshot.
    Failed(String),
}

impl Loaded {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Loaded::Ok => "ok",
            Loaded::Missing => "missing",
            Loaded::Failed(_) => "failed",
        }
    }
}

/// The store saved at `path`, or an empty one (with the reason) when there
/// is none or it cannot be used. States expired at `now` are left out.
pub fn load(path: &Path, config: MemoryConfig, now: u64) -> (MemoryStore, Loaded) {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return (MemoryStore::new(config), Loaded::Missing);
        }
        Err(e) => {
            return (
                MemoryStore::new(config),
                Loaded::Failed(format!("{}: {e}", path.display())),
            );
        }
    };
    match MemoryStore::from_snapshot(config, &bytes, now) {
        Ok(store) => (store, Loaded::Ok),
        Err(e) => (
            MemoryStore::new(config),
            Loaded::Failed(format!("{}: {e}", path.display())),
        ),
    }
}

/// Writes `store` to `path` atomically: to `PATH.tmp` (owner-only
/// permissions: the snapshot holds the fingerprint seed), flushed to disk,
/// renamed over `path`, and the directory flushed, so a crash at any point
/// leaves either the old snapshot or the new one.
pub fn save(store: &MemoryStore, path: &Path, now: u64) -> io::Result<usize> {
    write_atomically(path, &store.snapshot(now))
}

/// Where the runtime overrides are kept beside the snapshot at `snapshot`:
/// `SNAPSHOT.overrides`.
pub fn overrides_path(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.file_name().unwrap_or_default().to_os_string();
    name.push(".overrides");
    snapshot.with_file_name(name)
}

/// The overrides saved at `path`, or none (with the reason) when there are
/// none or they cannot be used. Every limit is validated again.
pub fn load_overrides(path: &Path) -> (OverrideTable, Loaded) {
    match fs::read(path) {
        Ok(bytes) => match OverrideTable::from_bytes(&bytes) {
            Ok(table) => (table, Loaded::Ok),
            Err(e) => (
                OverrideTable::new(),
                Loaded::Failed(format!("{}: {e}", path.display())),
            ),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => (OverrideTable::new(), Loaded::Missing),
        Err(e) => (
            OverrideTable::new(),
            Loaded::Failed(format!("{}: {e}", path.display())),
        ),
    }
}

/// Writes `table` to `path` atomically, as [`save`] does a snapshot.
pub fn save_overrides(table: &OverrideTable, path: &Path) -> io::Result<usize> {
    write_atomically(path, &table.to_bytes())
}

/// Writes `bytes` to `path` atomically (see [`save`]).
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<usize> {
    let tmp = temporary(path);
    let mut file = create_private(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Flushing the directory makes the rename itself durable; not every
        // platform can open a directory, and failing to is not fatal.
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(bytes.len())
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{AlgorithmName, Limit, Rate};

    #[test]
    fn saves_atomically_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.snap");
        let (store, loaded) = load(&path, MemoryConfig::default(), 0);
        assert!(matches!(loaded, Loaded::Missing));
        let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap());
        store.limiter(&limit).unwrap().check(b"k", 0, 7).unwrap();
        save(&store, &path, 0).unwrap();
        assert!(!temporary(&path).exists());
        let (restored, loaded) = load(&path, MemoryConfig::default(), 0);
        assert!(matches!(loaded, Loaded::Ok));
        assert_eq!(
            restored
                .limiter(&limit)
                .unwrap()
                .check(b"k", 0, 0)
                .unwrap()
                .remaining,
            3
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }

    #[test]
    fn overrides_save_beside_the_snapshot_and_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = overrides_path(&dir.path().join("state.snap"));
        assert!(path.ends_with("state.snap.overrides"));
        assert!(matches!(load_overrides(&path).1, Loaded::Missing));
        let table = OverrideTable::new();
        let limit = r#"{"rate_limit":{"requests_per_unit":5,"unit":"second"}}"#;
        table.put("api", &[("user", "7")], limit).unwrap();
        save_overrides(&table, &path).unwrap();
        let (back, loaded) = load_overrides(&path);
        assert!(matches!(loaded, Loaded::Ok));
        assert_eq!(back.get("api", &[("user", "7")]).unwrap().text(), limit);
        fs::write(&path, b"damaged").unwrap();
        let (empty, loaded) = load_overrides(&path);
        assert!(empty.is_empty() && matches!(loaded, Loaded::Failed(_)));
    }

    #[test]
    fn a_corrupt_file_gives_an_empty_store_and_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.snap");
        fs::write(&path, b"not a snapshot").unwrap();
        let (store, loaded) = load(&path, MemoryConfig::default(), 0);
        assert!(store.is_empty());
        let Loaded::Failed(reason) = loaded else {
            panic!("{loaded:?}")
        };
        assert!(reason.contains("state.snap"), "{reason}");
    }
}
